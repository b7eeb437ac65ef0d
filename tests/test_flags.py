"""Every flag of every recipe and tool: it has help text, bad values of its kind are refused
before anything starts, and a preset fills only the flags the user did not give."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from accelrl.cli import leaf_fields

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["ppo_atari", "a2c_atari", "appo_atari", "dqn_atari", "pqn_atari"]


def field_docstrings(cls: type) -> dict[str, str]:
    """The help text tyro prints for each field (the docs' flags tables read the same)."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        from flags_table import field_docstrings as read
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    return read(cls)


def config_classes() -> list[tuple[str, type]]:
    from accelrl.tools.export import ExportConfig
    from accelrl.tools.play import PlayConfig

    recipes = [(r, importlib.import_module(f"recipes.{r}").Config) for r in RECIPES]
    return [*recipes, ("accelrl.tools.play", PlayConfig), ("accelrl.tools.export", ExportConfig)]


@pytest.mark.parametrize("name,cls", config_classes(), ids=[n for n, _ in config_classes()])
def test_every_flag_has_help_text(name, cls):
    missing = [
        path for path, owner, field in leaf_fields(cls) if not field_docstrings(owner).get(field)
    ]
    assert not missing, f"{name}: flags without help text (a docstring under the field): {missing}"


# Flags whose value may be negative (the bounds of C51's support).
SIGNED = {"dqn.v_min", "dqn.v_max"}
PROBABILITIES = [
    "env.sticky_actions", "ppo.gamma", "ppo.gae_lambda", "a2c.gamma", "a2c.gae_lambda",
    "a2c.rms_alpha", "appo.gamma", "appo.gae_lambda", "dqn.gamma", "dqn.tau", "dqn.eps_start",
    "dqn.eps_end", "dqn.eval_eps", "dqn.priority_alpha", "dqn.priority_beta", "pqn.gamma",
    "pqn.q_lambda", "pqn.eps_start", "pqn.eps_end", "pqn.eps_decay_fraction", "pqn.eval_eps",
]  # fmt: skip


def numeric_flags(recipe: str) -> list[tuple[str, Any]]:
    """(dotted path, default) of the recipe's int and float flags (bools left out)."""
    cls = importlib.import_module(f"recipes.{recipe}").Config
    cfg = cls()
    found = []
    for path, _, _ in leaf_fields(cls):
        value = get(cfg, path)
        if path == "env.sticky_actions":
            value = 0.0  # None: the game's standard
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            found.append((path, value))
    return found


def get(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def with_value(recipe: str, path: str, value: Any) -> Any:
    cfg = importlib.import_module(f"recipes.{recipe}").Config()
    *sections, name = path.split(".")
    target = cfg
    for part in sections:
        target = getattr(target, part)
    setattr(target, name, value)
    return cfg


def refused(recipe: str, cfg: Any) -> str | None:
    """The ConfigError's message for ``cfg``, None when the recipe's checks pass it."""
    from accelrl.errors import ConfigError

    try:
        importlib.import_module(f"recipes.{recipe}").ALGORITHM.validate(cfg)
    except ConfigError as err:
        return str(err)
    return None


def bad_values() -> list[tuple[str, str, Any]]:
    cases = []
    for recipe in RECIPES:
        for path, default in numeric_flags(recipe):
            if isinstance(default, float):
                cases += [(recipe, path, float("nan")), (recipe, path, float("inf"))]
                cases += [(recipe, path, float("-inf"))]
            if path not in SIGNED:
                cases.append((recipe, path, -1 if isinstance(default, int) else -1.0))
    return cases


@pytest.mark.parametrize(
    "recipe,path,value", bad_values(), ids=[f"{r} {p}={v}" for r, p, v in bad_values()]
)
def test_every_number_flag_refuses_non_finite_and_negative_values(recipe, path, value):
    message = refused(recipe, with_value(recipe, path, value))
    assert message is not None, f"{recipe}: --{path}={value} passed the checks"
    assert f"--{path.replace('_', '-')}=" in message, message


PROBABILITY_CASES = [
    (r, p) for r in RECIPES for p in PROBABILITIES if p.split(".")[0] in ("env", r.split("_")[0])
]


@pytest.mark.parametrize(
    "recipe,path", PROBABILITY_CASES, ids=[" ".join(c) for c in PROBABILITY_CASES]
)
def test_probabilities_and_factors_above_one_are_refused(recipe, path):
    message = refused(recipe, with_value(recipe, path, 1.5))
    assert message is not None and "[0, 1]" in message, (path, message)


@pytest.mark.parametrize("recipe", RECIPES)
def test_defaults_pass_the_checks(recipe):
    assert refused(recipe, importlib.import_module(f"recipes.{recipe}").Config()) is None


@pytest.mark.parametrize("seed,ok", [(0, True), (2**32 - 1, True), (-1, False), (2**32, False)])
def test_seed_in_the_range_the_generators_take(seed, ok):
    message = refused("ppo_atari", with_value("ppo_atari", "seed", seed))
    assert (message is None) == ok, message
    if not ok:
        assert "--seed=" in message and "2**32 - 1" in message


@pytest.mark.parametrize("game", ["Pong", "MinAtar/Breakout", "CartPole-v1"])
def test_simulators_take_the_seeds_the_largest_seed_derives(game):
    """A run seeds its simulators from ``--seed`` times a large prime plus the updates done
    (``Process.collect_seed``); ale-py takes 32-bit signed seeds, MinAtar unsigned ones."""
    from types import SimpleNamespace

    from accelrl.config import EnvConfig
    from accelrl.envs import make_env
    from accelrl.process import Process
    from accelrl.validate import SEED_MAX

    if game.startswith("MinAtar"):
        pytest.importorskip("minatar")
    fake = SimpleNamespace(seed=SEED_MAX, dist=SimpleNamespace(rank=7))
    env = make_env(EnvConfig(game=game, num_envs=2), seed=Process.collect_seed(fake, 10**6))
    try:
        assert env.reset().batch_size == (2,)
    finally:
        env.close()


def resolved_dqn(*argv: str) -> Any:
    from accelrl.cli import parse_flags
    from recipes import dqn_atari

    return dqn_atari.ALGORITHM.resolve(parse_flags(dqn_atari.Config, list(argv)))


def test_a_preset_leaves_flags_given_at_their_default_value():
    from accelrl.algos.dqn import PRESETS, DQNConfig

    default_lr = DQNConfig().lr
    assert PRESETS["rainbow"]["lr"] != default_lr
    assert resolved_dqn("--dqn.preset", "rainbow").dqn.lr == PRESETS["rainbow"]["lr"]
    assert resolved_dqn("--dqn.preset", "rainbow", "--dqn.lr", str(default_lr)).dqn.lr == default_lr
    assert resolved_dqn("--dqn.preset", "rainbow", f"--dqn.lr={default_lr}").dqn.lr == default_lr
    # A boolean given as its negation, and the simulators a preset would size.
    cfg = resolved_dqn("--dqn.preset", "dqn-512", "--dqn.no-double", "--env.num-envs", "8")
    assert (cfg.dqn.double, cfg.dqn.batch_size, cfg.env.num_envs) == (False, 512, 8)
    assert cfg.collector.steps_per_batch == 32
    cfg = resolved_dqn("--dqn.preset", "dqn-512", "--collector.steps-per-batch", "128")
    assert (cfg.env.num_envs, cfg.collector.steps_per_batch) == (64, 128)


def test_a_preset_from_python_fills_fields_at_their_default_unless_named_given():
    from accelrl.algos.dqn import PRESETS, DQNConfig
    from accelrl.cli import mark_given
    from recipes import dqn_atari

    cfg = dqn_atari.Config(dqn=DQNConfig(preset="rainbow"))
    assert dqn_atari.ALGORITHM.resolve(cfg).dqn.lr == PRESETS["rainbow"]["lr"]
    mark_given(cfg, "dqn.lr")
    assert dqn_atari.ALGORITHM.resolve(cfg).dqn.lr == DQNConfig().lr


def test_the_flags_given_are_named_by_field_not_by_value():
    from accelrl.cli import flags_in
    from recipes import dqn_atari

    argv = ["--dqn.lr", "1e-4", "--env.num-envs=8", "--log.no-progress", "--seed", "-1", "x"]
    assert flags_in(dqn_atari.Config, argv) == {"dqn.lr", "env.num_envs", "log.progress", "seed"}
