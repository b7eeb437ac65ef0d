"""Runs CleanRL's ``ppo_atari_envpool.py`` as shipped, in the peer's venv, and notes
``time.perf_counter()`` at the end of every PPO update (its ``charts/SPS`` scalar, written once
per iteration after the update) and of every game (its ``charts/episodic_return``), on stderr,
for ``benchmarks.peers``. Nothing in the script is edited: TensorBoard's ``add_scalar`` is
wrapped before it starts.

    python cleanrl_script.py PATH/ppo_atari_envpool.py SCRIPT_ARGS...
"""

import os
import runpy
import sys
import time

from torch.utils.tensorboard import SummaryWriter

MARK = "accelrl-peers-mark"  # agent steps so far, perf_counter: the end of one update
EPISODE = "accelrl-peers-episode"  # agent steps so far, game score, perf_counter


def note(*fields: object) -> None:
    # One write of the whole line: the peer's other processes share this stderr pipe, and
    # print() writes a line in pieces that their output could split.
    line = " ".join(str(f) for f in (*fields, time.perf_counter()))
    os.write(2, f"{line}\n".encode())


add_scalar = SummaryWriter.add_scalar


def noted_add_scalar(self, tag, scalar_value, global_step=None, *args, **kwargs):
    if tag == "charts/SPS":
        note(MARK, global_step)
    elif tag == "charts/episodic_return":  # a whole game (lives == 0), unclipped
        note(EPISODE, global_step, float(scalar_value))
    return add_scalar(self, tag, scalar_value, global_step, *args, **kwargs)


SummaryWriter.add_scalar = noted_add_scalar
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
