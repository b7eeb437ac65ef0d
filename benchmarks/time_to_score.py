"""Wall time for a recipe to reach a mean episode return (PPO on Pong to 18 by default).

Starts the recipe as a subprocess (``python recipes/<algo>_atari.py`` with ``--seed`` and the
given flags and a run folder), reads the run's ``episodes.csv`` once a second, and stops the run
(SIGTERM, then SIGKILL after 20 s) when the mean unclipped return of the last ``--window``
finished episodes reaches ``--target`` or when ``--budget-s`` has passed. Writes
``time_to_score.json``: whether the target was reached, the wall time from launch and from the
first logged update (excluding start-up), frames at that moment, the best windowed mean seen,
the frames/s, and the host's CPU, the date and accelrl's commit; ``curve.csv``: one row per
finished game (wall seconds from launch, at most a second late: the read that saw it; frames;
unclipped score), as for a library; copies the run's ``metrics.csv`` and ``episodes.csv`` next
to it. ``python -m benchmarks.time_to_score_report DIR...`` draws the curves of several runs
and tabulates them.

Run: ``python -m benchmarks.time_to_score --out DIR [--budget-s 300] [--target 18]
[--device cuda] [-- extra recipe flags]``.

``--peer sb3|cleanrl|sf`` runs a library from ``benchmarks.peers`` instead, with its own default
PPO settings for Atari (``benchmarks.peer_libs.default_args``: only the game, ``--seed``, the
length ``--frames`` and the device are set; the zoo's periodic evaluation is off; the length
defaults to the recipe's 10M frames, since each library anneals its learning rate over it and
their own lengths differ: 10M agent steps for the zoo and CleanRL, 10M frames for Sample
Factory), from the venv
that ``python -m benchmarks.peers setup NAME --cache DIR`` made. Its wrapper reports each
finished game; ``curve.csv`` gets one row per game as it ends (wall seconds from launch, frames,
unclipped score), so a long run can be left in the background and read at any time; the same
window, target and budget stop it, and ``time_to_score.json`` holds the same fields. Breakout to
a last-100 return of 10 with each peer's defaults:

    python -m benchmarks.time_to_score --peer cleanrl --game Breakout --target 10 \
        --budget-s 86400 --out runs/tts-cleanrl-breakout
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from accelrl.run.record import code_version
from benchmarks.common import cpu_name

FRAMESKIP = 4

# The protocol every library plays by in a time-to-score run (``--protocol peers``, the
# default): what the peers' Atari settings do, which the recipe's own defaults do not (sticky
# actions 0.25, no FIRE after a lost life). The rest is the same in all already: the minimal
# action set, up to 30 no-op starts, FIRE at a reset, a lost life ending bootstrapping (an
# episode end inside the peers' envs, ``life_loss_boundary`` in the recipes), rewards clipped to
# their sign for learning, and the score counted over whole games (docs/results/speed.md#the-
# time-to-score-protocol).
PROTOCOL_FLAGS = ["--env.sticky-actions", "0", "--env.fire-on-life-loss"]


def reach(
    args: argparse.Namespace,
    ended_by: str,
    t_launch: float,
    t_first: float | None,
    reached_at: float | None,
    reached_frames: int | None,
) -> dict:
    """A run's target and when it was reached (None: not), from the launch and from the first
    update, its start-up time, and where and when it ran (the CPU, the date, accelrl's commit):
    the fields the recipe's and a peer's results share. Times from different hosts are not
    compared: ``time_to_score_report`` sets each library against the recipe on the same CPU."""
    return {
        "host": cpu_name(),
        "date": datetime.date.today().isoformat(),
        "commit": code_version()["commit"],
        "target": args.target,
        "window": args.window,
        "budget_s": args.budget_s,
        "reached": reached_at is not None,
        "ended_by": ended_by,
        "wall_s_from_launch": None if reached_at is None else reached_at - t_launch,
        "wall_s_from_first_update": (
            None if reached_at is None or t_first is None else reached_at - t_first
        ),
        "frames_at_target": reached_frames,
        "startup_s": None if t_first is None else t_first - t_launch,
    }


def read_rows(path: str) -> list[tuple[int, float]]:
    """(frames, return) of each whole row of a run's ``episodes.csv``; a last line still being
    written (no newline yet) is left for the next read."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        text = f.read()
    lines = text.split("\n")[:-1]  # the part after the last newline is not a whole row yet
    rows = []
    for row in csv.DictReader(lines):
        try:
            rows.append((int(float(row["frames"])), float(row["return"])))
        except (KeyError, TypeError, ValueError):
            continue
    return rows


def read_episodes(path: str, window: int) -> tuple[int, float | None, int]:
    """(episodes, mean return of the last ``window``, frames of the last episode)."""
    rows = read_rows(path)
    return len(rows), window_mean(rows, window), rows[-1][0] if rows else 0


def window_mean(rows: list[tuple[int, float]], window: int) -> float | None:
    """Mean return of the last ``window`` rows; None before there are that many."""
    return sum(r for _, r in rows[-window:]) / window if len(rows) >= window else None


def print_progress(
    elapsed_s: float, count: int, what: str, window: int, mean: float | None, frames: int
) -> None:
    """One progress line: ``count`` episodes (or games) by ``elapsed_s``, the mean return of the
    last ``window`` of them ("-" before there are that many), and the frames played."""
    m = "-" if mean is None else f"{mean:.1f}"
    print(
        f"  {elapsed_s:5.0f} s: {count} {what}, mean of last {window} {m}, frames {frames:,}",
        flush=True,
    )


def has_update(metrics: str) -> bool:
    """True once the run's metrics.csv holds a data row (its first update is done)."""
    if not os.path.exists(metrics):
        return False
    with open(metrics) as f:
        return sum(1 for _ in f) >= 2


def last_metrics(metrics: str) -> dict[str, str]:
    if not os.path.exists(metrics):
        return {}
    rows = []
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[-1] if rows else {}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="time_to_score", help="folder for the results")
    p.add_argument(
        "--algo",
        default="ppo",
        help="recipe: ppo, a2c, appo, dqn, pqn; with --peer cleanrl: ppo or pqn (its script)",
    )
    p.add_argument("--game", default="Pong")
    p.add_argument("--target", type=float, default=18.0)
    p.add_argument("--window", type=int, default=100, help="episodes in the running mean")
    p.add_argument("--budget-s", type=float, default=300.0, help="wall-time budget from launch")
    p.add_argument("--device", default="auto")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--peer", choices=["sb3", "cleanrl", "sf"], help="a library instead of a recipe")
    p.add_argument("--cache", type=Path, help="the peers' venvs (benchmarks.peers setup)")
    p.add_argument("--seed", type=int, default=1, help="the recipe's or the library's seed")
    p.add_argument(
        "--frames", type=int, default=10_000_000, help="--peer: its length in emulator frames"
    )
    p.add_argument(
        "--protocol",
        choices=["peers", "own"],
        default="peers",
        help="peers: the recipe plays by the peers' Atari settings (no sticky actions, FIRE "
        "after a lost life; PROTOCOL_FLAGS); own: the recipe's defaults",
    )
    p.add_argument("extra", nargs="*", help="recipe flags (after --; they come last and win)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.peer:
        if args.extra:
            p.error(f"recipe flags {args.extra} apply to recipes only, not to --peer {args.peer}")
        return peer_main(args, p)
    run_dir = tempfile.mkdtemp(prefix=f"tts_{args.algo}_")
    shutil.rmtree(run_dir)
    cmd = [
        args.python,
        os.path.join("recipes", f"{args.algo}_atari.py"),
        "--env.game",
        args.game,
        "--device",
        args.device,
        "--run-dir",
        run_dir,
        "--log.no-progress",
        "--log.no-tensorboard",
        "--log.eval-episodes",
        "0",
        "--log.checkpoint-every-frames",
        str(10**12),
        "--seed",
        str(args.seed),
        *(PROTOCOL_FLAGS if args.protocol == "peers" else []),
        *args.extra,
    ]
    print("launch:", " ".join(cmd), flush=True)
    episodes_csv = os.path.join(run_dir, "episodes.csv")
    metrics_csv = os.path.join(run_dir, "metrics.csv")
    t_launch = time.time()
    log_path = os.path.join(args.out, "recipe.log")
    curve_path = os.path.join(args.out, "curve.csv")
    with open(log_path, "w") as log_file, open(curve_path, "w", newline="") as curve_file:
        curve = csv.writer(curve_file)  # the peers' columns; a game's time: the poll that saw it
        curve.writerow(["wall_s", "frames", "return"])
        in_curve = 0
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        t_first: float | None = None
        reached_at: float | None = None
        reached_frames = None
        best = None
        last_print = 0.0
        while True:
            time.sleep(1.0)
            now = time.time()
            if t_first is None and has_update(metrics_csv):
                t_first = now
            rows = read_rows(episodes_csv)
            for f_row, r_row in rows[in_curve:]:
                curve.writerow([f"{now - t_launch:.3f}", f_row, r_row])
            curve_file.flush()
            in_curve = len(rows)
            n, frames = len(rows), rows[-1][0] if rows else 0
            mean = window_mean(rows, args.window)
            if mean is not None:
                best = mean if best is None else max(best, mean)
            if now - last_print >= 15:
                last_print = now
                print_progress(now - t_launch, n, "episodes", args.window, mean, frames)
            if mean is not None and mean >= args.target:
                reached_at, reached_frames = now, frames
                break
            if proc.poll() is not None or now - t_launch >= args.budget_s:
                break
        ended_by = (
            "target"
            if reached_at
            else ("recipe exited" if proc.poll() is not None else "time budget")
        )
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    last = last_metrics(metrics_csv)
    n, mean, frames = read_episodes(episodes_csv, args.window)
    result = {
        "algo": args.algo,
        "game": args.game,
        "seed": args.seed,
        **reach(args, ended_by, t_launch, t_first, reached_at, reached_frames),
        "episodes": n,
        "final_mean": mean,
        "best_mean": best,
        "frames": int(float(last.get("frames", 0) or 0)),
        "fps_logged": float(last.get("perf/fps", "nan") or "nan"),
        "recipe_returncode": proc.returncode,
        "protocol": args.protocol,
        "command": cmd,
    }
    for name in ("metrics.csv", "episodes.csv", "config.json"):
        src = os.path.join(run_dir, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))
    shutil.rmtree(run_dir, ignore_errors=True)
    with open(os.path.join(args.out, "time_to_score.json"), "w") as f:
        json.dump(result, f, indent=2)
    status = (
        f"reached {args.target} after {result['wall_s_from_launch']:.0f} s "
        f"({reached_frames:,} frames)"
        if reached_at
        else f"did not reach {args.target} ({ended_by}; best mean {best})"
    )
    print(f"{args.algo} {args.game}: {status}; {result['frames']:,} frames in all")
    return result


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group (a peer's worker processes too), SIGKILL after 20 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def peer_main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """``--peer``: run a library with its defaults until the target, its end or the budget."""
    from benchmarks import peer_libs

    cache = args.cache or peer_libs.DEFAULT_CACHE
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    work_dir = tempfile.mkdtemp(prefix=f"tts_{args.peer}_")
    try:
        peer_args = peer_libs.default_args(
            args.peer, args.game, args.frames, work_dir, seed=args.seed, device=device
        )
        cmd = peer_libs.command(args.peer, cache, peer_args, algo=args.algo)
    except peer_libs.PeerError as err:
        shutil.rmtree(work_dir)
        parser.error(str(err))
    print("launch:", " ".join(cmd), flush=True)
    lines: queue.Queue[str | None] = queue.Queue()
    last: deque[float] = deque(maxlen=args.window)
    n, frames, best, mean = 0, 0, None, None
    t_first = reached_at = reached_frames = None
    curve_path = os.path.join(args.out, "curve.csv")
    with (
        open(os.path.join(args.out, "peer.log"), "w", buffering=1) as log,
        open(os.path.join(args.out, "peer_stdout.log"), "w") as out_log,
        open(curve_path, "w", newline="") as curve_file,
    ):
        curve = csv.writer(curve_file)
        curve.writerow(["wall_s", "frames", "return"])
        t_launch = time.perf_counter()  # the wrappers' marks use the same monotonic clock
        proc = subprocess.Popen(
            cmd, cwd=work_dir, stdout=out_log, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip

        def pump() -> None:
            for line in proc.stderr:
                lines.put(line)
            lines.put(None)

        try:  # the peer and its worker processes stop whatever happens here
            threading.Thread(target=pump, daemon=True).start()
            last_print, ended = 0.0, False
            while not ended and reached_at is None:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    line = ""
                if line is None:
                    ended = True
                elif line:
                    log.write(line)
                    for steps, t in peer_libs.read_marks(line):
                        frames = int(steps) * peer_libs.FRAMESKIP
                        t_first = t if t_first is None else t_first
                    for steps, score, t in peer_libs.read_marks(line, peer_libs.EPISODE):
                        curve.writerow(
                            [f"{t - t_launch:.3f}", int(steps) * peer_libs.FRAMESKIP, score]
                        )
                        curve_file.flush()
                        n += 1
                        last.append(score)
                        if len(last) == args.window:
                            mean = sum(last) / len(last)
                            best = mean if best is None else max(best, mean)
                            if mean >= args.target:
                                reached_at, reached_frames = t, int(steps) * peer_libs.FRAMESKIP
                now = time.perf_counter()
                if now - last_print >= 15:
                    last_print = now
                    print_progress(now - t_launch, n, "games", args.window, mean, frames)
                if now - t_launch >= args.budget_s:
                    break
        finally:
            stop_group(proc)
        ended_by = "target" if reached_at else ("peer exited" if ended else "time budget")
    shutil.rmtree(work_dir, ignore_errors=True)
    result = {
        "peer": args.peer,
        "title": peer_libs.peer(args.peer).title,
        "installed": peer_libs.installed(args.peer, cache),
        "game": args.game,
        "seed": args.seed,
        "frames_planned": args.frames,
        "device": device,
        **reach(args, ended_by, t_launch, t_first, reached_at, reached_frames),
        "episodes": n,
        "final_mean": mean,
        "best_mean": best,
        "frames": frames,
        "peer_returncode": proc.returncode,
        "command": cmd,
    }
    with open(os.path.join(args.out, "time_to_score.json"), "w") as f:
        json.dump(result, f, indent=2)
    if ended and proc.returncode:
        print(f"{args.peer} exited {proc.returncode}; its output: {args.out}/peer.log")
    status = (
        f"reached {args.target} after {result['wall_s_from_launch']:.0f} s "
        f"({reached_frames:,} frames)"
        if reached_at
        else f"did not reach {args.target} ({ended_by}; best mean {best})"
    )
    print(f"{args.peer} {args.game}: {status}; {frames:,} frames in all; curve in {curve_path}")
    return result


if __name__ == "__main__":
    main()
