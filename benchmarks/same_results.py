"""Same results before and after a change that must not change behaviour (a refactoring).

Runs each recipe for a short, fixed budget on CartPole (with evaluation episodes) and on Pong
(two batches), one torch thread each, and records what each run's summary says: the weights'
checksum (a float64 sum of every parameter), the mean return, the evaluation returns. Run it
on both checkouts and compare; equal tables mean the same weights after the same updates.

    python -m benchmarks.same_results run --out after.json          # this checkout
    PYTHONPATH=../old python -m benchmarks.same_results run --out before.json --resume-check old_run
    python -m benchmarks.same_results resume old_run
    python -m benchmarks.same_results compare before.json after.json

``--resume-check DIR`` (with ``run``): the PPO CartPole run is stopped halfway into DIR (a
folder kept for a later checkout to resume); ``resume DIR`` continues it with this checkout and
compares it with the same run stopped and resumed by this checkout (exact resume across the
change).
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
    # APPO collecting in-process: asynchronous batches depend on timing, and worker processes
    # sample actions from unseeded generators, so no two such runs agree.
    "appo CartPole-v1": ["appo", *CARTPOLE, "--collector.kind", "sync",
                         "--collector.num-workers", "0"],
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


def resume(run_dir: Path) -> int:
    """Resume ``run_dir`` (stopped halfway by another checkout) and a run this checkout stopped
    at the same point; both must end with the same weights. (A resumed run plays new episodes,
    so it is compared with another resumed run, not with an uninterrupted one.)"""
    half = [*CASES["ppo CartPole-v1"][1:], "--total-frames", "4096"]
    whole = [*CASES["ppo CartPole-v1"][1:], "--resume"]
    theirs = run_recipe("ppo", whole, run_dir)
    with tempfile.TemporaryDirectory() as tmp:
        run_recipe("ppo", half, Path(tmp) / "half")
        ours = run_recipe("ppo", whole, Path(tmp) / "half")
    same = theirs == ours
    print(f"resumed from the other checkout's folder: {theirs}")
    print(f"stopped and resumed by this checkout:    {ours}")
    print("same" if same else "DIFFERENT")
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
    s.add_argument("run_dir", type=Path, help="a folder from `run --resume-check DIR`")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    ns = p.parse_args(argv)
    if ns.cmd == "run":
        run_all(ns.out, ns.resume_check, ns.only)
        return 0
    if ns.cmd == "resume":
        return resume(ns.run_dir)
    return compare(ns.before, ns.after)


if __name__ == "__main__":
    raise SystemExit(main())
