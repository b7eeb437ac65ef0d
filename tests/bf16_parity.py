"""One Breakout batch seen by a recipe learning in bf16 and by its plain loop in float64: the
helpers of the bf16 parity tests in test_a2c.py and test_ppo.py.

The tolerances, derived for bf16. bf16 keeps 8 significant bits, so rounding a value to it errs
by at most the unit roundoff u = 2^-8 relative. Under autocast each convolution and linear layer
rounds its two inputs (activation, weight) to bf16 and accumulates in fp32, whose own error
(2^-24 per add) is negligible here: each layer adds at most 2u relative error to its output,
and its backward pass (two more products in bf16: the input's and the weight's gradient) 2u to
each gradient. The Nature actor-critic has L = 5 such layers on the way from the frames to a
logit or a value (3 convolutions, the 512-unit layer, a head):

- forward: a logit or value errs by at most 2Lu = 10u ~ 0.04 of the sum of the magnitudes
  that make it up; a policy head's logit at init is ~0.01 and made of terms of that size, so
  the log-prob, computed from fp32 logits, errs by at most 2 x that: ``LOGP_TOL`` below, scaled
  by the largest |logit|. Computed in bf16 (the loss not in fp32), a log-prob of ~-1.4 is
  itself rounded to 2^-9 x 1.4 ~ 3e-3 absolute: ~20x more;
- backward: a layer's gradient carries the forward error of every layer and the backward
  error of every layer above it: at most 4Lu = 20u ~ 0.08 norm-wise over the layer's weight
  and bias (``GRAD_RTOL``), a first-order bound that ignores cancellation within a sum.

Both are upper bounds, first-order ones (cancellation within a sum can exceed them; measured
on the tests' batch: logits 2.8u, the first convolution's gradient 14u, the others 1u-13u).
Each test also checks that bf16 ran: fp32 products leave errors of ~2^-24, so a logit error
below u / 16 (``BF16_RAN``), or a first-convolution gradient within 4u of the plain loop's
(``TRUNK_RAN``), mean that the learner's forward pass ran without autocast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from reference.atari import ActorCritic
from tests import plain_parity

U = 2.0**-8
"""bf16's unit roundoff (8 significant bits)."""
LAYERS = 5
"""Products in bf16 between a frame and a logit or value: 3 convolutions, fc, the head."""
LOGIT_RTOL = 2 * LAYERS * U
"""Error bound of a logit or value, relative to its scale (module docstring)."""
GRAD_RTOL = 4 * LAYERS * U
"""Norm-wise error bound of a weight's gradient (module docstring)."""
BF16_RAN = U / 16
"""A logit error (relative to the logits' scale) below this: the networks did not compute in
bf16."""
TRUNK_RAN = 4 * U
"""A first-convolution gradient error below this: the learner's forward pass did not compute in
bf16. Its gradient goes through all 4L = 20 roundings, which add up to ~sqrt(20) u as a random
walk (measured: 14u); with the learner's forward pass in fp32, only the bootstrap values that
the critic computed in bf16 move it (measured: 1u in PPO, 0.1u in A2C)."""


def recipe_and_plain(
    make_agent: Callable[..., Any], cfg: Any, steps: int
) -> tuple[Any, TensorDictBase, TensorDictBase, ActorCritic, list[torch.nn.Parameter]]:
    """The recipe's agent for Breakout frames in fp32 (learning in ``cfg.precision``), a
    ``[4, steps]`` batch collected by its (fp32) policy, the same batch in float64 for the plain
    loop, the plain loop's twin of the actor-critic in float64 and the agent's parameters in
    the plain order."""
    spec = {**plain_parity.SPEC, "num_actions": plain_parity.num_actions()}
    agent = make_agent(cfg, spec, torch.device("cpu"))
    batch = plain_parity.breakout_batch(agent.collect_policy, envs=4, steps=steps)
    plain, ours = plain_parity.plain_twin(agent.model)
    wide = batch.apply(lambda x: x.double() if x.is_floating_point() else x)
    return agent, batch, wide, plain.double(), ours


def check_forward(agent: Any, batch: TensorDictBase, plain: ActorCritic) -> None:
    """The learner's forward pass (its autocast, trunk once, both heads: what its loss reads)
    against the float64 plain network on the batch's frames: fp32 logits and values within
    ``LOGIT_RTOL`` of their scale, log-probs within twice the logits' bound, and errors large
    enough to show that bf16 ran."""
    flat = batch.exclude("next").reshape(-1).copy()
    with torch.no_grad(), agent.precision.autocast():
        td = agent.trunk(flat)  # as the learner's objective: trunk once, then both heads
        agent.model.get_policy_head()[0](td)  # the logits module (public indexing)
        agent.model.get_value_head()(td)
    logits, value = td.get("logits"), td.get("state_value").squeeze(-1)
    assert logits.dtype == value.dtype == torch.float32, (
        "network outputs must reach the loss in fp32"
    )
    with torch.no_grad():
        ref_logits, ref_value = plain(flat.get("pixels"))
    action = flat.get("action")
    logp = torch.distributions.Categorical(logits=logits).log_prob(action)
    ref_logp = torch.distributions.Categorical(logits=ref_logits).log_prob(action)
    logit_err = (logits.double() - ref_logits).abs().max()
    scale = ref_logits.abs().max()
    assert logit_err <= LOGIT_RTOL * scale, (logit_err, scale)
    assert logit_err >= BF16_RAN * scale, f"logits within {logit_err:.2e} of float64: no bf16"
    value_err = (value.double() - ref_value).abs().max()
    assert value_err <= LOGIT_RTOL * ref_value.abs().max(), value_err
    logp_err = (logp.double() - ref_logp).abs().max()
    assert logp_err <= 2 * LOGIT_RTOL * scale, f"log-prob error {logp_err:.2e}, logits {scale:.2e}"


def gradient_errors(ours: list[torch.nn.Parameter], plain: ActorCritic) -> list[float]:
    """Per layer (weight and bias together, in the plain order), ||g - g_plain|| / ||g_plain||
    of the gradients. Per layer, not per tensor: a bias gradient can cancel to almost nothing
    (PPO's policy bias: 2e-5 where its weight's is 0.1), and its error is bounded relative to
    the terms of the sum, which the layer's weight gradient has too."""
    pairs = zip(ours, plain.parameters(), strict=True)
    grads = [(mine.grad.double().reshape(-1), ref.grad.reshape(-1)) for mine, ref in pairs]
    errors = []
    for (w, w_ref), (b, b_ref) in zip(grads[::2], grads[1::2], strict=True):
        diff = torch.cat([w - w_ref, b - b_ref]).norm()
        errors.append(float(diff / torch.cat([w_ref, b_ref]).norm()))
    return errors
