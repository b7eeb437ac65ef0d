"""The agent contract (``accelrl.agent``): every registered algorithm's learner provides it, the
registry holds each algorithm once under its own name, and what the run folder and export read
of an agent is complete."""

from __future__ import annotations

import importlib

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from accelrl.agent import Agent, unique_parameters
from accelrl.algos.catalog import algorithm
from accelrl.algos.registry import ALGORITHMS, UnknownAlgorithm
from accelrl.envs import describe_env

CASES = [
    ("ppo", "CartPole-v1"),
    ("a2c", "MinAtar/Breakout"),
    ("appo", "CartPole-v1"),
    ("dqn", "CartPole-v1"),
    ("dqn", "MinAtar/Breakout"),  # C51 below
    ("pqn", "CartPole-v1"),
    ("pqn", "MinAtar/Breakout"),
]


def build(algo: str, game: str):
    record = algorithm(algo)
    cfg = record.config()
    cfg.env.game = game
    if algo == "dqn" and game.startswith("MinAtar"):
        cfg.dqn.distributional = True
    spec = describe_env(cfg.env)
    torch.manual_seed(0)
    return record.make_agent(cfg, spec, torch.device("cpu")), spec


RECIPES = {
    "ppo": "ppo_atari",
    "a2c": "a2c_atari",
    "appo": "appo_atari",
    "dqn": "dqn_atari",
    "pqn": "pqn_atari",
}


def test_each_recipe_trains_the_registered_algorithm_of_its_name():
    assert set(ALGORITHMS) >= set(RECIPES)
    for algo, module in RECIPES.items():
        recipe = importlib.import_module(f"recipes.{module}")
        record = algorithm(algo)
        assert recipe.ALGORITHM is record and record.name == algo
        assert recipe.Config is record.config and record.section in vars(record.config())
        assert callable(recipe.train)
    with pytest.raises(UnknownAlgorithm, match="'ddpg': accelrl knows a2c, appo, dqn, ppo, pqn"):
        algorithm("ddpg")


@pytest.mark.parametrize("algo,game", CASES)
def test_every_network_the_agent_holds_is_in_its_networks(algo, game):
    # The run folder broadcasts, checksums and checks for NaN exactly ``networks()``: a network
    # an agent holds but leaves out would go unsynchronised across ranks and unchecked.
    agent, _ = build(algo, game)
    assert isinstance(agent, Agent)
    listed = {id(p) for p in unique_parameters(agent.networks())}
    for name, value in vars(agent).items():
        if isinstance(value, torch.nn.Module):
            missing = [n for n, p in value.named_parameters() if id(p) not in listed]
            assert not missing, f"{algo}: {name} holds parameters outside networks(): {missing}"
    assert agent.initial_state(4) is None  # feed-forward


@pytest.mark.parametrize("algo,game", CASES)
def test_the_export_module_acts_as_the_greedy_evaluation_policy(algo, game):
    agent, spec = build(algo, game)
    shape = (16, *spec["obs_shape"])
    if len(spec["obs_shape"]) == 3:
        obs = torch.randint(0, 2, shape, dtype=torch.uint8)
    else:
        obs = torch.randn(shape)
    with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
        td = agent.eval_policy(TensorDict({spec["obs_key"]: obs}, [16]))
        exported = agent.export_module()(obs)
    acted = td.get("action")
    if acted.ndim == 2:  # one-hot
        acted = acted.argmax(-1)
    assert torch.equal(exported, acted)
    # The export shares the agent's weights (a copy would export the untrained network).
    listed = {id(p) for p in unique_parameters(agent.networks())}
    assert all(id(p) in listed for p in agent.export_module().parameters())


def test_only_the_loops_hand_out_the_agents_initial_state_to_what_steps_an_env():
    # The collectors, evaluation, videos and play step envs from the state the loop hands them
    # (accelrl.loops.start.acting_state); export traces the module on a batch of it.
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    allowed = {"accelrl/loops/start.py", "accelrl/tools/export.py"}
    callers = set()
    for folder in ("accelrl", "recipes", "slurm"):
        for path in (root / folder).rglob("*.py"):
            code = re.sub(r'"""[\s\S]*?"""', "", path.read_text())  # docstrings name it
            if re.search(r"\.initial_state\(", code):
                callers.add(path.relative_to(root).as_posix())
    assert callers == allowed
