"""xLSTM's mLSTM on CUDA through the mlstm_kernels package's Triton kernel (``triton_xl_chunk``, NX-AI's own), and
the dispatcher that chooses it.

mlstm_kernels computes what ``mlstm_chunkwise`` computes (the same stabilised gates, normaliser and q·k scale
dk^-1/2) with the heads first, (b, h, l, d), the gates (b, h, l) and the stabiliser state (b, h, 1). Its chunk
kernels need a length that is a multiple of their chunk, so the sequence is padded at its end with tokens whose
gates leave the state as it is (input gate -inf: nothing written; forget gate +inf: nothing forgotten, and the
stabiliser unmoved), and their outputs dropped. ``mlstm`` runs it for ``backend`` "auto" on CUDA tensors when
mlstm_kernels imports, and the chunkwise torch form everywhere else; "triton" asks for it.
"""

from __future__ import annotations

import torch

from recemb.kernels._backend import BACKENDS, importable
from recemb.kernels.mlstm.chunkwise import DEFAULT_CHUNK_SIZE, MLSTMState, mlstm_chunkwise

__all__ = ["XL_CHUNK", "mlstm", "mlstm_kernels_available", "mlstm_xl_chunk"]

XL_CHUNK = 64  # the kernel's chunk: lengths are padded to a multiple of it
_CLOSED = 1e4  # a gate pre-activation whose exp / log-sigmoid is exactly 0 in fp32


def mlstm_kernels_available() -> bool:
    return importable("mlstm_kernels.torch.chunkwise.triton_xl_chunk")


def _xl_chunk_kernel():
    from mlstm_kernels.torch.chunkwise.triton_xl_chunk import mlstm_chunkwise__xl_chunk

    return mlstm_chunkwise__xl_chunk


def mlstm_xl_chunk(q, k, v, i, f, initial_state: MLSTMState | None = None, eps: float = 1e-6,
                   qk_scale: float | None = None) -> tuple[torch.Tensor, MLSTMState]:
    """``mlstm_chunkwise``'s computation by mlstm_kernels' Triton kernel (CUDA): same arguments and shapes, fp32."""
    b, l, nh, dk = q.shape
    pad = -l % XL_CHUNK
    q = q.float() * ((dk ** -0.5 if qk_scale is None else qk_scale) / dk ** -0.5)  # the kernel scales by dk^-1/2
    k, v, i, f = k.float(), v.float(), i.float(), f.float()
    if pad:
        grow = lambda t, value=0.0: torch.cat([t, t.new_full((b, pad, *t.shape[2:]), value)], dim=1)  # noqa: E731
        q, k, v, i, f = grow(q), grow(k), grow(v), grow(i, -_CLOSED), grow(f, _CLOSED)
    heads = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731
    C0, n0, m0 = (None, None, None) if initial_state is None else (
        initial_state[0].float().contiguous(), initial_state[1].float().contiguous(),
        initial_state[2].float()[..., None].contiguous())
    h, (C, n, m) = _xl_chunk_kernel()(heads(q), heads(k), heads(v), heads(i), heads(f), c_initial=C0, n_initial=n0,
                                      m_initial=m0, return_last_states=True, eps=eps, chunk_size=XL_CHUNK)
    return h.transpose(1, 2)[:, :l].float(), (C.float(), n.float(), m.float().reshape(b, nh))


def mlstm(q, k, v, i, f, chunk_size: int = DEFAULT_CHUNK_SIZE, initial_state: MLSTMState | None = None,
          eps: float = 1e-6, qk_scale: float | None = None, backend: str = "auto") -> tuple[torch.Tensor, MLSTMState]:
    """The mLSTM by ``backend``: "torch" the chunkwise torch form, "triton" mlstm_kernels' kernel (CUDA), "auto"
    the kernel on CUDA when mlstm_kernels is installed (and the inputs are not fp64), else the torch form."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    usable = q.device.type == "cuda" and mlstm_kernels_available()
    if backend == "triton":
        if not usable:
            raise RuntimeError("xLSTM's Triton path is the mlstm_kernels package's kernel, on CUDA tensors: pip "
                               'install mlstm-kernels, or use backend="torch" or "auto"')
        return mlstm_xl_chunk(q, k, v, i, f, initial_state, eps, qk_scale)
    if backend == "auto" and usable and q.dtype != torch.float64:
        return mlstm_xl_chunk(q, k, v, i, f, initial_state, eps, qk_scale)
    return mlstm_chunkwise(q, k, v, i, f, chunk_size=chunk_size, initial_state=initial_state, eps=eps,
                           qk_scale=qk_scale)
