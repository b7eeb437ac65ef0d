"""Runs CleanRL's ``ppo_atari_envpool.py`` (or ``pqn_atari_envpool.py``, which writes the same
scalars) as shipped, in the peer's venv, and notes ``time.perf_counter()`` at the end of every
update (its ``charts/SPS`` scalar, written once per iteration after the update) and of every
game (its ``charts/episodic_return``), on stderr, for ``benchmarks.peers``. Nothing in the
script is edited: TensorBoard's ``add_scalar`` is wrapped before it starts.

    python cleanrl_script.py PATH/ppo_atari_envpool.py SCRIPT_ARGS...
"""

import runpy
import sys

from marks import EPISODE, MARK, note  # this folder's marks.py
from torch.utils.tensorboard import SummaryWriter

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
