"""Command line for recipes: tyro flags from the recipe's ``Config``, one-line errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import tyro

from accelrl.config import ConfigError

C = TypeVar("C")


def run_recipe(
    config_cls: type[C],
    train: Callable[[C], dict[str, Any]],
    *,
    description: str,
    argv: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Parse flags into ``config_cls``, run ``train`` and print its summary as JSON.

    A ``ConfigError`` (raised before any worker starts) becomes one line on stderr and exit code 2.
    """
    cfg = tyro.cli(config_cls, args=argv, description=description)
    try:
        summary = train(cfg)
    except ConfigError as err:
        print(f"accelrl: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("accelrl: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    print(json.dumps(summary))
    return summary
