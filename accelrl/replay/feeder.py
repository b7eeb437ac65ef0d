"""Asynchronous off-policy training: collection fills the replay in a background thread while
the learner samples from it, and a replay-ratio throttle keeps the two in step.

The paper's asynchronous DQN variants overlap sampling with optimisation. Here the collector
(any kind whose batches hold every simulator: sync, alternating, batched) runs in a thread of
the learner process with its own copy of the policy; its simulators and inference run on their
C++ threads, worker processes or inference server, so the thread mostly waits while the
learner computes. Neither side runs away:

- the learner takes its ``k``-th sample only while ``k x batch_size <= intensity x collected +
  slack`` (it waits for fresh data), and
- the collector starts a new batch only while ``intensity x collected <= replayed + slack``
  (it waits for the learner),

with ``slack`` one collector batch worth of samples, so replayed / collected stays within one
batch of ``intensity`` from the first update on.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from accelrl.clock import AwakeClock
from accelrl.errors import RunFailure

EPISODE_KEYS = [("next", "done"), ("next", "episode_return"), ("next", "episode_length")]


class FeederError(RunFailure):
    """The collector thread failed; raised in the learner with the original as its cause."""


class ReplayFeeder:
    """Runs ``make_collector(policy_copy)`` in a thread that extends ``replay``.

    The learner calls ``wait_batch()`` for the episode stats of each collected batch (in
    order), ``sample(batch_size, beta)`` / ``update_priority(...)`` for replay access,
    ``publish_weights()`` after updates (the collector copies them at its next batch
    boundary), and ``close()`` at the end.
    """

    def __init__(
        self,
        make_collector: Callable[[torch.nn.Module], Any],
        policy: torch.nn.Module,
        replay: Any,
        *,
        intensity: float,
        steps_per_batch: int,
        learning_starts: int,
        on_stream_break: Callable[[], None] | None = None,
    ) -> None:
        self.policy = policy
        self.replay = replay
        self.intensity = float(intensity)
        self.slack = self.intensity * steps_per_batch
        self.learning_starts = learning_starts  # agent steps collected before updates begin
        self.collected = 0  # agent steps written to the replay
        self.replayed = 0  # samples handed to the learner since learning started
        self._copy = copy.deepcopy(policy)
        self._make_collector = make_collector
        self._lock = threading.Lock()  # replay and counters
        self._weights_lock = threading.Lock()  # learner weights while they change
        self._cond = threading.Condition(self._lock)
        self._batches: deque[TensorDictBase] = deque()
        self._weights_version = 0
        self._copied_version = 0
        self._stop = False
        self._error: BaseException | None = None
        self._on_stream_break = on_stream_break
        # Daemon: a collector that hangs must not keep the process alive after the run stops.
        self._thread = threading.Thread(target=self._run, name="accelrl-replay-feeder", daemon=True)
        self.collector = None

    # ----- collector thread -------------------------------------------------------------

    def start(self) -> ReplayFeeder:
        self.collector = self._make_collector(self._copy)
        self._thread.start()
        return self

    def _learning(self) -> bool:
        return self.collected >= self.learning_starts

    def _run(self) -> None:
        try:
            for batch in self.collector:
                if self._stop:
                    return
                stats = batch.select(*EPISODE_KEYS).to("cpu").clone()
                with self._cond:
                    self.replay.extend(batch)
                    if self._on_stream_break and getattr(self.collector, "stream_break", False):
                        self._on_stream_break()
                    self.collected += batch.numel()
                    self._batches.append(stats)
                    self._cond.notify_all()
                    # Throttle: wait for the learner before collecting more than one batch
                    # ahead of the configured intensity.
                    while (
                        not self._stop
                        and self._learning()
                        and self.intensity * (self.collected - self.learning_starts)
                        > self.replayed + self.slack
                    ):
                        self._cond.wait(timeout=1.0)
                    if self._stop:
                        return
                self._sync_weights()
        except BaseException as err:  # noqa: BLE001 - handed to the learner thread
            with self._cond:
                self._error = err
                self._cond.notify_all()

    def _sync_weights(self) -> None:
        if self._weights_version == self._copied_version:
            return
        with self._weights_lock:
            TensorDict.from_module(self._copy).data.update_(
                TensorDict.from_module(self.policy).data
            )
            self._copied_version = self._weights_version
        self.collector.update_policy_weights_()

    # ----- learner side -----------------------------------------------------------------

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise FeederError(f"the collector thread failed: {self._error!r}") from self._error

    def wait_batch(self, timeout: float = 600.0) -> TensorDictBase:
        """The episode stats of the next collected batch (``("next", done / episode_return /
        episode_length)``), waiting for it."""
        with self._cond:
            if not AwakeClock().wait_for(self._cond, lambda: self._batches or self._error, timeout):
                raise FeederError(f"no batch collected within {timeout:.0f} s")
            self._raise_if_failed()
            return self._batches.popleft()

    def learning(self) -> bool:
        with self._lock:
            return self._learning()

    def sample(self, batch_size: int, beta: float | None = None, timeout: float = 600.0):
        """A replay sample once the throttle allows it (the learner may not run ahead)."""
        with self._cond:
            ok = AwakeClock().wait_for(
                self._cond,
                lambda: (
                    self._error is not None
                    or (
                        self._learning()
                        and self.replayed + batch_size
                        <= self.intensity * (self.collected - self.learning_starts) + self.slack
                    )
                ),
                timeout,
            )
            self._raise_if_failed()
            if not ok:
                raise FeederError(f"no fresh data for the learner within {timeout:.0f} s")
            sample = self.replay.sample(batch_size, beta=beta)
            self.replayed += batch_size
            self._cond.notify_all()
            return sample

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        with self._lock:
            self.replay.update_priority(index, priority)

    def weights_changing(self) -> threading.Lock:
        """Hold this while the optimizer changes the learner's weights."""
        return self._weights_lock

    def publish_weights(self) -> None:
        self._weights_version += 1

    def ratio(self) -> float:
        """Replayed samples per agent step collected since learning started."""
        with self._lock:
            fresh = self.collected - self.learning_starts
            return self.replayed / fresh if fresh > 0 else float("nan")

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self.collector is not None:
            # The thread stops at its next batch boundary; only then is the collector (which
            # that thread iterates) shut down, from this one.
            if self._thread.is_alive():
                self._thread.join(timeout=60.0)
            self.collector.shutdown()


class SyncReplay:
    """``ReplayFeeder``'s interface without the thread: the learner collects each batch itself
    (collection and updates take turns), so both DQN loops are one loop."""

    def __init__(self, collector: Any, replay: Any, learning_starts: int) -> None:
        self.collector = collector
        self.replay = replay
        self.learning_starts = learning_starts
        self.collected = 0
        self.replayed = 0
        self._fresh_from: int | None = None  # steps collected before the first learning batch
        self._batches = None

    def start(self) -> SyncReplay:
        self._batches = iter(self.collector)
        return self

    def wait_batch(self) -> TensorDictBase:
        batch = next(self._batches)
        self.replay.extend(batch)
        if getattr(self.collector, "stream_break", False):
            self.replay.restart_streams()
        before = self.collected
        self.collected += batch.numel()
        if self._fresh_from is None and self.learning():
            self._fresh_from = before
        return batch

    def learning(self) -> bool:
        return self.collected >= self.learning_starts

    def sample(self, batch_size: int, beta: float | None = None):
        self.replayed += batch_size
        return self.replay.sample(batch_size, beta=beta)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        self.replay.update_priority(index, priority)

    def weights_changing(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()

    def publish_weights(self) -> None:
        self.collector.update_policy_weights_()

    def ratio(self) -> float:
        """Replayed samples per agent step collected since (and in) the first learning batch:
        exactly the training intensity when every batch gets its share of updates."""
        if self._fresh_from is None:
            return float("nan")
        return self.replayed / (self.collected - self._fresh_from)

    def close(self) -> None:
        self.collector.shutdown()
