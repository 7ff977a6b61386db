"""Vertical chunking: each chunk of V tokens goes through all layers before the next, states carried.

Memory is one chunk's activations (O(b·V·d)) plus the per-layer states, whatever the input length T;
``V >= T`` is ordinary horizontal inference. On the CPU those activations live in one ``Workspace`` per call,
allocated by the first layer of the first chunk and reused by every later one. Sequences are right-padded and
pooled at their own last token (the appended EOS): the model is causal, so padding after it cannot change it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch

from recemb.core.context_extension import resolve_mode
from recemb.core.encoder import ChunkRun, RecurrentEncoder
from recemb.core.threads import check_threads, intra_op_threads
from recemb.kernels.workspace import Workspace

__all__ = ["CPU_SINGLE_SEQUENCE_V", "VerticalStream", "default_vertical_chunk_size", "encode_vertical",
           "encode_with_branches", "flush_denormals", "flushing_denormals", "pad_right", "pool_last_token"]


def pad_right(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (b, T) and lengths (b,) of token-id lists, the input ``encode_vertical`` takes."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    ids = torch.full((len(sequences), int(lengths.max()) if len(sequences) else 0), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return ids, lengths


# One sequence on the CPU: as fast as 4096, a third of its activations (docs/benchmarks.md, the V sweep).
CPU_SINGLE_SEQUENCE_V = 1024


def default_vertical_chunk_size(batch_size: int, chunk_size: int, device: torch.device | str | None = None) -> int:
    """The paper's guidance, 4096 tokens for a single sequence and 2·chunk_size for batches; a single sequence on
    the CPU takes ``CPU_SINGLE_SEQUENCE_V``, which measured as fast there (the V sweep)."""
    if batch_size > 1:
        return 2 * chunk_size
    return CPU_SINGLE_SEQUENCE_V if device is not None and torch.device(device).type == "cpu" else 4096


def flushing_denormals() -> bool:
    """Whether this thread flushes fp32 denormals to zero (torch has a setter but no getter, so probe it)."""
    return bool((torch.tensor([1e-39], dtype=torch.float32) * 1.0).item() == 0.0)


@contextmanager
def flush_denormals(device: torch.device) -> Iterator[None]:
    """Flush fp32 denormals to zero on the CPU for the duration, then restore the caller's mode.

    Decays that underflow (exp of a large negative dt·A) leave the scan with denormal numbers, on which CPU
    arithmetic is many times slower; their value (< 1.2e-38) never matters to an embedding. Measured on a 24-layer
    130M-class encoder at T = 4096: about 20-25% faster. GPUs flush in their own kernels; nothing to do there.
    """
    if device.type != "cpu" or flushing_denormals():
        yield
        return
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@torch.inference_mode()
def encode_vertical(
    model: RecurrentEncoder,
    input_ids: torch.Tensor,
    lengths: torch.Tensor,
    vertical_chunk_size: int | None = None,
    backend: str = "auto",
    on_tokens: Callable[[int], None] | None = None,
    chunk_size: int | None = None,
    context_extension: str = "auto",
    threads: int | str | None = None,
) -> torch.Tensor:
    """Pooled last-token embeddings of a right-padded batch, computed chunk by chunk.

    Arguments:
        input_ids: (b, T) right-padded token ids; each row's last real token is its EOS
        lengths: (b,) real lengths, each >= 1
        vertical_chunk_size: V >= 1; None picks ``default_vertical_chunk_size``
        on_tokens: called with the number of real tokens consumed after every chunk (progress bars)
        chunk_size: the SSD scan's chunk length q; None: per backend
        context_extension: which calibrated methods run: "auto" | "off" | "mambaextend" | "longmamba" |
            "both"
        threads: CPU intra-op threads per chunk: None/"auto" chooses them from the chunk's size and the free
            cores (``recemb.core.threads``), an int fixes them
    Return:
        (b, d) final-normed hidden state at position lengths - 1 of each row (fp32 when residual_in_fp32)
    """
    b, T = input_ids.shape
    lengths = lengths.to(torch.long).cpu()
    if lengths.shape != (b,):
        raise ValueError(f"lengths must have shape ({b},), got {tuple(lengths.shape)}")
    if b == 0:
        return torch.empty(0, model.dim, device=input_ids.device)
    if int(lengths.min()) < 1 or int(lengths.max()) > T:
        raise ValueError(f"lengths must lie in [1, {T}]")
    V = vertical_chunk_size
    if V is None:
        V = default_vertical_chunk_size(b, model.config.chunk_size, input_ids.device)
    if V < 1:
        raise ValueError(f"vertical_chunk_size must be >= 1, got {V}")
    threads = check_threads(threads)

    # Longest first, so the sequences still running are always a prefix of the batch.
    order = torch.argsort(lengths, descending=True, stable=True)
    ids = input_ids[order.to(input_ids.device)]
    lens = lengths[order]
    # Context extension is keyed by each row's whole length, not by V.
    deltas = model.delta_controls(lens, context_extension)
    with flush_denormals(input_ids.device), intra_op_threads(input_ids.device, threads) as intra_op:
        pooled = _vertical_loop(model, ids, lens, V, backend, deltas, on_tokens, chunk_size, intra_op.apply)
    result = torch.empty_like(pooled)
    result[order.to(pooled.device)] = pooled
    return result


def _vertical_loop(model, ids, lens, V, backend, deltas, on_tokens, chunk_size, set_threads) -> torch.Tensor:
    """The chunk loop of ``encode_vertical`` over rows sorted longest first; pooled rows in that order.
    ``set_threads(tokens)`` picks the intra-op threads before each chunk."""
    b = ids.shape[0]
    last = lens - 1  # pooling position per row
    pooled: torch.Tensor | None = None
    states = None
    active = b
    # Every chunk runs the same layer shapes: allocate their scratch once (on the CPU, fresh buffers are faulted
    # in page by page; see recemb.kernels.workspace). CUDA's caching allocator already reuses memory.
    workspace = Workspace() if ids.device.type == "cpu" else None
    for start in range(0, int(lens[0]), V):
        still_running = int((lens > start).sum())
        if still_running < active:  # finished sequences leave the batch
            states = [s.keep_rows(still_running) for s in states]
            if deltas is not None:
                deltas = [None if d is None else d.keep_rows(still_running) for d in deltas]
            active = still_running
        end = min(start + V, int(lens[0]))
        run = ChunkRun(backend=backend, workspace=workspace, chunk_size=chunk_size, deltas=deltas,
                       last_tokens=torch.clamp(lens[:active], max=end) - 1 - start)
        set_threads(active * (end - start))
        h, states = model.forward_chunk(ids[:active, start:end], states, run)  # (a, end-start, d)
        rows = torch.nonzero((last[:active] >= start) & (last[:active] < end)).flatten()
        if rows.numel():
            pos = (last[rows] - start).to(h.device)
            rows_d = rows.to(h.device)
            out = model.final_norm(h[rows_d, pos])  # final norm only where a sequence ends
            if pooled is None:
                pooled = out.new_empty(b, out.shape[-1])
            pooled[rows_d] = out
        if on_tokens is not None:
            on_tokens(int(torch.clamp(lens[:active] - start, max=end - start).sum()))
    return pooled


@torch.inference_mode()
def encode_with_branches(
    model: RecurrentEncoder,
    input_ids: torch.Tensor,
    lengths: torch.Tensor,
    cuts: list[int],
    branch_id: int,
    vertical_chunk_size: int | None = None,
    backend: str = "auto",
    chunk_size: int | None = None,
    context_extension: str = "auto",
    threads: int | str | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``encode_vertical``'s pooled embeddings, and from the same pass a branch at every cut: the output of one
    more token, ``branch_id`` (the EOS), run from the states after the first ``c`` tokens of a row, for each cut
    ``c`` below the row's last position. A branch changes nothing downstream: the row goes on from the states it
    had, so its pooled vector is ``encode_vertical``'s. The branch at ``c`` equals encoding ``ids[:c] + [branch_id]``
    alone; the pass costs one token per cut beyond the sequence itself.

    The cuts are shared by every row (a fixed grid of passage ends), so the rows that branch at a cut are those
    still running past it: a prefix of the batch sorted longest first. Chunks end at every cut and at least every V
    tokens.

    Arguments:
        input_ids, lengths, vertical_chunk_size, backend, chunk_size, context_extension, threads: as in
            ``encode_vertical``
        cuts: increasing positions >= 1
        branch_id: the token run at each cut
    Return:
        ((b, d) final-normed hidden state at position lengths - 1 of each row, [per row (k, d): the final-normed
        branch outputs at the cuts c < lengths - 1 of that row, in order])
    """
    b, T = input_ids.shape
    lengths = lengths.to(torch.long).cpu()
    if lengths.shape != (b,):
        raise ValueError(f"lengths must have shape ({b},), got {tuple(lengths.shape)}")
    if b == 0:
        return torch.empty(0, model.dim, device=input_ids.device), []
    if int(lengths.min()) < 1 or int(lengths.max()) > T:
        raise ValueError(f"lengths must lie in [1, {T}]")
    cuts = [int(c) for c in cuts]
    if any(c < 1 for c in cuts) or any(a >= z for a, z in zip(cuts, cuts[1:])):
        raise ValueError(f"cuts must be increasing positions >= 1, got {cuts[:8]}")
    V = vertical_chunk_size or default_vertical_chunk_size(b, model.config.chunk_size, input_ids.device)
    if V < 1:
        raise ValueError(f"vertical_chunk_size must be >= 1, got {V}")
    order = torch.argsort(lengths, descending=True, stable=True)
    ids, lens = input_ids[order.to(input_ids.device)], lengths[order]
    deltas = model.delta_controls(lens, context_extension)
    longest = int(lens[0])
    cut_set = set(cuts)
    ends = sorted({c for c in cuts if c < longest} | set(range(V, longest, V)) | {longest})
    last = lens - 1
    pooled: torch.Tensor | None = None
    branches: list[list[torch.Tensor]] = [[] for _ in range(b)]
    states, active, start = None, b, 0
    workspace = Workspace() if ids.device.type == "cpu" else None
    with flush_denormals(ids.device), intra_op_threads(ids.device, check_threads(threads)) as intra_op:
        for end in ends:
            still_running = int((lens > start).sum())
            if still_running < active:
                states = [s.keep_rows(still_running) for s in states]
                if deltas is not None:
                    deltas = [None if d is None else d.keep_rows(still_running) for d in deltas]
                active = still_running
            intra_op.apply(active * (end - start))
            run = ChunkRun(backend=backend, workspace=workspace, chunk_size=chunk_size, deltas=deltas,
                           last_tokens=torch.clamp(lens[:active], max=end) - 1 - start)
            h, states = model.forward_chunk(ids[:active, start:end], states, run)
            rows = torch.nonzero((last[:active] >= start) & (last[:active] < end)).flatten()
            if rows.numel():
                out = model.final_norm(h[rows.to(h.device), (last[rows] - start).to(h.device)])
                if pooled is None:
                    pooled = out.new_empty(b, out.shape[-1])
                pooled[rows.to(h.device)] = out
            branching = int((last > end).sum()) if end in cut_set else 0  # rows whose body goes on past the cut
            if branching:
                branch_run = ChunkRun(backend=backend, chunk_size=chunk_size,
                                      deltas=None if deltas is None else [
                                          None if d is None else d.keep_rows(branching) for d in deltas])
                token = torch.full((branching, 1), branch_id, dtype=ids.dtype, device=ids.device)
                hb, _ = model.forward_chunk(token, [s.keep_rows(branching) for s in states], branch_run)
                outs = model.final_norm(hb[:, 0])
                for row in range(branching):
                    branches[row].append(outs[row])
            start = end
    result = torch.empty_like(pooled)
    result[order.to(pooled.device)] = pooled
    by_row: list[torch.Tensor] = [pooled.new_empty(0, pooled.shape[-1])] * b
    for sorted_row, original in enumerate(order.tolist()):
        if branches[sorted_row]:
            by_row[original] = torch.stack(branches[sorted_row])
    return result, by_row


def pool_last_token(
    model: RecurrentEncoder, input_ids: torch.Tensor, lengths: torch.Tensor, backend: str = "auto",
    chunk_size: int | None = None, context_extension: str = "auto",
) -> torch.Tensor:
    """Differentiable twin of ``encode_vertical`` for training: one horizontal pass, autograd kept.

    Memory grows with T (every activation is kept for backward), so training inputs are truncated
    (``max_seq_length``); inference goes through ``encode_vertical``.

    Arguments:
        input_ids: (b, T) right-padded ids; lengths: (b,) real lengths, each in [1, T]
    Return:
        (b, d) final-normed hidden state at position lengths - 1 of each row
    """
    b, T = input_ids.shape
    if b == 0:
        return torch.empty(0, model.dim, device=input_ids.device)
    lengths = lengths.to(device=input_ids.device, dtype=torch.long)
    if int(lengths.min()) < 1 or int(lengths.max()) > T:
        raise ValueError(f"lengths must lie in [1, {T}]")
    h, _ = model.forward_chunk(input_ids, None, ChunkRun(backend=backend, chunk_size=chunk_size,
                                                         deltas=model.delta_controls(lengths.cpu(), context_extension)))
    last = h[torch.arange(b, device=h.device), lengths - 1]  # (b, d): padding after EOS cannot reach it (causal)
    return model.final_norm(last)


class VerticalStream:
    """One sequence fed piece by piece through the vertical engine; the embedding comes out at ``finish``.

    Pieces of any size are buffered into chunks of exactly V tokens, so the chunk boundaries (and the result) are
    those of ``encode_vertical`` on the whole sequence with the same V, while memory holds one chunk's activations,
    the per-layer states and at most V pending ids, however long the sequence. The last token fed is the pooling
    position (the EOS).

    With ``cuts`` (increasing positions) the stream also branches as ``encode_with_branches`` does: at each cut
    ``c`` below the last position, chunks end at ``c`` and ``on_branch`` receives the final-normed output of
    ``branch_id`` run from the states after the first ``c`` tokens (the stream goes on from those states). A cut is
    taken once two tokens past it have been fed (so it is known not to be the last position), or at ``finish``.

    Arguments:
        vertical_chunk_size: V >= 1; None picks ``default_vertical_chunk_size`` for a single sequence
        total_length: the whole sequence's length in tokens. Context extension keys its Δ controls by it, so a
            stream with context extension on needs it up front (``finish`` checks it was right).
        chunk_size, context_extension, threads: as in ``encode_vertical``
        cuts, branch_id, on_branch: the branches, as above (all three or none)
    """

    def __init__(self, model: RecurrentEncoder, vertical_chunk_size: int | None = None, backend: str = "auto",
                 total_length: int | None = None, chunk_size: int | None = None,
                 context_extension: str = "auto", threads: int | str | None = None,
                 cuts: Iterable[int] | None = None, branch_id: int | None = None,
                 on_branch: Callable[[torch.Tensor], None] | None = None):
        V = vertical_chunk_size if vertical_chunk_size is not None else default_vertical_chunk_size(
            1, model.config.chunk_size, next(model.parameters()).device)
        if V < 1:
            raise ValueError(f"vertical_chunk_size must be >= 1, got {V}")
        if total_length is None and resolve_mode(model.context_extension, context_extension) != "off":
            raise ValueError("this model's context extension depends on the whole input length: pass "
                             "total_length (count the tokens first) or switch context extension off")
        if (cuts is None) != (branch_id is None) or (cuts is None) != (on_branch is None):
            raise ValueError("branches need cuts, branch_id and on_branch together")
        self.model, self.V, self.backend, self.total_length = model, V, backend, total_length
        self.chunk_size = chunk_size
        self.threads = check_threads(threads)
        self.deltas = None if total_length is None else model.delta_controls(torch.tensor([total_length]),
                                                                             context_extension)
        self.device = model.device
        self.tokens = 0  # tokens run through the model so far
        self._pending: list[torch.Tensor] = []  # ids not yet run, fewer than V in total between calls
        self._n_pending = 0
        self._states = None
        self._last_h: torch.Tensor | None = None  # (1, d) residual stream at the latest token run
        self._workspace = Workspace() if self.device.type == "cpu" else None
        self._cuts = iter(cuts) if cuts is not None else None
        self._branch_id, self._on_branch = branch_id, on_branch
        self._next_cut = self._advance_cut(0)

    def feed(self, ids) -> None:
        """Append token ids (a sequence of ints or a 1-D tensor); every full chunk of V runs at once."""
        ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
        if ids.numel() == 0:
            return
        self._pending.append(ids)
        self._n_pending += ids.numel()
        if self._cuts is not None:
            self._drain(final=False)
            return
        if self._n_pending >= self.V:
            pending = torch.cat(self._pending)
            full = (pending.numel() // self.V) * self.V
            for start in range(0, full, self.V):
                self._run(pending[start : start + self.V])
            rest = pending[full:]
            self._pending, self._n_pending = ([rest] if rest.numel() else []), rest.numel()

    @torch.inference_mode()
    def finish(self) -> torch.Tensor:
        """(d,) final-normed hidden state at the last token fed (the pooled, unnormalised embedding)."""
        if self._cuts is not None:
            self._drain(final=True)
        if self._n_pending:
            self._run(torch.cat(self._pending))
            self._pending, self._n_pending = [], 0
        if self._last_h is None:
            raise ValueError("no token was fed; every sequence needs at least its EOS token")
        if self.total_length is not None and self.tokens != self.total_length:
            raise ValueError(f"total_length was {self.total_length} but {self.tokens} tokens were fed")
        return self.model.final_norm(self._last_h)[0]

    def _advance_cut(self, after: int) -> int | None:
        """The first cut beyond ``after`` tokens (cuts must increase), or None."""
        if self._cuts is None:
            return None
        for cut in self._cuts:
            if cut > after:
                return int(cut)
        return None

    @torch.inference_mode()
    def _drain(self, final: bool) -> None:
        """Run the pending ids up to each cut that can be taken now (then branch) and in chunks of V between."""
        pending = torch.cat(self._pending) if self._pending else torch.empty(0, dtype=torch.long)
        first, fed = self.tokens, self.tokens + pending.numel()
        while True:
            cut = self._next_cut
            if cut is not None and cut <= self.tokens + self.V:
                if cut >= fed - 1:  # not known yet to lie below the last position (or, at the end, it does not)
                    if not final:
                        break
                    self._next_cut = None
                    continue
                self._run(pending[self.tokens - first : cut - first])
                self._branch()
                self._next_cut = self._advance_cut(cut)
                continue
            end = self.tokens + self.V
            if end > fed:
                break
            self._run(pending[self.tokens - first : end - first])
        rest = pending[self.tokens - first :]
        self._pending, self._n_pending = ([rest] if rest.numel() else []), rest.numel()

    def _branch(self) -> None:
        with flush_denormals(self.device), intra_op_threads(self.device, self.threads) as intra_op:
            intra_op.apply(1)
            run = ChunkRun(backend=self.backend, chunk_size=self.chunk_size, deltas=self.deltas)
            token = torch.full((1, 1), self._branch_id, dtype=torch.long, device=self.device)
            h, _ = self.model.forward_chunk(token, self._states, run)
        self._on_branch(self.model.final_norm(h[:, 0])[0])

    @torch.inference_mode()
    def _run(self, chunk: torch.Tensor) -> None:
        with flush_denormals(self.device), intra_op_threads(self.device, self.threads) as intra_op:
            intra_op.apply(chunk.numel())
            run = ChunkRun(backend=self.backend, workspace=self._workspace, chunk_size=self.chunk_size,
                           deltas=self.deltas)
            h, self._states = self.model.forward_chunk(chunk.to(self.device)[None], self._states, run)  # (1, l, d)
        self._last_h = h[:, -1].clone()  # h may live in the workspace, which the next chunk overwrites
        self.tokens += chunk.numel()
