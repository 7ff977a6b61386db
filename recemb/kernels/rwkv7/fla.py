"""RWKV-7's time mixing on CUDA through flash-linear-attention's chunk kernel (``fla.ops.rwkv7.chunk_rwkv7``), and
the dispatcher that chooses it.

fla is a maintained package of Triton kernels for linear-attention recurrences, RWKV-7's among them; its
``chunk_rwkv7`` computes the recurrence ``rwkv7_recurrent_ref`` defines (fla's ``dplr_recurrence``: the state
decays by exp(w), gains b ⊗ (aᵀS) and k ⊗ v, and is read by r), with the state laid out keys first, (b, h, n, p),
where recemb keeps (b, h, p, n). ``rwkv7`` runs it for ``backend`` "auto" on CUDA tensors when fla imports, and
the chunked torch form everywhere else; "triton" asks for fla's kernels and fails clearly without them.
"""

from __future__ import annotations

import torch

from recemb.kernels._backend import BACKENDS, importable
from recemb.kernels.rwkv7.chunked import rwkv7_chunked

__all__ = ["fla_available", "rwkv7", "rwkv7_fla"]


def fla_available() -> bool:
    return importable("fla.ops.rwkv7")


def rwkv7_fla(r, w, k, v, a, b, initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``rwkv7_chunked``'s computation by fla's ``chunk_rwkv7`` (CUDA): same arguments and shapes, fp32 outputs."""
    from fla.ops.rwkv7 import chunk_rwkv7

    r, w, k, v, a, b = (t.float().contiguous() for t in (r, w, k, v, a, b))
    state = None if initial_state is None else initial_state.float().transpose(-1, -2).contiguous()
    o, final = chunk_rwkv7(r, w, k, v, a, b, scale=1.0, initial_state=state, output_final_state=True)
    return o.float(), final.float().transpose(-1, -2).contiguous()


def rwkv7(r, w, k, v, a, b, initial_state: torch.Tensor | None = None, chunk_size: int | None = None,
          backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """The RWKV-7 recurrence by ``backend``: "torch" the chunked torch form (``chunk_size``: its chunk length),
    "triton" fla's kernel (CUDA), "auto" fla's on CUDA when it is installed, else the torch form."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    on_cuda = k.device.type == "cuda"
    if backend == "triton":
        if not on_cuda or not fla_available():
            raise RuntimeError('RWKV-7\'s Triton path is flash-linear-attention\'s kernel, on CUDA tensors: pip '
                               'install flash-linear-attention, or use backend="torch" or "auto"')
        return rwkv7_fla(r, w, k, v, a, b, initial_state)
    if backend == "auto" and on_cuda and fla_available():
        return rwkv7_fla(r, w, k, v, a, b, initial_state)
    return rwkv7_chunked(r, w, k, v, a, b, initial_state=initial_state, chunk_size=chunk_size)
