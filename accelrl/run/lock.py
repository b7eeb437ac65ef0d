"""One live writer per run folder: an exclusive ``flock`` on RUN_DIR/run.lock, held by rank 0
from the start of a run to its end.

The operating system drops the lock when the process dies, however it dies (SIGKILL, the OOM
killer, a crashed node's processes), so no stale lock is ever left to clean up: ``--resume``
after a kill just works, and so does a SLURM requeue (the old attempt is dead before the new one
starts). The file records who holds the lock (pid, host, start time, SLURM job id), which is what
a second start on the folder reports before it stops; the file itself stays after the run, only
the lock on it counts. Forked children (collector workers) close their inherited copy of the
descriptor, so a worker that outlives a killed learner does not keep the folder locked.

Shared file systems:

- NFS (v4, and v3 with the NLM lock manager): Linux turns ``flock`` into a whole-file POSIX
  lock that the server arbitrates, so two nodes exclude each other. Such a lock belongs to the
  process, so it does not keep a second ``FolderLock`` in the same process out. A node that
  dies holding it keeps it until NFSv4's lease expires (90 s by default); NFSv3 frees it only
  when the node reboots, so for a node that never comes back, remove run.lock once you know
  its run is dead.
- NFS mounted with ``nolock`` / ``local_lock=all``: the lock is local to each node; two starts on
  one node still exclude each other, starts on two nodes do not.
- Lustre: ``-o flock`` gives cluster-wide locks (released when a dead client is evicted),
  ``-o localflock`` node-local ones (as ``local_lock`` on NFS), ``-o noflock`` none: ``flock``
  fails with ENOSYS.

Where the file system has no locks (ENOSYS, EOPNOTSUPP, ENOLCK) the run warns once and goes on
without one: refusing would make every recipe unusable on that mount for a guard against a
slip, and the user cannot change the mount options. The warning says that nothing stops a
second run there.

A SLURM job whose previous attempt still holds the lock (a node failure: the server has not
yet released the dead node's lock) waits up to ``REQUEUE_WAIT_S`` for it before refusing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("accelrl")

LOCK_NAME = "run.lock"
REQUEUE_WAIT_S = 180.0
NO_LOCKS = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOLCK}

_held: set[int] = set()


def _close_in_child() -> None:
    # A forked child shares the parent's open file description, and with it the lock: the lock
    # would outlive the parent for as long as the child runs.
    for fd in _held:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


class FolderInUse(Exception):
    """Another live process holds the folder's lock; ``holder`` is what its lock file says."""

    def __init__(self, folder: Path, holder: dict[str, Any]) -> None:
        self.folder, self.holder = folder, holder
        super().__init__(f"is in use by {describe_holder(holder)}")


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid 123 on host since 2026-12-03 10:00:00 +0100 (SLURM job 55)``."""
    if not holder.get("pid"):
        return "another run (its lock file names no holder yet)"
    text = f"pid {holder['pid']} on {holder.get('host', '?')} since {holder.get('started', '?')}"
    if holder.get("slurm_job_id"):
        text += f" (SLURM job {holder['slurm_job_id']})"
    return text


def this_holder() -> dict[str, Any]:
    """What the lock file records about this process."""
    holder: dict[str, Any] = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    for key, var in (("slurm_job_id", "SLURM_JOB_ID"), ("slurm_restart", "SLURM_RESTART_COUNT")):
        if os.environ.get(var):
            holder[key] = os.environ[var]
    return holder


class FolderLock:
    """The exclusive lock on ``folder`` (which must exist); ``acquire`` then ``release``."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock; returns False when the file system has no locks (warned once).
        Raises ``FolderInUse`` when a live process holds it, ``OSError`` when the lock file
        cannot be opened."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        waited_since: float | None = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read(fd)
                job = os.environ.get("SLURM_JOB_ID")
                now = time.monotonic()
                if job and holder.get("slurm_job_id") == job:
                    # The same job's earlier attempt, on a node that the file server still
                    # believes alive: its lock goes when the server's lease runs out.
                    if waited_since is None:
                        waited_since = now
                        log.warning(
                            "%s: waiting up to %.0f s for the previous attempt of SLURM "
                            "job %s (%s) to release it",
                            self.path,
                            REQUEUE_WAIT_S,
                            job,
                            describe_holder(holder),
                        )
                    if now - waited_since < REQUEUE_WAIT_S:
                        time.sleep(1.0)
                        continue
                os.close(fd)
                raise FolderInUse(self.path.parent, holder) from None
            except OSError as err:
                os.close(fd)
                if err.errno in NO_LOCKS:
                    log.warning(
                        "%s: this file system has no file locks (%s): nothing stops a "
                        "second run from writing to %s at the same time",
                        self.path,
                        os.strerror(err.errno),
                        self.path.parent,
                    )
                    return False
                raise
        text = json.dumps(this_holder()).encode() + b"\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
        self._fd = fd
        _held.add(fd)
        return True

    def release(self) -> None:
        """Drop the lock (closing the file); safe to call twice."""
        if self._fd is not None:
            _held.discard(self._fd)
            os.close(self._fd)
            self._fd = None


def _read(fd: int) -> dict[str, Any]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}
