"""The collector watchdog: a dead or silent collector worker stops the run
(``CollectorFailure``) instead of hanging it."""

from __future__ import annotations

import logging
import re
import signal
import threading
from typing import Any

from torchrl.collectors import Collector

from accelrl.clock import AwakeClock
from accelrl.errors import RunFailure

log = logging.getLogger("accelrl")


def _alive(proc: Any) -> bool | None:
    """``proc.is_alive()``, or None for a process object TorchRL has closed already (it closes
    them in its own shutdown after it noticed a dead worker; ``is_alive`` then raises)."""
    try:
        return proc.is_alive()
    except ValueError:
        return None


class CollectorFailure(RunFailure):
    """A collector worker died or stopped producing batches; the run stops."""


class WatchedCollector:
    """Wraps any collector so that a dead or silent worker stops the run instead of hanging it.

    TorchRL's ``MultiSyncCollector`` waits forever for a worker that was killed (found here:
    SIGKILL on a worker mid-run left the learner blocked with no CPU use). A watchdog thread
    checks the worker processes every second and how long the current wait for a batch has
    lasted (not the learner's time between batches, nor time the job spent suspended: an
    ``AwakeClock``); on a failure
    it records the reason and sends SIGUSR1 to the main thread, whose handler raises
    ``CollectorFailure`` there (a blocked wait is interrupted too). ``shutdown`` then kills the
    remaining workers before TorchRL's own shutdown, bounded in time, so nothing is left behind.

    ``learner_policy``: the module the learner updates. An in-process ``Collector`` that acts
    with that very module (no copy, no compiled wrapper) already acts with the new weights, so
    ``update_policy_weights_()`` skips TorchRL's copy of every weight onto itself (a cost per
    batch: docs/development-notes.md#torchrl-and-tensordict).
    """

    def __init__(
        self,
        collector: Any,
        *,
        stall_timeout_s: float,
        startup_timeout_s: float | None = None,
        learner_policy: Any = None,
    ) -> None:
        self.inner = collector
        self.acts_with_learner_weights = (
            learner_policy is not None
            and isinstance(collector, Collector)
            and getattr(collector, "policy", None) is learner_policy
        )
        self.stall_timeout_s = stall_timeout_s
        # The first batch includes starting the workers and their simulators.
        self.startup_timeout_s = startup_timeout_s or 5 * stall_timeout_s
        self.failure: str | None = None
        self._clock = AwakeClock(tick_s=1.0)  # ticked by the watchdog
        self._last = self._clock.now()  # since the wait for the next batch began
        self._waiting = True  # start-up counts: the first wait begins now
        self._batches = 0
        self._stop = threading.Event()
        self._pids: dict[int, int] = {}  # worker index -> pid, as last seen alive
        self._main = threading.main_thread().ident
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGUSR1, self._raise_failure)
        self._thread = threading.Thread(target=self._watch, name="accelrl-watchdog", daemon=True)
        self._thread.start()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def procs(self) -> list[Any]:
        return list(getattr(self.inner, "procs", []) or [])

    def __iter__(self):
        # Only the time spent waiting for a batch counts: a learner that holds one for longer
        # than the limit (a first compiled update takes minutes on a CPU) is not a stall.
        batches = iter(self.inner)
        try:
            while True:
                self._last = self._clock.now()
                self._waiting = True
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                finally:
                    self._waiting = False
                self._batches += 1
                yield batch
        except (Exception, KeyboardInterrupt) as err:
            # TorchRL may notice the dead worker first, or wrap our exception in its own.
            reason = self.failure or self._dead_worker(err)
            if reason is None or isinstance(err, CollectorFailure):
                raise
            self.failure = reason
            raise CollectorFailure(reason) from err

    def _dead_worker(self, err: BaseException | None = None) -> str | None:
        closed = False
        for i, proc in enumerate(self.procs()):
            alive = _alive(proc)
            if alive:
                self._pids[i] = proc.pid
            elif alive is False:
                return f"collector worker {i} (pid {proc.pid}) died (exit code {proc.exitcode})"
            else:
                closed = True
        if closed and err is not None:
            # TorchRL saw the failure first and closed the process objects; its message names
            # the worker and exit code, the pids are the ones the watchdog saw alive.
            first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
            named = re.search(r"worker (\d+)", first)
            if named and int(named.group(1)) in self._pids:
                i = int(named.group(1))
                return f"collector worker {i} (pid {self._pids[i]}) died ({first})"
            return f"a collector worker died ({first})"
        return None

    def _watch(self) -> None:
        while not self._stop.wait(self._clock.tick_s):
            self._clock.tick()
            reason = self._dead_worker()
            limit = self.stall_timeout_s if self._batches else self.startup_timeout_s
            silent = self._clock.now() - self._last if self._waiting else 0.0
            if reason is None and silent > limit:
                reason = f"the collector produced no batch for {silent:.0f} s (limit {limit:.0f} s)"
            if reason is not None:
                self.failure = reason
                log.error("%s; stopping the run", reason)
                if self._previous is not None:
                    signal.pthread_kill(self._main, signal.SIGUSR1)
                return

    def _raise_failure(self, signum: int, frame: Any) -> None:
        if self.failure is not None:
            raise CollectorFailure(self.failure)

    def update_policy_weights_(self, *args: Any, **kwargs: Any) -> None:
        if self.acts_with_learner_weights and not args and not kwargs:
            return
        self.inner.update_policy_weights_(*args, **kwargs)

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            # No daemon thread of ours may be running when the interpreter exits: one woken
            # during finalization is ended by pthread_exit, which aborts the process when C++
            # frames are on its stack (pytorch/pytorch#38228).
            self._thread.join(timeout=5.0)
        try:
            if self.failure is None:
                self.inner.shutdown()
                return
            for proc in self.procs():
                if _alive(proc):
                    proc.kill()
            # TorchRL's shutdown talks to every worker; bound it so a broken one cannot hang us.
            done = threading.Thread(target=self._shutdown_broken, daemon=True)
            done.start()
            done.join(timeout=30.0)
        finally:
            main = threading.current_thread() is threading.main_thread()
            if self._previous is not None and main:
                signal.signal(signal.SIGUSR1, self._previous)
                self._previous = None

    def _shutdown_broken(self) -> None:
        try:
            if hasattr(self.inner, "procs"):
                self.inner.shutdown(timeout=5.0, raise_on_error=False)
            else:
                self.inner.shutdown()
        except Exception as err:  # noqa: BLE001 - the run is already stopping for a reason
            log.warning("collector shutdown after a failure: %r", err)
