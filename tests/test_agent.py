"""The agent contract (``accelrl.agent``): every recipe's learner provides it, the registry names
every recipe once, and what the run folder and export read of an agent is complete."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from accelrl.agent import RECIPES, Agent, UnknownAlgorithm, recipe_module, unique_parameters
from accelrl.envs import describe_env

CASES = [
    ("ppo", "CartPole-v1"),
    ("a2c", "MinAtar/Breakout"),
    ("appo", "CartPole-v1"),
    ("dqn", "CartPole-v1"),
    ("dqn", "MinAtar/Breakout"),  # C51 below
]


def build(algo: str, game: str):
    recipe = recipe_module(algo)
    cfg = recipe.Config()
    cfg.env.game = game
    if algo == "dqn" and game.startswith("MinAtar"):
        cfg.dqn.distributional = True
    spec = describe_env(cfg.env)
    torch.manual_seed(0)
    return recipe.make_agent(cfg, spec, torch.device("cpu")), spec


def test_the_registry_names_each_recipe_by_its_own_algorithm_name():
    for algo, module in RECIPES.items():
        recipe = recipe_module(algo)
        assert recipe.__name__ == module and recipe.ALGO == algo
        assert callable(recipe.train) and callable(recipe.make_agent)
    with pytest.raises(UnknownAlgorithm, match="'ddpg': accelrl knows a2c, appo, dqn, ppo"):
        recipe_module("ddpg")


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
