"""Watch a trained agent: play evaluation episodes from a run folder, optionally into an MP4.

    python -m accelrl.tools.play runs/ppo_Breakout_... --episodes 10
    python -m accelrl.tools.play RUN_DIR --video breakout.mp4 --episodes 1
    python -m accelrl.tools.play RUN_DIR --checkpoint RUN_DIR/checkpoints/ckpt_000002000000.pt

The run's recipe and settings come from its ``config.json``; the agent is rebuilt with the
recipe's ``make_agent`` and loaded from the newest good checkpoint (or ``--checkpoint``), with the
same safe load as ``--resume`` (``--trust-checkpoint`` for files a safe load refuses).

Episodes follow the usual evaluation protocol, with the run's env settings: whole games (a lost
life does not end an episode), the unclipped game score, the episode cap of
``--env.max-episode-frames`` (108k emulator frames by default), random no-op starts and sticky
actions as configured. Episodes are played one after another by one simulator, the one the
run's env backend plays with (``EnvBackend.play_env``; for Atari the ``gym`` backend's
``AtariWorkerEnv``, whose preprocessing matches ``ale_vec`` frame for frame), and backends that
render a screen (Atari: the full-size RGB screen; MinAtar: its grid in colour) can record it to
a video. The agent acts greedily (its most likely action, or the highest Q-value);
``--epsilon 0.001`` takes a random action that often, as DQN papers evaluate; ``--sample``
samples an actor-critic's policy instead.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import torch
import tyro
from tensordict.nn import InteractionType, set_interaction_type

from accelrl.agent import Agent
from accelrl.algos.catalog import algorithm
from accelrl.algos.registry import UnknownAlgorithm
from accelrl.config import from_dict, resolve_device
from accelrl.loops.start import acting_state
from accelrl.run.checkpoint import CheckpointError, load_checkpoint, load_latest
from accelrl.run.evaluate import Episode, VideoWriter, play_env, play_episode
from accelrl.run.record import CONFIG_NAME, DamagedRecord, current_config, read_config
from accelrl.validate import check_device


@dataclass
class PlayConfig:
    """Play a trained agent's episodes and print their scores."""

    run_dir: Annotated[str, tyro.conf.Positional]
    """Run folder written by a recipe (holds config.json and checkpoints/)."""
    checkpoint: str | None = None
    """Checkpoint file to load (default: the newest loadable one in RUN_DIR/checkpoints)."""
    episodes: int = 10
    """Episodes to play, one after another."""
    video: str | None = None
    """Write the first --video-episodes episodes' screens to this MP4 (Atari: full-size RGB;
    MinAtar: the grid in colour)."""
    video_episodes: int = 1
    """How many of the played episodes go into the video."""
    epsilon: float = 0.0
    """Probability of a uniformly random action at each step (0: greedy)."""
    sample: bool = False
    """Actor-critic agents: sample actions from the policy instead of taking the most likely."""
    device: str = "cpu"
    """Where the network runs: cpu, cuda, cuda:N or auto."""
    seed: int = 0
    """Seeds the simulator (no-op starts, sticky actions) and the random actions."""
    trust_checkpoint: bool = False
    """Read a checkpoint that the safe load refuses (it can run code stored in the file)."""


class PlayError(ValueError):
    """Something in the play request cannot work; the message says what and the fix."""


@dataclass
class LoadedAgent:
    """A trained agent rebuilt from its run folder."""

    run_cfg: Any
    """The run's recipe ``Config``, from config.json."""
    agent: Agent
    """The recipe's learner (``make_agent``) with the checkpoint's state loaded."""
    policy: torch.nn.Module
    """What acts: the agent's ``eval_policy``."""
    checkpoint: Path
    device: torch.device


def load_agent(cfg: PlayConfig) -> LoadedAgent:
    """Rebuild the agent of ``cfg.run_dir`` and load its checkpoint (safely, see
    ``accelrl.run.checkpoint``); raises ``PlayError`` or ``CheckpointError`` with one line."""
    run_dir = Path(cfg.run_dir)
    config_path = run_dir / CONFIG_NAME
    try:
        saved = read_config(run_dir)
        if saved is None:
            raise PlayError(f"{run_dir} has no config.json: not a run folder written by a recipe")
        config = current_config(run_dir, saved)  # with the changes a --resume brought in
    except DamagedRecord as err:
        raise PlayError(f"{err}: repair it by hand") from None
    algo = saved.get("algo")
    try:
        record = algorithm(algo)
    except UnknownAlgorithm as err:
        raise PlayError(f"{config_path} names {err}") from None
    run_cfg = from_dict(record.config, config)
    device_name = resolve_device(cfg.device)
    try:
        check_device("device", device_name)
    except ValueError as err:
        raise PlayError(str(err)) from None
    device = torch.device(device_name)
    if cfg.checkpoint is not None:
        path = Path(cfg.checkpoint)
        if not path.is_file():
            raise PlayError(f"--checkpoint {path} does not exist")
        state = load_checkpoint(path, map_location=device, trust=cfg.trust_checkpoint)
    else:
        found = load_latest(run_dir, map_location=device, trust=cfg.trust_checkpoint)
        if found is None:
            raise PlayError(
                f"{run_dir} has no loadable checkpoint (checkpoints/ckpt_*.pt): a run writes one "
                "every --log.checkpoint-every-frames and at its end; or pass --checkpoint FILE"
            )
        state, path = found
    if not isinstance(state, dict) or algo not in state.get("components", {}):
        raise PlayError(f"{path} is not a {algo!r} checkpoint of this run")
    from accelrl.envs import MissingExtra, describe_env

    try:
        env_spec = describe_env(run_cfg.env)
    except MissingExtra as err:
        raise PlayError(str(err)) from None
    agent = record.make_agent(run_cfg, env_spec, device)
    agent.load_state_dict(state["components"][algo])
    policy = agent.eval_policy  # greedy, or sampled under --sample (accelrl.agent)
    policy.eval()
    return LoadedAgent(run_cfg, agent, policy, path, device)


@torch.no_grad()
def play(cfg: PlayConfig) -> dict[str, Any]:
    """Play ``cfg.episodes`` episodes; prints one line each and the mean; returns the scores."""
    if cfg.episodes < 1:
        raise PlayError(f"--episodes {cfg.episodes}: play at least 1")
    if not 0.0 <= cfg.epsilon <= 1.0:
        raise PlayError(f"--epsilon {cfg.epsilon}: a probability in [0, 1]")
    loaded = load_agent(cfg)
    run_cfg, policy, path, device = loaded.run_cfg, loaded.policy, loaded.checkpoint, loaded.device
    from accelrl.envs import backend_for

    backend = backend_for(run_cfg.env)
    if cfg.video and not backend.renders:
        raise PlayError(
            f"--video records game screens, and {run_cfg.env.game} (backend {backend.name}) "
            "has none"
        )
    env = play_env(backend, run_cfg.env, cfg.seed, acting_state(loaded.agent))
    rng = random.Random(cfg.seed)
    video = VideoWriter(cfg.video, fps=backend.video_fps(run_cfg.env)) if cfg.video else None
    mode = "sampled" if cfg.sample else "greedy"
    if cfg.epsilon > 0:
        mode += f", epsilon {cfg.epsilon:g}"
    print(f"playing {cfg.episodes} episode(s) of {run_cfg.env.game} ({mode}) from {path}")
    episodes: list[Episode] = []
    interaction = InteractionType.RANDOM if cfg.sample else InteractionType.DETERMINISTIC
    try:
        with set_interaction_type(interaction):
            for i in range(cfg.episodes):
                record = video is not None and i < cfg.video_episodes
                # The screen after each agent step (Atari: the emulator's last frame, full size).
                grab = (lambda: video.add(backend.screen(env))) if record else None
                ep = play_episode(env, policy, device, epsilon=cfg.epsilon, rng=rng, on_step=grab)
                episodes.append(ep)
                frames = ep.steps * backend.frames_per_step(run_cfg.env)
                ended = "cap" if ep.truncated else "game over"
                print(
                    f"episode {i + 1}: score {ep.score:g}, {ep.steps} steps "
                    f"({frames:,} frames, {ended})",
                    flush=True,
                )
    finally:
        env.close()
        if video is not None:
            video.close()
    scores = [ep.score for ep in episodes]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    print(f"mean score {mean:g} +- {std:.3g} (std) over {len(scores)} episode(s)")
    if video is not None:
        print(f"video: {video.path} ({video.frames} frames at {video.fps:g} fps)")
    return {"scores": scores, "lengths": [ep.steps for ep in episodes], "checkpoint": str(path)}


def run_tool(name: str, config_cls: type, action, argv: list[str] | None, doc: str) -> None:
    """Parse ``argv`` into ``config_cls`` and run ``action``; a ``PlayError`` or
    ``CheckpointError`` becomes one line ``NAME: error: ...`` and exit code 2."""
    cfg = tyro.cli(config_cls, args=sys.argv[1:] if argv is None else argv, description=doc)
    try:
        action(cfg)
    except (PlayError, CheckpointError) as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    run_tool("accelrl.tools.play", PlayConfig, play, argv, __doc__)


if __name__ == "__main__":
    main()
