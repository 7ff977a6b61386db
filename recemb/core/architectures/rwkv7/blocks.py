"""RWKV-7's layers: LoRA, the time mix, the channel mix and the block (flash-linear-attention's parameter
names).

Shape glossary: b batch, l tokens in this (vertical) chunk, d model width, h heads, n head size (d = h n),
I the channel mix's width.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from recemb.core.architectures.rwkv7.config import RWKV7Config
from recemb.core.architectures.rwkv7.state import RWKV7LayerState
from recemb.kernels.rwkv7 import rwkv7

__all__ = ["DECAY_SCALE", "LoRA", "MIX_NAMES", "RWKV7Block", "RWKV7ChannelMix", "RWKV7TimeMix"]

DECAY_SCALE = math.exp(-0.5)  # log decay = -DECAY_SCALE * sigmoid(...): the factor lies in [e^{-e^{-0.5}}, 1)
MIX_NAMES = ("r", "w", "k", "v", "a", "g")  # the time mix's token-shift coefficients x_r ... x_g, in order


class LoRA(nn.Module):
    """x -> lora.2(act(lora.0(x))): fla's LoRA (keys ``lora.0.weight``, ``lora.2.weight``,
    ``lora.2.bias``)."""

    def __init__(self, d_in: int, d_out: int, rank: int, activation: str | None, bias: bool = True):
        super().__init__()
        act = {None: nn.Identity(), "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid()}[activation]
        self.lora = nn.Sequential(nn.Linear(d_in, rank, bias=False), act, nn.Linear(rank, d_out, bias=bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lora(x)


def _token_shift(x: torch.Tensor, last: torch.Tensor | None) -> torch.Tensor:
    """(b, l, d) -> the previous token's x at every position (the carried ``last`` (b, d), zeros at the
    start)."""
    first = x.new_zeros(x.shape[0], 1, x.shape[2]) if last is None else last[:, None].to(x.dtype)
    return torch.cat([first, x[:, :-1]], dim=1)


class RWKV7TimeMix(nn.Module):
    def __init__(self, config: RWKV7Config, layer_idx: int):
        super().__init__()
        c = config
        d, h, n = c.hidden_size, c.num_heads, c.head_dim
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = h, n
        self.group_norm_eps = c.group_norm_eps
        for name in MIX_NAMES:
            setattr(self, f"x_{name}", nn.Parameter(torch.zeros(1, 1, d)))
        self.k_k = nn.Parameter(torch.zeros(d))
        self.k_a = nn.Parameter(torch.zeros(d))
        self.r_k = nn.Parameter(torch.zeros(h, n))
        self.r_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.w_lora = LoRA(d, d, c.decay_low_rank_dim, "tanh")
        if layer_idx != 0:  # layer 0 defines v_first; the others mix towards it
            self.v_lora = LoRA(d, d, c.v_low_rank_dim, None)
        self.a_lora = LoRA(d, d, c.a_low_rank_dim, None)
        self.g_lora = LoRA(d, d, c.gate_low_rank_dim, "sigmoid", bias=False)
        self.g_norm = nn.GroupNorm(h, d, eps=c.group_norm_eps)

    def forward(self, x: torch.Tensor, shift: torch.Tensor | None, wkv: torch.Tensor | None,
                v_first: torch.Tensor | None, chunk_size: int, backend: str = "torch"
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (b, l, d) the normed input; shift (b, d) and wkv (b, h, n, n) the carried state (None: start);
        v_first (b, l, d): layer 0's values (None at layer 0); backend: the recurrence's (``kernels.rwkv7.rwkv7``).
        Return: out (b, l, d), the new wkv state, v_first."""
        bsz, l, d = x.shape
        h, n = self.num_heads, self.head_dim
        delta = _token_shift(x, shift) - x  # x_{t-1} - x_t
        xr, xw, xk, xv, xa, xg = (x + delta * getattr(self, f"x_{name}") for name in MIX_NAMES)

        r = self.r_proj(xr)
        fp = torch.promote_types(x.dtype, torch.float32)  # the decay, the delta rule and ln_x: fp32 at least
        w = -DECAY_SCALE * torch.sigmoid(self.w_lora(xw).to(fp))  # (b, l, d) log decay
        k = self.k_proj(xk)
        v = self.v_proj(xv)
        if v_first is None:
            v_first = v
        else:  # value residual: v + (v_first - v) * sigmoid(v0 + xv v1 v2)
            v = v + (v_first - v) * torch.sigmoid(self.v_lora(xv))
        a = torch.sigmoid(self.a_lora(xa))
        g = self.g_lora(xg)
        kk = F.normalize((k * self.k_k).view(bsz, l, h, n), dim=-1, p=2.0)  # (b, l, h, n)
        k = k * (1 + (a - 1) * self.k_a)

        heads = lambda t: t.view(bsz, l, h, n)  # noqa: E731
        o, wkv = rwkv7(heads(r), heads(w), heads(k), heads(v), -kk, kk * heads(a), initial_state=wkv,
                       chunk_size=chunk_size, backend=backend)  # o (b, l, h, n), wkv (b, h, n, n): fp32 (fp64)
        o = F.group_norm(o.reshape(bsz * l, d), h, self.g_norm.weight.to(fp), self.g_norm.bias.to(fp),
                         self.group_norm_eps).view(bsz, l, h, n).to(x.dtype)
        o = o + (heads(r) * heads(k) * self.r_k).sum(-1, keepdim=True) * heads(v)  # the per-head "bonus"
        return self.o_proj(o.reshape(bsz, l, d) * g), wkv, v_first


class RWKV7ChannelMix(nn.Module):
    def __init__(self, config: RWKV7Config):
        super().__init__()
        d = config.hidden_size
        self.x_k = nn.Parameter(torch.zeros(d))
        self.key = nn.Linear(d, config.intermediate_size, bias=False)
        self.value = nn.Linear(config.intermediate_size, d, bias=False)

    def forward(self, x: torch.Tensor, shift: torch.Tensor | None) -> torch.Tensor:
        k = x + (_token_shift(x, shift) - x) * self.x_k
        return self.value(torch.relu(self.key(k)).square())


class RWKV7Block(nn.Module):
    def __init__(self, config: RWKV7Config, layer_idx: int):
        super().__init__()
        d, eps, bias = config.hidden_size, config.norm_eps, config.norm_bias
        if config.norm_first and layer_idx == 0:
            self.pre_norm = nn.LayerNorm(d, eps=eps, bias=bias)  # ln0 on the embeddings
        self.attn_norm = nn.LayerNorm(d, eps=eps, bias=bias)  # ln1
        self.attn = RWKV7TimeMix(config, layer_idx)
        self.ffn_norm = nn.LayerNorm(d, eps=eps, bias=bias)  # ln2
        self.ffn = RWKV7ChannelMix(config)

    def forward(self, h: torch.Tensor, state: RWKV7LayerState | None, v_first: torch.Tensor | None,
                chunk_size: int, backend: str = "torch") -> tuple[torch.Tensor, RWKV7LayerState, torch.Tensor]:
        if hasattr(self, "pre_norm"):
            h = self.pre_norm(h)
        x = self.attn_norm(h)
        out, wkv, v_first = self.attn(x, None if state is None else state.attn_shift,
                                      None if state is None else state.wkv, v_first, chunk_size, backend)
        h = h + out
        y = self.ffn_norm(h)
        h = h + self.ffn(y, None if state is None else state.ffn_shift)
        return h, RWKV7LayerState(x[:, -1].clone(), wkv, y[:, -1].clone()), v_first
