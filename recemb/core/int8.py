"""An int8 linear layer whose output for a token depends on that token alone.

Why not torch's dynamically quantised linear layer: it quantises a whole call's activations with one scale, set by
the largest value of any row, pads included, so the same text embedded in another batch got another vector. Here
every row (token) gets its own scale, the product is an integer matmul (exact, whatever the other rows are) and
the dequantisation is elementwise: a row's output is a function of that row and the weights only.

The quantisation, defined once (``int8_linear_ref`` is its pure-torch statement):

- outlier inputs: the input channels k whose weight column is large, ``max|W[:, k]| > OUTLIER_RATIO`` times the
  median column's, stay in fp32 (a set O fixed by the weights, usually empty). One such column would otherwise
  set every output channel's scale and leave the other weights a few bits (the bundled model's first layer has
  one, and its channel is large in the activations too; docs/benchmarks.md);
- weights: int8 per output channel, symmetric, over the other columns: ``s_w[n] = max|W[n, ~O]| / 127``,
  ``q_w = round(W[:, ~O] / s_w)``;
- activations: int8 per row over the same columns: ``s_x[m] = max|x[m, ~O]| / 127``,
  ``q_x = clamp(round(x[:, ~O] / s_x), ±127)``;
- ``y = (q_x @ q_wᵀ) · s_x[:, None] · s_w[None, :] + x[:, O] @ W[:, O]ᵀ + b``, the integer product accumulated
  in int32, the outlier product in fp32 (in fixed-size calls, ``row_stable_linear``).

Scales and codes are computed in fp32 (an all-zero row gets scale 1 and codes 0). The integer product is
``torch._int_mm`` (int8 (M, K) @ (K, N) -> int32, on the CPU); where this torch cannot run
it (an older build, a shape it refuses) an fp64 matmul of the codes gives the same integers, only slower.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["FEW_ROWS", "INT8_BLOCK", "Int8Linear", "OUTLIER_RATIO", "ROW_BLOCK", "int8_linear_ref", "int_matmul",
           "outlier_columns", "quantize_rows", "row_stable_linear"]

QMAX = 127
# An input column whose largest weight is this many times the median column's stays fp32: above it the column
# alone would take two of the other weights' eight bits.
OUTLIER_RATIO = 4.0
# Rows per integer product in ``Int8Linear``: bounds its int32 temporary for long calls, while few, large calls
# keep the number of parallel regions low (each costs most on a busy machine). Any value gives the same results.
INT8_BLOCK = 1024
# Rows per call of ``row_stable_linear``: large enough for a float GEMM's full speed; the block of the products of a
# few rows per call (each row's last token) is FEW_ROWS.
ROW_BLOCK = 256
FEW_ROWS = 16


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 codes of each row of x (M, K) fp32 and the row's scale (M, 1) fp32."""
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    return torch.round(x / scale).clamp_(-QMAX, QMAX).to(torch.int8), scale


def int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (M, K) int8 @ b (K, N) int8 -> (M, N) int32, exactly."""
    try:
        return torch._int_mm(a, b)
    except (RuntimeError, AttributeError, NotImplementedError):
        # Products <= 127² summed over K: integers far below 2^53, so fp64 holds every partial sum exactly.
        return torch.mm(a.double(), b.double()).to(torch.int32)


def row_stable_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                      block: int = ROW_BLOCK, out: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` (x (..., in)) computed in calls of exactly ``block`` rows, the last one padded
    with zeros, into ``out`` when given: each row's result is then the same whatever the other rows of x are and
    however many there are.

    Why: a float GEMM picks its kernel, and how its threads split the sum, by the shape of the call, so a row's
    last bits depend on how many rows it was multiplied with (a text alone, or in a batch). In an int8 model the
    next layer's activation codes turn such last-bit differences into whole quantisation steps; with every float
    product of a mixer in fixed-size calls, a text's vector moves with its batch no more than an fp32 model's
    (on the torch backend not at all where the test machines measured it: the SSD scan keeps its own shapes and
    rounding apart from the batch's padding, ``recemb.kernels.ssd.combined.CHUNK_ALIGN``)."""
    x2 = x.reshape(-1, x.shape[-1])
    m, n = x2.shape[0], weight.shape[0]
    if out is None:
        out = torch.empty(*x.shape[:-1], n, dtype=torch.result_type(x2, weight), device=x.device)
    out2 = out.view(-1, n)
    whole = m - m % block
    for start in range(0, whole, block):
        _addmm(x2[start:start + block], weight, bias, out2[start:start + block])
    if whole < m:
        padded = x2.new_zeros(block, x2.shape[1])
        padded[: m - whole] = x2[whole:]
        out2[whole:] = _addmm(padded, weight, bias, out2.new_empty(block, n))[: m - whole]
    return out


def outlier_columns(weight: torch.Tensor, ratio: float = OUTLIER_RATIO) -> torch.Tensor:
    """The input channels (long, sorted) of ``weight`` (out, in) kept in fp32: max|W[:, k]| > ratio x median."""
    column = weight.detach().abs().amax(dim=0)
    return torch.nonzero(column > ratio * column.median()).flatten()


def _addmm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


class Int8Linear(nn.Module):
    """``nn.Linear``'s function with int8 weights (per output channel) and int8 activations (per row), outlier input
    columns in fp32 (module docstring); fp32 in, fp32 out. Built from a float layer by ``from_linear``; inference
    only (no gradients)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, outliers: int = 0):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        # The outlier input columns O and their fp32 weights W[:, O]; weight_int8[:, O] is 0.
        self.register_buffer("outlier_index", torch.zeros(outliers, dtype=torch.long))
        self.register_buffer("outlier_weight", torch.zeros(out_features, outliers))

    @classmethod
    def from_linear(cls, linear: nn.Linear, outlier_ratio: float = OUTLIER_RATIO) -> "Int8Linear":
        weight = linear.weight.detach().float()
        outliers = outlier_columns(weight, outlier_ratio)
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, outliers=len(outliers))
        with torch.no_grad():
            layer.outlier_index.copy_(outliers)
            layer.outlier_weight.copy_(weight[:, outliers])
            codes, scale = quantize_rows(weight.index_fill(1, outliers, 0.0))  # a weight row is an output channel
            layer.weight_int8.copy_(codes)
            layer.weight_scale.copy_(scale[:, 0])
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.detach().float())
        return layer.to(linear.weight.device)

    def dequantized_weight(self, outputs: slice = slice(None)) -> torch.Tensor:
        """The weight this layer multiplies by, (out, in) fp32 (of the ``outputs`` channels only): for the few rows
        computed at full precision."""
        weight = self.weight_int8[outputs].float() * self.weight_scale[outputs, None]
        return weight.index_copy_(1, self.outlier_index, self.outlier_weight[outputs])

    def float_rows(self, x: torch.Tensor, outputs: slice = slice(None)) -> torch.Tensor:
        """The ``outputs`` channels of this layer for a few rows x (..., in) whose activations stay fp32 (the
        weights are the int8 ones, dequantised), each row on its own (``row_stable_linear``): for the pooled last
        tokens, whose activations are the ones an outlier channel hurts most."""
        bias = None if self.bias is None else self.bias[outputs]
        return row_stable_linear(x.float(), self.dequantized_weight(outputs), bias, FEW_ROWS)

    def forward(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x (..., in) -> (..., out) fp32, into ``out`` when given (a contiguous buffer of that shape)."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).float()
        if out is None:
            out = torch.empty(*lead, self.out_features, dtype=torch.float32, device=x.device)
        out2 = out.view(-1, self.out_features)
        weight_t = self.weight_int8.t()  # (in, out), a view: _int_mm reads it transposed
        outliers = len(self.outlier_index) > 0
        for start in range(0, x2.shape[0], INT8_BLOCK):
            rows = slice(start, start + INT8_BLOCK)
            xb = x2[rows].index_fill(1, self.outlier_index, 0.0) if outliers else x2[rows]
            codes, scale = quantize_rows(xb)
            block = out2[rows].copy_(int_matmul(codes, weight_t))  # int32 -> fp32: exact below 2^24
            block.mul_(scale).mul_(self.weight_scale)
        if outliers:
            out2.add_(row_stable_linear(x2.index_select(1, self.outlier_index), self.outlier_weight))
        if self.bias is not None:
            out2.add_(self.bias)
        return out

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"fp32 inputs={self.outlier_index.tolist()}")


def int8_linear_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    outlier_ratio: float = OUTLIER_RATIO) -> torch.Tensor:
    """The definition of ``Int8Linear`` from the float layer (weight (out, in), bias (out,)), in pure torch: the
    outlier columns picked from the weight, codes and scales of the rest in fp32, the product of the codes in fp64
    (exact), the dequantisation and the outlier columns' product in fp64. Never run in production; ``Int8Linear``
    is tested against it."""
    def codes(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        amax = t.abs().amax(dim=-1, keepdim=True)
        scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
        return torch.clamp(torch.round(t / scale), -127, 127), scale

    weight, x2 = weight.detach().float(), x.detach().reshape(-1, x.shape[-1]).float()
    column = weight.abs().amax(dim=0)
    outlier = column > outlier_ratio * column.median()
    qx, sx = codes(torch.where(outlier, 0.0, x2))
    qw, sw = codes(torch.where(outlier, 0.0, weight))
    y = F.linear(qx.double(), qw.double()) * sx.double() * sw.double()[:, 0]
    y = y + F.linear(x2[:, outlier].double(), weight[:, outlier].double())
    if bias is not None:
        y = y + bias.double()
    return y.reshape(*x.shape[:-1], weight.shape[0])
