"""The start of a run in its folder (rank 0, before any simulator starts): take the folder's
lock, check that this start may write there (``--resume`` / ``--run-dir``), and write the
record (config.json) of a new run or compare a resumed run's flags with it.

    changes = open_folder(run_dir, FolderLock(run_dir), cfg, "ppo", resolved)

Every refusal is a ``ConfigError`` (one line, exit code 2); a damaged or missing file is named
with what to do about it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from accelrl.config import to_dict
from accelrl.errors import ConfigError
from accelrl.run.checkpoint import list_checkpoints
from accelrl.run.lock import FolderInUse, FolderLock
from accelrl.run.record import (
    CHANGES_NAME,
    CONFIG_NAME,
    FOLDER_FORMAT,
    Change,
    DamagedRecord,
    apply_changes,
    check_format,
    code_version,
    differences,
    dumps,
    read_changes,
    read_config,
    recorded_settings,
)

log = logging.getLogger("accelrl")


def open_folder(
    folder: Path, lock: FolderLock, cfg: Any, algo: str, resolved: dict[str, Any]
) -> list[Change]:
    """Lock ``folder`` and check or write its record; returns the changes a ``--resume`` brings
    in (recorded by the caller once it knows the frame count they apply from). Raises
    ``ConfigError``; the caller releases ``lock`` then."""
    here = str(folder)
    if cfg.resume and not folder.is_dir():
        raise ConfigError("resume", True, f"no checkpoint in {folder} to resume from")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except FolderInUse as err:
        why = f"{err}; wait for that run to end, stop it, or pick another --run-dir"
        raise ConfigError("run_dir", here, why) from None
    except OSError as err:
        raise ConfigError("run_dir", here, f"cannot be written ({err})") from None
    try:
        checkpoints = list_checkpoints(folder)
    except OSError as err:
        why = f"its checkpoints folder cannot be read ({err}): fix its permissions"
        raise ConfigError("run_dir", here, why) from None
    if not cfg.resume:
        if checkpoints:
            why = "already holds checkpoints; pass --resume to continue it or pick a new --run-dir"
            raise ConfigError("run_dir", here, why)
        write_config(folder, cfg, algo, resolved)
        return []
    if not checkpoints:
        raise ConfigError("resume", True, f"no checkpoint in {folder} to resume from")
    try:
        saved = read_config(folder)
    except DamagedRecord as err:
        why = f"{err}: repair it, or move it away to resume with the current flags as its record"
        raise ConfigError("run_dir", here, why) from None
    if saved is None:
        log.warning("%s has no %s: writing one from the current flags, which cannot be checked "
                    "against those the run started with", folder, CONFIG_NAME)  # fmt: skip
        write_config(folder, cfg, algo, resolved)
        return []
    if why := check_format(saved, folder / CONFIG_NAME):
        raise ConfigError("run_dir", here, why)
    if saved.get("algo") != algo:
        why = f"holds a {saved.get('algo')!r} run; cannot resume it with {algo!r}"
        raise ConfigError("run_dir", here, why)
    return resume_changes(folder, saved, cfg, resolved)


def resume_changes(
    folder: Path, saved: dict[str, Any], cfg: Any, resolved: dict[str, Any]
) -> list[Change]:
    """What this start changes against the run's record (config.json ``saved`` and the changes
    recorded since); refuses changes to what the run learns unless ``--allow-config-change``."""
    try:
        records, bad = read_changes(folder)
    except DamagedRecord as err:
        why = f"{err}: make it readable, or move it away (its records are then not checked)"
        raise ConfigError("run_dir", str(folder), why) from None
    if bad:
        log.warning("%s: %d line(s) that do not parse are skipped (a record cut by a kill?)",
                    folder / CHANGES_NAME, bad)  # fmt: skip
    settings = recorded_settings(
        saved["config"], saved.get("resolved") or {}, saved.get("accelrl") or {}
    )
    before = apply_changes(settings, records)
    now = recorded_settings(to_dict(cfg), resolved, code_version())
    changes = differences(before, now)
    learned = [c.describe() for c in changes if c.learned]
    if learned and not cfg.allow_config_change:
        raise ConfigError(
            "resume",
            True,
            f"these flags change what the run in {folder} learns: {', '.join(learned)}; resume "
            "with the flags in its config.json, or add --allow-config-change to continue with "
            f"them (recorded in {CHANGES_NAME})",
        )
    return changes


def write_config(folder: Path, cfg: Any, algo: str, resolved: dict[str, Any]) -> None:
    """config.json: the flags, what they resolved to, the code version and the folder format
    (written to a temp file and renamed over the old one)."""
    data = {
        "algo": algo,
        "folder_format": FOLDER_FORMAT,
        "accelrl": code_version(),
        "config": to_dict(cfg),
        "resolved": resolved,
    }
    tmp = folder / (CONFIG_NAME + ".tmp")
    tmp.write_text(dumps(data, indent=2))
    os.replace(tmp, folder / CONFIG_NAME)
