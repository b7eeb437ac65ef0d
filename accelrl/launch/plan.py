"""From a recipe module and its flags to the runs to submit: parsed and validated configs,
sweep members (the cartesian product of ``--sweep KEY=V1,V2`` values), one run folder each."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import itertools
import os
import re
import shlex
import time
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from accelrl.cli import FlagError, parse_flags, validate_recipe_config
from accelrl.errors import ConfigError
from accelrl.run.checkpoint import list_checkpoints


class LaunchError(ValueError):
    """Input refused before any job is submitted; the message is one line."""


@dataclass
class PlannedRun:
    """One member of a submission: its sweep values (empty without a sweep) and its config."""

    label: str
    cfg: Any


def load_recipe(name: str) -> ModuleType:
    """The recipe module; a path such as recipes/ppo_atari.py is accepted too."""
    if name.endswith(".py"):
        name = name[:-3].replace(os.sep, ".").replace("/", ".").strip(".")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and name.startswith(err.name):
            raise LaunchError(f"unknown recipe module {name!r} (e.g. recipes.ppo_atari)") from None
        raise
    if not (
        dataclasses.is_dataclass(getattr(module, "Config", None))
        and callable(getattr(module, "train", None))
    ):
        raise LaunchError(f"{name!r} is not a recipe: it needs a Config dataclass and train(cfg)")
    return module


def _leaf_fields(config_cls: type, prefix: str = "") -> dict[str, Any]:
    """Every settable field of a config as {dotted.name: type}, nested sections flattened."""
    hints = typing.get_type_hints(config_cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config_cls):
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            out.update(_leaf_fields(typ, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = typ
    return out


def parse_sweeps(config_cls: type, specs: list[str]) -> list[tuple[str, list[str]]]:
    """``KEY=V1,V2`` specs as [(dotted field name, values)], keys checked against the config."""
    fields = _leaf_fields(config_cls)
    sweeps: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, sep, values_text = spec.partition("=")
        key = key.strip().removeprefix("--").replace("-", "_")
        values = [v.strip() for v in values_text.split(",")]
        if not sep or not key or not all(values):
            raise LaunchError(f"--sweep {spec!r}: expected KEY=V1,V2,... (e.g. seed=0,1,2)")
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise LaunchError(
                f"--sweep {spec!r}: {key!r} is not a field of the recipe's Config{hint}"
            )
        if any(key == k for k, _ in sweeps):
            raise LaunchError(f"--sweep {spec!r}: {key!r} is swept twice")
        if len(set(values)) != len(values):
            raise LaunchError(f"--sweep {spec!r}: repeated value")
        sweeps.append((key, values))
    return sweeps


def _sweep_flag(key: str, value: str, typ: Any) -> list[str]:
    """The tyro flag(s) setting ``key`` to ``value``."""
    flag = "--" + key.replace("_", "-")
    if typ is bool:
        truth = value.lower()
        if truth not in ("true", "false", "1", "0", "yes", "no"):
            raise LaunchError(f"--sweep {key}: {value!r} is not a boolean (true/false)")
        if truth in ("true", "1", "yes"):
            return [flag]
        section, _, name = key.rpartition(".")
        return ["--" + (f"{section}." if section else "") + "no-" + name.replace("_", "-")]
    if typing.get_origin(typ) in (tuple, list):
        try:  # a sequence field takes several tokens: --sweep "model.mlp-hidden=64 64,256 256"
            return [flag, *shlex.split(value)]
        except ValueError as err:
            raise LaunchError(f"--sweep {key}: cannot split {value!r}: {err}") from None
    return [flag, value]


def _for_submit_host(cfg: Any) -> Any:
    """A copy to validate on a machine other than the one that will run it: CUDA devices become
    cpu (the submit host often has no GPU), after checking that they parse."""
    import torch

    changes = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            changes[f.name] = _for_submit_host(value)
        elif f.name.endswith("device") and isinstance(value, str) and value.startswith("cuda"):
            try:
                torch.device(value)
            except (RuntimeError, ValueError):
                continue  # left as is: validation reports it
            changes[f.name] = "cpu"
    return replace(cfg, **changes)


def uses_cuda(cfg: Any) -> bool:
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value) and uses_cuda(value):
            return True
        if f.name.endswith("device") and isinstance(value, str) and value.startswith("cuda"):
            return True
    return False


def _safe_label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text)


def plan_runs(
    recipe: ModuleType,
    recipe_args: list[str],
    sweep_specs: list[str],
    *,
    runs_here: bool,
    prog: str,
) -> list[PlannedRun]:
    """Parse and validate the recipe flags of every sweep member and give each its run folder.

    ``runs_here``: the jobs run on this machine, so devices are checked against it; otherwise
    CUDA devices are only checked for syntax (the submit host often has no GPU).
    """
    sweeps = parse_sweeps(recipe.Config, sweep_specs)
    fields = _leaf_fields(recipe.Config)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    runs: list[PlannedRun] = []
    for values in itertools.product(*[vals for _, vals in sweeps]):
        pairs = [(key, value) for (key, _), value in zip(sweeps, values, strict=True)]
        args = list(recipe_args)
        for key, value in pairs:
            args += _sweep_flag(key, value, fields[key])
        label = "-".join(f"{key}={value}" for key, value in pairs)
        where = f" (sweep {label})" if label else ""
        try:
            cfg = parse_flags(recipe.Config, args, description=recipe.__doc__, prog=prog)
            validate_recipe_config(recipe, cfg if runs_here else _for_submit_host(cfg))
        except FlagError as err:
            raise LaunchError(f"recipe flags{where}: {err}") from None
        except ConfigError as err:
            raise LaunchError(f"{err}{where}") from None
        runs.append(PlannedRun(label, cfg))
    name = recipe.__name__.rsplit(".", 1)[-1]
    for run in runs:
        run.cfg = replace(run.cfg, run_dir=str(_run_dir(name, run, sweeps, stamp)))
        _check_run_dir(run.cfg)
    dirs = [run.cfg.run_dir for run in runs]
    if len(set(dirs)) != len(dirs):
        raise LaunchError("sweep members would share a run folder; make the values distinct")
    return runs


def _run_dir(recipe_name: str, run: PlannedRun, sweeps: list, stamp: str) -> Path:
    given = run.cfg.run_dir
    if given is not None and any(key == "run_dir" for key, _ in sweeps):
        path = Path(given)
    elif given is not None:
        path = Path(given) / _safe_label(run.label) if run.label else Path(given)
    else:
        name = "-".join(x for x in (recipe_name, _safe_label(run.label), stamp) if x)
        path = Path("runs") / name
        # two launches within the same second must not share a folder
        n = 1
        while path.exists():
            n += 1
            path = Path("runs") / f"{name}-{n}"
    return path.absolute()


def _check_run_dir(cfg: Any) -> None:
    # The job's resume rule (RecipeJob) relies on this: a fresh job starts in a folder without
    # checkpoints.
    has_checkpoints = bool(list_checkpoints(cfg.run_dir))
    if cfg.resume and not has_checkpoints:
        raise LaunchError(f"--resume: no checkpoint in {cfg.run_dir} to resume from")
    if has_checkpoints and not cfg.resume:
        raise LaunchError(
            f"run folder {cfg.run_dir} already holds checkpoints; pass --resume in the recipe "
            "flags to continue it, or another --run-dir"
        )
