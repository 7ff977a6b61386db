"""``Embedder``: texts in, L2-normalised last-token (EOS) embeddings out, with vertical chunking."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from recemb.core.encoder import RecurrentEncoder, check_context_extension
from recemb.core.loading import load_pretrained
from recemb.core.memory import (
    AUTO,
    ChunkPlan,
    format_bytes,
    input_bytes,
    parse_bytes,
    peak_activation_bytes,
    plan_chunks,
)
from recemb.core.options import check_chunk_size, check_positive
from recemb.core.prompts import query_prompt
from recemb.core.streaming import TokenStream
from recemb.core.texts import check_text, check_texts
from recemb.core.threads import cap_threads, check_threads
from recemb.core.tokenizer import TextTokenizer
from recemb.core.vertical import (
    VerticalStream,
    default_vertical_chunk_size,
    encode_vertical,
    encode_with_branches,
    pad_right,
    pool_last_token,
)
from recemb.kernels import BACKENDS, resolve_backend

__all__ = ["Embedder", "PROGRESS_MIN_TOKENS", "STREAM_MIN_CHARS"]

PROGRESS_MIN_TOKENS = 65536  # show_progress_bar=None shows a bar from this much input on
# Texts longer than this are tokenized in windows and embedded as a stream, one at a time: the ids of a whole
# book never exist at once (a 50 MB text tokenized in one call took 6.5 GB). Shorter ones are batched.
STREAM_MIN_CHARS = 1 << 18


class Embedder:
    """A recurrent text embedder (Mamba2, xLSTM, RWKV-7) with constant memory in the input length.

    Args:
        model: the backbone. It may be shared with other Embedders (``shared_embedder``): every setting
            below is this Embedder's own and is handed down at call time, so the model itself never changes.
        tokenizer: turns text into ids ending in EOS; None allows only ``embed_token_ids``.
        vertical_chunk_size: V, tokens per vertical chunk (a memory dial; any V >= 1 gives the same result).
            None: 4096 for a single sequence, 2·chunk_size for batches; with ``max_memory``, or "auto": from the
            budget.
        backend: SSD scan backend, "auto" | "torch" | "triton".
        chunk_size: SSD chunk length q (numerics only); None: the checkpoint's on Triton, 64 on the torch backend.
        max_length: truncate inputs to this many tokens (EOS included); None never truncates.
        context_extension: which calibrated context-extension methods run: "auto" (every calibrated one),
            "off", "mambaextend", "longmamba" or "both"; see ``set_context_extension``.
        name: where the model came from (recorded by integrations).
        max_memory: a budget for what encoding adds to the loaded model, in bytes or as "2GiB", "512MiB",
            "1.5GB": the activations of one chunk, every layer's recurrent states and the ids being encoded; not
            the weights (``recemb.core.memory.weight_bytes``), the tokenizer's work or the embeddings returned.
            V is then the largest that fits (``chunk_plan``), and batches are split into as many rows per forward
            as fit; a fixed V is kept, its batches split. A budget one chunk of 64 tokens exceeds is refused.
            Estimated from the model's shapes (``recemb.core.memory``), so it holds on the CPU and on CUDA alike.
        threads: CPU intra-op threads: None or "auto" lets ``recemb.core.threads`` choose them per chunk from the
            chunk's size and the cores other processes leave free (``RECEMB_NUM_THREADS``, ``OMP_NUM_THREADS`` or
            a ``torch.set_num_threads`` after import are honoured instead); an int fixes them, at most the cores
            this process may use (more is capped, with a ``recemb.core.threads.ThreadsCappedWarning``).
    """

    def __init__(
        self,
        model: RecurrentEncoder,
        tokenizer: TextTokenizer | None = None,
        vertical_chunk_size: int | None = None,
        backend: str = "auto",
        max_length: int | None = None,
        name: str | None = None,
        chunk_size: int | None = None,
        context_extension: str = "auto",
        max_memory: int | str | None = None,
        threads: int | str | None = None,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.vertical_chunk_size = check_chunk_size(vertical_chunk_size)
        self.backend = backend
        self.max_length = check_positive("max_length", max_length)
        self.name = name
        self.chunk_size = check_positive("chunk_size", chunk_size)
        self.set_context_extension(context_extension)
        # More than the usable cores is capped, with a warning; on a GPU the CPU threads are not used.
        self.threads = cap_threads(threads) if model.device.type == "cpu" else check_threads(threads)
        self.max_memory = None if max_memory is None else parse_bytes(max_memory)
        if self.vertical_chunk_size == AUTO and self.max_memory is None:
            raise ValueError("vertical_chunk_size='auto' picks V from a memory budget: pass max_memory too "
                             "(e.g. max_memory='2GiB')")
        if self.max_memory is not None:
            self.chunk_plan()  # a budget too small for one chunk is refused now, not at the first call

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        quantize: str | None = None,
        vertical_chunk_size: int | None = None,
        backend: str = "auto",
        chunk_size: int | None = None,
        tokenizer: str | os.PathLike | TextTokenizer | None = None,
        eos_token_id: int | None = None,
        max_length: int | None = None,
        revision: str | None = None,
        cache_dir: str | os.PathLike | None = None,
        token: str | bool | None = None,
        local_files_only: bool | None = None,
        context_extension: str = "auto",
        max_memory: int | str | None = None,
        threads: int | str | None = None,
    ) -> "Embedder":
        """Load a local folder or a Hugging Face id (resolved through the hub cache; honours HF_HUB_OFFLINE).

        device: default cuda if available, else cpu. dtype: a floating-point dtype or its name (an integer one is
        refused before anything is read: int8 weights are ``quantize="int8"``); default fp32 on the CPU, the
        checkpoint's dtype on a GPU; "auto": on the CPU bf16 where this machine measured the model's bf16
        projections >= 1.2x faster than fp32, else fp32 (a short probe on first load, cached per machine:
        ``recemb.core.autodtype``; ``recemb info`` shows it). bf16 on the CPU is mixed precision
        (``recemb.core.precision``). quantize: "int8" for int8 in_proj on the CPU, per-token scales, independent of
        the batch (opt-in, never chosen by "auto"; docs/benchmarks.md, "Low-precision CPU inference", has what it
        costs and gains).
        tokenizer: default the model folder's own; a folder, a hub id or a TextTokenizer otherwise
        (mamba_ssm checkpoints ship none: state-spaces/mamba2-* use EleutherAI/gpt-neox-20b).
        max_memory: a budget for encoding (activations and states, not the weights), from which V is picked;
        see the class docstring. The options are named in ``recemb.core.options`` (LOAD_OPTIONS,
        CALLER_OPTIONS); ``shared_embedder`` takes the same ones and loads through the same ``load_pretrained``.
        """
        model, tok = load_pretrained(name_or_path, device=device, dtype=dtype, quantize=quantize,
                                     tokenizer=tokenizer,
                                     eos_token_id=eos_token_id, revision=revision, cache_dir=cache_dir,
                                     token=token, local_files_only=local_files_only)
        return cls(model, tok, vertical_chunk_size=vertical_chunk_size, backend=backend,
                   max_length=max_length, name=str(name_or_path), chunk_size=chunk_size,
                   context_extension=context_extension, max_memory=max_memory, threads=threads)

    def set_context_extension(self, mode: str) -> None:
        """Switch MambaExtend Δ scaling / LongMamba filtering for this Embedder: "auto" (every calibrated
        method), "off", "mambaextend", "longmamba" or "both" (a method that is not calibrated is an error).

        Other Embedders sharing the model keep their own mode. Either method acts only on inputs of at least
        the calibrated minimum length; shorter ones are embedded by the plain model in every mode."""
        check_context_extension(self.model, mode)  # checks now; resolved again per call
        self._context_extension = mode

    @property
    def context_extension(self) -> str:
        """The methods that run: "off", "mambaextend", "longmamba" or "both" ("auto" resolved)."""
        return check_context_extension(self.model, self._context_extension)

    def _run_options(self) -> dict:
        """This Embedder's settings, as the engine takes them on every call."""
        return dict(backend=self.backend, chunk_size=self.chunk_size,
                    context_extension=self.context_extension, threads=self.threads)

    def chunk_plan(self, rows: int = 1, longest: int | None = None, vertical_chunk_size: int | str | None = None,
                   total_tokens: int = 0) -> ChunkPlan | None:
        """V and rows per forward for ``rows`` rows of at most ``longest`` tokens (None: unknown, a stream) under
        ``max_memory``, with this Embedder's V (or ``vertical_chunk_size``: an int is kept, its rows fitted);
        None without a budget. ``total_tokens``: every input sequence's tokens (their ids count in the budget).
        A budget that one row of the smallest chunk exceeds is a ``ValueError`` that says what it needs."""
        if self.max_memory is None:
            return None
        V = self.vertical_chunk_size if vertical_chunk_size is None else vertical_chunk_size
        backend = resolve_backend(self.backend, self.device)

        def peak(r: int, v: int) -> int:
            return peak_activation_bytes(self.config, self.dtype, r, v, self.chunk_size, backend)

        return plan_chunks(self.max_memory, peak, rows, longest,
                           preferred=default_vertical_chunk_size(rows, self.config.chunk_size, self.device),
                           vertical_chunk_size=None if V in (None, AUTO) else V,
                           fixed=input_bytes(rows, longest or 0, total_tokens))

    def _chunking(self, rows: int, longest: int | None, vertical_chunk_size, total_tokens: int = 0
                  ) -> tuple[int | None, int]:
        """(V, rows per forward) of one call: the per-call V, else this Embedder's; under a budget, its plan.
        V None: the engine's default."""
        V = check_chunk_size(vertical_chunk_size)
        plan = self.chunk_plan(rows, longest, V, total_tokens)
        if plan is not None:
            return plan.vertical_chunk_size, plan.rows
        V = self.vertical_chunk_size if V is None else V
        if V == AUTO:
            raise ValueError("vertical_chunk_size='auto' picks V from a memory budget: this Embedder has no "
                             "max_memory")
        return V, rows

    # ------------------------------------------------------------------ properties
    @property
    def dim(self) -> int:
        return self.model.dim

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @property
    def config(self):
        return self.model.config

    # ------------------------------------------------------------------ text API
    def tokenize(self, texts: Sequence[str], prompt: str | None = None, max_length: int | None = None
                 ) -> list[list[int]]:
        """Token ids per text: prompt + text, BOS as the tokenizer adds it, EOS last; truncated to max_length."""
        if self.tokenizer is None:
            raise RuntimeError(
                "this model was loaded without a tokenizer (its folder has no tokenizer.json or "
                "tokenizer_config.json): pass tokenizer=... to from_pretrained, or use embed_token_ids"
            )
        if prompt is not None and not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str or None, got {type(prompt).__name__}")
        texts = check_texts(texts, single=False)
        texts = [prompt + t for t in texts] if prompt else texts
        ids = self.tokenizer.encode(texts)
        limit = check_positive("max_length", max_length) or self.max_length
        if limit is not None:
            eos = self.tokenizer.eos_token_id
            ids = [seq if len(seq) <= limit else seq[: limit - 1] + [eos] for seq in ids]
        return ids

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 8,
        prompt: str | None = None,
        normalize: bool = True,
        show_progress_bar: bool | None = None,
        vertical_chunk_size: int | None = None,
        max_length: int | None = None,
    ) -> np.ndarray:
        """Embed texts: (n, dim) float32, or (dim,) for a single str. ``prompt`` is prepended verbatim."""
        single = isinstance(texts, str)
        items = check_texts(texts)
        streamed = {i for i, t in enumerate(items) if self.streams(t)}
        batched = [i for i in range(len(items)) if i not in streamed]
        ids = self.tokenize([items[i] for i in batched], prompt=prompt, max_length=max_length) if batched else []
        out = torch.empty(len(items), self.dim, dtype=torch.float32)
        out[batched] = self.embed_token_ids(ids, normalize=normalize, batch_size=batch_size,
                                            show_progress_bar=show_progress_bar,
                                            vertical_chunk_size=vertical_chunk_size).float().cpu()
        for i in sorted(streamed):
            out[i] = self.encode_stream(items[i], prompt=prompt, normalize=normalize, max_length=max_length,
                                        vertical_chunk_size=vertical_chunk_size,
                                        show_progress_bar=show_progress_bar).cpu()
        array = out.numpy()
        return array[0] if single else array

    def encode_queries(self, queries: str | Sequence[str], instruction: str | None = None, **kwargs) -> np.ndarray:
        """Queries get ``Instruct: {instruction}\\nQuery: ``; ``instruction`` may be an E5 task name
        (e.g. "SciFact"), any instruction text, or None for the web-search default."""
        return self.encode(queries, prompt=query_prompt(instruction), **kwargs)

    def encode_documents(self, documents: str | Sequence[str], **kwargs) -> np.ndarray:
        """Documents are embedded without any prompt, so one index serves every task."""
        if kwargs.get("prompt"):
            raise ValueError("documents never get a prompt or instruction; use encode() for custom prompts")
        kwargs.pop("prompt", None)
        return self.encode(documents, **kwargs)

    # ------------------------------------------------------------------ streams (texts of any length)
    def streams(self, text: str) -> bool:
        """Whether ``encode`` embeds this text as a stream (long, and a tokenizer that can be cut safely)."""
        return len(text) > STREAM_MIN_CHARS and self.tokenizer is not None and self.tokenizer.streamable

    @property
    def needs_whole_length(self) -> bool:
        """Context extension keys its Δ controls by the whole input length, so with it on a stream must be
        counted (tokenized once without embedding) before it is embedded."""
        return self.context_extension != "off"

    def tokenize_stream(self, text: str, prompt: str | None = None, max_length: int | None = None,
                        on_chars=None, offsets: bool = False) -> TokenStream:
        """The ids of ``tokenize([text], prompt, max_length)[0]`` as bounded pieces, computed lazily on text
        windows; ``on_chars(n)`` reports progress in characters. ``.truncated`` tells whether the limit cut it,
        ``.notes`` what bounding the memory took (a stretch read no further, words made the unknown token).

        ``offsets``: pieces are ``(ids, spans)``, each token's ``(start, end)`` characters or None (BOS, CLS, SEP,
        EOS; see ``TextTokenizer.encode``), truncated with the ids. With a prompt the spans index ``prompt + text``
        (subtract ``len(prompt)`` for ``text``'s own). Needs a fast tokenizer (``ValueError`` otherwise)."""
        if self.tokenizer is None:
            self.tokenize([])  # the error that names the missing tokenizer
        check_text(text)
        if prompt is not None and not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str or None, got {type(prompt).__name__}")
        if offsets and not self.tokenizer.has_offsets:  # now, not as a TokenizationError from inside the stream
            raise ValueError("offsets need a fast (tokenizers-backed) tokenizer, and this model's is not one")
        notes: list[str] = []
        pieces = self.tokenizer.encode_stream(prompt + text if prompt else text, on_chars=on_chars, notes=notes,
                                              offsets=offsets)
        limit = check_positive("max_length", max_length) or self.max_length
        return TokenStream(pieces, self.tokenizer.eos_token_id, limit, notes=notes, spans=offsets)

    def encode_stream(self, text: str, prompt: str | None = None, normalize: bool = True,
                      max_length: int | None = None, vertical_chunk_size: int | None = None,
                      show_progress_bar: bool | None = None) -> torch.Tensor:
        """Embed one text of any length in bounded memory: (dim,) fp32. The progress bar counts characters
        (tokenizing and embedding run interleaved); None shows it."""
        check_text(text)
        total = None
        if self.needs_whole_length:
            with tqdm(total=len(text), disable=show_progress_bar is False, unit="char", unit_scale=True,
                      desc="Counting tokens") as bar:
                total = self.count_tokens(text, prompt=prompt, max_length=max_length, on_chars=bar.update)
        with tqdm(total=len(text), disable=show_progress_bar is False, unit="char", unit_scale=True,
                  desc="Embedding") as bar:
            stream = self.tokenize_stream(text, prompt=prompt, max_length=max_length, on_chars=bar.update)
            vector = self.embed_stream(stream, total_tokens=total, normalize=normalize,
                                       vertical_chunk_size=vertical_chunk_size)
        for note in stream.notes:  # what the embedding is of, when it is not of every character
            warnings.warn(f"the text was embedded in bounded memory: {note}", stacklevel=2)
        return vector

    def count_tokens(self, text: str, prompt: str | None = None, max_length: int | None = None,
                     on_chars=None) -> int:
        """Tokens of ``text`` after truncation, counted in bounded memory (a stream that is not embedded)."""
        stream = self.tokenize_stream(text, prompt=prompt, max_length=max_length, on_chars=on_chars)
        for _ in stream:
            pass
        return stream.tokens

    @torch.inference_mode()
    def embed_stream(self, pieces, total_tokens: int | None = None, normalize: bool = False,
                     vertical_chunk_size: int | None = None, cuts: Iterable[int] | None = None,
                     on_branch: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
        """Embed one sequence given as pieces of ids (EOS last): (dim,) fp32, equal to ``embed_token_ids`` on the
        concatenation with the same V, in memory that does not grow with its length. ``total_tokens`` is needed
        when ``needs_whole_length``. With ``cuts`` (increasing), ``on_branch`` gets, as the stream reaches each cut
        below its last position, the embedding of the prefix up to the cut followed by the EOS, read from this
        pass (as ``embed_token_ids_with_branches``; normalised with ``normalize``)."""
        V, _ = self._chunking(1, total_tokens, vertical_chunk_size)
        branches = {}
        if cuts is not None:
            if on_branch is None or self.tokenizer is None or self.tokenizer.eos_token_id is None:
                raise ValueError("branches need on_branch and a tokenizer that names the EOS")

            def branched(vector: torch.Tensor) -> None:
                vector = vector.float()
                on_branch(F.normalize(vector, p=2, dim=-1) if normalize else vector)

            branches = dict(cuts=cuts, branch_id=self.tokenizer.eos_token_id, on_branch=branched)
        stream = VerticalStream(self.model, V, total_length=total_tokens, **branches, **self._run_options())
        vocab = self.config.vocab_size
        for piece in pieces:
            piece = torch.as_tensor(piece, dtype=torch.long)
            if piece.numel() and (int(piece.min()) < 0 or int(piece.max()) >= vocab):
                raise ValueError(f"token id outside [0, {vocab}) in the stream")
            stream.feed(piece)
        out = stream.finish().float()
        return F.normalize(out, p=2, dim=-1) if normalize else out

    # ------------------------------------------------------------------ ids API
    @torch.inference_mode()
    def embed_token_ids(
        self,
        sequences: Sequence[Sequence[int]] | torch.Tensor,
        normalize: bool = False,
        batch_size: int = 8,
        show_progress_bar: bool | None = None,
        vertical_chunk_size: int | None = None,
    ) -> torch.Tensor:
        """Embed already-tokenised sequences (EOS included, pooled at each one's last token): (n, dim) fp32."""
        seqs = _validate_ids(sequences, self.config.vocab_size)
        batch_size = check_positive("batch_size", batch_size)
        check_chunk_size(vertical_chunk_size)
        out = torch.empty(len(seqs), self.dim, dtype=torch.float32, device=self.device)
        total = sum(len(s) for s in seqs)
        show = show_progress_bar if show_progress_bar is not None else total >= PROGRESS_MIN_TOKENS
        with tqdm(total=total, disable=not show, unit="tok", unit_scale=True, desc="Embedding") as bar:
            for idx, batch_ids, lengths in self._batches(seqs, batch_size):
                pooled = self._encode_batch(batch_ids, lengths, vertical_chunk_size, total, on_tokens=bar.update)
                out[idx.to(self.device)] = pooled.float()
        return F.normalize(out, p=2, dim=-1) if normalize else out

    def embed_token_ids_with_branches(
        self,
        sequences: Sequence[Sequence[int]],
        cuts: Sequence[int],
        normalize: bool = False,
        batch_size: int = 8,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``embed_token_ids`` of each sequence and, from the same pass, the embedding of each of its prefixes cut
        at ``cuts`` (increasing, shared by all; those below a sequence's last position) followed by its EOS: what a
        sequence's passages ending there get when read from the whole sequence's pass (``encode_with_branches``;
        one extra token per cut instead of a pass per passage). Returns ((n, dim), per sequence (k, dim)), fp32."""
        seqs = _validate_ids(sequences, self.config.vocab_size)
        batch_size = check_positive("batch_size", batch_size)
        if self.tokenizer is None or self.tokenizer.eos_token_id is None:
            raise ValueError("branches end with the EOS token: this Embedder has no tokenizer that names one")
        eos = self.tokenizer.eos_token_id
        out = torch.empty(len(seqs), self.dim, dtype=torch.float32, device=self.device)
        branches: list[torch.Tensor] = [out.new_empty(0, self.dim)] * len(seqs)
        total = sum(len(s) for s in seqs)
        for idx, batch_ids, lengths in self._batches(seqs, batch_size):
            V, rows = self._chunking(len(idx), int(lengths.max()), None, total)
            for start in range(0, len(idx), rows):
                part = lengths[start : start + rows]
                pooled, found = encode_with_branches(self.model, batch_ids[start : start + rows, : int(part.max())],
                                                     part, list(cuts), eos, V, **self._run_options())
                where = idx[start : start + rows]
                out[where.to(self.device)] = pooled.float()
                for i, vectors in zip(where.tolist(), found):
                    branches[i] = F.normalize(vectors.float(), p=2, dim=-1) if normalize else vectors.float()
        return (F.normalize(out, p=2, dim=-1) if normalize else out), branches

    def _encode_batch(self, input_ids: torch.Tensor, lengths: torch.Tensor, vertical_chunk_size,
                      total_tokens: int = 0, on_tokens=None) -> torch.Tensor:
        """``encode_vertical`` on a right-padded batch, split into as many rows per forward as the budget lets
        run at once (all of them without one): (b, d) pooled, in the batch's order."""
        b = input_ids.shape[0]
        longest = int(lengths.max()) if b else 0
        V, rows = self._chunking(b, longest, vertical_chunk_size, total_tokens)
        if rows >= b:
            return encode_vertical(self.model, input_ids, lengths, V, on_tokens=on_tokens, **self._run_options())
        parts = []
        for start in range(0, b, rows):
            part = lengths[start : start + rows]
            parts.append(encode_vertical(self.model, input_ids[start : start + rows, : int(part.max())], part, V,
                                         on_tokens=on_tokens, **self._run_options()))
        return torch.cat(parts)

    def embed_padded(self, input_ids: torch.Tensor, lengths: torch.Tensor,
                     vertical_chunk_size: int | None = None, differentiable: bool = False) -> torch.Tensor:
        """Pooled, unnormalised embeddings of a right-padded batch (b, T) with real lengths (b,): (b, d).

        differentiable: one horizontal pass that autograd can go through (training; memory grows with T);
        otherwise vertical chunking with V = ``vertical_chunk_size`` or this Embedder's."""
        if differentiable:
            options = self._run_options()
            options.pop("threads")  # training: the trainer's own thread setting
            return pool_last_token(self.model, input_ids, lengths, **options)
        return self._encode_batch(input_ids, lengths, vertical_chunk_size)

    def _batches(self, seqs: list[list[int]], batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor,
                                                                                   torch.Tensor]]:
        """Length-sorted batches: (original indices, right-padded ids (b, T), lengths (b,))."""
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        pad_id = self.config.pad_token_id if self.config.pad_token_id is not None else 0
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, lengths = pad_right([seqs[i] for i in idx], pad_id)
            yield torch.tensor(idx), ids.to(self.device), lengths

    def __repr__(self) -> str:
        c = self.config
        return (f"Embedder(name={self.name!r}, dim={self.dim}, layers={c.num_hidden_layers}, device={self.device}, "
                f"dtype={self.dtype}, vertical_chunk_size={self._describe_chunking()}, "
                f"backend={self.backend!r}, "
                f"chunk_size={self.chunk_size}, context_extension={self.context_extension!r}, "
                f"threads={self.threads or 'auto'!r})")

    def _describe_chunking(self) -> str:
        """V as set, and under a budget the V it picks for one long text: "'auto' (V=1408 under max_memory=64.0
        MiB)"."""
        if self.max_memory is None:
            return repr(self.vertical_chunk_size)
        try:
            picked = f"V={self.chunk_plan().vertical_chunk_size}"
        except ValueError:  # settings changed since (chunk_size): no chunk fits any more
            picked = "no V fits"
        return f"{self.vertical_chunk_size or AUTO!r} ({picked} under max_memory={format_bytes(self.max_memory)})"


def _validate_ids(sequences, vocab_size: int) -> list[list[int]]:
    if isinstance(sequences, torch.Tensor):
        if sequences.dim() != 2:
            raise ValueError(f"a tensor of token ids must be 2-D (n, T), got shape {tuple(sequences.shape)}")
        seqs = sequences.tolist()
    else:
        seqs = [list(s) for s in sequences]
    for i, s in enumerate(seqs):
        if len(s) == 0:
            raise ValueError(f"sequences[{i}] is empty; every sequence needs at least its EOS token")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in s):
            raise TypeError(f"sequences[{i}] must hold ints")
        lo, hi = min(s), max(s)
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"sequences[{i}] has token id {lo if lo < 0 else hi} outside [0, {vocab_size})")
    return seqs
