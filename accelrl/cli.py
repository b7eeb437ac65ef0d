"""Command line for recipes: tyro flags from the recipe's ``Config``, one-line errors."""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import io
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar

import tyro

from accelrl.config import mark_given
from accelrl.errors import ConfigError, RunFailure
from accelrl.run.folder import RunInterrupted
from accelrl.run.record import dumps
from accelrl.validate import validate_common

C = TypeVar("C")


def run_recipe(
    config_cls: type[C],
    train: Callable[[C], dict[str, Any]],
    *,
    description: str,
    argv: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Parse flags into ``config_cls``, run ``train`` and print its summary as JSON.

    A flag that does not parse or a ``ConfigError`` (raised before any worker starts) becomes
    one line on stderr and exit code 2.
    """
    # A crash in native code (SIGSEGV, SIGABRT) prints every thread's Python stack first.
    if not faulthandler.is_enabled():
        with contextlib.suppress(AttributeError, ValueError, OSError, io.UnsupportedOperation):
            faulthandler.enable()
    try:
        cfg = parse_flags(
            config_cls, sys.argv[1:] if argv is None else argv, description=description
        )
    except FlagError as err:
        print(f"accelrl: error: {err} (see --help)", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        summary = train(cfg)
    except ConfigError as err:
        print(f"accelrl: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("accelrl: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except RunFailure as err:
        # ``RunFolder`` adds where the run stood and its latest checkpoint.
        print(f"accelrl: error: {err}{err.where}", file=sys.stderr)
        raise SystemExit(3) from None
    except RunInterrupted as stop:
        # SIGTERM / SIGUSR2: the checkpoint is written; exit as the signal would (128 + n).
        print(f"accelrl: {stop}", file=sys.stderr)
        raise SystemExit(128 + stop.signum) from None
    print_line(dumps(summary))  # a missing value (NaN) as null
    return summary


def print_line(text: str) -> None:
    """Print one line in a single write: the ranks of a torchrun job share one stdout pipe and
    finish at the same moment (they leave through a barrier), and ``print`` writes the text and
    its newline separately, so two summaries could interleave (seen: ``{...}{...}\n\n``).
    A pipe write up to PIPE_BUF (4 KiB) bytes is atomic."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):  # a captured, in-memory stdout
        print(text)
        return
    os.write(fd, (text + "\n").encode())


class FlagError(ValueError):
    """Recipe flags that do not parse; the message is tyro's reason, in one line."""


def parse_flags(
    config_cls: type[C],
    argv: Sequence[str],
    *,
    description: str | None = None,
    prog: str | None = None,
) -> C:
    """Parse ``argv`` into ``config_cls`` without running anything.

    ``-h``/``--help`` prints the help and exits 0, as on the recipe's own command line. Any other
    parse failure raises ``FlagError`` carrying the one line of tyro's error box that says what
    is wrong (tyro would print a multi-line box and exit).
    """
    argv = list(argv)
    if "-h" in argv or "--help" in argv:
        return tyro.cli(config_cls, args=argv, description=description, prog=prog)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            cfg = tyro.cli(config_cls, args=argv, description=description, prog=prog)
    except SystemExit:
        raise FlagError(_tyro_reason(captured.getvalue())) from None
    return mark_given(cfg, *flags_in(config_cls, argv))


def flags_in(config_cls: type, argv: Sequence[str]) -> set[str]:
    """The dotted field names ``argv`` gives values to: ``--dqn.lr 1e-4``, ``--dqn.lr=1e-4``,
    ``--dqn.no-double`` (``dqn.double``), by name and not by value, so a flag given at its
    default value counts as given."""
    fields = {path for path, _, _ in leaf_fields(config_cls)}
    given = set()
    for arg in argv:
        if not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0].replace("-", "_")
        section, _, leaf = name.rpartition(".")
        negated = f"{section}.{leaf[3:]}" if section else leaf[3:]
        if name in fields:
            given.add(name)
        elif leaf.startswith("no_") and negated in fields:
            given.add(negated)
    return given


def leaf_fields(cls: type, prefix: str = "") -> list[tuple[str, type, str]]:
    """(dotted path, owning class, field name) of every flag of the config class ``cls``."""
    found = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            found += leaf_fields(type(default), f"{prefix}{f.name}.")
        else:
            found.append((prefix + f.name, cls, f.name))
    return found


def _tyro_reason(text: str) -> str:
    # tyro's box: a title ("Value error"), the reason (possibly wrapped over several lines), a
    # rule, help hints. Keep the reason, unwrapped into one line.
    rule_chars = set("-\u2500\u2502\u256d\u256e\u2570\u256f ")
    lines = [line.strip(" \u2502") for line in text.splitlines()]
    reason: list[str] = []
    for line in lines[1:]:
        if line and set(line) <= rule_chars:
            if reason:
                break
            continue
        if line:
            reason.append(line)
    return " ".join(reason) or "could not parse the flags"


def validate_recipe_config(recipe: ModuleType, cfg: Any) -> None:
    """Run the recipe's checks without training; raises ``ConfigError``.

    That is its algorithm's (the module's ``ALGORITHM``, an ``accelrl.algos.registry.Algorithm``)
    when it has one, else the checks every recipe shares (``accelrl.validate.validate_common``).
    """
    algorithm = getattr(recipe, "ALGORITHM", None)
    validate = validate_common if algorithm is None else algorithm.validate
    validate(cfg)
