"""Data-parallel training without SLURM: two gloo ranks under torchrun on this machine, and the
signal handling that SLURM's time limits and preemptions rely on."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import cartpole_flags, free_port

REPO = Path(__file__).resolve().parents[1]
CARTPOLE = cartpole_flags("--ppo.minibatches", "2")


def summaries(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


# Feed-forward, and an LSTM whose state each rank's simulators carry (docs/recurrent.md).
@pytest.mark.parametrize("model", [[], ["--model.recurrent", "lstm", "--model.lstm-hidden", "16"]],
                         ids=["feed-forward", "lstm"])  # fmt: skip
def test_two_ranks_train_on_identical_weights_and_count_all_frames(tmp_path, model):
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [
        str(torchrun), "--nproc-per-node", "2", "--master-port", str(free_port()),
        str(REPO / "recipes" / "ppo_atari.py"), *CARTPOLE, *model, "--total-frames", "2048",
        "--dist.check-sync-every", "1", "--dist.lr-scaling", "linear",
        "--run-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = sorted(summaries(out.stdout), key=lambda s: s["rank"])
    assert [s["rank"] for s in ranks] == [0, 1]
    # check-sync-every 1 compares all weights after every step (a mismatch fails the run);
    # the final weights agree to the last bit.
    assert ranks[0]["weights_checksum"] == ranks[1]["weights_checksum"]
    # 2 ranks x 64 steps per update: 16 updates reach 2048 frames.
    assert ranks[0]["frames"] == 2048 and ranks[0]["updates"] == 16
    assert "learning rate x 2 (linear scaling, 2 ranks)" in out.stderr
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["resolved"]["lr_scale"] == 2.0 and saved["config"]["ppo"]["lr"] == 0.00025
    first = next(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    # The optimizer runs at twice the flag's rate (annealed linearly over the run).
    expected = 0.0005 * (1 - int(first["frames"]) / 2048)
    assert float(first["train/lr"]) == pytest.approx(expected, rel=1e-6)
    # Only rank 0 writes: one metrics row per update, episodes from both ranks.
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 16
    assert ranks[0]["episodes"] > 0 and ranks[1]["episodes"] == 0
    # Rank 1's episodes reach rank 0's episodes.csv: the lengths there add up to more agent
    # steps than rank 0 took itself (1024; both ranks: 2048 minus the unfinished episodes).
    lengths = [int(line.split(",")[2]) for line in
               (tmp_path / "run" / "episodes.csv").read_text().splitlines()[1:]]  # fmt: skip
    assert sum(lengths) > 1.25 * 1024, sum(lengths)


def wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2])
def test_signal_writes_a_checkpoint_and_exits_then_resume_finishes(tmp_path, sig):
    run = tmp_path / "run"
    recipe = [sys.executable, str(REPO / "recipes" / "ppo_atari.py"), *CARTPOLE]
    proc = subprocess.Popen(
        [*recipe, "--total-frames", "1000000", "--run-dir", str(run)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        metrics = run / "metrics.csv"
        assert wait_for(lambda: metrics.exists() and metrics.read_text().count("\n") > 3, 120)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-2000:]
    stopped = f"stopped by {signal.Signals(sig).name}"
    line = next(x for x in err.splitlines() if x.startswith("accelrl: ") and stopped in x)
    frames = int(line.split(" at ")[1].split()[0])
    ckpts = sorted((run / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts and ckpts[-1].name == f"ckpt_{frames:012d}.pt"
    rows_at_stop = metrics.read_text().count("\n") - 1
    assert rows_at_stop == frames // 64

    done = subprocess.run(
        [*recipe, "--total-frames", str(frames + 640), "--run-dir", str(run), "--resume"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed from {ckpts[-1]} at {frames} frames" in done.stderr, done.stderr[-2000:]
    assert summaries(done.stdout)[-1]["frames"] == frames + 640
    frames_col = [int(r.split(",")[0]) for r in metrics.read_text().splitlines()[1:]]
    assert frames_col == list(range(64, frames + 640 + 1, 64)), "no duplicated or missing rows"


@pytest.mark.parametrize("workers", [0, 2])
def test_ctrl_c_stops_after_the_batch_with_a_checkpoint(tmp_path, workers):
    """Ctrl-C in a terminal reaches the whole process group, collector workers included: the
    run finishes its batch, writes a checkpoint and exits 130 with the --resume hint (before,
    it exited at once and lost everything since the last periodic checkpoint)."""
    run = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "recipes" / "ppo_atari.py"), *CARTPOLE,
           "--collector.num-workers", str(workers), "--total-frames", "1000000",
           "--run-dir", str(run)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )  # fmt: skip
    try:
        metrics = run / "metrics.csv"
        assert wait_for(lambda: metrics.exists() and metrics.read_text().count("\n") > 3, 120)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert "Ctrl-C: stopping after this batch with a checkpoint" in err
    line = next(x for x in err.splitlines() if x.startswith("accelrl: stopped by SIGINT"))
    assert "continue with --resume" in line
    frames = int(line.split(" at ")[1].split()[0])
    ckpts = sorted((run / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts and ckpts[-1].name == f"ckpt_{frames:012d}.pt"
    assert metrics.read_text().count("\n") - 1 == frames // 64


def test_a_second_ctrl_c_stops_at_once_and_handlers_are_restored():
    from accelrl.process import StopSignals

    before = signal.getsignal(signal.SIGINT)
    stops = StopSignals()
    assert signal.getsignal(signal.SIGINT) is before  # nothing installed until install()
    stops.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs between bytecodes of the main thread
        assert stops.signum == signal.SIGINT and stops.requested()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
    finally:
        stops.restore()
    assert signal.getsignal(signal.SIGINT) is before


def start_ranks(tmp_path, extra: list[str], world: int = 2) -> list[subprocess.Popen]:
    """``world`` ranks of the PPO recipe started as torchrun would (its environment variables),
    without torchrun's agent, which would itself kill the survivors of a dead rank."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
        procs.append(subprocess.Popen(
            [sys.executable, str(REPO / "recipes" / "ppo_atari.py"), *CARTPOLE, *extra,
             "--run-dir", str(tmp_path / "run")],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))  # fmt: skip
    return procs


def test_a_dead_rank_stops_the_survivor_with_one_line(tmp_path):
    procs = start_ranks(tmp_path, ["--total-frames", "100000000"])
    metrics = tmp_path / "run" / "metrics.csv"
    try:
        assert wait_for(lambda: metrics.exists() and metrics.read_text().count("\n") > 3, 120)
        procs[1].kill()
        killed_at = time.monotonic()
        while procs[0].poll() is None and time.monotonic() - killed_at < 120:
            time.sleep(0.05)
        stopped_after = time.monotonic() - killed_at
        _, err = procs[0].communicate(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    print(f"rank 0 stopped {stopped_after:.2f} s after rank 1 was killed")
    assert procs[0].returncode == 3, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("accelrl: error: rank 0 of 2: ") and "died" in last, last
    assert "latest checkpoint: " in last, last
    assert "Traceback" not in err, err[-3000:]
    assert stopped_after < 30, stopped_after


def test_signal_on_one_rank_stops_all_at_the_same_batch_and_they_resume(tmp_path):
    """SIGTERM to rank 1 only: the ranks agree (all-reduce) to stop after the same batch, rank
    0 checkpoints, both exit 143; two ranks resume and end with one metrics row per update."""
    procs = start_ranks(tmp_path, ["--total-frames", "100000000"])
    metrics = tmp_path / "run" / "metrics.csv"
    try:
        assert wait_for(lambda: metrics.exists() and metrics.read_text().count("\n") > 3, 120)
        procs[1].send_signal(signal.SIGTERM)
        errs = [p.communicate(timeout=60)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [143, 143], errs[0][-2000:] + errs[1][-2000:]
    stops = [next(x for x in e.splitlines() if "stopped at" in x) for e in errs]
    frames = [int(x.split("stopped at ")[1].split()[0]) for x in stops]
    assert frames[0] == frames[1], stops
    ckpts = sorted((tmp_path / "run" / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts[-1].name == f"ckpt_{frames[0]:012d}.pt"

    target = frames[0] + 10 * 128
    procs = start_ranks(tmp_path, ["--total-frames", str(target), "--resume"])
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:]
    ranks = sorted((s for out, _ in outs for s in summaries(out)), key=lambda s: s["rank"])
    assert ranks[0]["weights_checksum"] == ranks[1]["weights_checksum"]
    rows = [int(r.split(",")[0]) for r in metrics.read_text().splitlines()[1:]]
    assert rows == list(range(128, target + 1, 128)), "one row per update, none lost or repeated"
