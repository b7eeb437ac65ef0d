"""Export a run's greedy policy as a standalone model: observations in, actions out.

    python -m accelrl.tools.export RUN_DIR policy.pt2     # torch.export program (torch.export.load)
    python -m accelrl.tools.export RUN_DIR policy.onnx    # ONNX (needs onnx and onnxscript)

The exported model takes a batch of observations as the env writes them (``uint8`` frames
``[B, 4, 84, 84]`` for Atari, ``uint8`` grids ``[B, C, 10, 10]`` for MinAtar, ``float32``
``[B, obs_dim]`` otherwise; any batch size) and returns
``int64`` actions ``[B]``: the actor's most likely action, or the action with the highest
(expected, for C51) Q-value. The agent is loaded as ``accelrl.tools.play`` loads it (config.json,
newest good checkpoint or ``--checkpoint``, safe load).

A recurrent agent (``--model.recurrent``) exports one step with its state as inputs and
outputs: ``(obs, *state) -> (action, *state_next)``, each part of the state ``float32``
``[B, 1, lstm_hidden]``, named by its core (``accelrl.recurrent``; the LSTM's
``(obs, h, c) -> (action, h_next, c_next)``). The caller carries the next state to the next
step of the same simulator and passes zeros at an episode's first step (the exported model has
no episode start input: zeroing the state is the reset).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import torch
import tyro
from torch import nn

from accelrl.agent import Agent
from accelrl.recurrent import core_for_state
from accelrl.tools.play import PlayConfig, PlayError, load_agent, run_tool


def greedy_module(agent: Agent) -> nn.Module:
    """A plain ``nn.Module`` (observations in, actions out; a recurrent agent's state in and
    out too) with the agent's weights (shared, not copied): the agent contract's
    ``export_module``."""
    return agent.export_module()


def example_input(run_cfg: Any, batch: int = 2) -> torch.Tensor:
    from accelrl.envs import describe_env

    spec = describe_env(run_cfg.env)
    shape = (batch, *spec["obs_shape"])
    if len(spec["obs_shape"]) == 3:  # frames and grids are uint8 (accelrl.envs)
        return torch.randint(0, 256, shape, dtype=torch.uint8)
    return torch.randn(shape)


def example_inputs(agent: Agent, run_cfg: Any, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """What ``agent.export_module()`` is traced on: observations, and a recurrent agent's state
    (``initial_state``, in its core's order of ``state_keys``)."""
    state = agent.initial_state(batch)
    obs = example_input(run_cfg, batch)
    if state is None:
        return (obs,)
    return (obs, *(state[key] for key in core_for_state(state).state_keys))


def save_module(
    module: nn.Module, example: torch.Tensor | tuple[torch.Tensor, ...], out: Path
) -> None:
    """Write ``module`` (traced on ``example``: the observations, then a recurrent module's
    state; any batch size, dimension 0 of every input) as .pt2 or .onnx."""
    inputs = example if isinstance(example, tuple) else (example,)
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # A torch RNN (nn.LSTM) re-reads its weights into ``_flat_weights`` when torch.export
        # swaps its parameters in; the program holds them as parameters all the same
        # (lstm.weight_* in its state_dict), so this warning says nothing about the file.
        warnings.filterwarnings("ignore", r"The tensor attributes self\.\w+\._flat_weights")
        trace(module, inputs, out)


def trace(module: nn.Module, inputs: tuple[torch.Tensor, ...], out: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    dynamic = tuple({0: batch} for _ in inputs)
    if out.suffix == ".pt2":
        program = torch.export.export(module, inputs, dynamic_shapes=dynamic)
        torch.export.save(program, out)
        return
    try:
        import onnxscript  # noqa: F401  (torch's ONNX exporter needs it)
    except ImportError:
        raise PlayError(
            "ONNX export needs onnx and onnxscript: pip install onnx onnxscript "
            "(or write a .pt2 file)"
        ) from None
    # A recurrent step names its state inputs (``accelrl.recurrent``); the outputs are NAME_next.
    state = getattr(module, "state_names", ())
    torch.onnx.export(
        module,
        inputs,
        str(out),
        input_names=["obs", *state],
        output_names=["action", *(f"{name}_next" for name in state)],
        dynamic_shapes=dynamic,
        dynamo=True,
    )


@dataclass
class ExportConfig:
    """Export the greedy policy of a run to a .pt2 (torch.export) or .onnx file."""

    run_dir: Annotated[str, tyro.conf.Positional]
    """Run folder written by a recipe."""
    output: Annotated[str, tyro.conf.Positional]
    """File to write: NAME.pt2 or NAME.onnx."""
    checkpoint: str | None = None
    """Checkpoint file to export (default: the newest loadable one)."""
    trust_checkpoint: bool = False
    """Read a checkpoint that the safe load refuses (it can run code stored in the file)."""


def export(cfg: ExportConfig) -> Path:
    """Write the greedy policy to ``cfg.output``; returns the path."""
    out = Path(cfg.output)
    if out.suffix not in (".pt2", ".onnx"):
        raise PlayError(f"{out}: the output must end in .pt2 (torch.export) or .onnx")
    play_cfg = PlayConfig(
        run_dir=cfg.run_dir,
        checkpoint=cfg.checkpoint,
        trust_checkpoint=cfg.trust_checkpoint,
        device="cpu",
    )
    loaded = load_agent(play_cfg)
    save_module(greedy_module(loaded.agent), example_inputs(loaded.agent, loaded.run_cfg), out)
    print(f"exported the greedy policy of {loaded.checkpoint} to {out}")
    return out


def main(argv: list[str] | None = None) -> None:
    run_tool("accelrl.tools.export", ExportConfig, export, argv, __doc__)


if __name__ == "__main__":
    main()
