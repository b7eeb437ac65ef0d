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

Run: ``python -m benchmarks.replay_memory [--capacity 1000000] [--dir PATH] [--json PATH]``.
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
from accelrl.replay import FrameReplay, ReplayConfig
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
    """A collector-like ``[16, STEPS]`` batch whose stacks all repeat one frame (zero copies)."""
    pixels = frames[:, :, None].expand(-1, -1, 4, -1, -1)
    done = torch.rand(NUM_ENVS, STEPS, 1, generator=gen) < 1 / 500  # Atari-like episode ends
    return TensorDict(
        {
            "pixels": pixels,
            "action": torch.randint(NUM_ACTIONS, (NUM_ENVS, STEPS), generator=gen),
            "next": {
                "pixels": pixels,
                "reward": torch.randint(-1, 2, (NUM_ENVS, STEPS, 1), generator=gen).float(),
                "done": done,
                "terminated": done,
                "life_lost": torch.zeros_like(done),
            },
        },
        batch_size=[NUM_ENVS, STEPS],
    )


def dqn_update_seconds(batch_size: int, reps: int) -> float:
    """Median seconds of one DQN update on a uint8 batch of ``batch_size`` stacks."""
    online = torch.nn.Sequential(NatureCNN(), torch.nn.Linear(512, NUM_ACTIONS))
    target = copy.deepcopy(online).requires_grad_(False)
    opt = torch.optim.Adam(online.parameters(), lr=1e-4)
    obs = torch.randint(0, 256, (batch_size, 4, 84, 84), dtype=torch.uint8)
    action = torch.randint(NUM_ACTIONS, (batch_size, 1))
    times = []
    for _ in range(reps + 1):  # the first one warms up allocators
        start = time.perf_counter()
        with torch.no_grad():
            y = target(obs).max(-1).values
        q = online(obs).gather(-1, action).squeeze(-1)
        loss = torch.nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return median(times[1:])


def tree_bytes(capacity: int) -> int:
    """Estimated bytes of the sampler's two float64 segment trees (2 x next power of 2 leaves)."""
    return 2 * 2 * (1 << (capacity - 1).bit_length()) * 8


def gb(x: float) -> str:
    return f"{x / 1e9:.3f} GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None, help="parent of the temporary storage folder")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    capacity = args.capacity

    folder = Path(tempfile.mkdtemp(prefix="replay_bench_", dir=args.dir))
    try:
        cfg = ReplayConfig(capacity=capacity, prioritized=True, n_step=3, storage_dir=str(folder))
        buf = FrameReplay(
            cfg, num_envs=NUM_ENVS, obs_key="pixels", obs_shape=(4, 84, 84), stack=4, gamma=0.99
        )
        gen = torch.Generator().manual_seed(0)
        frames = torch.randint(0, 256, (NUM_ENVS, STEPS, 84, 84), dtype=torch.uint8)
        mem_before = rss()
        start = time.perf_counter()
        steps = 0
        while steps < capacity:
            buf.extend(fake_batch(frames, gen))
            steps += NUM_ENVS * STEPS
        fill_s = time.perf_counter() - start
        mem = rss()
        disk = disk_bytes(folder)
        storage = sum(v.nbytes for v in buf.storage.values())
        print(
            f"capacity {capacity:,}: filled {steps:,} steps in {fill_s:.1f} s "
            f"({steps / fill_s:,.0f} steps/s), {len(buf):,} transitions sampleable\n"
        )

        rows, results = [], {}
        for batch_size in BATCHES:
            times = []
            for _ in range(SAMPLE_REPS + 1):  # the first one warms up
                t0 = time.perf_counter()
                buf.sample(batch_size)
                times.append(time.perf_counter() - t0)
            sample_s = median(times[1:])
            update_s = dqn_update_seconds(batch_size, UPDATE_REPS[batch_size])
            rows.append([batch_size, sample_s * 1e3, update_s * 1e3, sample_s / update_s])
            results[batch_size] = {"sample_s": sample_s, "update_s": update_s}

        per_step = storage / capacity  # storage is linear in capacity, the trees step by 2x
        at_1m = per_step * 1e6 + tree_bytes(1_000_000)
        label = "at 1M" if capacity == 1_000_000 else "at 1M (extrapolated)"
        print_table(
            ["", "measured", "per transition", label],
            [
                [
                    "disk used (du)",
                    gb(disk),
                    f"{disk / capacity:,.0f} B",
                    gb(disk / capacity * 1e6),
                ],
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
        print_table(
            ["process memory", "before fill", "after fill"],
            [[key, gb(mem_before[key]), gb(mem[key])] for key in ("VmRSS", "RssAnon", "RssFile")],
        )
        print("(RssFile: mapped file pages, i.e. torch's libraries and the replay's page cache)\n")
        print_table(["batch", "sample ms", "DQN update ms", "sample/update"], rows)
        print(f"\n1M transitions in {gb(at_1m)}: {'PASS' if at_1m <= BUDGET else 'MISS'}")
        if args.json:
            write_json(
                args.json,
                {
                    "machine": machine_info(),
                    "capacity": capacity,
                    "fill_steps_per_s": steps / fill_s,
                    "disk_bytes": disk,
                    "storage_bytes": storage,
                    "tree_bytes": tree_bytes(capacity),
                    "bytes_at_1m": at_1m,
                    "rss_before": mem_before,
                    "rss_after": mem,
                    "batches": results,
                },
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
