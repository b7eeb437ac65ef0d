"""Recurrent cores: what an actor-critic's memory between its trunk and its heads is made of, in
one table (``CORES``, keyed by ``--model.recurrent``).

Each core names its TorchRL module, the TensorDict keys of its state and the plain step that
``accelrl.tools.export`` traces; everything else (the learner's sequences, the env that carries the
state, the collectors, evaluation, play, export) asks this module or reads the keys of
``Agent.initial_state``, and names no core. A new core is one entry here.

The state of ``num_envs`` simulators is one tensor per key, ``[num_envs, layers, hidden]``
(batch first): zeros at an episode's first step (``zero_state``), written for the next step
under ``"next"`` by the module, carried to the next step's input by the env's ``step_mdp``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.modules import GRUModule, LSTMModule


class LSTMGreedyStep(nn.Module):
    """One step of an LSTM actor-critic: trunk, LSTM, policy head, argmax of the logits.

    ``(obs [B, ...], h [B, layers, hidden], c [B, layers, hidden]) -> (action [B], h, c)``: the
    state batch first, as ``zero_state`` lays it out. The caller carries the returned state to
    the next step and zeros it where an episode starts (there is no ``is_init`` input)."""

    state_names = ("h", "c")
    """The state's input names in an exported file; the outputs are ``NAME_next``."""

    def __init__(self, trunk: nn.Module, lstm: nn.LSTM, head: nn.Module) -> None:
        super().__init__()
        self.trunk, self.lstm, self.head = trunk, lstm, head

    def forward(
        self, obs: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self.trunk(obs).unsqueeze(1)  # [B, 1 step, features]; the LSTM is batch first
        state = (h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous())
        y, (h, c) = self.lstm(features, state)
        return self.head(y[:, 0]).argmax(-1), h.transpose(0, 1), c.transpose(0, 1)


class GRUGreedyStep(nn.Module):
    """One step of a GRU actor-critic: trunk, GRU, policy head, argmax of the logits.

    ``(obs [B, ...], h [B, layers, hidden]) -> (action [B], h)``, carried and zeroed by the
    caller as ``LSTMGreedyStep``'s state is."""

    state_names = ("h",)
    """The state's input name in an exported file; the output is ``h_next``."""

    def __init__(self, trunk: nn.Module, gru: nn.GRU, head: nn.Module) -> None:
        super().__init__()
        self.trunk, self.gru, self.head = trunk, gru, head

    def forward(self, obs: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(obs).unsqueeze(1)  # [B, 1 step, features]; the GRU is batch first
        y, h = self.gru(features, h.transpose(0, 1).contiguous())
        return self.head(y[:, 0]).argmax(-1), h.transpose(0, 1)


@dataclass(frozen=True)
class RecurrentCore:
    """One kind of recurrent core."""

    name: str
    """Its ``--model.recurrent`` value."""
    module_class: type[TensorDictModuleBase]
    """TorchRL's module for it (``LSTMModule``, ``GRUModule``): one step at a time by default,
    whole ``[B, T]`` sequences cut at ``is_init`` under ``set_recurrent_mode(True)``."""
    rnn_name: str
    """The attribute of ``module_class`` that holds the torch RNN (``nn.LSTM``, ``nn.GRU``)."""
    state_keys: tuple[str, ...]
    """The state's TensorDict keys, in the order of the RNN's state tuple and of the exported
    step's inputs. The LSTM's are those of the checkpoints and exports written before this
    table."""
    step: Callable[[nn.Module, nn.Module, nn.Module], nn.Module]
    """``step(trunk, rnn, head)``: the plain greedy step ``accelrl.tools.export`` traces,
    ``(obs, *state) -> (action, *next_state)``, with a ``state_names`` attribute."""

    def build(self, input_size: int, hidden_size: int) -> TensorDictModuleBase:
        """The module: reads ``features``, the state keys and ``is_init``; writes ``hidden`` and
        the next state under ``"next"``. Orthogonal weights and zero biases, as CleanRL's
        recurrent agents."""
        module = self.module_class(
            input_size=input_size,
            hidden_size=hidden_size,
            in_keys=["features", *self.state_keys, "is_init"],
            out_keys=["hidden", *(("next", key) for key in self.state_keys)],
            recurrent_backend="pad",
        )
        for name, param in self.rnn(module).named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)
        return module

    def rnn(self, module: TensorDictModuleBase) -> nn.RNNBase:
        """The torch RNN inside ``module`` (its parameters, layers and width)."""
        return getattr(module, self.rnn_name)


LSTM = RecurrentCore(
    name="lstm",
    module_class=LSTMModule,
    rnn_name="lstm",
    state_keys=("recurrent_state_h", "recurrent_state_c"),
    step=LSTMGreedyStep,
)

GRU = RecurrentCore(
    name="gru",
    module_class=GRUModule,
    rnn_name="gru",
    state_keys=("recurrent_state",),
    step=GRUGreedyStep,
)

CORES: dict[str, RecurrentCore] = {core.name: core for core in (LSTM, GRU)}
"""Every recurrent core by its ``--model.recurrent`` name (``accelrl.config.ModelConfig``
lists the same names for the flag's choices)."""


def core_of(module: nn.Module) -> RecurrentCore | None:
    """The core that ``module`` is an instance of, or None."""
    return next((c for c in CORES.values() if isinstance(module, c.module_class)), None)


def core_for_state(state: TensorDictBase) -> RecurrentCore:
    """The core whose state ``state`` holds (``Agent.initial_state``: exactly its keys)."""
    keys = set(state.keys())
    for core in CORES.values():
        if keys == set(core.state_keys):
            return core
    raise ValueError(f"no recurrent core has the state keys {sorted(keys)}")


def zero_state(module: TensorDictModuleBase, num_envs: int) -> TensorDict:
    """``module``'s state keys as zeros for ``num_envs`` simulators (an episode's first state),
    ``[num_envs, layers, hidden]`` each, on the RNN's device and in its dtype."""
    core = core_of(module)
    rnn = core.rnn(module)
    weight = rnn.weight_hh_l0
    zeros = torch.zeros(
        num_envs, rnn.num_layers, rnn.hidden_size, dtype=weight.dtype, device=weight.device
    )
    return TensorDict(
        {key: zeros.clone() for key in core.state_keys}, [num_envs], device=weight.device
    )


def greedy_step(trunk: nn.Module, module: TensorDictModuleBase, head: nn.Module) -> nn.Module:
    """``module``'s core's plain greedy step over ``trunk``, its RNN and the policy ``head``
    (the same parameters, not copies)."""
    core = core_of(module)
    return core.step(trunk, core.rnn(module), head)


__all__ = [
    "CORES",
    "GRU",
    "GRUGreedyStep",
    "LSTM",
    "LSTMGreedyStep",
    "RecurrentCore",
    "core_for_state",
    "core_of",
    "greedy_step",
    "zero_state",
]
