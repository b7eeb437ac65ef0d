"""Float64 for the tests that compare two implementations of the same computation.

In float32 two implementations order their reductions differently, and so do CPU kernels
(AVX2, AVX-512, ARM, oneDNN's ISA) and thread counts: a tolerance tight enough to catch a
wrong coefficient after a few optimizer steps fails on some host. In float64 the same
differences are ~1e-15, so the tolerances below hold on every host and are still orders of
magnitude below what a wrong term, sign or coefficient moves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

TIGHT = dict(rtol=1e-10, atol=1e-12)
"""Float64 tolerance for one pass through a small network (a loss, its gradients)."""


@contextlib.contextmanager
def float64() -> Iterator[None]:
    """Networks, buffers and loss constants built inside are float64 (default dtype, restored
    on exit)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
