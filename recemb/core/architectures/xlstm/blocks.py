"""xLSTM's layers: the norms, the mLSTM layer, the feed-forward and the block (transformers' ``xLSTMModel``
parameter names).

Shape glossary (as ``recemb.kernels.mlstm``): b batch, l tokens in this (vertical) chunk, d model width,
h heads, dk = qk_dim / h query/key head dim, dv = v_dim / h value head dim.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from recemb.core.architectures.xlstm.config import XLSTMConfig
from recemb.core.architectures.xlstm.state import XLSTMLayerState
from recemb.kernels.mlstm import mlstm

__all__ = ["MLSTMLayer", "XLSTMBlock", "XLSTMFeedForward", "XLSTMMultiHeadLayerNorm", "XLSTMRMSNorm"]


# Both norms reduce in at least fp32 when forced (norm_reduction_force_float32, the default). transformers and the
# xlstm package call x.float(), which also drops an fp64 model's activations to fp32; here fp64 stays fp64.
class XLSTMRMSNorm(nn.Module):
    """RMSNorm over the last dim; the reduction in fp32 (when forced), cast back, then weight (and bias)."""

    def __init__(self, d: int, eps: float = 1e-6, bias: bool = False, force_float32: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None
        self.eps, self.force_float32 = eps, force_float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        xf = x.to(torch.promote_types(in_dtype, torch.float32)) if self.force_float32 else x
        x = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(in_dtype) * self.weight
        return x if self.bias is None else x + self.bias


class XLSTMMultiHeadLayerNorm(nn.Module):
    """LayerNorm (no affine) over each head's dv features, then one weight (and bias) over all h·dv."""

    def __init__(self, nheads: int, head_dim: int, eps: float = 1e-6, bias: bool = False,
                 force_float32: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(nheads * head_dim))
        self.bias = nn.Parameter(torch.zeros(nheads * head_dim)) if bias else None
        self.eps, self.force_float32 = eps, force_float32

    def forward(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """x (b, l, h, dv) -> (b, l, h·dv) in ``out_dtype``."""
        xf = x.to(torch.promote_types(x.dtype, torch.float32)) if self.force_float32 else x
        mean = xf.mean(-1, keepdim=True)
        var = xf.var(-1, keepdim=True, unbiased=False)
        y = ((xf - mean) * torch.rsqrt(var + self.eps)).to(out_dtype).flatten(-2) * self.weight
        return y if self.bias is None else y + self.bias


class MLSTMLayer(nn.Module):
    """q, k, v, o, i, f projections -> soft-capped gates -> mLSTM cell (carried state) -> per-head LayerNorm
    -> times sigmoid(o) -> out_proj. Parameter names equal transformers' ``xLSTMLayer`` (weight_mode single)."""

    def __init__(self, config: XLSTMConfig):
        super().__init__()
        c = config
        self.config = c
        d, bias = c.hidden_size, c.use_bias
        self.q = nn.Linear(d, c.qk_dim, bias=bias)
        self.k = nn.Linear(d, c.qk_dim, bias=bias)
        self.v = nn.Linear(d, c.v_dim, bias=bias)
        self.ogate_preact = nn.Linear(d, c.v_dim, bias=bias)
        self.igate_preact = nn.Linear(d, c.num_heads, bias=True)
        self.fgate_preact = nn.Linear(d, c.num_heads, bias=True)
        self.multihead_norm = XLSTMMultiHeadLayerNorm(c.num_heads, c.v_head_dim, c.norm_eps, bias,
                                                      c.norm_reduction_force_float32)
        self.out_proj = nn.Linear(c.v_dim, d, bias=bias)

    def forward(self, x: torch.Tensor, state: XLSTMLayerState | None, chunk_size: int, backend: str = "torch"
                ) -> tuple[torch.Tensor, XLSTMLayerState]:
        """x (b, l, d) normed input; state before token 0 of x (None: start of the sequence); backend: the mLSTM's
        (``kernels.mlstm.mlstm``).
        Return (b, l, d) in x.dtype and the state after the last token."""
        b, l, _ = x.shape
        c = self.config
        nh = c.num_heads
        cap = c.gate_soft_cap
        i, f = self.igate_preact(x), self.fgate_preact(x)  # (b, l, h)
        if cap is not None:
            i, f = cap * torch.tanh(i / cap), cap * torch.tanh(f / cap)
        y, (C, n, m) = mlstm(
            self.q(x).view(b, l, nh, c.qk_head_dim), self.k(x).view(b, l, nh, c.qk_head_dim),
            self.v(x).view(b, l, nh, c.v_head_dim), i, f, chunk_size=chunk_size,
            initial_state=None if state is None else tuple(state), eps=c.eps, backend=backend,
        )  # y (b, l, h, dv) in fp32 (fp64 for an fp64 model)
        y = self.multihead_norm(y, x.dtype)  # (b, l, v_dim)
        return self.out_proj(torch.sigmoid(self.ogate_preact(x)) * y), XLSTMLayerState(C, n, m)


class XLSTMFeedForward(nn.Module):
    """proj_down(silu(proj_up_gate(x)) * proj_up(x))."""

    def __init__(self, config: XLSTMConfig):
        super().__init__()
        d, up, bias = config.hidden_size, config.up_proj_dim, config.use_bias
        self.proj_up_gate = nn.Linear(d, up, bias=bias)
        self.proj_up = nn.Linear(d, up, bias=bias)
        self.proj_down = nn.Linear(up, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_down(F.silu(self.proj_up_gate(x)) * self.proj_up(x))


class XLSTMBlock(nn.Module):
    """x + mLSTM(RMSNorm(x)), then x + FFN(RMSNorm(x)); the residual stream in the model's dtype."""

    def __init__(self, config: XLSTMConfig):
        super().__init__()
        c = config
        self.norm_mlstm = XLSTMRMSNorm(c.hidden_size, c.norm_eps, c.use_bias, c.norm_reduction_force_float32)
        self.mlstm_layer = MLSTMLayer(c)
        self.norm_ffn = XLSTMRMSNorm(c.hidden_size, c.norm_eps, c.use_bias, c.norm_reduction_force_float32)
        self.ffn = XLSTMFeedForward(c)

    def forward(self, x: torch.Tensor, state: XLSTMLayerState | None, chunk_size: int, backend: str = "torch"
                ) -> tuple[torch.Tensor, XLSTMLayerState]:
        out, state = self.mlstm_layer(self.norm_mlstm(x), state, chunk_size, backend)
        x = x + out
        return x + self.ffn(self.norm_ffn(x)), state
