"""The on-policy loop: PPO, A2C, APPO and PQN (Stooke & Abbeel 2018's synchronous and
asynchronous sampling and optimisation), written once.

Per batch: the simulators step with one batched forward pass acting for all of them (TorchRL's
``Collector``, ``MultiSyncCollector`` or ``MultiAsyncCollector``, or ours:
``accelrl.collectors.make_collector``) -> a batch ``[envs, T]`` (``[workers, envs, T]``) of
agent steps -> the learner's ``update`` (PPO: GAE, then epochs x minibatches of clipped steps;
A2C: n-step returns, one step on all of it; PQN: Q(lambda) targets, then epochs x minibatches
of MSE steps) -> the new weights to the actors -> the log; evaluation, video and checkpoint
when due.

With an asynchronous collector (``--collector.kind async``: APPO's default) a batch may have
been acted by older weights: ``PolicyLag`` stamps each step with the version that took it,
drops batches more than ``--collector.max-policy-lag`` behind and recomputes a lagged batch's
values with the current critic.
"""

from __future__ import annotations

from typing import Any

from accelrl.algos.registry import Algorithm
from accelrl.collectors import PolicyLag, run_collector
from accelrl.loops.start import started


def train(cfg: Any, algorithm: Algorithm) -> dict[str, Any]:
    """Train an on-policy ``algorithm``; returns final frames, updates, episodes, the mean
    return of the last 100 and frames/s."""
    with started(cfg, algorithm) as s:
        cfg, proc, run, agent = s.cfg, s.proc, s.run, s.agent
        progress = run.restore(agent, s.state)  # --resume: weights, optimizer, counters
        if progress.done:
            return run.finish(progress)
        lag = PolicyLag(cfg.collector, progress.updates, proc.device)  # async kinds only
        acting = lag.acting(agent.collect_policy)  # stamped with its version (kind async)
        # A recurrent policy's state travels with the simulators, zeros at each episode's
        # start; a resumed run starts every simulator from zeros (new episodes).
        collector = run_collector(
            cfg.env, cfg.collector, cfg.compile, acting, proc, progress.updates, state=s.state
        )
        try:
            for batch in collector:  # [envs, T] (or [workers, envs, T]) agent steps
                if not lag.accept(batch, progress):
                    continue  # acted by weights more than --collector.max-policy-lag behind
                progress.collected(batch)
                run.episodes(batch, progress.frames)
                with proc.update_threads():  # more cores while the simulators wait
                    metrics = agent.update(lag.fresh(batch), progress=progress.fraction)
                lag.bump()
                collector.update_policy_weights_()  # the workers act with the new weights
                metrics |= {**lag.metrics, **progress.updated()}
                run.log(progress, metrics)
                # Stop signal (checkpoint, then requeue or exit); evaluation, video, checkpoint
                # when due (--log.*-every-frames).
                run.on_schedule(progress)
                if progress.done:
                    break
        finally:
            collector.shutdown()
        return run.finish(progress)
