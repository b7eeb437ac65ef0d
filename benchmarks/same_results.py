"""Same results before and after a change that must not change behaviour (a refactoring).

Runs each recipe for a short, fixed budget on CartPole (with evaluation episodes) and on Pong
(two batches), one torch thread each, and records what each run's summary says: the weights'
checksum (a float64 sum of every parameter), the mean return, the evaluation returns. Run it
on both checkouts and compare; equal tables mean the same weights after the same updates.

    python -m benchmarks.same_results run --out after.json          # this checkout
    PYTHONPATH=../old python -m benchmarks.same_results run --out before.json
    python -m benchmarks.same_results compare before.json after.json

``--resume-check DIR`` (with ``run``): the PPO CartPole run is stopped halfway into DIR (a
folder kept for a later checkout to resume); ``resume DIR`` continues it with this checkout,
which must end with the uninterrupted run's checksum (exact resume across the change).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUIET = ["--log.no-progress", "--log.no-tensorboard", "--threads.torch-threads", "1"]
KEYS = ("frames", "updates", "episodes", "mean_return_100", "weights_checksum",
        "eval/greedy_return", "eval/sampled_return")  # fmt: skip

CARTPOLE = ["--env.game", "CartPole-v1", "--total-frames", "8192", "--log.eval-episodes", "4"]
PONG = ["--env.game", "Pong", "--log.eval-episodes", "0"]
CASES: dict[str, list[str]] = {
    "ppo CartPole-v1": ["ppo", *CARTPOLE],
    "a2c CartPole-v1": ["a2c", *CARTPOLE],
    # APPO with sync collection: asynchronous batches depend on timing, so no two runs agree.
    "appo CartPole-v1": ["appo", *CARTPOLE, "--collector.kind", "sync"],
    "dqn CartPole-v1": ["dqn", *CARTPOLE, "--dqn.learning-starts-frames", "1000"],
    "ppo Pong": ["ppo", *PONG, "--total-frames", "8192"],
    "dqn Pong": ["dqn", *PONG, "--total-frames", "4096", "--dqn.learning-starts-frames", "1024",
                 "--dqn.replay-capacity", "10000"],
}  # fmt: skip


def run_recipe(algo: str, flags: list[str], run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", f"recipes.{algo}_atari", *QUIET, *flags, "--run-dir", str(run_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {k: summary.get(k) for k in KEYS}


def run_all(out: Path, resume_check: Path | None, only: list[str]) -> None:
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (algo, *flags) in CASES.items():
            if only and name not in only:
                continue
            table[name] = run_recipe(algo, flags, Path(tmp) / name.replace(" ", "_"))
            print(name, table[name], flush=True)
    if resume_check is not None:
        half = [*CASES["ppo CartPole-v1"][1:], "--total-frames", "4096"]
        run_recipe("ppo", half, resume_check)
        print(f"{resume_check}: PPO CartPole stopped at 4096 frames; resume it with `resume`")
    out.write_text(json.dumps(table, indent=1))


def resume(run_dir: Path, table_path: Path) -> int:
    flags = [*CASES["ppo CartPole-v1"][1:], "--resume"]
    got = run_recipe("ppo", flags, run_dir)
    want = json.loads(table_path.read_text())["ppo CartPole-v1"]
    same = got["weights_checksum"] == want["weights_checksum"]
    verdict = "same" if same else "DIFFERENT"
    print(f"resumed checksum {got['weights_checksum']!r}, "
          f"uninterrupted {want['weights_checksum']!r}: {verdict}")  # fmt: skip
    return 0 if same else 1


def compare(a: Path, b: Path) -> int:
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    differ = 0
    for name in sorted(set(left) ^ set(right)):
        print(f"only in {'the first' if name in left else 'the second'}: {name}")
    for name in [n for n in left if n in right]:
        same = left[name] == right.get(name)
        differ += not same
        print(f"{'same     ' if same else 'DIFFERENT'} {name}")
        if not same:
            for k in KEYS:
                if left[name].get(k) != right.get(name, {}).get(k):
                    print(f"    {k}: {left[name].get(k)!r} vs {right.get(name, {}).get(k)!r}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--resume-check", type=Path)
    r.add_argument("--only", action="append", default=[], help="a case's name, e.g. 'ppo Pong'")
    s = sub.add_parser("resume")
    s.add_argument("run_dir", type=Path)
    s.add_argument("table", type=Path, help="the table of this checkout's `run`")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    ns = p.parse_args(argv)
    if ns.cmd == "run":
        run_all(ns.out, ns.resume_check, ns.only)
        return 0
    if ns.cmd == "resume":
        return resume(ns.run_dir, ns.table)
    return compare(ns.before, ns.after)


if __name__ == "__main__":
    raise SystemExit(main())
