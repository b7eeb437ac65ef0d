"""Evaluation episodes with the current policy: greedy (most likely action) and sampled."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type

from accelrl.config import EnvConfig
from accelrl.envs import is_atari, make_env

log = logging.getLogger("accelrl")


class Episodes(NamedTuple):
    returns: list[float]
    """Unclipped return of each episode."""
    truncated: int
    """How many ended at the time limit rather than at game over (an Atari policy that stops
    acting, e.g. never presses FIRE after a lost life in Breakout, plays on to the cap)."""


@torch.no_grad()
def run_episodes(
    env_cfg: EnvConfig,
    policy: torch.nn.Module,
    *,
    episodes: int,
    seed: int,
    device: torch.device,
    greedy: bool,
    on_step: Callable[[int], None] | None = None,
    state: TensorDictBase | None = None,
) -> Episodes:
    """The first episode of each of ``episodes`` simulators run together. ``on_step(ended)``
    is called after every step with the number of episodes that ended in it. ``state``: a
    recurrent policy's (``Agent.initial_state(1)``): each simulator carries its own, from
    zeros at its episode's start (``accelrl.envs.with_state``)."""
    env = make_env(env_cfg, seed=seed, num_envs=episodes, synchronous=True, state=state)
    interaction = InteractionType.DETERMINISTIC if greedy else InteractionType.RANDOM
    returns = torch.full((episodes,), float("nan"))
    truncated = 0
    try:
        td = env.reset()
        with set_interaction_type(interaction):
            while returns.isnan().any():
                td = policy(td.to(device)).to("cpu")
                td, td_next = env.step_and_maybe_reset(td)
                nxt = td.get("next")
                done = nxt.get("done").squeeze(-1) & returns.isnan()
                returns[done] = nxt.get("episode_return").squeeze(-1)[done]
                truncated += int((nxt.get("truncated").squeeze(-1) & done).sum())
                if on_step is not None:
                    on_step(int(done.sum()))
                td = td_next
    finally:
        env.close()
    return Episodes(returns.tolist(), truncated)


def evaluate(
    env_cfg: EnvConfig,
    policy: torch.nn.Module,
    *,
    episodes: int,
    seed: int,
    device: torch.device,
    on_step: Callable[[int], None] | None = None,
    state: TensorDictBase | None = None,
) -> tuple[dict[str, float], Episodes]:
    """Mean unclipped return of greedy and of sampled episodes (``eval/greedy_return`` ...),
    and the greedy episodes themselves. ``on_step``, ``state``: as ``run_episodes``'s, for
    both."""
    greedy = run_episodes(env_cfg, policy, episodes=episodes, seed=seed, device=device,
                          greedy=True, on_step=on_step, state=state)  # fmt: skip
    sampled = run_episodes(env_cfg, policy, episodes=episodes, seed=seed + episodes,
                           device=device, greedy=False, on_step=on_step, state=state)  # fmt: skip
    metrics = {
        "eval/greedy_return": sum(greedy.returns) / episodes,
        "eval/sampled_return": sum(sampled.returns) / episodes,
    }
    return metrics, greedy


def warn_if_capped(env_cfg: EnvConfig, greedy: Episodes, frames: int) -> None:
    """Say so when greedy Atari episodes ran on to the frame cap: the policy stopped acting."""
    if greedy.truncated and is_atari(env_cfg.game):
        log.warning(
            "evaluation at %d frames: %d of %d greedy episodes played on to the %d-frame "
            "cap (--env.max-episode-frames): the greedy policy stopped acting (in Breakout: "
            "no FIRE after a lost life), which an early policy often does; "
            "--log.eval-episodes 0 skips evaluation",
            frames, greedy.truncated, len(greedy.returns), env_cfg.max_episode_frames,
        )  # fmt: skip
