"""A study's grid file: algorithms (recipe, frame budget, named settings of recipe flags, the
standard setting) x games x seeds, read from TOML and checked before anything runs.

    [study]
    games = ["MinAtar/Breakout", "MinAtar/SpaceInvaders"]
    seeds = [0, 1, 2]
    flags = "--log.no-progress"                 # every cell
    dir = "runs/minatar_batch"                  # optional; default runs/<file name>, from
                                                # the folder the command runs in

    [algorithms.dqn]
    recipe = "recipes.dqn_atari"
    frames = 2_000_000                          # the budget of every dqn cell
    flags = "--dqn.preset minatar --dqn.replay-dir {run_dir}/replay"
    standard = "dqn-32"
    settings = { dqn-32 = "", dqn-512 = "--dqn.batch-size 512 --dqn.lr 1e-3" }

    [slurm]                   # optional: slurm.launch options (python -m slurm.study)
    time = 240

Flags are a string (split as a shell would) or a list of strings; ``{run_dir}`` becomes the
cell's run folder. A cell is one algorithm x setting x game x seed; its run folder is
``<dir>/<algorithm>/<setting>/<game>/seed<seed>`` (``/`` in a game name becomes ``_``).
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from accelrl.run.checkpoint import list_checkpoints
from accelrl.run.lock import FolderInUse, FolderLock

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib


class GridError(ValueError):
    """A grid file that cannot run; the message is one line naming the value and the fix."""


RESERVED = {
    "--total-frames": "the algorithm's frames",
    "--seed": "the study's seeds",
    "--env.game": "the study's games",
    "--run-dir": "the study's dir",
    "--resume": "the study itself (it resumes unfinished cells)",
}
"""Recipe flags the study sets for each cell, and where the grid file gives their values."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_STUDY_KEYS = {"games", "seeds", "flags", "dir"}
_ALGO_KEYS = {"recipe", "frames", "flags", "standard", "settings", "games", "seeds"}
RECORD_NAME = "study.json"
"""The grid as the ``run`` commands resolved it, in the study folder (what ``report`` reads):
the latest grid, with the algorithms, settings, games and seeds earlier runs had and it lacks."""


@dataclass(frozen=True)
class Algorithm:
    name: str
    recipe: str
    frames: int
    """The frame budget (``--total-frames``) of every cell of this algorithm."""
    flags: tuple[str, ...]
    settings: dict[str, tuple[str, ...]]
    standard: str
    games: tuple[str, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Cell:
    algorithm: Algorithm
    setting: str
    game: str
    seed: int
    run_dir: Path

    @property
    def name(self) -> str:
        """``dqn/dqn-512/MinAtar_Breakout/seed0``: the run folder under the study folder."""
        return cell_folder(self.algorithm.name, self.setting, self.game, self.seed)

    def recipe_args(self, threads: int | None = None) -> list[str]:
        """The recipe flags of this cell (without ``--resume``): the study's, the algorithm's,
        the setting's, then budget, seed, game and run folder; ``threads`` sets
        ``--threads.torch-threads`` unless the grid sets it."""
        here = str(self.run_dir)
        given = [a.replace("{run_dir}", here) for a in self.algorithm.flags]
        given += [a.replace("{run_dir}", here) for a in self.algorithm.settings[self.setting]]
        if threads is not None and not any(
            a.split("=", 1)[0] == "--threads.torch-threads" for a in given
        ):
            given += ["--threads.torch-threads", str(threads)]
        return given + [
            *("--total-frames", str(self.algorithm.frames), "--seed", str(self.seed)),
            *("--env.game", self.game, "--run-dir", here),
        ]


@dataclass
class Grid:
    path: Path
    dir: Path
    """The study folder: one run folder per cell, the record, the report."""
    algorithms: dict[str, Algorithm]
    slurm: dict[str, Any] = field(default_factory=dict)

    def cells(self) -> list[Cell]:
        """Every cell, algorithm by algorithm, then setting, game and seed."""
        return [
            Cell(algo, setting, game, seed, self.dir / cell_folder(algo.name, setting, game, seed))
            for algo in self.algorithms.values()
            for setting in algo.settings
            for game in algo.games
            for seed in algo.seeds
        ]

    def selected(self, only: Sequence[str] = ()) -> list[Cell]:
        """The cells whose name matches one of the ``only`` patterns (all, when none is given);
        ``GridError`` when none does."""
        cells = [c for c in self.cells() if not only or any(fnmatch(c.name, p) for p in only)]
        if not cells:
            raise GridError(
                f"--only {' '.join(only)}: matches no cell of {self.path} (cells are named "
                "algorithm/setting/game/seedN, e.g. 'dqn/*/MinAtar_Breakout/*')"
            )
        return cells

    def record(self) -> dict[str, Any]:
        """What ``report`` needs: each algorithm's budget, settings, standard, and its cells."""
        return {
            "grid": str(self.path),
            "algorithms": {
                a.name: {
                    "recipe": a.recipe,
                    "frames": a.frames,
                    "standard": a.standard,
                    "flags": list(a.flags),
                    "settings": {k: list(v) for k, v in a.settings.items()},
                    "games": list(a.games),
                    "seeds": list(a.seeds),
                }
                for a in self.algorithms.values()
            },
        }

    def write_record(self) -> Path:
        """Write the record into the study folder, merged with the one there
        (``merged_record``)."""
        return write_record(self.dir, self.record())


def _union(first: list, second: list) -> list:
    return list(first) + [x for x in second if x not in first]


def merged_record(folder: Path, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` merged with the one ``folder`` already holds, so that a grid which grew (a new
    setting, game or seed) or shrank keeps every cell the folder has in its report: algorithms,
    settings, games and seeds are the union, the grid's first. A GridError (one line) when the
    folder's cells ran differently from what the grid now says under the same name (another
    recipe, budget, or flags), since the report would describe them wrongly."""
    path = folder / RECORD_NAME
    try:
        held = json.loads(path.read_text())
    except FileNotFoundError:
        return record
    except (OSError, ValueError) as err:
        raise GridError(f"{path}: unreadable ({err}); remove it if the folder's cells are gone, "
                        "or restore it") from None  # fmt: skip
    merged = {"grid": record["grid"], "algorithms": {}}
    new, old = record["algorithms"], held.get("algorithms", {})
    for name in _union(list(new), list(old)):
        if name not in new or name not in old:
            merged["algorithms"][name] = new.get(name) or old[name]
            continue
        a, b = new[name], old[name]
        for key in ("recipe", "frames", "flags"):
            if a[key] != b.get(key):
                raise GridError(
                    f"algorithm {name}: {key} {_shown(a[key])} in the grid, but its cells in "
                    f"{folder} ran with {_shown(b.get(key))}; give it another name in the grid "
                    "or use another folder"
                )
        settings = dict(a["settings"])
        for setting, flags in b.get("settings", {}).items():
            if setting in settings and settings[setting] != flags:
                raise GridError(
                    f"setting {name}/{setting}: flags {_shown(settings[setting])} in the grid, "
                    f"but its cells in {folder} ran with {_shown(flags)}; give the new flags a "
                    "setting name of their own"
                )
            settings.setdefault(setting, flags)
        merged["algorithms"][name] = {
            **a,
            "settings": settings,
            "games": _union(a["games"], b.get("games", [])),
            "seeds": _union(a["seeds"], b.get("seeds", [])),
        }
    return merged


def _shown(value: Any) -> str:
    return repr(shlex.join(value)) if isinstance(value, list) else repr(value)


def write_record(folder: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` (merged with the folder's, ``merged_record``) as the folder's
    ``study.json``, through a temporary file."""
    merged = merged_record(folder, record)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RECORD_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def cell_folder(algorithm: str, setting: str, game: str, seed: int) -> str:
    """A cell's run folder under the study folder: ``dqn/dqn-512/MinAtar_Breakout/seed0``
    (``my_envs_Memory-v0`` for ``my_envs:Memory-v0``)."""
    return f"{algorithm}/{setting}/{game.replace('/', '_').replace(':', '_')}/seed{seed}"


def load_grid(
    path: str | Path, study_dir: str | Path | None = None, *, frames: int | None = None
) -> Grid:
    """The grid in ``path`` (TOML); ``study_dir`` overrides its ``dir``, ``frames`` every
    algorithm's budget. Raises ``GridError``. Recipe flags are checked later, by each recipe's
    own parser (``accelrl.study.runner.plan_cells``)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GridError(f"{path}: no such grid file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise GridError(f"{path}: cannot be read ({err})") from None
    except tomllib.TOMLDecodeError as err:
        raise GridError(f"{path}: not valid TOML: {err}") from None
    where = str(path)
    _known(data, {"study", "algorithms", "slurm"}, where)
    study = _table(data, "study", where, required=True)
    _known(study, _STUDY_KEYS, f"{where} [study]")
    games = _games(study.get("games"), f"{where} [study] games")
    seeds = _seeds(study.get("seeds"), f"{where} [study] seeds")
    common = _flags(study.get("flags", ""), f"{where} [study] flags")
    algos_table = _table(data, "algorithms", where, required=True)
    if not algos_table:
        raise GridError(f"{where}: [algorithms] is empty; add e.g. [algorithms.dqn] with recipe, "
                        "frames, settings and standard")  # fmt: skip
    algorithms = {}
    for name, spec in algos_table.items():
        here = f"{where} [algorithms.{name}]"
        if not isinstance(spec, dict):
            raise GridError(f"{here}: expected a table with recipe, frames, settings, standard")
        _check_name(name, here)
        _known(spec, _ALGO_KEYS, here)
        for key in ("recipe", "frames", "settings", "standard"):
            if key not in spec:
                raise GridError(f"{here}: missing {key!r}")
        recipe = spec["recipe"]
        if not isinstance(recipe, str) or not recipe:
            raise GridError(f"{here} recipe: expected a module name such as recipes.dqn_atari")
        own = spec["frames"]
        if isinstance(own, bool) or not isinstance(own, int) or own < 1:
            raise GridError(f"{here} frames = {own!r}: expected a positive whole number of "
                            "emulator frames, e.g. 2_000_000")  # fmt: skip
        settings_table = spec["settings"]
        if not isinstance(settings_table, dict) or not settings_table:
            raise GridError(f'{here} settings: expected a table of name = "recipe flags"')
        settings = {}
        for setting, flags in settings_table.items():
            _check_name(setting, f"{here} settings")
            settings[setting] = _flags(flags, f"{here} settings.{setting}")
        standard = spec["standard"]
        if standard not in settings:
            raise GridError(f"{here} standard = {standard!r}: not one of its settings "
                            f"{sorted(settings)}")  # fmt: skip
        algorithms[name] = Algorithm(
            name=name,
            recipe=recipe,
            frames=own if frames is None else frames,
            flags=common + _flags(spec.get("flags", ""), f"{here} flags"),
            settings=settings,
            standard=standard,
            games=_games(spec["games"], f"{here} games") if "games" in spec else games,
            seeds=_seeds(spec["seeds"], f"{here} seeds") if "seeds" in spec else seeds,
        )
    slurm = _table(data, "slurm", where, required=False)
    if study_dir is None:
        given = study.get("dir")
        if given is not None and not (isinstance(given, str) and given):
            raise GridError(f"{where} [study] dir = {given!r}: expected a folder path")
        study_dir = given or Path("runs") / path.stem
    return Grid(path, Path(study_dir).absolute(), algorithms, slurm)


def _table(data: dict, key: str, where: str, *, required: bool) -> dict:
    if key not in data:
        if required:
            raise GridError(f"{where}: missing the [{key}] table")
        return {}
    if not isinstance(data[key], dict):
        raise GridError(f"{where}: {key} must be a table ([{key}])")
    return data[key]


def _known(table: dict, keys: set[str], where: str) -> None:
    for key in table:
        if key not in keys:
            close = difflib.get_close_matches(key, sorted(keys), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {sorted(keys)}"
            raise GridError(f"{where}: unknown key {key!r}{hint}")


def _check_name(name: str, where: str) -> None:
    if not _NAME.fullmatch(name):
        raise GridError(f"{where}: name {name!r} cannot be a folder name; use letters, digits, "
                        "'.', '_' and '-'")  # fmt: skip


def _distinct(
    value: Any, where: str, ok: Callable[[Any], bool], item: str, items: str, example: str
) -> tuple[Any, ...]:
    """``value`` as a tuple: a list of one or more different ``item``s (``items``: the plural
    for the message), each of which ``ok`` accepts; ``example``: such a list, for the
    messages."""
    if value is None:
        raise GridError(f"{where}: missing; give a list such as {example}")
    if not (isinstance(value, list) and value and all(ok(v) for v in value)):
        raise GridError(f"{where} = {value!r}: expected a list of {items}, e.g. {example}")
    if len(set(value)) != len(value):
        raise GridError(f"{where} = {value!r}: a {item} is listed twice")
    return tuple(value)


def _games(value: Any, where: str) -> tuple[str, ...]:
    def ok(g: Any) -> bool:
        return isinstance(g, str) and bool(g)

    return _distinct(value, where, ok, "game", "game names", '["MinAtar/Breakout"]')


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    def ok(s: Any) -> bool:
        return isinstance(s, int) and not isinstance(s, bool) and s >= 0

    return _distinct(value, where, ok, "seed", "whole numbers >= 0", "[0, 1, 2]")


def _flags(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            args = shlex.split(value)
        except ValueError as err:
            raise GridError(f"{where} = {value!r}: cannot be split into flags ({err})") from None
    elif isinstance(value, list) and all(isinstance(a, str) for a in value):
        args = list(value)
    else:
        raise GridError(f"{where} = {value!r}: expected recipe flags as a string or a list of "
                        "strings")  # fmt: skip
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in RESERVED:
            raise GridError(f"{where}: {flag} is set by the study; give it in "
                            f"{RESERVED[flag]}")  # fmt: skip
    return tuple(args)


# ---------------------------------------------------------------------------------------------
# cell states

FINISHED, RUNNING, RESUME, NEW = "finished", "running", "resume", "new"
KEPT = "kept"
"""Finished in a kept folder (``accelrl.study.keep``), not in the study folder."""


def summary_frames(run_dir: Path) -> int | None:
    """The frame count of ``run_dir``'s summary.json; None without a readable one."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        return int(summary["frames"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cell_state(cell: Cell) -> str:
    """``finished``: summary.json holds the budget; ``running``: a live process holds the run
    folder's lock; ``resume``: it has a checkpoint; ``new``: otherwise (a folder without a
    checkpoint starts afresh)."""
    frames = summary_frames(cell.run_dir)
    if frames is not None and frames >= cell.algorithm.frames:
        return FINISHED
    if not cell.run_dir.is_dir():
        return NEW
    lock = FolderLock(cell.run_dir)
    try:
        lock.acquire()
    except FolderInUse:
        return RUNNING
    except OSError:
        pass  # the run itself will name what is wrong with the folder
    finally:
        lock.release()
    return RESUME if list_checkpoints(cell.run_dir) else NEW
