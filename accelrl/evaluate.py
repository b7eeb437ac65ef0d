"""Evaluation episodes with the current policy: greedy (most likely action) and sampled."""

from __future__ import annotations

import torch
from tensordict.nn import InteractionType, set_interaction_type

from accelrl.config import EnvConfig
from accelrl.envs import make_env


@torch.no_grad()
def run_episodes(
    env_cfg: EnvConfig,
    policy: torch.nn.Module,
    *,
    episodes: int,
    seed: int,
    device: torch.device,
    greedy: bool,
) -> list[float]:
    """Unclipped returns of the first episode of each of ``episodes`` simulators run together."""
    env = make_env(env_cfg, seed=seed, num_envs=episodes, synchronous=True)
    interaction = InteractionType.DETERMINISTIC if greedy else InteractionType.RANDOM
    returns = torch.full((episodes,), float("nan"))
    try:
        td = env.reset()
        with set_interaction_type(interaction):
            while returns.isnan().any():
                td = policy(td.to(device)).to("cpu")
                td, td_next = env.step_and_maybe_reset(td)
                nxt = td.get("next")
                done = nxt.get("done").squeeze(-1) & returns.isnan()
                returns[done] = nxt.get("episode_return").squeeze(-1)[done]
                td = td_next
    finally:
        env.close()
    return returns.tolist()


def evaluate(
    env_cfg: EnvConfig,
    policy: torch.nn.Module,
    *,
    episodes: int,
    seed: int,
    device: torch.device,
) -> dict[str, float]:
    """Mean unclipped return of greedy and of sampled episodes (``eval/greedy_return`` ...)."""
    greedy = run_episodes(env_cfg, policy, episodes=episodes, seed=seed, device=device, greedy=True)
    sampled = run_episodes(
        env_cfg, policy, episodes=episodes, seed=seed + episodes, device=device, greedy=False
    )
    return {
        "eval/greedy_return": sum(greedy) / len(greedy),
        "eval/sampled_return": sum(sampled) / len(sampled),
    }
