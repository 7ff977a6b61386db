"""RWKV-7 time mixing in chunks (the CPU production path): the generalised delta rule in matrix form.

The recurrence (``reference.py``; per head, state S (p, n): value rows, key columns)

    S_t = S_{t-1} · diag(exp(w_t)) + (S_{t-1} a_t) b_t^T + v_t k_t^T,        o_t = S_t r_t

is computed a chunk of q tokens at a time. Write Z = S^T (n, p) and, inside a chunk with state Z_0 before it,
g_t = w_1 + ... + w_t (inclusive cumulative log decay per key channel), g_{t-1} the exclusive one, and
u_t = S_{t-1} a_t (p,), the "pseudo-value" the in-context term writes. Unrolling,

    Z_t = diag(e^{g_t}) Z_0 + sum_{s<=t} diag(e^{g_t - g_s}) (k_s v_s^T + b_s u_s^T)
    u_t = Z_0^T (e^{g_{t-1}} a_t)
          + sum_{s<t} <a_t, e^{g_{t-1} - g_s} k_s> v_s + <a_t, e^{g_{t-1} - g_s} b_s> u_s

so with the q x q matrices A_ak[t, s] = <a_t e^{g_{t-1}}, k_s e^{-g_s}> (s < t), A_ab likewise with b, and
A_rk, A_rb = <r_t e^{g_t}, (k|b)_s e^{-g_s}> (s <= t), the pseudo-values of the whole chunk solve one unit
lower triangular system (the WY / UT form of the delta rule):

    (I - A_ab) U = A_ak V + (a e^{g_excl}) Z_0                  ->  U = U0 + W Z_0
    O   = (r e^{g}) Z_0 + A_rk V + A_rb U                       =  Q Z_0 + O0
    Z_q = diag(e^{g_q}) Z_0 + (k e^{g_q - g})^T V + (b e^{g_q - g})^T U  =  M Z_0 + N

Everything but the last line's dependence on Z_0 is computed for all chunks at once (matmuls and one batched
triangular solve); the chunks are then chained by ``Z <- M Z + N`` (one (n, n) @ (n, p) product per chunk),
and the outputs take ``Q Z + O0`` in one batched product.

Numerics: the factorised exponentials e^{g_{t-1} - c} and e^{c - g_s} are taken relative to the middle of the
chunk's decay (c = g_q / 2), so no factor exceeds e^{|g_q| / 2}. RWKV-7's log decays lie in [-e^{-0.5}, 0),
so a chunk of 64 spans at most 38.8 nats: factors <= e^{19.4}, far inside fp32. For arbitrary inputs a chunk
whose decay spans more than ``MAX_CHUNK_DECAY`` nats (fp32) is split (the chunk size is halved until it fits).
Computation is in fp32 (fp64 when an input is fp64); the state is returned in that dtype. Against the fp64
loop: ~1e-15 in fp64, <= ~1e-6 (max-abs relative) in fp32.

Cost: about 576 q + 16384 + 262144 / q multiply-adds per token and head at n = p = 64 (41-57 K for
q = 16..64), against ~5 n^2 = 20 K element operations of the token loop, but as batched matmuls: measured on
one core it runs 1.3-3.7x faster than a vectorised fp32 token loop (``rwkv7_recurrent_ref(dtype=float32)``;
b·h = 4..48 heads, l = 256..4096), and the rwkv package's own loop costs n^3 per token (``state @ ab``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["DEFAULT_CHUNK_SIZE", "MAX_CHUNK_DECAY", "rwkv7_chunked"]

# Default chunk length q. Measured on one core (n = 64, fp32, b·h = 4..48 heads, l = 256..4096): q = 32 and 64
# within noise of each other, q = 16 and 128 slower; 64 is also fla's (GPU) chunk length.
DEFAULT_CHUNK_SIZE = 64
# Largest total log decay one chunk may span in fp32: factors up to e^{MAX/2} = e^{40} stay far from overflow
# (fp32 max ~ e^{88.7}) while their products keep full relative precision.
MAX_CHUNK_DECAY = {torch.float32: 80.0, torch.float64: 600.0}


def rwkv7_chunked(
    r: torch.Tensor,
    w: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The RWKV-7 recurrence over any length l >= 0, chunk-parallel (see the module docstring).

    Arguments:
        r, w, k, a, b: (b, l, h, n); w is the log decay (<= 0)
        v: (b, l, h, p)
        initial_state: (b, h, p, n) or None (zeros); the state before token 0
        chunk_size: q, the chunk length (numerics and speed only); None: ``DEFAULT_CHUNK_SIZE``
    Return:
        o: (b, l, h, p) and the final state (b, h, p, n), both in the compute dtype (fp32, or fp64 when any
        input is fp64)
    """
    bsz, l, h, n = k.shape
    p = v.shape[-1]
    q = DEFAULT_CHUNK_SIZE if chunk_size is None else int(chunk_size)
    if q < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    inputs = (r, w, k, v, a, b) + (() if initial_state is None else (initial_state,))
    cdt = torch.float64 if any(t.dtype == torch.float64 for t in inputs) else torch.float32
    state = (torch.zeros(bsz, h, p, n, device=k.device, dtype=cdt) if initial_state is None
             else initial_state.to(cdt))
    if l == 0:
        return v.new_zeros(bsz, 0, h, p, dtype=cdt), state.clone()
    q = min(q, l)
    w = w.to(cdt)
    # The chunk length must keep each chunk's decay span within the dtype's range (never hit by RWKV-7 at
    # q <= 128).
    limit = MAX_CHUNK_DECAY[cdt]
    while q > 1 and _max_chunk_decay(w, q) > limit:
        q = max(1, q // 2)
    return _chunked(r.to(cdt), w, k.to(cdt), v.to(cdt), a.to(cdt), b.to(cdt), state, q)


def _max_chunk_decay(w: torch.Tensor, q: int) -> float:
    """The largest -sum(w) over one chunk of q tokens and one channel."""
    bsz, l, h, n = w.shape
    c = math.ceil(l / q)
    wp = F.pad(w, (0, 0, 0, 0, 0, c * q - l)).reshape(bsz, c, q, h, n)
    return float(-wp.sum(2).min()) if wp.numel() else 0.0


def _to_chunks(t: torch.Tensor, q: int) -> torch.Tensor:
    """(b, l, h, x) -> (b, h, c, q, x), zero-padded at the end to c·q tokens. Zero padding is inert: a padded
    token has decay factor e^0 = 1 and writes k v^T = b u^T = 0, so the state after it is the state before
    it."""
    bsz, l, h, x = t.shape
    c = math.ceil(l / q)
    if c * q != l:
        t = F.pad(t, (0, 0, 0, 0, 0, c * q - l))
    return t.reshape(bsz, c, q, h, x).permute(0, 3, 1, 2, 4).contiguous()


def _causal_mask(q: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(2q, 2q) 0/1: the a-rows (u_t reads the state before token t) see s < t; the r-rows (the readout
    follows the update) see s <= t."""
    strict = torch.ones(q, q, dtype=dtype, device=device).tril_(-1)
    incl = torch.ones(q, q, dtype=dtype, device=device).tril_()
    return torch.cat([torch.cat([strict, strict], 1), torch.cat([incl, incl], 1)], 0)


def _chunked(r, w, k, v, a, b, state, q):
    bsz, l, h, n = k.shape
    p = v.shape[-1]
    r, w, k, v, a, b = (_to_chunks(t, q) for t in (r, w, k, v, a, b))  # (b, h, c, q, n|p)
    c = r.shape[2]

    g = w.cumsum(dim=-2)  # (b, h, c, q, n): inclusive cumulative log decay
    g_excl = g - w  # exclusive: the decay up to the token before
    g_last = g[..., -1:, :]  # (b, h, c, 1, n): the decay of the whole chunk
    mid = 0.5 * g_last  # centre of the chunk's decay range: every factor below is <= e^{|g_last| / 2}

    # The four q x q products share their factors: one (2q, n) @ (n, 2q) product holds all of them.
    # a_t e^{g_{t-1}} and r_t e^{g_t}, relative to the centre
    left = torch.cat([a * torch.exp(g_excl - mid), r * torch.exp(g - mid)], dim=-2)
    inv = torch.exp(mid - g)  # e^{-g_s}
    right = torch.cat([k * inv, b * inv], dim=-2)  # (b, h, c, 2q, n)
    G = (left @ right.transpose(-1, -2)).mul_(_causal_mask(q, left.dtype, left.device))
    # (b, h, c, 2q, 2q): [[a.k, a.b], [r.k, r.b]], each block masked to its causal part (views into G)
    A_ak, A_ab, A_rk, A_rb = G[..., :q, :q], G[..., :q, q:], G[..., q:, :q], G[..., q:, q:]

    # (I - A_ab) [U0 | W] = [A_ak V | a e^{g_excl}]: the pseudo-values, as an affine function of the chunk's
    # initial state (U = U0 + W Z_0). solve_triangular with unitriangular=True reads only the strict lower
    # part.
    rhs = torch.cat([A_ak @ v, a * torch.exp(g_excl)], dim=-1)  # (b, h, c, q, p + n)
    sol = torch.linalg.solve_triangular(-A_ab, rhs, upper=False, unitriangular=True)  # [U0 | W]

    rb = A_rb @ sol  # (b, h, c, q, p + n): [A_rb U0 | A_rb W]
    O0 = torch.baddbmm(rb[..., :p].reshape(-1, q, p), A_rk.reshape(-1, q, q), v.reshape(-1, q, p))
    Q = rb[..., p:] + r * torch.exp(g)  # (b, h, c, q, n): O = Q Z_0 + O0
    decay_end = torch.exp(g_last - g)  # e^{g_q - g_s}
    bn = (b * decay_end).transpose(-1, -2) @ sol  # (b, h, c, n, p + n): [b_end^T U0 | b_end^T W]
    N = torch.baddbmm(bn[..., :p].reshape(-1, n, p), (k * decay_end).transpose(-1, -2).reshape(-1, n, q),
                      v.reshape(-1, q, p)).view(bsz, h, c, n, p)  # Z_q = M Z_0 + N
    M = bn[..., p:] + torch.diag_embed(torch.exp(g_last[..., 0, :]))  # (b, h, c, n, n)

    Z = state.transpose(-1, -2)  # (b, h, n, p)
    starts = []
    for i in range(c):  # the only sequential part: one (n, n) @ (n, p) per chunk
        starts.append(Z)
        Z = torch.baddbmm(N[:, :, i].reshape(-1, n, p), M[:, :, i].reshape(-1, n, n), Z.reshape(-1, n, p)
                          ).view(bsz, h, n, p)
    Z0 = torch.stack(starts, dim=2)  # (b, h, c, n, p): the state before each chunk
    o = torch.baddbmm(O0, Q.reshape(-1, q, n), Z0.reshape(-1, n, p)).view(bsz, h, c, q, p)
    o = o.permute(0, 2, 3, 1, 4).reshape(bsz, c * q, h, p)[:, :l]
    return o, Z.transpose(-1, -2).contiguous()
