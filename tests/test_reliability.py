"""Faults during a run: non-finite losses, a full disk at checkpoint time, SIGKILL at random
points (resume must continue exactly), a dead collector worker."""

import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import accelrl.algos.ppo as ppo_module
from accelrl.cli import run_recipe
from accelrl.run.checkpoint import list_checkpoints, load_latest
from recipes import ppo_atari
from tests.helpers import cartpole_flags
from tests.test_distributed import wait_for

REPO = Path(__file__).resolve().parents[1]
CARTPOLE = cartpole_flags(
    "--ppo.minibatches", "2", "--ppo.epochs", "2", "--log.checkpoint-every-frames", "256"
)


def poison_loss(monkeypatch, from_call: int) -> None:
    """Make PPO's total loss NaN from the ``from_call``-th minibatch on."""
    real = ppo_module.total_loss
    calls = {"n": 0}

    def total_loss(out):
        calls["n"] += 1
        loss = real(out)
        return loss * float("nan") if calls["n"] >= from_call else loss

    monkeypatch.setattr(ppo_module, "total_loss", total_loss)


def finite_weights(state: dict) -> bool:
    tensors = [
        v
        for v in state["components"]["ppo"]["loss"].values()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    return bool(tensors) and all(torch.isfinite(t).all() for t in tensors)


def stopped_run(run_dir: Path, capsys) -> str:
    """Runs the CartPole PPO recipe for 2048 frames into ``run_dir``; it must stop with exit
    code 3 (a fault it reports). Returns the last line it wrote to stderr."""
    argv = [*CARTPOLE, "--total-frames", "2048", "--run-dir", str(run_dir)]
    with pytest.raises(SystemExit) as stop:
        run_recipe(ppo_atari.Config, ppo_atari.train, description="", argv=argv)
    assert stop.value.code == 3
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    # 2 epochs x 2 minibatches = 4 loss calls per update: NaN appears in update 11 (640 frames).
    poison_loss(monkeypatch, from_call=41)
    err = stopped_run(tmp_path, capsys)
    assert "loss is nan" in err and "at 704 frames, update 11" in err, err
    assert "ckpt_000000000512.pt" in err
    state, path = load_latest(tmp_path)
    assert path.name == "ckpt_000000000512.pt" and finite_weights(state)


def test_nan_loss_can_be_skipped_and_counted(tmp_path, monkeypatch, capsys):
    poison_loss(monkeypatch, from_call=41)
    argv = [*CARTPOLE, "--total-frames", "1024", "--run-dir", str(tmp_path), "--on-nonfinite",
            "skip"]  # fmt: skip
    summary = run_recipe(ppo_atari.Config, ppo_atari.train, description="", argv=argv)
    assert summary["frames"] == 1024 and math.isfinite(summary["weights_checksum"])
    last = (tmp_path / "metrics.csv").read_text().splitlines()
    column = last[0].split(",").index("train/skipped_steps")
    assert int(float(last[-1].split(",")[column])) == 24  # updates 11-16, 4 steps each
    state, _ = load_latest(tmp_path)
    assert finite_weights(state)


def test_full_disk_at_checkpoint_reports_and_keeps_the_previous(tmp_path, monkeypatch, capsys):
    import accelrl.run.checkpoint as ckpt

    real_save = torch.save
    calls = {"n": 0}

    def save(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            f.write(b"partial")
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", save)
    err = stopped_run(tmp_path, capsys)
    assert "No space left on device" in err and "ckpt_000000000512.pt" in err, err
    assert "ckpt_000000000256.pt" in err, f"the line names the latest good checkpoint: {err}"
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["ckpt_000000000256.pt"], names
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.suffix != ".pt"]


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


def mapped_shm(pids: set[int]) -> set[str]:
    """The /dev/shm files these processes have mapped (other programs' files are not ours)."""
    found = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        found |= {line.split()[-1] for line in maps.splitlines() if "/dev/shm/" in line}
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# MKL chooses kernels by memory alignment, so the same matmul can differ in the last bit
# between two processes with different allocation histories; its strict conditional numerical
# reproducibility mode removes that (needed for bitwise comparisons across processes).
REPRODUCIBLE = {**os.environ, "MKL_CBWR": "AUTO,STRICT"}


def start_recipe(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(REPO / "recipes" / "ppo_atari.py"), *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=REPRODUCIBLE,
    )


def wait_rows(metrics: Path, rows: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if metrics.exists() and metrics.read_text().count("\n") > rows:
            return True
        time.sleep(0.1)
    return False


class ClosesItsWorkersOnError:
    """Stands in for MultiSyncCollector when it notices a dead worker before our watchdog does:
    its iterator raises, and its cleanup closes the process objects (``is_alive`` then raises
    ValueError; that escaped our shutdown once in CI and turned exit code 3 into 1)."""

    def __init__(self, procs):
        self.procs = procs
        self.shutdowns = 0

    def __iter__(self):
        try:
            yield {"batch": 0}
            raise RuntimeError("At least one process failed: worker 0 (exit code -9).")
        finally:
            for proc in self.procs:
                proc.close()

    def shutdown(self, timeout=None, raise_on_error=True):
        self.shutdowns += 1


def test_watchdog_converts_and_shuts_down_after_torchrl_closed_the_workers():
    import multiprocessing

    from accelrl.collectors import CollectorFailure, WatchedCollector

    victim = multiprocessing.get_context("fork").Process(target=os._exit, args=(7,))
    victim.start()
    victim.join()
    inner = ClosesItsWorkersOnError([victim])
    watched = WatchedCollector(inner, stall_timeout_s=60, startup_timeout_s=60)
    watched._pids[0] = victim.pid  # as the watchdog saw it while it was alive
    named = rf"worker 0 \(pid {victim.pid}\) died \(At least one process failed"
    try:
        with pytest.raises(CollectorFailure, match=named):
            for _ in watched:
                pass
    finally:
        watched.shutdown()  # must not raise on the closed process objects
    assert inner.shutdowns == 1
    assert not watched._thread.is_alive(), "the watchdog thread is joined at shutdown"


@pytest.mark.slow
def test_dead_worker_stops_the_run_and_leaves_nothing_behind(tmp_path):
    run = tmp_path / "run"
    argv = [*CARTPOLE, "--collector.num-workers", "2", "--collector.steps-per-batch", "128",
            "--total-frames", "100000000", "--run-dir", str(run)]  # fmt: skip
    proc = start_recipe(argv)
    try:
        assert wait_rows(run / "metrics.csv", 6, 180), "the run must get going"
        workers = {
            p for p in children_of(proc.pid)
            if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()
        }  # fmt: skip
        assert len(workers) == 2, workers
        victim = max(workers)
        shm = mapped_shm({proc.pid, *workers})
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        # The watchdog checks the workers every second; without it only the stall timeout
        # (60 s here) would stop the run. Bounded by an event (the exit), not a sleep.
        while proc.poll() is None and time.monotonic() - killed_at < 90:
            time.sleep(0.05)
        stopped_after = time.monotonic() - killed_at
        _, err = proc.communicate(timeout=30)
        print(f"run stopped {stopped_after:.2f} s after the worker was killed")
        assert stopped_after < 20, f"took {stopped_after:.1f} s to stop (stall timeout: 60 s)"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "collector worker" in last and f"(pid {victim}) died" in last, last
    assert "latest checkpoint: " in last and "ckpt_" in last, last
    assert not [p for p in workers if alive(p)], "no orphan worker"
    # multiprocessing's resource tracker unlinks what the run left once the run has exited.
    assert shm, "the run and its workers map shared memory (semaphores, buffers)"
    assert wait_for(lambda: not [f for f in shm if Path(f).exists()], 15), (
        f"shared memory left behind: {[f for f in shm if Path(f).exists()]}"
    )


@pytest.mark.slow
def test_sigkill_cycles_resume_exactly(tmp_path):
    """Three SIGKILLs at random points, each followed by --resume: the run ends with the same
    counters and metrics rows as an uninterrupted run, and with bit-identical weights to a run
    stopped cleanly at the checkpoints the killed run resumed from.

    Exact equality with a run that was never stopped is not possible: the simulators' states
    are not in the checkpoint (ale-py cannot save a vector env's emulators), so a resumed run
    starts new episodes, seeded from the update count. Everything else (weights, optimizer,
    schedules, RNG streams, counters, logger) resumes exactly, which the comparison checks.
    """
    rng = random.Random(7)
    total = 3200
    flags = [*CARTPOLE, "--ppo.no-anneal-lr", "--ppo.no-anneal-clip", "--seed", "3"]
    run = tmp_path / "killed"
    resumed_from: list[int] = []
    for cycle in range(4):
        argv = [*flags, "--total-frames", str(total), "--run-dir", str(run)]
        if list_checkpoints(run):
            argv.append("--resume")
        proc = start_recipe(argv)
        if cycle < 3:
            done_rows = 0
            if (run / "metrics.csv").exists():
                done_rows = (run / "metrics.csv").read_text().count("\n") - 1
            assert wait_rows(run / "metrics.csv", done_rows + rng.randint(5, 12), 180)
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
        resumed_from += [int(x.split(" at ")[1].split()[0]) for x in err.splitlines()
                         if "resumed from" in x]  # fmt: skip
    assert proc.returncode == 0, err[-2000:]
    frames = [int(r.split(",")[0]) for r in (run / "metrics.csv").read_text().splitlines()[1:]]
    assert frames == list(range(64, total + 1, 64)), "no duplicated or missing rows"
    assert len(resumed_from) >= 2, resumed_from

    # The reference stops cleanly at the same frames and resumes from there (a checkpoint the
    # killed run resumed from twice, killed again before the next one, is one stop).
    stops = [f for i, f in enumerate(resumed_from) if i == 0 or f != resumed_from[i - 1]]
    ref = tmp_path / "reference"
    for stop in [*stops, total]:
        argv = [*flags, "--total-frames", str(stop), "--run-dir", str(ref)]
        if list_checkpoints(ref):
            argv.append("--resume")
        proc = start_recipe(argv)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    killed, _ = load_latest(run)
    reference, _ = load_latest(ref)
    assert (killed["frames"], killed["updates"]) == (reference["frames"], reference["updates"])
    for name, tensor in reference["components"]["ppo"]["loss"].items():
        assert torch.equal(killed["components"]["ppo"]["loss"][name], tensor), (name, stops)


def test_same_seed_same_first_updates_to_the_bit(tmp_path, capsys):
    """Single process on CPU: two runs with one seed log identical losses for 5 updates."""
    rows = []
    for name in ("a", "b"):
        argv = [*CARTPOLE, "--total-frames", "320", "--seed", "11", "--run-dir",
                str(tmp_path / name)]  # fmt: skip
        run_recipe(ppo_atari.Config, ppo_atari.train, description="", argv=argv)
        lines = (tmp_path / name / "metrics.csv").read_text().splitlines()
        header = lines[0].split(",")
        keep = [i for i, h in enumerate(header) if h.startswith(("loss/", "train/"))]
        rows.append([[line.split(",")[i] for i in keep] for line in lines[1:]])
    assert len(rows[0]) == 5
    assert rows[0] == rows[1]


class GoesSilent:
    """A collector that yields ``batches`` batches and then blocks (a hung worker)."""

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.shutdowns = 0

    def __iter__(self):
        for i in range(self.batches):
            yield {"batch": i}
        time.sleep(3600)

    def shutdown(self, timeout=None, raise_on_error=True):
        self.shutdowns += 1


@pytest.mark.parametrize("batches,limit", [(2, "limit 2 s"), (0, "limit 4 s")],
                         ids=["stalled", "never-started"])  # fmt: skip
def test_watchdog_stops_a_silent_collector(batches, limit):
    from accelrl.collectors import CollectorFailure, WatchedCollector

    def backstop(signum, frame):
        raise AssertionError("the watchdog never stopped the silent collector")

    inner = GoesSilent(batches)
    watched = WatchedCollector(inner, stall_timeout_s=2.0, startup_timeout_s=4.0)
    start = time.monotonic()
    seen = 0
    previous = signal.signal(signal.SIGALRM, backstop)
    signal.alarm(30)  # a broken watchdog fails the test instead of hanging it
    try:
        with pytest.raises(CollectorFailure, match=f"produced no batch for .*{limit}"):
            for _ in watched:
                seen += 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        watched.shutdown()
    elapsed = time.monotonic() - start
    assert seen == batches
    # The limit, plus at most one watchdog period and scheduling slack; never the hour.
    assert float(limit.split()[1]) <= elapsed < float(limit.split()[1]) + 10, elapsed
    assert inner.shutdowns == 1


def test_watchdog_does_not_count_the_learners_time_with_a_batch():
    """A first compiled update can take minutes on a CPU: the learner holding a batch for longer
    than the stall limit is not a silent collector."""
    from accelrl.collectors import WatchedCollector

    inner = GoesSilent(3)
    watched = WatchedCollector(inner, stall_timeout_s=1.0, startup_timeout_s=1.0)
    try:
        batches = iter(watched)
        for expected in range(3):
            assert next(batches) == {"batch": expected}
            time.sleep(2.5)  # the update: longer than the limit
        assert watched.failure is None
    finally:
        watched.shutdown()


SUSPENDED_RUN = """
import time
from accelrl.collectors import WatchedCollector

class Steady:
    # Batches of 0.3 s of CPU work each: a stopped process does no work (a sleep would end the
    # moment the process continues).
    def __iter__(self):
        while True:
            start = time.process_time()
            while time.process_time() - start < 0.3:
                pass
            yield {}

    def shutdown(self):
        pass

watched = WatchedCollector(Steady(), stall_timeout_s=3.0, startup_timeout_s=3.0)
print("ready", flush=True)
start = time.monotonic()
for _ in watched:
    if time.monotonic() - start > 14:
        break
watched.shutdown()
print("finished" if watched.failure is None else watched.failure, flush=True)
"""


def test_a_suspended_run_is_not_a_stalled_collector():
    """SIGSTOP / SIGCONT (Ctrl-Z and fg, SLURM's suspend and gang scheduling) longer than the
    stall limit: the run goes on. Counting wall time, the watchdog ended it on SIGCONT (a run
    stopped for four minutes: "no batch for 250 s (limit 60 s)")."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SUSPENDED_RUN],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(2.0)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(9.0)  # three times the stall limit
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert out.strip() == "finished", err[-2000:]


def test_awake_clock_leaves_out_a_pause_and_times_waits_in_awake_seconds(monkeypatch):
    """The clock behind the watchdog and the asynchronous replay's waits, on a fake monotonic
    clock: a gap between ticks beyond the grace counts one tick; a shorter delay counts whole."""
    from accelrl import clock as clocks

    fake = {"t": 100.0}
    monkeypatch.setattr(clocks.time, "monotonic", lambda: fake["t"])
    clock = clocks.AwakeClock(tick_s=1.0, grace_s=4.0)
    start = clock.now()
    for gap in (1.0, 1.0, 3.5, 1.0):  # 3.5: a busy machine, within the grace
        fake["t"] += gap
        clock.tick()
    assert clock.now() - start == pytest.approx(6.5)
    fake["t"] += 300.0  # stopped for five minutes
    assert clock.now() - start == pytest.approx(7.5)  # continuous before the next tick
    clock.tick()
    assert clock.now() - start == pytest.approx(7.5)
    assert clock.lost == pytest.approx(299.0)

    class Cond:
        """A condition whose third wait spans a ten-minute suspension."""

        def __init__(self) -> None:
            self.waits: list[float] = []

        def wait(self, seconds: float) -> None:
            self.waits.append(seconds)
            fake["t"] += seconds + (600.0 if len(self.waits) == 3 else 0.0)

    cond = Cond()
    clock = clocks.AwakeClock(tick_s=1.0, grace_s=4.0)
    assert not clock.wait_for(cond, lambda: False, timeout=5.0)
    assert sum(cond.waits) == pytest.approx(5.0)  # five awake seconds, the pause not counted
    ready = iter([False, False, "batch"])
    assert clocks.AwakeClock().wait_for(cond, lambda: next(ready), timeout=60.0) == "batch"


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_nonfinite_gradient_norm_with_a_finite_loss(monkeypatch, policy):
    from accelrl.algos import common

    guard = common.NonFiniteGuard(policy)
    model = torch.nn.Linear(3, 1)
    model.weight.register_hook(lambda g: g * float("inf"))  # finite loss, infinite gradient
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(4, 3)).pow(2).mean()
    if policy == "stop":
        with pytest.raises(common.NonFiniteError, match="gradient norm is (inf|nan)"):
            common.gradient_step(opt, loss, list(model.parameters()), 1.0, guard)
    else:
        assert float(common.gradient_step(opt, loss, list(model.parameters()), 1.0, guard)) == 0
        assert guard.skipped == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_checkpoint_refuses_nonfinite_weights(tmp_path, monkeypatch, capsys):
    """Weights that turned NaN without a NaN loss (an optimizer or hardware fault) are never
    saved: the checkpoint is refused with one line and the previous one stays the latest."""
    from accelrl.run.folder import RunFolder

    real = RunFolder.checkpoint

    def checkpoint(self, progress):
        if progress.frames == 512:
            with torch.no_grad():
                next(self.modules()[0].parameters()).view(-1)[0] = float("nan")
        return real(self, progress)

    monkeypatch.setattr(RunFolder, "checkpoint", checkpoint)
    err = stopped_run(tmp_path, capsys)
    assert "is not finite; checkpoint not written" in err and "ckpt_000000000256.pt" in err, err
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_000000000256.pt"]
