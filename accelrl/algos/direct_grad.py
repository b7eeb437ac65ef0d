"""A Q-network's gradient without autograd: the forward pass keeps what each layer's backward
reads, and the backward pass calls the kernels autograd would call, layer by layer.

On a small Q-network most of a DQN gradient step is not arithmetic: autograd records a graph
node per operation, the module calls dispatch through hooks, and the backward engine walks the
graph (docs/results/speed.md#the-dqn-update-next-to-the-plain-loops). A plain Q-network is a
chain (``Linear``, ``Conv2d``, ``ReLU``, ``Flatten``, with the observation scaled into it), whose
gradient is a fixed sequence of matrix products and convolution backwards. ``ChainGradient``
runs that sequence directly: the same kernels (``addmm``/``mm``, ``convolution`` and
``convolution_backward``, ``threshold_backward``) on the same operands, so the gradients equal
autograd's (``tests/test_dqn_math.py`` holds them together in float64 and float32).

Networks with a dueling head, C51's atoms or LayerNorm are not chains of these layers:
``ChainGradient.of`` returns None for them and the learner keeps autograd.
"""

from __future__ import annotations

import torch
from torch import nn

from accelrl.models import QNetwork, as_float

_LAYERS = (nn.Linear, nn.Conv2d, nn.ReLU, nn.Flatten)


def _leaves(module: nn.Module) -> list[nn.Module] | None:
    """``module``'s layers in the order it runs them, or None when it is not a chain of
    ``_LAYERS`` (``nn.Sequential`` and the MLP's ``net`` are walked into)."""
    if isinstance(module, _LAYERS):
        return [module]
    if isinstance(module, nn.Sequential):
        out: list[nn.Module] = []
        for child in module:
            leaves = _leaves(child)
            if leaves is None:
                return None
            out += leaves
        return out
    net = getattr(module, "net", None)  # accelrl.models.MLP: its forward is ``self.net(x)``
    if isinstance(net, nn.Sequential) and list(module.children()) == [net]:
        return _leaves(net)
    return None


class ChainGradient:
    """Forward and backward of a ``QNetwork`` that is a chain of layers (no dueling head,
    one atom, no LayerNorm), on plain tensors.

    ``forward(obs)`` returns the Q-values ``[B, actions]`` (what ``net(obs)`` returns, for a
    batch ``[B, *obs_shape]``) and what the backward reads; ``backward(grad_q, saved)`` sets
    each parameter's ``.grad`` to the gradient of a loss whose gradient with respect to the
    Q-values is ``grad_q``.
    """

    def __init__(self, net: QNetwork, layers: list[nn.Module]) -> None:
        self.net, self.layers = net, layers

    @classmethod
    def of(cls, net: nn.Module) -> ChainGradient | None:
        """A ``ChainGradient`` for ``net``, or None when it is not such a chain."""
        if not isinstance(net, QNetwork) or net.value is not None or net.atoms != 1:
            return None
        features, head = _leaves(net.features), _leaves(net.advantage)
        if features is None or head is None:
            return None
        layers = features + head
        if not isinstance(layers[-1], nn.Linear):
            return None
        # Each parameter exactly once, in the layers' order: the chain is the whole network.
        chained = [p for layer in layers for p in layer.parameters()]
        if len(chained) != len(list(net.parameters())):
            return None
        return cls(net, layers)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(Q-values ``[B, actions]``, the tensors each layer's backward reads)."""
        net = self.net
        if net.input_scale is not None:
            x = as_float(obs, net.input_scale, self.layers[-1].weight.dtype)
            x = x.reshape(-1, *x.shape[-3:])
        else:
            x = obs.reshape(-1, obs.shape[-1])
        saved: list[torch.Tensor] = []
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                saved.append(x)  # the input: both products' operand
                x = torch.addmm(layer.bias, x, layer.weight.t())
            elif isinstance(layer, nn.Conv2d):
                saved.append(x)
                x = torch.conv2d(
                    x, layer.weight, layer.bias, layer.stride, layer.padding, layer.dilation,
                    layer.groups,
                )  # fmt: skip
            elif isinstance(layer, nn.ReLU):
                x = torch.relu(x)
                saved.append(x)  # the output: ReLU's backward masks by it
            else:  # Flatten
                saved.append(x)  # the input, for its shape
                x = x.flatten(1)
        return x, saved

    def backward(self, grad: torch.Tensor, saved: list[torch.Tensor]) -> None:
        """Set every parameter's ``.grad`` from ``grad`` (d loss / d Q-values ``[B, actions]``)
        and ``saved`` (``forward``'s), as autograd's backward through the chain sets them."""
        for i in range(len(self.layers) - 1, -1, -1):
            layer, kept = self.layers[i], saved[i]
            first = i == 0  # the observation needs no gradient
            if isinstance(layer, nn.Linear):
                # AddmmBackward0 of addmm(bias, x, W^T): d bias = the batch sum; W^T is
                # column-major, so autograd takes d W^T = (g^T x)^T, and W's gradient is g^T x.
                layer.bias.grad = grad.sum(0)
                layer.weight.grad = grad.t().mm(kept)
                if not first:
                    grad = grad.mm(layer.weight)
            elif isinstance(layer, nn.Conv2d):
                d_input, d_weight, d_bias = torch.ops.aten.convolution_backward(
                    grad, kept, layer.weight, [layer.out_channels], layer.stride,
                    layer.padding, layer.dilation, False, [0, 0], layer.groups,
                    [not first, True, True],
                )  # fmt: skip
                layer.weight.grad, layer.bias.grad = d_weight, d_bias
                grad = d_input
            elif isinstance(layer, nn.ReLU):
                grad = torch.ops.aten.threshold_backward(grad, kept, 0)
            else:  # Flatten
                grad = grad.reshape(kept.shape)
