"""Compact batches (``accelrl.batches``): each observation once, the next observations at the
ends on the side; the learners that read ``("next", obs)`` compute the same from either layout."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from accelrl.algos.common import fill_values, mark_boundaries
from accelrl.algos.pqn import PQN, PQNConfig
from accelrl.batches import NEXT_OBS_AT_ENDS, compact, ends, is_compact, next_obs_at_ends
from accelrl.models import make_actor_critic

ROWS, T = 3, 6


def full_batch(seed: int = 0) -> TensorDict:
    """A ``[ROWS, T]`` batch in TorchRL's layout: episodes end inside it (terminated and
    truncated) and at a row's last step, where the next observation differs from the next
    root's."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(ROWS, T, 4, generator=gen)
    next_obs = torch.roll(obs, -1, dims=1)
    terminated = torch.zeros(ROWS, T, 1, dtype=torch.bool)
    truncated = torch.zeros(ROWS, T, 1, dtype=torch.bool)
    terminated[0, 2] = True
    truncated[1, 4] = True
    terminated[2, T - 1] = True
    done = terminated | truncated
    # Where an episode ended the next observation is its last one, not the next root's.
    next_obs[done.squeeze(-1)] = torch.randn(int(done.sum()), 4, generator=gen)
    next_obs[:, -1] = torch.where(done[:, -1], next_obs[:, -1], torch.randn(ROWS, 4, generator=gen))
    nxt = {
        "observation": next_obs,
        "reward": torch.randn(ROWS, T, 1, generator=gen),
        "done": done,
        "terminated": terminated,
        "truncated": truncated,
        "life_lost": torch.zeros(ROWS, T, 1, dtype=torch.bool),
    }
    root = {"observation": obs, "action": torch.randint(0, 2, (ROWS, T), generator=gen)}
    return TensorDict({**root, "next": TensorDict(nxt, [ROWS, T])}, [ROWS, T])


def test_compact_keeps_the_next_observations_at_the_ends_in_row_major_order():
    full = full_batch()
    small = compact(full, "observation")
    assert is_compact(small) and not is_compact(full)
    assert ("next", "observation") not in small.keys(True, True)
    need = ends(full["next", "done"].squeeze(-1))
    assert need[:, -1].all() and int(need.sum()) == ROWS + 2  # two ends before the last step
    assert torch.equal(small.get(NEXT_OBS_AT_ENDS), full["next", "observation"][need])
    at_ends = next_obs_at_ends(full, "observation")
    assert torch.equal(next_obs_at_ends(small, "observation"), at_ends)
    assert torch.equal(next_obs_at_ends(small, "observation"), at_ends)
    with pytest.raises(ValueError, match="at its ends only"):
        next_obs_at_ends(small, "observation", torch.ones(ROWS, T, dtype=torch.bool))
    # The side tensor stays whole through the batch's shape operations.
    assert torch.equal(small.reshape(-1).get(NEXT_OBS_AT_ENDS), small.get(NEXT_OBS_AT_ENDS))


def test_the_critics_next_values_are_the_same_from_either_layout():
    torch.manual_seed(0)
    critic = make_actor_critic("observation", (4,), 2).get_value_operator()
    full = full_batch()
    small = compact(full, "observation")
    with torch.no_grad():
        for batch in (full, small):
            batch.set("state_value", critic(batch.exclude("next").copy()).get("state_value"))
            fill_values(batch, critic)
    assert torch.equal(small["next", "state_value"], full["next", "state_value"])
    # Where an episode ended, the value is the final observation's, not the next root's.
    roll = torch.roll(full["state_value"], -1, dims=1)
    assert not torch.equal(full["next", "state_value"][0, 2], roll[0, 2])


def test_pqn_targets_are_the_same_from_either_layout():
    torch.manual_seed(0)
    pqn = PQN(
        PQNConfig(), obs_key="observation", obs_shape=(4,), num_actions=2,
        device=torch.device("cpu"),
    )  # fmt: skip
    full = full_batch(1)
    small = compact(full, "observation")
    for batch in (full, small):
        mark_boundaries(batch, life_loss=False)
    want = pqn.targets(full)
    assert torch.equal(pqn.targets(small), want)
    # The truncated row bootstraps from its final observation: another one changes the target.
    other = full.clone()
    other["next", "observation"][1, 4] += 1.0
    assert not torch.equal(pqn.targets(other)[1, 4], want[1, 4])
