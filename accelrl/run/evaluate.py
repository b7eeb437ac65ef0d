"""Episodes outside the learner: evaluation (greedy and sampled, many simulators at once), and
one greedy episode into an MP4 (videos of a run and `accelrl.tools.play`)."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type
from torchrl.envs.utils import step_mdp

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


class VideoWriter:
    """MP4 (H.264, yuv420p) through imageio-ffmpeg's bundled ffmpeg; written to a temp file and
    renamed when closed, so the path holds a whole video or nothing."""

    def __init__(self, path: str, fps: float) -> None:
        self.path, self.fps = Path(path), fps
        self.tmp = self.path.with_name(f".{self.path.stem}.tmp{self.path.suffix}")
        self._writer = None
        self.frames = 0

    def add(self, rgb) -> None:
        if self._writer is None:
            import imageio_ffmpeg

            height, width = rgb.shape[:2]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = imageio_ffmpeg.write_frames(
                str(self.tmp), (width, height), fps=self.fps, macro_block_size=2, quality=7
            )
            self._writer.send(None)
        self._writer.send(rgb.tobytes())
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            os.replace(self.tmp, self.path)


@dataclass
class Episode:
    score: float
    """Unclipped game score (the sum of the env's ``score``)."""
    steps: int
    truncated: bool
    """Ended by the episode cap (or ``max_steps``), not by the game."""


def play_env(backend: Any, env_cfg: Any, seed: int, state: TensorDictBase | None) -> Any:
    """The backend's ``play_env``, carrying a recurrent policy's ``state`` when there is one
    (``accelrl.envs.with_state``: from zeros at each episode's start)."""
    env = backend.play_env(env_cfg, seed)
    if state is None:
        return env
    from accelrl.envs import with_state

    return with_state(env, state)


@torch.no_grad()
def play_episode(
    env,
    policy: torch.nn.Module,
    device: torch.device,
    *,
    epsilon: float = 0.0,
    rng: random.Random | None = None,
    on_step=None,
    max_steps: int | None = None,
) -> Episode:
    """One episode from a reset of ``env`` (unbatched, or batched with one simulator), acting
    with ``policy`` under the current interaction type; ``on_step()`` is called after the reset
    and after every step (e.g. to grab the screen). ``max_steps`` stops a longer episode early."""
    unbatched = env.batch_size == torch.Size([])
    num_actions = int(env.action_spec.space.n)
    rng = rng or random.Random(0)
    td = env.reset()
    if on_step is not None:
        on_step()
    steps = 0
    while True:
        batch = td.unsqueeze(0) if unbatched else td
        out = policy(batch.to(device)).cpu()
        action = out.get("action")
        if epsilon > 0 and rng.random() < epsilon:
            action = torch.full_like(action, rng.randrange(num_actions))
        td.set("action", action.squeeze(0) if unbatched else action)
        if "next" in out.keys():
            # A recurrent policy's next state (``accelrl.envs.with_state``): ``step_mdp``
            # carries it to the next step's input.
            nxt = out.get("next")
            td.set("next", nxt.squeeze(0) if unbatched else nxt)
        td = env.step(td)
        steps += 1
        if on_step is not None:
            on_step()
        nxt = td.get("next")
        if bool(nxt.get("done").any()) or (max_steps is not None and steps >= max_steps):
            return Episode(
                score=float(nxt.get("episode_return").reshape(-1)[0]),
                steps=int(nxt.get("episode_length").reshape(-1)[0]),
                truncated=bool(nxt.get("truncated").any()) or not bool(nxt.get("done").any()),
            )
        td = step_mdp(td)


def record_video(
    env_cfg, policy: torch.nn.Module, path: str | Path, *, seed: int, device: torch.device,
    max_steps: int | None = None, state: TensorDictBase | None = None,
) -> Episode:  # fmt: skip
    """Play one greedy episode (or its first ``max_steps`` steps) into an MP4 of the screen the
    env backend renders; what training runs record with ``--log.video-every-frames``.
    ``state``: a recurrent policy's (``accelrl.loops.start.acting_state``)."""
    from accelrl.envs import backend_for

    backend = backend_for(env_cfg)
    env = play_env(backend, env_cfg, seed, state)
    video = VideoWriter(str(path), fps=backend.video_fps(env_cfg))
    try:
        with set_interaction_type(InteractionType.DETERMINISTIC):
            return play_episode(
                env, policy, device, on_step=lambda: video.add(backend.screen(env)),
                max_steps=max_steps,
            )  # fmt: skip
    finally:
        env.close()
        video.close()
