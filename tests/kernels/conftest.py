"""Shared fixtures for the kernel tests: the relative-error check, NaN-filled buffers, random SSD inputs.

The Triton kernels are tested on CPU tensors under the Triton interpreter; Triton decides at ``@triton.jit``
time whether to interpret, so ``TRITON_INTERPRET`` is set here, before any test module imports a kernel.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import functools  # noqa: E402
from typing import Callable, NamedTuple  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from tests import utils  # noqa: E402


@pytest.fixture
def assert_close() -> Callable[[str, torch.Tensor, torch.Tensor, float], None]:
    """``assert_close(name, ref, tri, tol)``: finite, same shape, and max-abs error <= tol * max |ref|
    (``tests.utils.assert_close`` with ``scale="max"``)."""
    return functools.partial(utils.assert_close, scale="max")


@pytest.fixture
def nan_filled_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Floating-point buffers from torch.empty / empty_like / new_empty start as NaN, so any element a kernel
    fails to write (a masked tail, a skipped tile) makes the comparison fail instead of passing by luck."""
    empty, empty_like, new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty

    def poison(t: torch.Tensor) -> torch.Tensor:
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison(empty_like(*a, **k)))
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **k: poison(new_empty(self, *a, **k)))


class SSDInputs(NamedTuple):
    x: torch.Tensor  # (b, l, h, p)
    dt: torch.Tensor  # (b, l, h) raw steps
    A: torch.Tensor  # (h,)
    B: torch.Tensor  # (b, l, g, n)
    C: torch.Tensor  # (b, l, g, n)
    D: torch.Tensor  # (h,)
    z: torch.Tensor  # (b, l, h, p)
    dt_bias: torch.Tensor  # (h,)
    initial_states: torch.Tensor  # (b, h, p, n)


def _make_ssd_inputs(b: int, l: int, h: int, p: int, g: int, n: int, seed: int = 0) -> SSDInputs:
    """fp32 CPU inputs with Mamba2-like magnitudes: A in [-2, -0.5], dt about 0.1 to 1 after softplus."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    return SSDInputs(
        x=randn(b, l, h, p),
        dt=randn(b, l, h) - 1.0,
        A=-(0.5 + 1.5 * torch.rand(h, generator=gen)),
        B=randn(b, l, g, n),
        C=randn(b, l, g, n),
        D=randn(h),
        z=randn(b, l, h, p),
        dt_bias=0.5 * randn(h),
        initial_states=randn(b, h, p, n),
    )


@pytest.fixture
def make_ssd_inputs() -> Callable[..., SSDInputs]:
    """``make_ssd_inputs(b, l, h, p, g, n, seed=0)`` -> SSDInputs (fp32, CPU, seeded)."""
    return _make_ssd_inputs
