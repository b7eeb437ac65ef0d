"""The prepared GPU check: one command, at most 8 minutes on one GPU machine, one line per claim
about speed on a GPU, each PASS or FAIL against its target (INFO where a figure has none).

    python -m benchmarks.gpu_check --out gpu_check              # on the GPU machine
    python -m benchmarks.gpu_check --smoke --out /tmp/check     # CPU smoke: every step, toy sizes

Steps, each a subprocess with a time limit out of ``--budget-s`` (the Pong run gets what is left):

1. ``benchmarks.run --sections collect train`` on the device, Pong, as many simulators as
   cores, in-process collectors only (``--workers 0``), training with PPO, A2C and the DQN
   recipe's ``dqn-512`` preset, each against its plain single-file loop (``suite.json``):
   - ``ppo-vs-plain``, ``a2c-vs-plain``: the recipe's training frames/s with its defaults at
     least 1.1x its plain loop's (at the plain loop's best thread count);
   - ``collect-vs-ceiling``: the in-process collector at least 0.85 of the synchronous ceiling
     1 / (1 / env rate + inference time per step);
   - ``dqn-512``: the DQN recipe's training frames/s at batch 512 and its ratio to the plain
     double DQN loop (INFO).
2. ``benchmarks.acting_overhead --device`` on ``Null/Atari`` at 64 and 256 simulators
   (``acting.json``): ``acting-<recipe>-<sims>``, each recipe's collection at most 1.25x the
   plain loop's time per agent step, the networks on the device.
   Before it, in this process: ``acting-graph-<sims>``, the PPO Atari acting network as
   ``--compile.cudagraphs auto`` chooses it at 64 and 256 simulators
   (``accelrl.collectors.graphs.choose``): PASS when the CUDA graph gives eager's outputs from
   the same generator state and is faster (chosen), INFO when it is equal but not faster, FAIL
   when the capture fails or its outputs differ; the eager and graph times per step are in the
   line.
3. ``benchmarks.time_to_score``: PPO on Pong with ``--pong-envs`` simulators (default 128; the
   paper ran 256 per GPU), T = 128, the deterministic ALE, until the mean return of the last 100
   episodes reaches 18 (``pong-18``: the wall time and frames, PASS when reached in the time
   left; ``time_to_score.json``, ``metrics.csv``, ``episodes.csv``).

Writes ``check.txt`` (the lines, with the host, card, date and commit) and ``check.json`` to
``--out``, with each step's files and log. ``--smoke``: the device is the CPU and every step
runs at the sizes of ``benchmarks.run --quick``; its lines say nothing about speed (a CPU's
timings decide nothing), they show that every step runs and gives its figure.
``--suite-json PATH`` reads step 1's rows from an earlier ``benchmarks.run`` JSON instead of
running it (the test suite passes its own quick run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TRAIN_TARGET = 1.1  # recipe / plain training frames/s (PPO, A2C)
CEILING_TARGET = 0.85  # in-process collection / synchronous ceiling
ACTING_TARGET = 1.25  # recipe / plain time per agent step (benchmarks.acting_overhead.TARGET)
PONG_TARGET = 18.0
GAME = "Pong"


@dataclass
class Line:
    name: str
    status: str  # PASS, FAIL or INFO; MISSING when the step gave no figure
    value: float | None
    target: str
    detail: str

    def text(self) -> str:
        shown = "n/a" if self.value is None or math.isnan(self.value) else f"{self.value:.3g}"
        return f"{self.status:7s} {self.name}: {shown} ({self.target}) {self.detail}".rstrip()


def judged(name: str, value: float | None, op: str, target: float, detail: str) -> Line:
    """A PASS or FAIL line for ``value op target`` (MISSING without a value)."""
    shown = f"target {op} {target:g}"
    if value is None or math.isnan(value):
        return Line(name, "MISSING", None, shown, detail or "the step gave no figure")
    ok = value >= target if op == ">=" else value <= target
    return Line(name, "PASS" if ok else "FAIL", value, shown, detail)


# --- reading each step's results --------------------------------------------------------------


def suite_lines(payload: dict[str, Any], game: str = GAME) -> list[Line]:
    """Step 1's lines from a ``benchmarks.run`` JSON payload (its ``rows``)."""
    rows = payload.get("rows", [])

    def row(section: str, prefix: str, reference: str = "") -> dict[str, Any] | None:
        for r in rows:
            if (
                r["section"] == section
                and r["what"].startswith(prefix)
                and r.get("reference", "").startswith(reference)
            ):
                return r
        return None

    lines = []
    for recipe in ("ppo", "a2c"):
        r = row("train", f"train {game}: {recipe} (")
        detail = "" if r is None else (
            f"recipe {r['frames_per_s']:,.0f} frames/s against {r['reference']} "
            f"{r['ref_rate'] * r['frames_per_s'] / r['rate']:,.0f}; {r['what'].split(': ', 1)[1]}"
        )  # fmt: skip
        lines.append(judged(f"{recipe}-vs-plain", r and r["ratio"], ">=", TRAIN_TARGET, detail))
    r = row("collect", f"collect {game}: accelrl sync in-process", "sync ceiling")
    detail = "" if r is None else (
        f"{r['rate']:,.0f} agent steps/s against a ceiling of {r['ref_rate']:,.0f}"
    )  # fmt: skip
    lines.append(judged("collect-vs-ceiling", r and r["ratio"], ">=", CEILING_TARGET, detail))
    r = row("train", f"train {game}: dqn-512 (")
    if r is None:
        lines.append(Line("dqn-512", "MISSING", None, "no target", "the step gave no figure"))
    else:
        lines.append(Line(
            "dqn-512", "INFO", r["frames_per_s"], "frames/s, no target",
            f"{r['ratio']:.3g}x {r['reference']}; {r['what'].split(': ', 1)[1]}",
        ))  # fmt: skip
    return lines


def acting_lines(payload: dict[str, Any], sizes: tuple[int, ...]) -> list[Line]:
    """Step 2's lines from a ``benchmarks.acting_overhead`` JSON payload."""
    found = {r["num_envs"]: r for r in payload.get("results", [])}
    lines = []
    for n in sizes:
        r = found.get(n, {})
        for recipe in ("ppo", "a2c", "dqn"):
            ratio = r.get(f"{recipe} / plain")
            detail = "" if ratio is None else (
                f"{r[f'{recipe} us/step']:.3g} us a step against the plain loop's "
                f"{r[f'plain {recipe} us/step']:.3g} ({r.get('game')}, networks on "
                f"{r.get('device', 'cpu')})"
            )  # fmt: skip
            lines.append(judged(f"acting-{recipe}-{n}", ratio, "<=", ACTING_TARGET, detail))
    return lines


def graph_line(name: str, graph: bool | None, reason: str) -> Line:
    """An ``acting-graph-<sims>`` line from what ``choose`` decided (None: it raised)."""
    if graph:
        return Line(name, "PASS", 1.0, "the graph chosen", reason)
    equal_not_faster = graph is not None and "not faster" in reason
    return Line(name, "INFO" if equal_not_faster else "FAIL", 0.0, "the graph chosen", reason)


def graph_lines(device: str, sizes: tuple[int, ...]) -> list[Line]:
    """Step 2's graph lines: ``--compile.cudagraphs auto``'s choice for PPO's Atari acting
    network (trunk, heads, the action draw) at each of ``sizes`` simulators on ``device``."""
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from accelrl.collectors.graphs import choose
    from accelrl.models import acting_policy, make_actor_critic

    lines = []
    for n in sizes:
        torch.manual_seed(0)
        net = acting_policy(make_actor_critic("pixels", (4, 84, 84), 6)).module.to(device)
        obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8).to(device)
        try:
            with set_exploration_type(ExplorationType.RANDOM), torch.no_grad():
                choice = choose(net, obs, "auto")
            graph, reason = choice.graph, choice.reason
        except Exception as err:  # a line, not a stop: the other steps still run
            graph, reason = None, f"{type(err).__name__}: {err}"
        lines.append(graph_line(f"acting-graph-{n}", graph, reason))
    return lines


def pong_line(result: dict[str, Any] | None, envs: int) -> Line:
    """Step 3's line from ``time_to_score.json`` (None: the step gave none)."""
    name = f"pong-{PONG_TARGET:g}"
    shown = f"reach a last-100 of {PONG_TARGET:g}"
    if result is None:
        return Line(name, "MISSING", None, shown, "the step gave no result")
    frames = result.get("frames_at_target") or result.get("frames") or 0
    if result.get("reached"):
        return Line(
            name, "PASS", result["wall_s_from_launch"], shown,
            f"s from launch, {frames:,} frames, {envs} simulators, "
            f"{result.get('fps_logged') or 0:,.0f} frames/s",
        )  # fmt: skip
    return Line(
        name, "FAIL", None, shown,
        f"not within {result.get('budget_s', 0):.0f} s: best last-100 {result.get('best_mean')}, "
        f"{frames:,} frames, {envs} simulators, {result.get('fps_logged') or 0:,.0f} frames/s",
    )  # fmt: skip


# --- running the steps ------------------------------------------------------------------------


def run_step(
    cmd: list[str], limit_s: float, log: Path, cwd: Path | None = None
) -> tuple[int, float]:
    """Run ``cmd`` with its output appended to ``log``, stopped after ``limit_s`` seconds;
    returns (exit code, 124 when stopped; seconds taken)."""
    t0 = time.monotonic()
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}  (limit {limit_s:.0f} s)\n")
        fh.flush()
        try:
            code = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=max(1.0, limit_s), cwd=cwd
            ).returncode
        except subprocess.TimeoutExpired:
            code = 124
        fh.write(f"exit {code} after {time.monotonic() - t0:.0f} s\n")
    return code, time.monotonic() - t0


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def host_lines(device: str) -> list[str]:
    import platform

    import torch

    from accelrl.run.record import code_version

    card = torch.cuda.get_device_name(0) if device.startswith("cuda") else "none (CPU)"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if "model name" in line)
    except (OSError, StopIteration):
        pass
    return [
        f"date {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, accelrl commit "
        f"{code_version()['commit'] or 'unknown'}",
        f"host {cpu}, {os.cpu_count()} cores; device {device}, card {card}; torch "
        f"{torch.__version__}",
    ]


def main(argv: list[str] | None = None) -> list[Line]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu_check", help="folder for check.txt and each step's files")
    p.add_argument("--device", default=None, help="default cuda (--smoke: cpu)")
    p.add_argument("--smoke", action="store_true", help="every step at toy sizes, on the CPU")
    p.add_argument("--budget-s", type=float, default=470.0, help="all steps together")
    p.add_argument("--pong-envs", type=int, default=128, help="simulators of the Pong run")
    p.add_argument("--suite-json", type=Path, help="step 1's rows from this benchmarks.run JSON")
    args = p.parse_args(argv)
    device = args.device or ("cpu" if args.smoke else "cuda")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"gpu_check: --device {device}: no CUDA device here; use --smoke on a CPU",
                  file=sys.stderr)  # fmt: skip
            raise SystemExit(2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "gpu_check.log"
    log.write_text("")
    start = time.monotonic()

    def left() -> float:
        return args.budget_s - (time.monotonic() - start)

    py = sys.executable
    cores = os.cpu_count() or 1
    lines: list[Line] = []

    # 1. collection and training against the ceiling and the plain loops.
    if args.suite_json is not None:
        suite = read_json(args.suite_json)
    else:
        size = (
            ["--quick"]
            if args.smoke
            else [
                "--num-envs",
                str(cores),
                "--seconds",
                "2",
                "--collect-rounds",
                "2",
                "--train-rounds",
                "1",
            ]
        )
        cmd = [py, "-m", "benchmarks.run", "--sections", "collect", "train", "--workers", "0",
               "--games", GAME, "--recipes", "ppo", "a2c", "dqn-512", "--device", device,
               *size, "--json", str(out / "suite.json")]  # fmt: skip
        run_step(cmd, min(240.0, left() - 120), log)
        suite = read_json(out / "suite.json")
    lines += suite_lines(suite or {})

    # 2. the acting network as a CUDA graph, then the acting overhead, networks on the device.
    sizes = (8,) if args.smoke else (64, 256)
    lines += graph_lines(device, sizes)
    game = "Null/CartPole" if args.smoke else "Null/Atari"
    rounds, seconds = ("2", "0.4") if args.smoke else ("6", "1.5")
    cmd = [py, "-m", "benchmarks.acting_overhead", "--games", game,
           "--num-envs", *map(str, sizes), "--rounds", rounds, "--seconds", seconds,
           "--device", device, "--json", str(out / "acting.json")]  # fmt: skip
    run_step(cmd, min(120.0, max(30.0, left() - 60)), log)
    lines += acting_lines(read_json(out / "acting.json") or {}, sizes)

    # 3. PPO on Pong to 18 in the time left.
    envs = 8 if args.smoke else args.pong_envs
    budget = 20.0 if args.smoke else max(0.0, left() - 25)
    result = None
    if budget >= 15:
        flags = ["--env.num-envs", str(envs), "--collector.steps-per-batch", str(envs * 128),
                 "--ppo.minibatches", "4", "--env.sticky-actions", "0",
                 "--total-frames", "10000000"]  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [py, "-m", "benchmarks.time_to_score", "--out", tmp, "--algo", "ppo",
                   "--game", GAME, "--target", str(PONG_TARGET), "--budget-s", f"{budget:.0f}",
                   "--device", device, "--python", py, "--", *flags]  # fmt: skip
            run_step(cmd, budget + 45, log)
            for name in ("time_to_score.json", "metrics.csv", "episodes.csv"):
                if (Path(tmp) / name).exists():
                    shutil.copy(Path(tmp) / name, out / name)
        result = read_json(out / "time_to_score.json")
    lines.append(pong_line(result, envs))

    head = host_lines(device)
    if args.smoke:
        head.append("smoke run: toy sizes on a CPU; the PASS/FAIL words say nothing here")
    head.append(f"took {time.monotonic() - start:.0f} s of a {args.budget_s:.0f} s budget")
    text = "\n".join([*head, *(line.text() for line in lines)]) + "\n"
    (out / "check.txt").write_text(text)
    (out / "check.json").write_text(json.dumps(
        {"header": head, "smoke": args.smoke, "lines": [asdict(line) for line in lines]},
        indent=1,
    ))  # fmt: skip
    print(text, end="")
    return lines


if __name__ == "__main__":
    main()
