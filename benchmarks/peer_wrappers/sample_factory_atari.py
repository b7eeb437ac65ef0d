"""Runs Sample Factory's Atari example (``sf_examples.atari.train_atari``) as shipped, in the
peer's venv, and notes ``time.perf_counter()`` at the end of every training iteration and of
every game, on stderr, for ``benchmarks.peers``. It uses Sample Factory's own hooks (an
``AlgoObserver`` and an episodic-stats handler on the runner), and edits nothing.

ale-py >= 0.9 registers its Atari ids (``BreakoutNoFrameskip-v4``) when imported, and the
example's env factory does not import it: this module imports it at the top, which every worker
process runs again (Sample Factory starts them with ``spawn``, which re-imports the main module).

    python sample_factory_atari.py SF_ARGS...
"""

import sys

import ale_py  # noqa: F401  (registers the Atari ids in this process and in every worker)
import numpy as np
from marks import EPISODE, MARK, note  # this folder's marks.py
from sample_factory import train
from sample_factory.algo.runners.runner import AlgoObserver
from sample_factory.algo.utils.misc import EPISODIC
from sf_examples.atari import train_atari


class BatchMarks(AlgoObserver):
    def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
        cfg = runner.cfg  # one iteration trains on num_batches_per_epoch x batch_size steps
        note(MARK, training_iteration_since_resume * cfg.batch_size * cfg.num_batches_per_epoch)


def game_ended(runner, msg: dict, policy_id: int) -> None:
    # Every lost life reports an episode (EpisodicLifeEnv); gymnasium's RecordEpisodeStatistics,
    # below every other wrapper, adds the whole game's unclipped score when the game ends.
    scores = msg[EPISODIC].get("RecordEpisodeStatistics_reward")
    if scores is None:
        return
    cfg = runner.cfg  # the learner's env steps count frames when summaries_use_frameskip
    steps = runner.env_steps.get(policy_id, 0)
    steps //= cfg.env_frameskip if cfg.summaries_use_frameskip else 1
    for score in np.atleast_1d(scores):
        note(EPISODE, steps, float(score))


make_runner = train.make_runner


def noted_make_runner(cfg):
    cfg, runner = make_runner(cfg)
    runner.register_observer(BatchMarks())
    runner.register_episodic_stats_handler(game_ended)
    return cfg, runner


if __name__ == "__main__":
    train.make_runner = noted_make_runner
    sys.exit(train_atari.main())
