"""Helpers shared by the Triton kernels of ``recemb.kernels``.

Only the Triton modules import this file (lazily, through the dispatchers), so importing Triton at the top
here keeps Triton optional for ``import recemb.kernels``.

The same kernels run on CUDA and, for testing, on CPU tensors under the Triton interpreter
(``TRITON_INTERPRET=1`` set before Triton is imported). Everything that differs between the two lives here:

- autotuning: a list of configs on a GPU, a single large-block config under the interpreter (which runs
  every program instance in Python, so fewer, larger blocks are much faster, and benchmarking is pointless);
- ``tl.dot`` operands: the interpreter multiplies bf16 blocks as their raw uint16 bits, so bf16 operands are
  upcast to fp32 there; on a GPU they stay bf16 for the tensor cores;
- device selection: ``torch.cuda.device`` only for CUDA tensors.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence, TypeVar

import torch
import triton
import triton.language as tl

from recemb.kernels._backend import triton_interpreter_enabled

F = TypeVar("F", bound=Callable)

next_power_of_2 = triton.next_power_of_2
cdiv = triton.cdiv

# fp32 inputs are multiplied at full fp32 precision: the embeddings must agree with the torch backend to about
# 1e-5, which TF32 (10-bit mantissa) does not meet. bf16/fp16 inputs use the tensor cores natively.
FP32_DOT_PRECISION = "ieee"

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def is_interpreter() -> bool:
    """True when Triton runs kernels in its Python interpreter (``TRITON_INTERPRET=1`` before import)."""
    knobs = getattr(triton, "knobs", None)  # Triton >= 3.4 reads the variable through its knobs
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return triton_interpreter_enabled()


def pick_configs(
    gpu_configs: Sequence[triton.Config], interpreter_config: triton.Config
) -> list[triton.Config]:
    """Autotuning candidates: ``gpu_configs`` on a GPU, only ``interpreter_config`` in the interpreter."""
    return [interpreter_config] if is_interpreter() else list(gpu_configs)


def matmul_configs(tiles: Sequence[tuple[int, int, int, int, int]]) -> list[triton.Config]:
    """Autotuning candidates for the matmul-shaped stages: ``(BLOCK_SIZE_M, N, K, num_stages, num_warps)`` per tile
    on a GPU, one 64×64×64 tile in the interpreter."""
    return pick_configs(
        [
            triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk}, num_stages=s, num_warps=w)
            for bm, bn, bk, s, w in tiles
        ],
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64}),
    )


def dot_config(dtype: torch.dtype) -> tuple[tl.dtype, str]:
    """``(DOT_DTYPE, DOT_PRECISION)`` constexprs for ``tl.dot`` on blocks made from inputs of ``dtype``."""
    if dtype not in _TL_DTYPES:
        raise TypeError(f"the Triton kernels take fp32, bf16 or fp16 inputs, got {dtype}")
    if dtype == torch.float32 or (dtype == torch.bfloat16 and is_interpreter()):
        return tl.float32, FP32_DOT_PRECISION
    return _TL_DTYPES[dtype], "tf32"  # the precision argument only matters for fp32 operands


def check_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} has dtype {t.dtype}; the Triton kernels take fp32, bf16 or fp16 "
            '(use backend="torch" for other dtypes)'
        )


def last_dim_contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """Contiguity guard: kernels take any strides but want a unit last-dim stride for coalesced loads."""
    if t is None or t.stride(-1) == 1 or t.shape[-1] == 1:
        return t
    return t.contiguous()


def same_device(*tensors: torch.Tensor | None) -> None:
    devices = {t.device for t in tensors if t is not None}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")


MAX_GRID_YZ = 65535  # CUDA limit on the second and third grid dimensions


def check_grid_yz(t: torch.Tensor, **dims: int) -> None:
    """Raise a clear error when a grid's y/z size (e.g. ``batch_x_nchunks=b * c``) exceeds CUDA's limit."""
    if not t.is_cuda:
        return  # the interpreter has no such limit
    for name, value in dims.items():
        if value > MAX_GRID_YZ:
            raise ValueError(
                f"{name} = {value} exceeds the CUDA grid limit {MAX_GRID_YZ}; split the batch or the "
                "sequence (vertical chunks) into smaller calls"
            )


def device_guard(t: torch.Tensor) -> contextlib.AbstractContextManager:
    """``torch.cuda.device(t.device)`` for CUDA tensors (launch on the tensor's GPU); a no-op otherwise."""
    if t.is_cuda:
        return torch.cuda.device(t.device.index)
    return contextlib.nullcontext()


def compiler_disable(fn: F) -> F:
    """``torch.compiler.disable`` when available: Triton launches are opaque to dynamo, so keep it out."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:
        return fn
    return disable(fn)


@triton.jit
def softplus(x):
    """``torch.nn.functional.softplus`` with threshold 20, accurate for very negative x as well.

    ``log1p(e)`` for small ``e = exp(x)`` is computed as ``log(u) * e / (u - 1)`` with ``u = 1 + e``
    (Goldberg's trick), which stays accurate where ``log(1 + e)`` would round to 0.
    """
    e = tl.exp(tl.minimum(x, 20.0))
    u = 1.0 + e
    denom = tl.where(u == 1.0, 1.0, u - 1.0)
    log1p_e = tl.where(u == 1.0, e, tl.log(u) * (e / denom))
    return tl.where(x > 20.0, x, log1p_e)
