"""One Breakout batch seen by a recipe's update and by its plain loop (reference.atari):
the helpers of the by-construction parity tests in test_a2c.py and test_ppo.py.

Both sides run in float64 (``tests.numerics.float64()`` around building the agent). In
float32 the two implementations order their reductions differently, and so do CPU kernels
(AVX2, AVX-512, oneDNN's ISA, thread counts): after four PPO epochs at 40x the default learning
rate a weight differed by 1.4e-6 between kernels, as much as a deliberate break moves some
weights. In float64 those differences are ~1e-15. What remains is the one place where the
implementations differ by design: PPO's advantage standardisation divides by ``std + 1e-8`` in
the plain loop (CleanRL's form) and by ``max(std, 1e-6)`` in TorchRL's loss, a relative
1e-8/std; after four epochs it leaves weights up to 3.4e-7 apart relatively and 2.4e-10
absolutely. ``TOL`` sits above that and far below what the breaks these tests catch move
(1e-5 and more).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from accelrl.config import EnvConfig
from accelrl.envs import make_env
from reference.atari import ActorCritic
from reference.atari_actor_critic import Rollout
from tests.numerics import float64

TOL = dict(rtol=1e-6, atol=1e-9)
"""Float64 tolerance of the parity tests (see the module docstring)."""

SPEC = {"obs_key": "pixels", "obs_shape": (4, 84, 84)}
"""``make_agent``'s env description for Breakout frames (``num_actions`` from ``num_actions``)."""


def num_actions() -> int:
    env = make_env(EnvConfig(game="Breakout", num_envs=1), seed=0)
    try:
        return int(env.action_spec.space.n)
    finally:
        env.close()


def breakout_batch(policy: nn.Module, envs: int, steps: int) -> TensorDictBase:
    """``[envs, steps]`` collected with ``policy``, then given what a short batch rarely has:
    rewards, a lost life (env 1, step 2), a game over (2, 3) and a truncation (3, 2) whose
    final frame differs from the next root frame (as after an autoreset)."""
    env = make_env(EnvConfig(game="Breakout", num_envs=envs), seed=0)
    with torch.no_grad():
        batch = env.rollout(steps, policy, break_when_any_done=False)
    env.close()
    nxt = batch.get("next")
    # Rewards in the networks' dtype: TorchRL's GAE computes in the reward's (float32 gamma).
    nxt.set("reward", nxt.get("reward").to(batch.get("state_value").dtype))
    reward, life_lost = nxt.get("reward"), nxt.get("life_lost")
    done, term, trunc = nxt.get("done"), nxt.get("terminated"), nxt.get("truncated")
    reward[0, 1], reward[2, 4], reward[3, 0] = 1.0, 1.0, -1.0
    life_lost[1, 2] = True
    done[2, 3], term[2, 3] = True, True
    done[3, 2], trunc[3, 2] = True, True
    nxt.get("pixels")[3, 2] = nxt.get("pixels")[3, 2].flip(-1)
    return batch


def recipe_and_plain(
    make_agent: Callable[..., Any], cfg: Any, steps: int
) -> tuple[Any, TensorDictBase, ActorCritic, list[nn.Parameter]]:
    """The recipe's agent (``make_agent(cfg, ...)``) for Breakout frames, built in float64; a
    ``[4, steps]`` ``breakout_batch`` collected with its policy; the plain loop's twin of its
    actor-critic and its parameters in the plain order (``plain_twin``)."""
    spec = {**SPEC, "num_actions": num_actions()}
    with float64():
        agent = make_agent(cfg, spec, torch.device("cpu"))
    batch = breakout_batch(agent.collect_policy, envs=4, steps=steps)
    plain, ours = plain_twin(agent.model)
    return agent, batch, plain, ours


def plain_twin(model: nn.Module) -> tuple[ActorCritic, list[nn.Parameter]]:
    """The plain loop's actor-critic with ``model``'s weights (an ``ActorValueOperator`` from
    ``accelrl.models.make_actor_critic``), and ``model``'s parameters in the plain order."""
    ours = [*model[0].parameters(), *model.get_policy_head().parameters(),
            *model.get_value_head().parameters()]  # fmt: skip
    plain = ActorCritic(ours[-4].shape[0]).to(ours[0].dtype)
    assert [p.shape for p in ours] == [p.shape for p in plain.parameters()]
    with torch.no_grad():
        for mine, theirs in zip(ours, plain.parameters(), strict=True):
            theirs.copy_(mine)
    return plain, ours


def plain_view(batch: TensorDictBase, plain: ActorCritic, a: Any) -> tuple[torch.Tensor, ...]:
    """What the plain loop computes from ``batch`` (time first; life loss folded into term and
    done; truncated rows bootstrapped from their final frame): ``(obs, actions, log-probs,
    advantages, returns, values)`` of ``[N]`` steps, with ``a``'s gamma and lambda."""
    envs, steps = batch.batch_size
    nxt = batch.get("next")
    done, lost = nxt.get("done"), nxt.get("life_lost")
    lost = lost & ~done

    dtype = batch.get("state_value").dtype  # the networks' (float64 in the parity tests)

    def time_first(x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(-1).transpose(0, 1).to(dtype)

    rollout = Rollout.__new__(Rollout)
    rollout.steps = steps
    rollout.rewards = time_first(nxt.get("reward"))
    rollout.terms = time_first(nxt.get("terminated") | lost)
    rollout.dones = time_first(done | lost)
    rollout.values = time_first(batch.get("state_value"))
    trunc = nxt.get("truncated").squeeze(-1)
    rollout.trunc_values = {}
    with torch.no_grad():
        for t in range(steps):
            rows = trunc[:, t].nonzero().squeeze(-1)
            if len(rows):
                rollout.trunc_values[t] = (rows, plain(nxt.get("pixels")[rows, t])[1])
        last_value = plain(nxt.get("pixels")[:, -1])[1]
    adv = rollout.advantages(last_value, a.gamma, a.gae_lambda)
    n = envs * steps
    return (
        batch.get("pixels").transpose(0, 1).reshape(n, *batch.get("pixels").shape[2:]),
        batch.get("action").transpose(0, 1).reshape(n),
        time_first(batch.get("action_log_prob")).reshape(n),
        adv.reshape(n),
        (adv + rollout.values).reshape(n),
        rollout.values.reshape(n),
    )
