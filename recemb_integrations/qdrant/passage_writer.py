"""A long document's passages, written as its token stream goes by (``writer.DocumentWriter._streamed``): each
group embedded (or given the document pass's vectors, one-pass) and emitted as one upsert, before the document's
own point."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from recemb_integrations.qdrant.documents import Document
from recemb_integrations.qdrant.points import PassageWindows, Span, passage_payload, point_id, point_vectors
from recemb_integrations.qdrant.record import SyncSettings
from recemb_integrations.qdrant.writes import Upsert
from recemb_integrations.stores import StoredPoint

__all__ = ["PASSAGE_WRITE_BATCH", "PassageWriter", "passage_ends"]

PASSAGE_WRITE_BATCH = 64  # passages embedded and upserted together


def passage_ends(settings: SyncSettings, below: int | None = None) -> Iterator[int]:
    """Where a document's full passages end, in tokens from its start (``PassageWindows``' grid: a window of
    ``passage_tokens`` every ``passage_tokens - passage_overlap``), up to ``below`` (None: without end). A one-pass
    document's passage ending there takes the EOS run from the state after that many tokens; its last passage ends
    where the document does and takes the document's own vector."""
    end, step = settings.passage_tokens, settings.passage_tokens - settings.passage_overlap
    while below is None or end < below:
        yield end
        end += step


class PassageWriter:
    """Embeds a document's passages in groups as its ids (and their spans) stream in and emits their upserts
    (before the document's own point). A document of at most ``passages_above`` tokens gets none: its windows are
    held until it is longer, and dropped if it ends first.

    ``given``: the passages' vectors come from the document's own pass (``long_documents`` one-pass), one per
    window in order through ``give`` and the last at ``close``; a window waits for its vector. Otherwise each
    passage is embedded on its own, and ``mean_vector`` is where they point on average (the document's vector when
    only passages are embedded). ``keep_head``: the first ``passages_above + 1`` ids are kept (``head``), so a
    document that turns out too short for passages can be embedded whole."""

    def __init__(self, writer: Any, doc: Document, document_hash: str, given: bool = False,
                 keep_head: bool = False):
        self.writer, self.doc, self.document_hash = writer, doc, document_hash
        job = writer.job
        settings = job.settings
        self.windows = PassageWindows(settings.passage_tokens, settings.passage_overlap,
                                      writer.embedder.tokenizer.eos_token_id)
        self.above = settings.passages_above
        self.pending: list[tuple[list[int], tuple[int, int]]] = []
        self.given = given
        self.vectors: list[Any] = []  # given vectors not yet matched with a window
        self.keep_head = keep_head
        self.head: list[int] = []
        self._sum: np.ndarray | None = None
        self.seen = 0  # ids fed (the last may be the EOS)
        self.written = 0
        self.tokens = 0  # embedded in passages (EOS included), counted in the report beside the document's own

    def give(self, vector) -> None:
        """The next passage's vector, read from the document's pass (``given`` only)."""
        self.vectors.append(np.asarray(vector, dtype=np.float32))
        self.tokens += 1  # the EOS run at the passage's end
        self._write_ready(final=False)

    def feed(self, ids: Sequence[int], spans: Sequence[Span]) -> None:
        if self.keep_head and len(self.head) <= self.above:
            self.head += list(ids[: self.above + 1 - len(self.head)])
        self.pending += self.windows.feed(ids, spans)
        self.seen += len(ids)
        self._write_ready(final=False)

    def close(self, last_vector=None) -> int:
        """Writes the rest (``last_vector``: the document's own, which its last passage shares when ``given``);
        returns how many passages the document has."""
        self.pending += self.windows.finish()
        if self.seen - 1 <= self.above:  # short enough to be found by its own point alone
            self.pending, self.vectors = [], []
            return 0
        if self.given:
            self.vectors.append(np.asarray(last_vector, dtype=np.float32))
            if len(self.vectors) != len(self.pending):
                raise RuntimeError(f"{len(self.pending)} passages left for {len(self.vectors)} vectors of the "
                                   "document's pass")
        self._write_ready(final=True)
        return self.written

    def mean_vector(self) -> np.ndarray:
        """The normalised mean of the passages' vectors (embedded ones only)."""
        if self._sum is None:
            raise ValueError("no passage was embedded")
        return (self._sum / np.linalg.norm(self._sum)).astype(np.float32)

    def _write_ready(self, final: bool) -> None:
        if not final and self.seen - 1 <= self.above:
            return
        while self.pending:
            ready = min(len(self.pending), len(self.vectors)) if self.given else len(self.pending)
            if ready == 0 or (not final and ready < PASSAGE_WRITE_BATCH):
                return
            n = min(ready, PASSAGE_WRITE_BATCH)
            self._write(self.pending[:n], self.vectors[:n] if self.given else None)
            self.pending = self.pending[n:]
            if self.given:
                self.vectors = self.vectors[n:]

    def _write(self, windows: list[tuple[list[int], tuple[int, int]]], given: list | None) -> None:
        writer, doc, job = self.writer, self.doc, self.writer.job
        if given is None:
            vectors = writer.embedder.embed_token_ids([ids for ids, _ in windows], normalize=True).cpu().numpy()
            total = vectors.sum(axis=0, dtype=np.float64)
            self._sum = total if self._sum is None else self._sum + total
            self.tokens += sum(len(ids) for ids, _ in windows)
        else:
            vectors = given
        points = []
        for i, ((ids, span), v) in enumerate(zip(windows, vectors), start=self.written):
            # The passage's own characters: what its BM25 vector counts and what a search shows and quotes.
            text = doc.text[span[0] : span[1]]
            payload = passage_payload(doc.id, i, doc.metadata, len(ids), job.root, span, self.document_hash,
                                      text if job.settings.store_text else None)
            sparse = writer.bm25_passages.embed_document(text) if writer.bm25_passages is not None else None
            points.append(StoredPoint(point_id(doc.id, i), payload, point_vectors(job.layout, v, sparse)))
        writer.emit(Upsert(tuple(points)))
        self.written += len(windows)
