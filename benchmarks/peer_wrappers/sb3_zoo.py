"""Runs RL Baselines3 Zoo's training script (``python -m rl_zoo3.train``, Stable-Baselines3's
own) as shipped, in the peer's venv, and notes ``time.perf_counter()`` at the end of every PPO
update and of every game, on stderr, for ``benchmarks.peers`` (nothing in SB3 or the zoo is
edited: two methods are wrapped before the script starts).

    python sb3_zoo.py ZOO_ARGS...
"""

import runpy
import sys

from marks import EPISODE, MARK, note  # this folder's marks.py
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm

train = PPO.train
update_info_buffer = BaseAlgorithm._update_info_buffer


def noted_train(self: PPO) -> None:
    train(self)
    note(MARK, self.num_timesteps)


def noted_update_info_buffer(self: BaseAlgorithm, infos: list, dones=None) -> None:
    # The zoo's Monitor sits below AtariWrapper: its "episode" is a whole game, unclipped.
    for info in infos:
        if "episode" in info:
            note(EPISODE, self.num_timesteps, float(info["episode"]["r"]))
    update_info_buffer(self, infos, dones)


PPO.train = noted_train
BaseAlgorithm._update_info_buffer = noted_update_info_buffer
sys.argv = ["rl_zoo3.train", *sys.argv[1:]]
runpy.run_module("rl_zoo3.train", run_name="__main__", alter_sys=True)
