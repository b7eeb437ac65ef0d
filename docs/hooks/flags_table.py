"""MkDocs hook: a recipe's flags table, generated from its ``Config`` dataclass.

A page line ``<!-- flags: recipes.ppo_atari -->`` becomes a table of every flag of that
recipe: the flag as tyro spells it, the recipe's default and the field's docstring (the text
``--help`` prints). Built from the code at build time, so the table cannot drift from it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys
import textwrap
import warnings
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- flags: ([\w.]+) -->$", flags=re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return MARKER.sub(lambda m: flags_table(m.group(1)), markdown)


def flags_table(module_name: str) -> str:
    """The Markdown table of ``module_name``'s ``Config`` flags, one row per leaf field."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    with warnings.catch_warnings():  # TorchRL's own deprecation notices on import
        warnings.simplefilter("ignore", DeprecationWarning)
        cfg = importlib.import_module(module_name).Config()
    rows = ["| flag | default | what |", "|---|---|---|"]
    rows += [f"| `{flag}` | {default} | {text} |" for flag, default, text in _rows(cfg, "")]
    return "\n".join(rows)


def _rows(cfg: Any, prefix: str) -> list[tuple[str, str, str]]:
    docs = field_docstrings(type(cfg))
    top: list[tuple[str, str, str]] = []
    nested: list[tuple[str, str, str]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        name = prefix + f.name.replace("_", "-")
        if dataclasses.is_dataclass(value):
            nested += _rows(value, name + ".")
            continue
        flag = f"--{name}"
        if isinstance(value, bool):
            flag = f"--{name}, --{prefix}no-{f.name.replace('_', '-')}"
        top.append((flag, _default(value), _cell(docs.get(f.name, ""), f.type)))
    return top + nested


def _default(value: Any) -> str:
    if isinstance(value, tuple):
        value = " ".join(str(v) for v in value) or "(none)"
    if isinstance(value, float) and value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
        value = f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        value = f"{value:_}"
    return f"`{value}`"


def _cell(text: str, annotation: Any) -> str:
    choices = re.search(r"Literal\[([^\]]*)\]", str(annotation))
    text = " ".join(text.split()).replace("|", "\\|")
    if choices:
        options = ", ".join(c.strip().strip("'\"") for c in choices.group(1).split(","))
        kind = "Any of" if str(annotation).startswith("tuple") else "One of"
        text = f"{kind} {options}. {text}".strip()
    return text


@cache
def field_docstrings(cls: type) -> dict[str, str]:
    """Attribute docstrings (a string right after a field) of ``cls`` and its bases, which is
    where tyro takes each flag's help text from."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        (node,) = ast.parse(source).body
        body = node.body if isinstance(node, ast.ClassDef) else []
        for stmt, after in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs
