"""The replay loop: the DQN family (DQN, Double, Dueling, n-step, Prioritized, Categorical,
eps-Rainbow), written once.

Per batch: the simulators step epsilon-greedily with one batched forward pass -> the batch is
written to the replay (``accelrl.replay.memory.FrameReplay``: each frame stored once, stacks and
n-step targets rebuilt when sampled; uniform or prioritized) -> as many gradient steps on
sampled minibatches as keep replayed / collected samples at ``--dqn.training-intensity`` (the
target network copied when due, priorities written back) -> the new weights to the actors ->
the log; evaluation, video and checkpoint when due. With ``--dqn.asynchronous`` a feeder
thread collects while the learner updates (``accelrl.replay.feeder.ReplayFeeder``).
"""

from __future__ import annotations

from typing import Any

import torch

from accelrl.algos.registry import Algorithm
from accelrl.collectors import WatchedCollector, run_collector
from accelrl.config import rows_per_batch
from accelrl.loops.start import started
from accelrl.replay.feeder import ReplayFeeder, SyncReplay
from accelrl.replay.memory import FrameReplay


def train(cfg: Any, algorithm: Algorithm) -> dict[str, Any]:
    """Train a replay ``algorithm``; returns final frames, updates, episodes, the mean return
    of the last 100 and frames/s."""
    hyper = getattr(cfg, algorithm.section)
    with started(cfg, algorithm, overlapped=hyper.asynchronous) as s:
        cfg, proc, run, agent, spec = s.cfg, s.proc, s.run, s.agent, s.env_spec
        hyper = getattr(cfg, algorithm.section)  # resolved: the preset applied
        replay = FrameReplay(
            capacity=hyper.replay_capacity,
            n_step=hyper.n_step,
            prioritized=hyper.prioritized,
            alpha=hyper.priority_alpha,
            beta=hyper.priority_beta,
            storage_dir=hyper.replay_dir,
            num_envs=rows_per_batch(cfg.env, cfg.collector),
            obs_key=spec["obs_key"],
            obs_shape=spec["obs_shape"],
            stack=spec["obs_shape"][0] if spec["obs_key"] == "pixels" else 1,
            gamma=hyper.gamma,
            life_loss_boundary=hyper.life_loss_boundary,
            device=proc.device,
        )
        # With --dqn.replay-dir the replay's frames live on disk and checkpoints hold its index
        # (kilobytes), so a resumed run samples from it at once (one process, synchronous
        # collection: a feeder thread would write while the checkpoint reads). A replay in RAM
        # is not saved (7 GB per 1M Atari transitions): a resumed run refills it first.
        keep = hyper.replay_dir and not hyper.asynchronous and proc.world_size == 1
        saved_replay = {"replay": replay} if keep else {}
        progress = run.restore(agent, s.state, **saved_replay)  # --resume
        agent.acted(progress.frames)  # epsilon's schedule, also after a resume
        if progress.done:
            return run.finish(progress)

        def collector_for(policy: torch.nn.Module) -> WatchedCollector:
            return run_collector(
                cfg.env, cfg.collector, cfg.compile, policy, proc, progress.updates, state=s.state
            )

        # Updates wait for learning_starts_frames of new frames (agent steps here), also after a
        # resume whose replay was not saved.
        learning_starts = hyper.learning_starts_frames // progress.frames_per_step
        if cfg.resume and saved_replay:
            learning_starts = 0
        if hyper.asynchronous:
            # Collection runs in a background thread (own policy copy, weights copied after
            # updates); the learner waits only when it would replay more than the intensity.
            source = ReplayFeeder(
                collector_for,
                agent.collect_policy,
                replay,
                intensity=hyper.training_intensity,
                steps_per_batch=cfg.collector.steps_per_batch,
                learning_starts=learning_starts,
                on_stream_break=replay.restart_streams,
            )
        else:
            source = SyncReplay(collector_for(agent.collect_policy), replay, learning_starts)
        # Updates per collected batch keep replayed / collected samples at the intensity; the
        # fractional part carries over as credit.
        per_batch = hyper.training_intensity * cfg.collector.steps_per_batch / hyper.batch_size
        credit = 0.0
        try:
            source.start()
            while not progress.done:
                batch = source.wait_batch()  # already written to the replay
                progress.collected(batch)
                run.episodes(batch, progress.frames)
                if source.learning():
                    credit += per_batch
                    due, credit = int(credit), credit - int(credit)
                    # More cores while the simulators wait (threads chosen by measurement).
                    beta = agent.beta(progress.fraction)  # prioritized replay's IS exponent
                    for _ in proc.update_threads.steps(due):
                        sample = source.sample(hyper.batch_size, beta=beta)
                        with source.weights_changing():
                            priority = agent.update(sample)  # target copy when due
                        if priority is not None:  # None: a skipped non-finite step
                            source.update_priority(sample.get("index"), priority)
                agent.acted(progress.frames)  # epsilon falls per step; workers' counts race
                source.publish_weights()  # the collector acts with the new weights
                metrics = agent.metrics() | {  # the batch's last gradient step; NaN before any
                    "train/epsilon": agent.epsilon(progress.frames),
                    "train/replay": len(replay),
                    "train/replay_ratio": source.ratio(),
                    **progress.updated(),
                }
                run.log(progress, metrics)
                # Stop signal (checkpoint, then requeue or exit); evaluation, video, checkpoint
                # when due (--log.*-every-frames).
                run.on_schedule(progress)
        finally:
            source.close()
        return run.finish(progress)
