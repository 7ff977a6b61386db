"""Mamba2 mixer and block with explicit state.

Shape glossary: b batch, l tokens in this (vertical) chunk, d model width, I = h * p intermediate width,
h heads, p head dim, g groups, n state size, k conv width. SSM tensors: A (h,), B/C (b, l, g, n),
D (h,), dt (b, l, h), x (b, l, h, p), z the gate (b, l, I).

Follows transformers' ``Mamba2Mixer`` torch path (models/mamba2/modeling_mamba2.py, v5.24) and mamba_ssm's
``Mamba2`` (modules/mamba2.py): parameter names match both, so state_dicts load unchanged.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from recemb.core.architectures.mamba2.config import Mamba2Config
from recemb.core.architectures.mamba2.state import LayerState
from recemb.core.context_extension import apply_delta_control
from recemb.core.encoder import ChunkRun
from recemb.core.int8 import FEW_ROWS, ROW_BLOCK, Int8Linear, row_stable_linear
from recemb.kernels import causal_conv1d, gated_rms_norm, prepare_dt, resolve_backend, ssd_chunk_scan
from recemb.kernels.workspace import Workspace

__all__ = ["GatedRMSNorm", "Mamba2Block", "Mamba2Mixer", "RMSNorm", "TORCH_SCAN_CHUNK_SIZE"]

# SSD chunk length for the torch backend. The checkpoint's chunk_size (256) suits GPU kernels; on the CPU the
# intra-chunk work per token grows with q while the inter-chunk work does not, so a shorter q is faster there
# (measured in docs/benchmarks.md, "What made the torch path fast"). Results differ only by rounding.
TORCH_SCAN_CHUNK_SIZE = 64


class RMSNorm(nn.Module):
    """Plain RMSNorm in fp32, cast back to the input dtype before the weight (transformers' Mamba2RMSNorm)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, h: torch.Tensor, workspace: Workspace | None = None) -> torch.Tensor:
        """h (..., d); with a ``workspace`` (inference, fp32) the result is its buffer "rms_norm"."""
        in_dtype = h.dtype
        hf = h.float()
        if workspace is not None and hf is h and self.weight.dtype == in_dtype and not torch.is_grad_enabled():
            # The same arithmetic as below, into reused memory: the square and the product are chunk-sized.
            mean_sq = torch.pow(hf, 2, out=workspace.empty("rms_norm", h.shape, h.dtype, h.device)).mean(
                -1, keepdim=True)
            out = torch.mul(hf, mean_sq.add_(self.eps).rsqrt_(), out=workspace.empty("rms_norm", h.shape, h.dtype,
                                                                                        h.device))
            return out.mul_(self.weight)
        hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * hf.to(in_dtype)


class GatedRMSNorm(nn.Module):
    """Holds the gated-norm weight (key ``mixer.norm.weight``); the maths is ``recemb.kernels.gated_rms_norm``."""

    def __init__(self, d: int, group_size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.group_size = group_size
        self.eps = eps

    def forward(self, y: torch.Tensor, z: torch.Tensor, backend: str = "auto", inplace: bool = False) -> torch.Tensor:
        return gated_rms_norm(y, z, self.weight, self.group_size, self.eps, backend=backend, inplace=inplace)


class Mamba2Mixer(nn.Module):
    """in_proj -> (z, xBC, dt) -> causal conv1d (carried state) -> SiLU -> (x, B, C) -> SSD scan (carried state)
    -> gated RMSNorm(y, z) -> out_proj."""

    def __init__(self, config: Mamba2Config, layer_idx: int = 0):
        super().__init__()
        c = config
        self.config = c
        self.layer_idx = layer_idx  # which of ChunkRun's per-layer Δ controls is this layer's
        self.d_inner = c.intermediate_size  # I
        self.nheads, self.headdim = c.num_heads, c.head_dim  # h, p
        self.ngroups, self.d_state = c.n_groups, c.state_size  # g, n
        self.conv_dim = c.conv_dim
        # Order of in_proj rows: [z (I), xBC (I + 2gn), dt (h)]
        self.in_proj = nn.Linear(c.hidden_size, c.in_proj_size, bias=c.use_bias)
        self.conv1d = nn.Conv1d(
            self.conv_dim, self.conv_dim, c.conv_kernel, groups=self.conv_dim,
            padding=c.conv_kernel - 1, bias=c.use_conv_bias,
        )  # used for its weight (conv_dim, 1, k) and bias only
        self.dt_bias = nn.Parameter(torch.zeros(self.nheads))
        self.A_log = nn.Parameter(torch.zeros(self.nheads))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm = GatedRMSNorm(self.d_inner, self.d_inner // self.ngroups, c.layer_norm_epsilon)
        self.out_proj = nn.Linear(self.d_inner, c.hidden_size, bias=c.use_bias)
        # A low-precision model's gate rows of in_proj in fp32 (``keep_exact_gate``); None at full precision.
        self.register_buffer("gate_weight_fp32", None, persistent=False)
        self.register_buffer("gate_bias_fp32", None, persistent=False)
        self.register_buffer("dt_weight_fp32", None, persistent=False)
        self.register_buffer("dt_bias_fp32", None, persistent=False)

    def keep_exact_gate(self) -> None:
        """Keep an fp32 copy of in_proj's gate (z) rows, before the projections go to bf16 or int8.

        Why: each row's last token (its pooled EOS) is computed at full precision, and there the gate is what
        bf16 rounding hurts: silu(z) at a strongly negative z turns z's relative error into a much larger one,
        which the group norm then scales up (measured on the bundled model: 0.96 cosine to fp32 with a bf16
        gate at the EOS, 0.9993 with this copy and out_proj's input split in two bf16 halves there)."""
        z = self.config.in_proj_rows["z"]
        self.gate_weight_fp32 = self.in_proj.weight[z].detach().float().clone()
        self.gate_bias_fp32 = None if self.in_proj.bias is None else self.in_proj.bias[z].detach().float().clone()
        dt = self.config.in_proj_rows["dt"]
        self.dt_weight_fp32 = self.in_proj.weight[dt].detach().float().clone()
        self.dt_bias_fp32 = None if self.in_proj.bias is None else self.in_proj.bias[dt].detach().float().clone()

    def chunk_size_for(self, device: torch.device, backend: str, chunk_size: int | None = None) -> int:
        """The SSD chunk length q a call runs with: ``chunk_size`` if given, else the checkpoint's on Triton
        and at most TORCH_SCAN_CHUNK_SIZE on the torch backend."""
        if chunk_size is not None:
            return chunk_size
        if resolve_backend(backend, device) == "torch":
            return min(self.config.chunk_size, TORCH_SCAN_CHUNK_SIZE)
        return self.config.chunk_size

    def forward(self, u: torch.Tensor, state: LayerState | None = None, run: ChunkRun | None = None
                ) -> tuple[torch.Tensor, LayerState]:
        """u: (b, l, d); state: the layer's state before token 0 of u (None = start of sequence); run: the call's
        backend, scratch workspace, scan chunk length and Δ controls (``ChunkRun``; this layer's is
        ``run.delta(layer_idx)``). With a workspace (inference on the torch backend) out is a workspace buffer,
        valid until the next call.

        Return: out (b, l, d) in out_proj's dtype, and the state after the last token of u.
        """
        run = run or ChunkRun()
        backend, workspace, delta = run.backend, run.workspace, run.delta(self.layer_idx)
        b, l, _ = u.shape
        h, p, g, n = self.nheads, self.headdim, self.ngroups, self.d_state
        if workspace is not None and (torch.is_grad_enabled() or resolve_backend(backend, u.device) != "torch"):
            workspace = None  # only the torch inference path writes into scratch buffers
        # The projections run in their weights' dtype; between them the mixer computes in its small parameters'
        # dtype (conv, Δ, A, D, norm): fp32 on a mixed-precision CPU model (``recemb/core/precision.py``), whose
        # projections are bf16. On a model in one dtype both are that dtype, as in the reference.
        zxbcdt = _linear(self.in_proj, u.to(_operand_dtype(self.in_proj)), workspace, "in_proj")  # (b, l, I+conv_dim+h)
        rows = self.config.in_proj_rows
        z, xBC, dt = zxbcdt[..., rows["z"]], zxbcdt[..., rows["xBC"]], zxbcdt[..., rows["dt"]]
        exact = self.gate_weight_fp32 is not None  # a low-precision model: each row's last token at full precision
        # An int8 model computes its float products in fixed-size calls, so that no row's codes depend on its batch.
        stable = isinstance(self.in_proj, Int8Linear)
        if exact:
            last = run.last_token_index(b, l, u.device)
            z = z.float()  # (b, l, I) fp32: a copy of bf16 z, or int8 in_proj's own fp32 output (scratch either way)
            z[last] = _float_linear(u[last].float(), self.gate_weight_fp32, self.gate_bias_fp32, stable, FEW_ROWS)
            dt = _float_linear(u.float(), self.dt_weight_fp32, self.dt_bias_fp32, stable)
            if stable:  # int8 in_proj: the last token's x, B, C from its fp32 activations too
                xBC[last] = self.in_proj.float_rows(u[last], rows["xBC"])
        xBC, conv_state = causal_conv1d(
            xBC, self.conv1d.weight[:, 0, :], self.conv1d.bias,
            conv_state=None if state is None else state.conv_state, activation="silu", backend=backend,
            workspace=workspace, out_dtype=self.conv1d.weight.dtype,
        )  # (b, l, conv_dim)
        x, B, C = torch.split(xBC, [self.d_inner, g * n, g * n], dim=-1)
        A = -torch.exp(self.A_log.float())  # (h,)
        dt_bias, dt_softplus, dt_limit = self.dt_bias, True, self.config.time_step_limit
        if delta is not None:  # softplus(dt + bias) -> Δ hook -> limit, then a scan that leaves dt as it is
            dt = prepare_dt(apply_delta_control(prepare_dt(dt, self.dt_bias, True), delta), dt_limit=dt_limit)
            dt_bias, dt_softplus, dt_limit = None, False, (0.0, float("inf"))
        y, ssm_state = ssd_chunk_scan(
            x.reshape(b, l, h, p), dt, A, B.reshape(b, l, g, n), C.reshape(b, l, g, n),
            self.chunk_size_for(u.device, backend, run.chunk_size), D=self.D, dt_bias=dt_bias,
            dt_softplus=dt_softplus, dt_limit=dt_limit,
            initial_states=None if state is None else state.ssm_state,
            return_final_states=True, backend=backend, out_dtype=torch.float32, workspace=workspace,
        )  # y (b, l, h, p) fp32, ssm_state (b, h, p, n) fp32
        # With a workspace y and z are scratch (z's columns of in_proj's output are read here for the last time).
        y = self.norm(y.reshape(b, l, self.d_inner), z, backend=backend, inplace=workspace is not None)  # (b, l, I)
        out = _linear(self.out_proj, y.to(_operand_dtype(self.out_proj)), workspace, "out_proj", stable)  # (b, l, d)
        if exact:
            out[last] = _exact_linear(self.out_proj, y[last], stable).to(out.dtype)
        return out, LayerState(conv_state, ssm_state)


def _operand_dtype(layer: nn.Module) -> torch.dtype:
    """The input dtype a projection multiplies in: its weights' (an int8 layer, ``Int8Linear``, takes fp32)."""
    return layer.weight.dtype if isinstance(layer, nn.Linear) else torch.float32


def _float_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stable: bool,
                  block: int = ROW_BLOCK) -> torch.Tensor:
    """F.linear, in calls of ``block`` rows when ``stable`` (``row_stable_linear``)."""
    return row_stable_linear(x, weight, bias, block) if stable else F.linear(x, weight, bias)


def _exact_linear(layer: nn.Module, x: torch.Tensor, stable: bool = False) -> torch.Tensor:
    """``layer(x)`` for a few fp32 rows x (..., in) with the input kept at full precision, in fp32: a bf16 layer
    multiplies x's bf16 high and low halves (the weight's rounding stays), an int8 layer its dequantised weight.
    ``stable``: in fixed-size calls (``row_stable_linear``)."""
    if isinstance(layer, nn.Linear):
        if layer.weight.dtype == x.dtype:
            return _float_linear(x, layer.weight, layer.bias, stable, FEW_ROWS)
        hi = x.to(layer.weight.dtype)
        lo = (x - hi.float()).to(layer.weight.dtype)
        # one pass over the weight for both halves
        both = _float_linear(torch.stack([hi, lo]), layer.weight, None, stable, FEW_ROWS).float()
        out = both[0] + both[1]
        return out if layer.bias is None else out + layer.bias.float()
    return _float_linear(x, layer.dequantized_weight(), layer.bias, stable, FEW_ROWS)


def _linear(layer: nn.Module, x: torch.Tensor, workspace: Workspace | None, name: str, stable: bool = False
            ) -> torch.Tensor:
    """``layer(x)``, written into the workspace buffer ``name`` when there is one (the same matmul as F.linear;
    an ``Int8Linear`` computes its own output, fp32, into the buffer). ``stable``: a float layer in fixed-size
    calls (``row_stable_linear``)."""
    if workspace is None and not stable:
        return layer(x)
    if isinstance(layer, Int8Linear):
        out = None if workspace is None else workspace.empty(name, (*x.shape[:-1], layer.out_features),
                                                             torch.float32, x.device)
        return layer(x, out=out)
    out = None if workspace is None else workspace.empty(name, (*x.shape[:-1], layer.out_features), x.dtype,
                                                         x.device)
    if stable:
        return row_stable_linear(x, layer.weight, layer.bias, out=out)
    x2, out2 = x.reshape(-1, layer.in_features), out.view(-1, layer.out_features)
    if layer.bias is None:
        torch.mm(x2, layer.weight.t(), out=out2)
    else:
        torch.addmm(layer.bias, x2, layer.weight.t(), out=out2)
    return out


class Mamba2Block(nn.Module):
    """h + mixer(norm(h)); the residual stream is fp32 when ``residual_in_fp32``."""

    def __init__(self, config: Mamba2Config, layer_idx: int = 0):
        super().__init__()
        self.residual_in_fp32 = config.residual_in_fp32
        self.norm = RMSNorm(config.hidden_size, config.layer_norm_epsilon)
        self.mixer = Mamba2Mixer(config, layer_idx)

    def forward(self, h: torch.Tensor, state: LayerState | None = None, run: ChunkRun | None = None
                ) -> tuple[torch.Tensor, LayerState]:
        """h (b, l, d), the residual stream. With a workspace in ``run`` (inference) h is the caller's scratch
        too: the residual sum is written into it when its dtype allows."""
        run = run or ChunkRun()
        residual = h.float() if self.residual_in_fp32 else h
        out, state = self.mixer(self.norm(h.to(self.norm.weight.dtype), run.workspace), state, run)
        if run.workspace is not None and not torch.is_grad_enabled() and residual.dtype == torch.promote_types(
                residual.dtype, out.dtype):
            return residual.add_(out), state
        return residual + out, state
