"""Every flag of every recipe and tool: it has help text, bad values of its kind are refused
before anything starts, and a preset fills only the flags the user did not give."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["ppo_atari", "a2c_atari", "appo_atari", "dqn_atari"]


def field_docstrings(cls: type) -> dict[str, str]:
    """The help text tyro prints for each field (the docs' flags tables read the same)."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        from flags_table import field_docstrings as read
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    return read(cls)


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


def config_classes() -> list[tuple[str, type]]:
    from accelrl.export import ExportConfig
    from accelrl.play import PlayConfig

    recipes = [(r, importlib.import_module(f"recipes.{r}").Config) for r in RECIPES]
    return [*recipes, ("accelrl.play", PlayConfig), ("accelrl.export", ExportConfig)]


@pytest.mark.parametrize("name,cls", config_classes(), ids=[n for n, _ in config_classes()])
def test_every_flag_has_help_text(name, cls):
    missing = [
        path for path, owner, field in leaf_fields(cls) if not field_docstrings(owner).get(field)
    ]
    assert not missing, f"{name}: flags without help text (a docstring under the field): {missing}"
