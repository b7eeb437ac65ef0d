"""The record of how a run was made: config.json (the flags it started with, the code version,
the folder format) and config_changes.jsonl (every change a ``--resume`` brought in, with the
frame count from which it applied).

Light on imports (no torch), so that ``accelrl.tools.plot`` and ``accelrl.tools.report`` read it
cheaply.

What ``--resume`` may change is decided field by field in ``RESUME_CHANGES``: a change of a
``LEARNED`` field alters what the run learns (a hyperparameter, the env, the seed, the number of
ranks) and is refused unless ``--allow-config-change``; an ``ACCEPTED`` one (a longer
``--total-frames``, cadences of logs and checkpoints, devices, threads, progress display,
trackers) goes through. Both are recorded. ``NOT_RECORDED`` fields say how this start was asked
for, not how the run is made. A section named whole (``env``, ``ppo``, ...) is ``LEARNED`` in
every field, including fields added to it later; any other field must be listed
(``tests/test_run_folder.py`` checks every field of every recipe).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from accelrl.algos.registry import learned_sections

FOLDER_FORMAT = 1
"""Version of the run folder's layout. Raise it when a folder written by this code can no
longer be resumed by older code; older code refuses newer folders. Folders without the field
are format 1."""

CONFIG_NAME = "config.json"
CHANGES_NAME = "config_changes.jsonl"

LEARNED, ACCEPTED, NOT_RECORDED = "learned", "accepted", "not recorded"

LEARNED_SECTIONS = frozenset({"env", "model"})
"""Sections learned whole besides each registered algorithm's own
(``accelrl.algos.registry.learned_sections``)."""

_LOG = (
    "progress tensorboard trackers project eval_every_frames eval_episodes video_every_frames "
    "video_max_steps checkpoint_every_frames keep_checkpoints"
)
RESUME_CHANGES: dict[str, str] = {
    "collector.kind": LEARNED,  # which weights act (async lag) and how batches are laid out
    "collector.num_workers": LEARNED,  # the batch's layout: envs x workers
    "collector.steps_per_batch": LEARNED,
    "collector.max_policy_lag": LEARNED,  # which batches are dropped
    "collector.stall_timeout_s": ACCEPTED,
    "collector.env_device": ACCEPTED,
    "collector.policy_device": ACCEPTED,
    "collector.storing_device": ACCEPTED,
    "collector.compact_obs": ACCEPTED,  # the batches' layout; the same learning from either
    "threads.torch_threads": ACCEPTED,
    "threads.sim_threads": ACCEPTED,
    **{f"log.{name}": ACCEPTED for name in _LOG.split()},
    "dist.lr_scaling": LEARNED,
    "dist.check_sync_every": ACCEPTED,
    "compile.loss": ACCEPTED,
    "compile.policy": ACCEPTED,
    "compile.cudagraphs": ACCEPTED,
    # Arithmetic precision and layout of the same fp32 weights: checkpoints are interchangeable
    # (docs/precision.md); a change is recorded with the frame it applies from.
    "precision.learner": ACCEPTED,
    "precision.actor": ACCEPTED,
    "precision.channels_last": ACCEPTED,
    # Schedules are fractions of total_frames: a longer run also stretches the rest of an
    # annealed learning rate; the record says from which frame.
    "total_frames": ACCEPTED,
    "device": ACCEPTED,
    "seed": LEARNED,
    # What happens after a NaN loss, not what a finite step learns; recorded.
    "on_nonfinite": ACCEPTED,
    "dqn.eval_eps": ACCEPTED,  # evaluation only
    "run_dir": NOT_RECORDED,
    "resume": NOT_RECORDED,
    "trust_checkpoint": NOT_RECORDED,
    "allow_config_change": NOT_RECORDED,
    # Not flags: how the process ran (config.json's "resolved") and the code that ran it.
    "resolved.world_size": LEARNED,  # the global batch is world_size x one rank's
    "resolved.device": ACCEPTED,
    "accelrl.version": ACCEPTED,
    "accelrl.commit": ACCEPTED,
}
LABELS = {
    "resolved.world_size": "ranks",
    "resolved.device": "learner device",
    "accelrl.version": "accelrl version",
    "accelrl.commit": "accelrl commit",
}


_NOT_FLAGS = ("resolved.", "accelrl.")


class DamagedRecord(ValueError):
    """A record file that cannot be read; the message names the file and what is wrong."""


def classify(key: str) -> str | None:
    """``LEARNED``, ``ACCEPTED`` or ``NOT_RECORDED`` for a dotted config key; None when the
    table does not know it (the caller treats it as ``LEARNED``)."""
    if key in RESUME_CHANGES:
        return RESUME_CHANGES[key]
    section = key.split(".", 1)[0]
    if section in LEARNED_SECTIONS or section in learned_sections():
        return LEARNED
    return None


def flag_name(key: str) -> str:
    """How a key is named to the user: its flag (``--ppo.lr``) or what it is."""
    return LABELS.get(key) or "--" + key.replace("_", "-")


def finite(value: Any) -> Any:
    """``value`` with every NaN / infinite float replaced by None (JSON's null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Standard JSON (no bare NaN / Infinity, which ``jq`` and JavaScript reject): a missing or
    non-finite number is written as null."""
    return json.dumps(finite(value), allow_nan=False, default=str, **kwargs)


@lru_cache(maxsize=1)
def code_version() -> dict[str, str | None]:
    """accelrl's version and, when it runs from a git checkout, the commit (with ``-dirty``
    when tracked files differ from it); None where git or the checkout is missing."""
    try:
        version: str | None = metadata.version("accelrl")
    except metadata.PackageNotFoundError:
        version = None
    source = Path(__file__).resolve().parents[2]
    commit = None
    try:
        top = _git(source, "rev-parse", "--show-toplevel")
        # Only the checkout that holds this package: not a project that vendors it.
        if top and Path(top).resolve() == source:
            commit = _git(source, "rev-parse", "HEAD")
            if commit and _git(source, "status", "--porcelain", "--untracked-files=no"):
                commit += "-dirty"
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"version": version, "commit": commit}


def _git(cwd: Path, *args: str) -> str | None:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    return out.stdout.strip() if out.returncode == 0 else None


def read_config(run_dir: Path) -> dict[str, Any] | None:
    """config.json of ``run_dir``; None when there is none. Raises ``DamagedRecord`` (one line)
    when it cannot be read or is not a run's config."""
    path = Path(run_dir) / CONFIG_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise DamagedRecord(f"{path} cannot be read ({_reason(err)})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DamagedRecord(
            f"{path} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise DamagedRecord(f'{path} holds no run config (an object with a "config" object)')
    return data


def _reason(err: BaseException) -> str:
    return getattr(err, "strerror", None) or str(err)


def check_format(data: dict[str, Any], path: Path) -> str | None:
    """Why this code cannot continue the folder whose config.json holds ``data``; None if it
    can."""
    fmt = data.get("folder_format", 1)
    if isinstance(fmt, int) and fmt <= FOLDER_FORMAT:
        return None
    by = (data.get("accelrl") or {}).get("version") or "another version"
    mine = code_version()["version"] or "this code"
    return (
        f"{path} was written by accelrl {by} in folder format {fmt!r}; accelrl {mine} reads "
        f"format {FOLDER_FORMAT} and older: upgrade accelrl or pick another --run-dir"
    )


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b": value}``; other values (lists included) as they are."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def recorded_settings(
    config: dict[str, Any], resolved: dict[str, Any], code: dict[str, Any]
) -> dict[str, Any]:
    """The flat settings that a resume compares: the config's fields, the resolved values in
    ``RESUME_CHANGES`` and the code version, all as JSON would give them back."""
    flat = flatten(json.loads(dumps(config)))
    for key in ("world_size", "device"):
        if key in resolved:
            flat[f"resolved.{key}"] = json.loads(dumps(resolved[key]))
    for key in ("version", "commit"):
        flat[f"accelrl.{key}"] = code.get(key)
    return flat


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any

    @property
    def learned(self) -> bool:
        return (classify(self.key) or LEARNED) == LEARNED

    def describe(self) -> str:
        return f"{flag_name(self.key)} {_show(self.old)} -> {_show(self.new)}"


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[Change]:
    """The changes from ``before`` to ``now`` (flat settings) that are recorded. A key
    ``before`` lacks (a folder from older code) is compared with ``now`` only for the code
    version; a key ``now`` lacks (a field since removed) is not compared."""
    changes = []
    for key, value in now.items():
        if classify(key) == NOT_RECORDED:
            continue
        if key not in before and not key.startswith("accelrl."):
            continue
        if before.get(key) != value:
            changes.append(Change(key, before.get(key), value))
    return changes


def read_changes(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of config_changes.jsonl, oldest first, and how many lines did not parse
    (a line cut by a kill, a hand edit); each record is ``{"frames", "time", "changes":
    [{"key", "old", "new", "learned"}]}``."""
    path = Path(run_dir) / CHANGES_NAME
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return [], 0
    except (OSError, UnicodeDecodeError) as err:
        raise DamagedRecord(f"{path} cannot be read ({_reason(err)})") from None
    records, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            whole = isinstance(record["changes"], list) and int(record["frames"]) >= 0
        except (ValueError, KeyError, TypeError):
            whole = False
        if whole:
            records.append(record)
        else:
            bad += 1
    return records, bad


def describe_record(record: dict[str, Any]) -> str:
    """``--total-frames 1024 -> 2048, --ppo.lr 0.00025 -> 0.5 (changes what is learned)``."""
    parts = []
    for c in record["changes"]:
        if isinstance(c, dict) and "key" in c:
            text = Change(str(c["key"]), c.get("old"), c.get("new")).describe()
            parts.append(text + (" (changes what is learned)" if c.get("learned") else ""))
    return ", ".join(parts)


def apply_changes(settings: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """``settings`` (flat) as the recorded changes left them."""
    out = dict(settings)
    for record in records:
        for change in record["changes"]:
            if isinstance(change, dict) and "key" in change:
                out[change["key"]] = change.get("new")
    return out


def current_config(run_dir: Path, saved: dict[str, Any]) -> dict[str, Any]:
    """config.json's ``config`` (``saved``) as the changes recorded since have left it: the flags
    the run continues with. Raises ``DamagedRecord`` when the changes cannot be read."""
    records, _ = read_changes(run_dir)
    flags = [
        change
        for record in records
        for change in record["changes"]
        if isinstance(change, dict) and not str(change.get("key")).startswith(_NOT_FLAGS)
    ]
    flat = flatten(saved["config"])
    flat = apply_changes(flat, [{"changes": flags}])
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        *sections, name = key.split(".")
        node = nested
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return nested


def append_changes(run_dir: Path, frames: int, changes: list[Change]) -> None:
    """Add one record to config_changes.jsonl: ``changes`` apply from ``frames`` on."""
    record = {
        "frames": int(frames),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "changes": [
            {"key": c.key, "old": c.old, "new": c.new, "learned": c.learned} for c in changes
        ],
    }
    with open(Path(run_dir) / CHANGES_NAME, "ab+") as fh:
        end = fh.seek(0, os.SEEK_END)
        if end:
            # A line cut by a kill stays as it was (readers skip it); the record starts afresh.
            fh.seek(end - 1)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write((dumps(record) + "\n").encode())
