"""The acting network's forward pass replayed as a CUDA graph, and the choice of it by
measurement (``--compile.cudagraphs auto``, the default).

On a GPU a small network's forward pass is a few dozen kernel launches, and launching them from
Python costs more than running them (docs/results/speed.md#one-gpu-h200). A CUDA graph records
the launches once and replays them as one. ``ActingGraph`` captures the lean rollout's acting
network (``accelrl.models._ActingNet``: trunk, heads, the action draw) on a static observation
buffer: each step copies the observation in, replays, and copies the outputs out (the next
replay overwrites the static outputs). Sampling inside the graph draws from the device's
default generator at the offsets eager calls would use, so the same generator state gives the
same actions (``tests/test_collect.py``, marked ``gpu``).

``choose`` decides at the rollout's first lean batch: it captures, checks on the batch's first
observation that the graph gives eager's outputs from the same generator state, times both, and
keeps the graph only when it is equal and faster. The generator state is put back afterwards,
so a run draws the same actions whichever was chosen, and a resumed run may choose differently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

PROBE_STEPS = 20
"""Forward passes timed on each side when ``auto`` chooses."""


class ActingGraph:
    """``net``'s forward pass on observations shaped like ``example``, as a CUDA graph.

    ``capture`` records ``net`` on the static buffer and returns the call that replays it
    (``cuda_capture``; the tests on a CPU pass an eager stand-in to check the buffers around
    it). Calls with another shape run ``net`` eagerly."""

    def __init__(
        self,
        net: torch.nn.Module,
        example: torch.Tensor,
        capture: Callable[[torch.nn.Module, torch.Tensor], Callable[[], tuple[torch.Tensor, ...]]]
        | None = None,
    ) -> None:
        self.net = net
        self.static_obs = example.clone()
        self._replay = (capture or cuda_capture)(net, self.static_obs)

    def __call__(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if obs.shape != self.static_obs.shape or obs.dtype != self.static_obs.dtype:
            out = self.net(obs)
            return out if isinstance(out, tuple) else (out,)
        self.static_obs.copy_(obs)
        # The static outputs belong to the graph: the next replay writes over them.
        return tuple(t.clone() for t in self._replay())


def cuda_capture(
    net: torch.nn.Module, static_obs: torch.Tensor
) -> Callable[[], tuple[torch.Tensor, ...]]:
    """Record ``net(static_obs)`` as a CUDA graph (after warm-up passes on a side stream, as
    ``torch.cuda.graphs`` asks) and return its replay, which yields the static outputs. The
    warm-up's random draws are undone: the generator is where it was before."""
    device = static_obs.device
    rng = torch.cuda.get_rng_state(device)
    # On the network's own GPU: a side stream or capture on another device fails the capture.
    with torch.cuda.device(device):
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(3):
                net(static_obs)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            out = net(static_obs)
    outputs = out if isinstance(out, tuple) else (out,)
    torch.cuda.set_rng_state(rng, device)

    def replay() -> tuple[torch.Tensor, ...]:
        graph.replay()
        return outputs

    return replay


@dataclass(frozen=True)
class Choice:
    """What ``choose`` decided: the call that acts, and the reason for the log line."""

    act: Callable[[torch.Tensor], tuple[torch.Tensor, ...]]
    graph: bool
    reason: str


def _eager(net: torch.nn.Module) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    def act(obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = net(obs)
        return out if isinstance(out, tuple) else (out,)

    return act


def _seconds_per_step(act: Callable, obs: torch.Tensor, sync: Callable[[], None]) -> float:
    act(obs)
    sync()
    start = time.perf_counter()
    for _ in range(PROBE_STEPS):
        act(obs)
    sync()
    return (time.perf_counter() - start) / PROBE_STEPS


def choose(
    net: torch.nn.Module,
    obs: torch.Tensor,
    mode: str,
    capture: Callable | None = None,
    rng: tuple[Callable[[], torch.Tensor], Callable[[torch.Tensor], None]] | None = None,
    sync: Callable[[], None] | None = None,
) -> Choice:
    """Eager or the CUDA graph for ``net`` on observations like ``obs`` (on its device), by
    ``mode``: ``off`` eager, ``on`` the graph (its capture errors are raised), ``auto`` the
    graph when it gives eager's outputs from the same generator state and is faster.
    ``capture``, ``rng`` (get, set) and ``sync`` default to CUDA's; the tests on a CPU pass
    stand-ins."""
    eager = _eager(net)
    if mode == "off":
        return Choice(eager, False, "eager (--compile.cudagraphs off)")
    device = obs.device
    get_rng, set_rng = rng or (
        lambda: torch.cuda.get_rng_state(device),
        lambda state: torch.cuda.set_rng_state(state, device),
    )
    sync = sync or (lambda: torch.cuda.synchronize(device))
    before = get_rng()  # every draw below is undone: the run draws as if nothing was probed
    try:
        graph = ActingGraph(net, obs, capture)
    except Exception as err:  # a network the graph cannot hold (host syncs, dynamic shapes)
        if mode == "on":
            raise RuntimeError(f"--compile.cudagraphs on: capture failed: {err}") from err
        set_rng(before)
        return Choice(eager, False, f"eager (the capture failed: {type(err).__name__}: {err})")
    set_rng(before)
    if mode == "on":
        return Choice(graph, True, "a CUDA graph (--compile.cudagraphs on)")
    with torch.no_grad():
        want = eager(obs)
        set_rng(before)
        got = graph(obs)
        same = len(want) == len(got) and all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(want, got, strict=True)
        )
        eager_s = _seconds_per_step(eager, obs, sync)
        graph_s = _seconds_per_step(graph, obs, sync)
    set_rng(before)
    times = f"eager {1e6 * eager_s:.0f} us, graph {1e6 * graph_s:.0f} us a step"
    if not same:
        return Choice(eager, False, f"eager (the graph's outputs differ from eager's; {times})")
    if graph_s >= eager_s:
        return Choice(eager, False, f"eager (not faster as a CUDA graph: {times})")
    return Choice(graph, True, f"a CUDA graph ({times})")
