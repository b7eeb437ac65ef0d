"""DQN learns CartPole as well as its plain loop: RL-zoo's settings, three seeds judged together
(``reference.cartpole_presets``; the parity table is docs/results/learning.md). A file of its
own, like the variants' (tests/test_dqn_variants_learning.py), so that CI's two pytest-xdist
workers, which take a whole file at a time, can run the long DQN learning runs side by side."""

import pytest

from tests.helpers import dqn_cartpole_run, print_cartpole_result


@pytest.mark.slow
def test_dqn_learns_cartpole_as_well_as_the_plain_loop(tmp_path, capsys):
    """RL-zoo settings, 50k steps, seeds 0-2, judged over the three seeds together.

    At lr 2.3e-3 DQN on CartPole is chaotic: a change at float-rounding level (PyTorch's fused
    Adam kernel instead of its foreach one) moved seed 0's last-100 from 231 to 67 and seeds
    1-2 from 281 / 278 to 264 / 264. With epsilon lowered every step (both sides), over seeds
    0-11 the plain loop (reference.classic) ended at 200-330 (mean 253), 139-306 with
    the recipe's fused Adam (mean 228), accelrl at 107-302 (mean 213; seeds 0-2: 244 / 236 /
    230, docs/results/learning.md). Before the ReLU Q-network the recipe
    ended at 70 / 76 on seeds 0 / 1 and never passed ~155; with a target network that never
    refreshes it ends at 11-17. So: the mean over seeds at least 150, one seed at least 200,
    and one greedy evaluation at 500."""
    results = {seed: dqn_cartpole_run("dqn", seed, tmp_path / f"s{seed}") for seed in (0, 1, 2)}
    for seed, r in results.items():
        print_cartpole_result(capsys, f"dqn seed {seed}", r)
    assert all(r["untrained"] < 60 for r in results.values()), results
    last = {s: r["mean_return_100"] for s, r in results.items()}
    assert sum(last.values()) / len(last) >= 150, f"mean last-100 over seeds below 150: {last}"
    assert max(last.values()) >= 200, f"no seed reached a last-100 of 200: {last}"
    greedy = {s: r["eval/greedy_return"] for s, r in results.items()}
    assert max(greedy.values()) >= 500, f"no seed's greedy policy balances 500 steps: {greedy}"
