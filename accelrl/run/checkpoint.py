"""Crash-safe checkpoints: atomic writes, keep-last-K retention, corrupt-file fallback, RNG state.

Checkpoints hold only tensors, plain containers, strings and numbers, and are read with
``torch.load(weights_only=True)``: a shared checkpoint cannot run code when it is loaded. A file
that needs full unpickling (a crafted one, or one written by other code) is refused with
``UnsafeCheckpoint`` unless the caller passes ``trust=True`` (``--trust-checkpoint``).

Checkpoints live in ``run_dir/checkpoints/ckpt_{frames:012d}.pt``. A checkpoint is either the
complete old file or the complete new one, never a mix: it is written to a temp file in the same
folder, fsynced, renamed over the final name and the folder is fsynced. Only one process (rank 0)
should save into a run folder, because a save removes temp files left by killed saves.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import random
import re
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accelrl.errors import RunFailure

_NAME = re.compile(r"^ckpt_(\d+)\.pt$")
_TMP_PREFIX = ".ckpt_"
_TMP_SUFFIX = ".tmp"


class CheckpointError(RunFailure):
    """A checkpoint could not be written; the message names the file and the cause."""


class UnsafeCheckpoint(CheckpointError):
    """A checkpoint holds Python objects that only a full unpickle (which can run code) reads."""


def _ckpt_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _fsync_dir(path: Path) -> None:
    # Makes the rename durable; some platforms/file systems cannot open or fsync a folder.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(
    run_dir: str | Path, state: Mapping[str, Any], frames: int, *, keep: int = 3
) -> Path:
    """Write ``state`` (plus ``"frames"``) to run_dir/checkpoints/ckpt_{frames:012d}.pt atomically
    and delete all but the newest ``keep`` checkpoints; returns the path written.

    Checkpoints with more frames than ``frames`` are deleted too: after a resume from an older
    checkpoint they are corrupt or belong to the abandoned run, and must not be resumed from.

    On failure (e.g. ENOSPC) the temp file is removed, previous checkpoints stay intact and
    ``CheckpointError`` is raised naming the path and the cause.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    folder = _ckpt_dir(run_dir)
    path = folder / f"ckpt_{int(frames):012d}.pt"
    payload = {**state, "frames": int(frames)}
    tmp: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX)
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(folder)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(e, Exception):
            raise CheckpointError(_write_failure(path, e, payload)) from e
        raise
    _prune(folder, keep, int(frames))
    return path


def _write_failure(path: Path, err: Exception, payload: Any) -> str:
    """The one-line cause of a failed save. A full disk surfaces as ``OSError(ENOSPC)`` or, from
    inside torch's serializer, as ``RuntimeError: [enforce fail at inline_container.cc ...]
    unexpected pos``: when the folder has less room than the checkpoint needs, say so."""
    needed = _tensor_bytes(payload) + 2**20  # the archive's headers and pickled containers
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    if getattr(err, "errno", None) == errno.ENOSPC or (free is not None and free < needed):
        room = "no room left" if free is None else f"{free / 2**20:.1f} MB free"
        return (
            f"could not write checkpoint {path}: No space left on device: it needs about "
            f"{needed / 2**20:.1f} MB and {path.parent} has {room}; free space there or move "
            "the run folder to a larger disk and resume it"
        )
    return f"could not write checkpoint {path}: {err!r}"


def _tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of the distinct tensor storages in ``obj`` (nested dicts, lists and tuples)."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return storage.nbytes()
    if isinstance(obj, Mapping):
        return sum(_tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, seen) for v in obj)
    return 0


def _prune(folder: Path, keep: int, frames: int) -> None:
    ckpts = _indexed(folder)
    # Newer files can only be corrupt ones that load_latest skipped or ones from a timeline that
    # was abandoned by resuming from an older checkpoint; either way a resume must not pick them.
    newer = [p for f, p in ckpts if f > frames]
    older = [p for f, p in ckpts if f <= frames][:-keep]
    temps = list(folder.glob(f"{_TMP_PREFIX}*{_TMP_SUFFIX}"))
    for p in newer + older + temps:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            # The new checkpoint is safe; a leftover old one only costs disk space.
            warnings.warn(f"could not delete old checkpoint {p}: {e!r}", stacklevel=3)


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoint files of ``run_dir``, oldest to newest by the frame count in their name."""
    return [p for _, p in _indexed(_ckpt_dir(run_dir))]


def _indexed(folder: Path) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name)))


def load_checkpoint(
    path: str | Path, *, map_location: str | torch.device = "cpu", trust: bool = False
) -> Any:
    """``torch.load`` with ``weights_only=True`` unless ``trust``; a file that the safe load
    refuses for holding other Python objects raises ``UnsafeCheckpoint`` (one line, naming the
    file, the object and ``--trust-checkpoint``) and runs nothing."""
    try:
        return torch.load(path, map_location=map_location, weights_only=not trust)
    except pickle.UnpicklingError as e:
        # A corrupt file fails here too ("Unsupported operand"); only a refused global means
        # the file is readable but not safe to read.
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if trust or found is None:
            raise
        what = f" ({found.group(1)})"
        raise UnsafeCheckpoint(
            f"{path} holds Python objects beyond tensors, containers and numbers{what}; a safe "
            "load refuses them because unpickling them can run code. If you wrote this file or "
            "trust its source, pass --trust-checkpoint"
        ) from None


def load_latest(
    run_dir: str | Path, *, map_location: str | torch.device = "cpu", trust: bool = False
) -> tuple[dict, Path] | None:
    """Newest loadable checkpoint as ``(state, path)``; None if there is none.

    A truncated or corrupt file (or one that is not a dict with ``"frames"``) is skipped with a
    ``warnings.warn`` naming the bad file and the one used instead. A file that only a full
    unpickle reads is not skipped: ``UnsafeCheckpoint`` is raised (see ``load_checkpoint``).
    """
    bad: list[str] = []
    for path in reversed(list_checkpoints(run_dir)):
        try:
            state = load_checkpoint(path, map_location=map_location, trust=trust)
        except UnsafeCheckpoint:
            raise
        except Exception as e:
            bad.append(f"{path} ({type(e).__name__}: {e})")
            continue
        if not isinstance(state, dict) or "frames" not in state:
            bad.append(f"{path} (not a checkpoint dict with 'frames')")
            continue
        if bad:
            warnings.warn(
                f"skipped unreadable checkpoint(s) {'; '.join(bad)}; using {path}", stacklevel=2
            )
        return state, path
    if bad:
        warnings.warn(
            f"no loadable checkpoint: skipped {'; '.join(bad)}; starting fresh", stacklevel=2
        )
    return None


def capture_rng() -> dict:
    """States of Python ``random``, NumPy's global RNG, torch CPU and every CUDA device, as
    tensors, tuples and numbers only (so that ``weights_only=True`` reads them back)."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def restore_rng(state: dict) -> None:
    """Restore the generators saved by ``capture_rng``; returns nothing.

    CUDA states are restored for the devices present in both runs, so resuming on fewer GPUs
    still works (with different draws on the missing devices).
    """
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["key"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        for device, s in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s.cpu(), device)
