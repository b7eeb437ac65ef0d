"""FrameReplay at Atari scale: disk and memory per transition, sample time vs a DQN update.

Builds an Atari-shaped ``FrameReplay`` (16 envs, 4 x 84 x 84 uint8 stacks, n-step 3, prioritized)
with memory-mapped storage in a temporary folder, fills it with synthetic frames by extending with
``[16, 1024]`` batches, then reports the disk space the folder uses (allocated blocks, as ``du``),
the process RSS from /proc/self/status (anonymous memory and mapped file pages apart: the
written frames stay in the page cache and count as RssFile while mapped), bytes per transition of
the storage tensors and priority trees, and the median time to sample 512 and 2048 transitions
next to the median time of one DQN update on the same batch: Nature-CNN + linear Q head, online
forward, target forward (no grad), backward and an Adam step, on 1 torch thread. The folder is
deleted at the end.

``measure`` does the work and returns the figures (``benchmarks.run`` uses it).

Run: ``python -m benchmarks.replay_memory [--capacity 1000000] [--dir PATH] [--device cuda]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import tempfile
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from accelrl.models import NatureCNN
from accelrl.replay.memory import FrameReplay
from benchmarks.common import machine_info, median, print_table, write_json

NUM_ENVS = 16
STEPS = 1024  # per row per synthetic batch
NUM_ACTIONS = 6
BATCHES = (512, 2048)
SAMPLE_REPS = 20
UPDATE_REPS = {512: 5, 2048: 3}
BUDGET = 7.5e9  # bytes for 1M transitions


def disk_bytes(folder: Path) -> int:
    """Bytes allocated to the files under ``folder`` (what ``du`` reports; files are sparse)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def rss() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process in bytes."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out


def fake_batch(frames: torch.Tensor, gen: torch.Generator) -> TensorDict:
    """A collector-like ``[16, steps]`` batch whose stacks all repeat one frame (zero copies)."""
    steps = frames.shape[1]
    pixels = frames[:, :, None].expand(-1, -1, 4, -1, -1)
    done = torch.rand(NUM_ENVS, steps, 1, generator=gen) < 1 / 500  # Atari-like episode ends
    return TensorDict(
        {
            "pixels": pixels,
            "action": torch.randint(NUM_ACTIONS, (NUM_ENVS, steps), generator=gen),
            "next": {
                "pixels": pixels,
                "reward": torch.randint(-1, 2, (NUM_ENVS, steps, 1), generator=gen).float(),
                "done": done,
                "terminated": done,
                "life_lost": torch.zeros_like(done),
            },
        },
        batch_size=[NUM_ENVS, steps],
    )


def dqn_update_seconds(batch_size: int, reps: int, device: str = "cpu") -> float:
    """Median seconds of one DQN update on a uint8 batch of ``batch_size`` stacks (moved from
    the CPU to ``device`` inside the timed part, as a replay sample is)."""
    online = torch.nn.Sequential(NatureCNN(), torch.nn.Linear(512, NUM_ACTIONS)).to(device)
    target = copy.deepcopy(online).requires_grad_(False)
    opt = torch.optim.Adam(online.parameters(), lr=1e-4)
    obs_cpu = torch.randint(0, 256, (batch_size, 4, 84, 84), dtype=torch.uint8)
    action = torch.randint(NUM_ACTIONS, (batch_size, 1), device=device)
    times = []
    for _ in range(reps + 1):  # the first one warms up allocators
        start = time.perf_counter()
        obs = obs_cpu.to(device)
        with torch.no_grad():
            y = target(obs).max(-1).values
        q = online(obs).gather(-1, action).squeeze(-1)
        loss = torch.nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        float(loss.detach())  # waits for the device
        times.append(time.perf_counter() - start)
    return median(times[1:])


def tree_bytes(capacity: int) -> int:
    """Estimated bytes of the sampler's two float64 segment trees (2 x next power of 2 leaves)."""
    return 2 * 2 * (1 << (capacity - 1).bit_length()) * 8


def gb(x: float) -> str:
    return f"{x / 1e9:.3f} GB"


NAIVE_BYTES = 2 * 4 * 84 * 84  # uint8 stacks of obs and next obs, per transition


def measure(
    capacity: int,
    *,
    storage_dir: str | None = None,
    batches: tuple[int, ...] = BATCHES,
    sample_reps: int = SAMPLE_REPS,
    update_reps: dict[int, int] | None = None,
    device: str = "cpu",
    verbose: bool = True,
) -> dict:
    """Fill an Atari-shaped ``FrameReplay`` of ``capacity`` transitions (memmap in a temporary
    folder under ``storage_dir``, deleted at the end) and measure it; see the module doc."""
    update_reps = update_reps or UPDATE_REPS
    torch.manual_seed(0)
    folder = Path(tempfile.mkdtemp(prefix="replay_bench_", dir=storage_dir))
    try:
        buf = FrameReplay(
            capacity=capacity,
            prioritized=True,
            n_step=3,
            storage_dir=str(folder),
            num_envs=NUM_ENVS,
            obs_key="pixels",
            obs_shape=(4, 84, 84),
            stack=4,
            gamma=0.99,
        )
        gen = torch.Generator().manual_seed(0)
        # Batches of up to STEPS steps per env; small buffers need shorter ones (the replay
        # keeps about two batches of headroom per env).
        per_batch = max(16, min(STEPS, capacity // NUM_ENVS // 3))
        frames = torch.randint(0, 256, (NUM_ENVS, per_batch, 84, 84), dtype=torch.uint8)
        mem_before = rss()
        start = time.perf_counter()
        steps = 0
        while steps < capacity:
            buf.extend(fake_batch(frames, gen))
            steps += NUM_ENVS * per_batch
        fill_s = time.perf_counter() - start
        mem = rss()
        disk = disk_bytes(folder)
        storage = sum(v.nbytes for v in buf.storage.values())
        if verbose:
            print(
                f"capacity {capacity:,}: filled {steps:,} steps in {fill_s:.1f} s "
                f"({steps / fill_s:,.0f} steps/s), {len(buf):,} transitions sampleable"
            )
        results = {}
        for batch_size in batches:
            times = []
            for _ in range(sample_reps + 1):  # the first one warms up
                t0 = time.perf_counter()
                buf.sample(batch_size)
                times.append(time.perf_counter() - t0)
            sample_s = median(times[1:])
            update_s = dqn_update_seconds(batch_size, update_reps[batch_size], device)
            results[batch_size] = {"sample_s": sample_s, "update_s": update_s}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    per_step = storage / capacity  # storage is linear in capacity, the trees step by 2x
    return {
        "capacity": capacity,
        "extrapolated": capacity != 1_000_000,
        "fill_steps_per_s": steps / fill_s,
        "disk_bytes": disk,
        "storage_bytes": storage,
        "bytes_per_transition": per_step,
        "tree_bytes": tree_bytes(capacity),
        "bytes_at_1m": per_step * 1e6 + tree_bytes(1_000_000),
        "naive_bytes_at_1m": NAIVE_BYTES * 1e6,
        "rss_before": mem_before,
        "rss_after": mem,
        "device": device,
        "batches": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None, help="parent of the temporary storage folder")
    parser.add_argument("--device", default="cpu", help="where the DQN update runs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    capacity = args.capacity
    r = measure(capacity, storage_dir=args.dir, device=args.device)
    disk, storage, per_step, at_1m = (
        r["disk_bytes"],
        r["storage_bytes"],
        r["bytes_per_transition"],
        r["bytes_at_1m"],
    )
    print()
    label = "at 1M" if capacity == 1_000_000 else "at 1M (extrapolated)"
    print_table(
        ["", "measured", "per transition", label],
        [
            ["disk used (du)", gb(disk), f"{disk / capacity:,.0f} B", gb(disk / capacity * 1e6)],
            ["storage tensors", gb(storage), f"{per_step:,.0f} B", gb(per_step * 1e6)],
            [
                "priority trees (est.)",
                gb(tree_bytes(capacity)),
                f"{tree_bytes(capacity) / capacity:.0f} B",
                gb(tree_bytes(1_000_000)),
            ],
            ["storage + trees", "", "", f"{gb(at_1m)} (budget {gb(BUDGET)})"],
        ],
    )
    print()
    mem_before, mem = r["rss_before"], r["rss_after"]
    print_table(
        ["process memory", "before fill", "after fill"],
        [[key, gb(mem_before[key]), gb(mem[key])] for key in ("VmRSS", "RssAnon", "RssFile")],
    )
    print("(RssFile: mapped file pages, i.e. torch's libraries and the replay's page cache)\n")
    rows = [
        [b, v["sample_s"] * 1e3, v["update_s"] * 1e3, v["sample_s"] / v["update_s"]]
        for b, v in r["batches"].items()
    ]
    print_table(["batch", "sample ms", "DQN update ms", "sample/update"], rows)
    print(f"\n1M transitions in {gb(at_1m)}: {'PASS' if at_1m <= BUDGET else 'MISS'}")
    if args.json:
        write_json(
            args.json,
            {
                "machine": machine_info(),
                **{k: v for k, v in r.items() if k != "batches"},
                "batches": r["batches"],
            },  # fmt: skip
        )


if __name__ == "__main__":
    main()
