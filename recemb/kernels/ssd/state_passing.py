"""SSD stage 2: the recurrence between chunks, carrying the state from an optional initial state.

    out[:, 0]        = initial_states (zeros if None)
    out[:, c + 1]    = exp(dA_chunk_cumsum[:, :, c]) * out[:, c] + states[:, c]
    final_states     = out[:, nchunks]          (returned apart; out keeps the state *entering* each chunk)

This is the same carry that links vertical chunks: ``final_states`` of one call is ``initial_states`` of the
next. Follows mamba_ssm's ``_state_passing_fwd`` (``mamba_ssm/ops/triton/ssd_state_passing.py``); step 3 of
Listing 1 in Dao & Gu 2024.

Reference: ``recemb.kernels.ssd.reference.state_passing_ref`` (pure torch; its module has the shape glossary).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from recemb.kernels._triton_utils import cdiv, check_grid_yz, compiler_disable, device_guard, pick_configs

__all__ = ["state_passing"]

_CONFIGS = pick_configs(
    [triton.Config({"BLOCK_SIZE": bs}, num_warps=4) for bs in (64, 128, 256, 512, 1024, 2048)],
    triton.Config({"BLOCK_SIZE": 4096}),
)


@triton.autotune(configs=_CONFIGS, key=["dim"])
@triton.jit
def _state_passing_fwd_kernel(
    # Pointers
    states_ptr,
    out_ptr,
    final_states_ptr,
    dA_chunk_cumsum_ptr,
    initial_states_ptr,
    # Dimensions
    dim,
    nchunks,
    # Strides
    stride_states_batch,
    stride_states_chunk,
    stride_states_head,
    stride_states_dim,
    stride_out_batch,
    stride_out_chunk,
    stride_out_head,
    stride_out_dim,
    stride_final_states_batch,
    stride_final_states_head,
    stride_final_states_dim,
    stride_dA_cs_batch,
    stride_dA_cs_head,
    stride_dA_cs_chunk,
    stride_initial_states_batch,
    stride_initial_states_head,
    stride_initial_states_dim,
    # Meta-parameters
    HAS_INITIAL_STATES: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # One block of the flattened (headdim * dstate) state of one (batch, head), walked through all chunks.
    pid_d = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    pid_h = tl.program_id(2)
    states_ptr += pid_b * stride_states_batch + pid_h * stride_states_head
    out_ptr += pid_b * stride_out_batch + pid_h * stride_out_head
    final_states_ptr += pid_b * stride_final_states_batch + pid_h * stride_final_states_head
    dA_chunk_cumsum_ptr += pid_b * stride_dA_cs_batch + pid_h * stride_dA_cs_head

    offs_d = pid_d * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # (BLOCK_SIZE,) along headdim * dstate
    mask_d = offs_d < dim
    if HAS_INITIAL_STATES:
        initial_states_ptr += pid_b * stride_initial_states_batch + pid_h * stride_initial_states_head
        state = tl.load(initial_states_ptr + offs_d * stride_initial_states_dim, mask=mask_d, other=0.0).to(
            tl.float32
        )
    else:
        state = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)

    for c in range(nchunks):
        tl.store(out_ptr + c * stride_out_chunk + offs_d * stride_out_dim, state, mask=mask_d)
        new_states = tl.load(
            states_ptr + c * stride_states_chunk + offs_d * stride_states_dim, mask=mask_d, other=0.0
        ).to(tl.float32)
        decay = tl.exp(tl.load(dA_chunk_cumsum_ptr + c * stride_dA_cs_chunk).to(tl.float32))
        state = decay * state + new_states
    tl.store(final_states_ptr + offs_d * stride_final_states_dim, state, mask=mask_d)


def _state_passing_fwd(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    batch, nchunks, nheads, hdim, dstate = states.shape
    assert dA_chunk_cumsum.shape == (batch, nheads, nchunks), f"dA_chunk_cumsum: {dA_chunk_cumsum.shape}"
    if initial_states is not None:
        assert initial_states.shape == (batch, nheads, hdim, dstate), (
            f"initial_states: {tuple(initial_states.shape)}"
        )
    check_grid_yz(states, batch=batch, nheads=nheads)
    dim = hdim * dstate
    states_flat = states.reshape(batch, nchunks, nheads, dim)  # (b, c, h, p*n)
    initial_flat = initial_states.reshape(batch, nheads, dim) if initial_states is not None else None
    out = torch.empty(batch, nchunks, nheads, hdim, dstate, device=states.device, dtype=torch.float32)
    final_states = torch.empty(batch, nheads, hdim, dstate, device=states.device, dtype=torch.float32)
    out_flat = out.view(batch, nchunks, nheads, dim)
    final_flat = final_states.view(batch, nheads, dim)

    def grid(META):
        return (cdiv(dim, META["BLOCK_SIZE"]), batch, nheads)

    with device_guard(states):
        _state_passing_fwd_kernel[grid](
            states_flat, out_flat, final_flat, dA_chunk_cumsum, initial_flat,
            dim, nchunks,
            states_flat.stride(0), states_flat.stride(1), states_flat.stride(2), states_flat.stride(3),
            out_flat.stride(0), out_flat.stride(1), out_flat.stride(2), out_flat.stride(3),
            final_flat.stride(0), final_flat.stride(1), final_flat.stride(2),
            dA_chunk_cumsum.stride(0), dA_chunk_cumsum.stride(1), dA_chunk_cumsum.stride(2),
            *((initial_flat.stride(0), initial_flat.stride(1), initial_flat.stride(2))
              if initial_flat is not None else (0, 0, 0)),
            HAS_INITIAL_STATES=initial_states is not None,
        )  # fmt: skip
    return out, final_states


@compiler_disable
def state_passing(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton forward of ``recemb.kernels.ssd.reference.state_passing_ref``: the same arguments, shapes and result."""
    return _state_passing_fwd(states, dA_chunk_cumsum, initial_states)
