"""The second pass of a sync: read the documents to (re-)embed again, a batch at a time, embed them and make their
points' writes, each document's passages before its own point (the point that carries its content hash: a crash
before it leaves no point, and the next sync redoes the document). A changed document's old own point is removed
before the first of its new points is written, so no crash leaves its old version visible with part of its
passages overwritten: a search shows all of a version or none of it. A long document is tokenized
in windows and embedded as a stream, its passages cut from the same stream: memory is bounded by a batch (or one
long document), not by the corpus.

``DocumentWriter`` makes the writes and hands each to ``emit`` as data (``writes.Upsert`` and
``writes.DeleteStalePassages``); what a sync does with them is its executor's choice: ``LocalExecutor`` hands them to
the sync as they are made, a Ray executor returns them to the driver (``recemb_integrations.ray``), and the sync
applies every one through the same step (``StoreCalls.apply``). The executor contract is data in, data out:
``run(job, tasks, embedder, emit, on_outcome, show_progress_bar)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from recemb.core.streaming import TokenizationError, TokenStream
from recemb_integrations.qdrant.documents import Document, DocumentEntry, WriteOutcome
from recemb_integrations.qdrant.errors import VectorError
from recemb_integrations.qdrant.passage_writer import PassageWriter, passage_ends
from recemb_integrations.qdrant.points import (
    content_hash,
    document_payload,
    passage_payload,
    point_id,
    point_vectors,
)
from recemb_integrations.qdrant.record import ONE_PASS, PASSAGES_ONLY, WHOLE_AND_PASSAGES, SyncSettings, bm25_encoders
from recemb_integrations.qdrant.vectors import check_vector
from recemb_integrations.qdrant.writes import DeletePoints, DeleteStalePassages, Upsert, Write
from recemb_integrations.stores import StoredPoint
from recemb_integrations.terminal import escape

__all__ = ["BATCH_MAX_CHARS", "DocumentWriter", "EXTERNAL_PASSAGE_GROUP", "Executor", "LocalExecutor", "WriteJob"]

EXTERNAL_PASSAGE_GROUP = 256  # passages of another library's model embedded together, across documents
BATCH_MAX_CHARS = 4 << 20  # text of one batch at most (its token ids are held as Python ints until embedded)
# A document of at least this many characters with fewer than one token per this many is warned of: English
# averages about four characters a token, CJK one or two; a whole file of one unbroken "word" gives three tokens.
FEW_TOKENS_MIN_CHARS = 1000
FEW_TOKENS_CHARS_PER_TOKEN = 100


@dataclass(frozen=True)
class WriteJob:
    """Everything the second pass needs besides the model and the documents: data only, so it travels to other
    processes. ``settings``: the sync's (passages, truncation, stored texts); ``bm25``: the collection's recorded
    BM25 settings (None: dense-only); ``fingerprint``: the model the collection records, which whoever embeds must
    load; ``root``: recorded on every point."""

    collection: str
    layout: int
    root: str
    settings: SyncSettings
    batch_size: int
    bm25: dict[str, Any] | None
    fingerprint: str


class Executor(Protocol):
    """Where a sync's embedding runs: it embeds ``tasks`` ((entry, "added" | "updated"), the plan's order) as
    ``job`` says, passes every write to ``emit`` in the order it was made and, after a group's writes, its
    ``WriteOutcome`` to ``on_outcome``."""

    def run(self, job: WriteJob, tasks: Sequence[tuple[DocumentEntry, str]], embedder: Any,
            emit: Callable[[Write], None], on_outcome: Callable[[WriteOutcome], None],
            show_progress_bar: bool = False) -> None: ...


class LocalExecutor:
    """The embedding in this process, each write sent as soon as it is made. ``embed_progress``: the model's own
    progress bars (``Embedder.embed_token_ids``)."""

    def __init__(self, embed_progress: bool | None = None):
        self.embed_progress = embed_progress

    def run(self, job: WriteJob, tasks: Sequence[tuple[DocumentEntry, str]], embedder: Any,
            emit: Callable[[Write], None], on_outcome: Callable[[WriteOutcome], None],
            show_progress_bar: bool = False) -> None:
        from tqdm.auto import tqdm

        with tqdm(total=len(tasks), disable=not show_progress_bar, desc=f"Syncing {job.collection}",
                  unit="doc") as bar:
            def counted(outcome: WriteOutcome) -> None:
                on_outcome(outcome)
                bar.update(outcome.documents)

            DocumentWriter(embedder, job, emit).write(tasks, counted, show_progress_bar=self.embed_progress,
                                                      show_streams=show_progress_bar)


class DocumentWriter:
    """Embeds documents and makes their points' writes (see the module's docstring)."""

    def __init__(self, embedder: Any, job: WriteJob, emit: Callable[[Write], None]):
        self.embedder, self.job, self.emit = embedder, job, emit
        self.bm25, self.bm25_passages = bm25_encoders(job.bm25)
        limits = [n for n in (job.settings.max_tokens, embedder.max_length) if n is not None]
        self.token_limit = min(limits) if limits else None

    def write(self, tasks: Iterable[tuple[DocumentEntry, str]], on_outcome: Callable[[WriteOutcome], None],
              show_progress_bar: bool | None = None, show_streams: bool = False) -> None:
        """Embed and write ``tasks``; ``on_outcome`` after each batch (or streamed document, or unreadable one)."""
        pending: list[tuple[Document, str]] = []
        pending_chars = 0
        for entry, action in tasks:
            try:
                doc = entry.load()
            except (OSError, ValueError) as e:  # changed or vanished since the first pass: keep what is stored
                on_outcome(WriteOutcome(failed=[(entry.id, f"cannot read: {getattr(e, 'strerror', None) or e}")],
                                        documents=1))
                continue
            if self.embedder.streams(doc.text):
                on_outcome(self._streamed(doc, action, show_streams))
                continue
            pending.append((doc, action))
            pending_chars += len(doc.text)
            if len(pending) == self.job.batch_size or pending_chars >= BATCH_MAX_CHARS:
                on_outcome(self._batch(pending, show_progress_bar))
                pending, pending_chars = [], 0
        if pending:
            on_outcome(self._batch(pending, show_progress_bar))

    def _batch(self, batch: list[tuple[Document, str]], show_progress_bar: bool | None) -> WriteOutcome:
        """Documents short enough to tokenize whole, embedded together (those whose vector is given, not again)."""
        emb = self.embedder
        outcome = WriteOutcome(documents=len(batch))
        batch = self._checked_vectors(batch, outcome)
        if getattr(emb, "external", False):
            return self._external(batch, outcome, show_progress_bar)
        try:
            if emb.tokenizer is None:
                emb.tokenize([])  # raises the error that names the missing tokenizer
            cut = self.job.settings.passages  # passages need each token's characters
            whole = emb.tokenizer.encode([d.text for d, _ in batch], offsets=cut)
        except Exception as e:  # a tokenizer failure is one batch's problem, not the sync's
            outcome.failed += [(d.id, f"tokenization failed: {e}") for d, _ in batch]
            return outcome
        # Truncated through a one-piece TokenStream: one truncation rule for short and streamed documents.
        streams = [TokenStream([seq], emb.tokenizer.eos_token_id, self.token_limit, spans=cut) for seq in whole]
        pieces = [list(s) for s in streams]
        ids = [[i for piece in p for i in (piece[0] if cut else piece)] for p in pieces]
        settings = self.job.settings
        mode = settings.long_documents
        # A document longer than passages_above gets passages; a shorter one is its own passage.
        long = [cut and stream.tokens - 1 > settings.passages_above for stream in streams]
        vectors: list[Any] = [d.vector for d, _ in batch]
        whole_rows = [i for i, v in enumerate(vectors) if v is None and (not long[i] or mode == WHOLE_AND_PASSAGES)]
        if whole_rows:
            made = emb.embed_token_ids([ids[i] for i in whole_rows], normalize=True,
                                       show_progress_bar=show_progress_bar).cpu().numpy()
            for i, vector in zip(whole_rows, made):
                vectors[i] = vector
        passes: dict[int, tuple[Any, list]] = {}  # one pass per long document: (its vector, its passages')
        one_pass = [i for i in range(len(batch)) if long[i] and mode == ONE_PASS]
        if one_pass:
            longest = max(len(ids[i]) for i in one_pass)
            made, branches = emb.embed_token_ids_with_branches(
                [ids[i] for i in one_pass], list(passage_ends(settings, longest)), normalize=True)
            for i, vector, found in zip(one_pass, made.cpu().numpy(), branches):
                passes[i] = (vector, list(found.cpu().numpy()))
        self._retract(doc for doc, action in batch if action == "updated")
        finished = []
        for i, ((doc, action), doc_pieces, stream) in enumerate(zip(batch, pieces, streams)):
            text_hash, n_passages, embedded = content_hash(doc.text), 0, stream.tokens if i in whole_rows else 0
            vector = vectors[i]
            if long[i]:
                passages = PassageWriter(self, doc, text_hash, given=i in passes)
                if i in passes:
                    vector = vector if vector is not None else passes[i][0]
                    embedded = stream.tokens
                    for branch in passes[i][1]:
                        passages.give(branch)
                for piece_ids, piece_spans in doc_pieces:
                    passages.feed(piece_ids, piece_spans)
                n_passages = passages.close(passes[i][0] if i in passes else None)
                outcome.embedded_tokens += passages.tokens
                if vector is None:  # passages only: the document is where its passages point on average
                    vector = passages.mean_vector()
            finished.append((doc, action, np.asarray(vector, dtype=np.float32), stream, n_passages, text_hash,
                             embedded))
        self._complete(finished, outcome)  # the batch's own points after all of its passages
        return outcome

    def _checked_vectors(self, batch: list[tuple[Document, str]], outcome: WriteOutcome
                         ) -> list[tuple[Document, str]]:
        """The documents whose given vector (if any) can be a point's (``vectors.check_vector``: the model's size,
        finite, not all zeros, any length: it is normalised as stored); the others failed, with the reason."""
        kept = []
        for doc, action in batch:
            if doc.vector is not None:
                try:
                    check_vector(doc.vector, self.embedder.dim, unit=False, what="its vector")
                except VectorError as e:
                    outcome.failed.append((doc.id, str(e)))
                    continue
            kept.append((doc, action))
        return kept

    def _external(self, batch: list[tuple[Document, str]], outcome: WriteOutcome,
                  show_progress_bar: bool | None = None) -> WriteOutcome:
        """Documents embedded by another library's model (``external.ExternalEmbedder``): a document longer than
        one passage (``cutting``) gets passages, embedded in groups across the batch's documents, and its own point
        the normalised mean of their vectors (or the first's: ``document_vector``); a shorter one is embedded whole.
        No tokens are counted."""
        from tqdm.auto import tqdm

        emb = self.embedder
        cutter = emb.cutter if self.job.settings.passages else None
        try:
            cuts = [cutter.spans(doc.text) if cutter is not None else [(0, len(doc.text))] for doc, _ in batch]
        except Exception as e:  # the model's tokenizer failed: this batch's problem, not the sync's
            outcome.failed += [(doc.id, f"cutting into passages failed: {e}") for doc, _ in batch]
            return outcome
        whole = [i for i, (doc, _) in enumerate(batch) if len(cuts[i]) == 1 and doc.vector is None]
        long = [i for i in range(len(batch)) if len(cuts[i]) > 1]
        try:
            made = dict(zip(whole, emb.encode_documents([batch[i][0].text for i in whole]) if whole else ()))
        except Exception as e:  # the model's failure is this batch's
            outcome.failed += [(doc.id, f"embedding failed: {e}") for doc, _ in batch]
            return outcome
        self._retract(doc for doc, action in batch if action == "updated")
        hashes = [content_hash(doc.text) for doc, _ in batch]
        sums: dict[int, np.ndarray] = {}
        firsts: dict[int, np.ndarray] = {}
        failed: set[int] = set()
        queue = [(i, n, span) for i in long for n, span in enumerate(cuts[i])]
        total = len(queue)
        with tqdm(total=total, disable=not (show_progress_bar and total > EXTERNAL_PASSAGE_GROUP), unit="passage",
                  leave=False, desc="passages") as bar:
            for at in range(0, total, EXTERNAL_PASSAGE_GROUP):
                group = [q for q in queue[at:at + EXTERNAL_PASSAGE_GROUP] if q[0] not in failed]
                texts = [batch[i][0].text[a:b] for i, _, (a, b) in group]
                try:
                    vectors = emb.encode_documents(texts) if texts else ()
                except Exception as e:
                    for i in {i for i, _, _ in group}:
                        failed.add(i)
                        outcome.failed.append((batch[i][0].id, f"embedding failed: {e}"))
                    continue
                self._external_passages(batch, hashes, group, texts, vectors)
                for (i, n, _), vector in zip(group, vectors):
                    sums[i] = sums.get(i, 0) + np.asarray(vector, dtype=np.float64)
                    if n == 0:
                        firsts[i] = np.asarray(vector, dtype=np.float32)
                bar.update(len(group))
        finished = []
        for i, (doc, action) in enumerate(batch):
            if i in failed:
                continue
            if doc.vector is not None:
                vector = np.asarray(doc.vector, dtype=np.float32)
            elif i in made:
                vector = np.asarray(made[i], dtype=np.float32)
            elif emb.document_vector == "first":
                vector = firsts[i]
            else:
                vector = (sums[i] / np.linalg.norm(sums[i])).astype(np.float32)
            if not vector.any():
                outcome.failed.append((doc.id, "its embedding is all zeros (the model gave no direction for it)"))
                continue
            n_passages = len(cuts[i]) if i in long else 0
            finished.append((doc, action, vector, _UNTOKENIZED, n_passages, hashes[i], 0))
        self._complete(finished, outcome)
        return outcome

    def _external_passages(self, batch: list[tuple[Document, str]], hashes: list[str],
                           group: list[tuple[int, int, tuple[int, int]]], texts: list[str], vectors) -> None:
        """One upsert of a group of passages of an external model's documents (before their own points)."""
        job, points = self.job, []
        for (i, n, span), text, vector in zip(group, texts, vectors):
            doc = batch[i][0]
            payload = passage_payload(doc.id, n, doc.metadata, 0, job.root, span, hashes[i],
                                      text if job.settings.store_text else None)
            sparse = self.bm25_passages.embed_document(text) if self.bm25_passages is not None else None
            points.append(StoredPoint(point_id(doc.id, n), payload, point_vectors(job.layout, vector, sparse)))
        self.emit(Upsert(tuple(points)))

    def _streamed(self, doc: Document, action: str, show: bool) -> WriteOutcome:
        """A long document: tokenized in windows, embedded as a stream, passages cut from the same stream."""
        from tqdm.auto import tqdm

        emb, limit = self.embedder, self.token_limit
        outcome = WriteOutcome(documents=1)
        try:
            total = None
            if emb.needs_whole_length:  # context extension is keyed by the whole length: count first
                with tqdm(total=len(doc.text), disable=not show, unit="char", unit_scale=True, leave=False,
                          desc=_short(doc.id) + " (counting)") as bar:
                    total = emb.count_tokens(doc.text, max_length=limit, on_chars=bar.update)
            with tqdm(total=len(doc.text), disable=not show, unit="char", unit_scale=True, leave=False,
                      desc=_short(doc.id)) as bar:
                text_hash = content_hash(doc.text)
                if action == "updated":
                    self._retract([doc])
                settings = self.job.settings
                mode = settings.long_documents if settings.passages else WHOLE_AND_PASSAGES
                passages = (PassageWriter(self, doc, text_hash, given=mode == ONE_PASS, keep_head=mode == PASSAGES_ONLY)
                            if settings.passages else None)
                stream = emb.tokenize_stream(doc.text, max_length=limit, on_chars=bar.update,
                                             offsets=passages is not None)

                def pieces() -> Iterator[list[int]]:  # one pass feeds the document's stream and its passages
                    for piece in stream:
                        if passages is not None:
                            passages.feed(*piece)
                            piece = piece[0]
                        yield piece

                embedded, pooled = 0, None
                if mode == ONE_PASS:  # the document's pass gives its passages' vectors as it reaches their ends
                    pooled = emb.embed_stream(pieces(), total_tokens=total, normalize=True,
                                              cuts=passage_ends(settings), on_branch=passages.give).cpu().numpy()
                    embedded = stream.tokens
                elif doc.vector is None and mode == WHOLE_AND_PASSAGES:
                    pooled = emb.embed_stream(pieces(), total_tokens=total, normalize=True).cpu().numpy()
                    embedded = stream.tokens
                else:  # only the passages are embedded (the document's vector is given, or their mean)
                    for _ in pieces():
                        pass
                n_passages = passages.close(pooled) if passages is not None else 0
                outcome.embedded_tokens += passages.tokens if passages is not None else 0
                if doc.vector is not None:
                    vector = np.asarray(doc.vector, dtype=np.float32)
                elif pooled is not None:
                    vector = pooled
                elif n_passages:
                    vector = passages.mean_vector()
                else:  # too few tokens for passages after all: the document is short, embed it whole
                    vector = emb.embed_token_ids([passages.head], normalize=True).cpu().numpy()[0]
                    embedded = len(passages.head)
        except TokenizationError as e:
            outcome.failed.append((doc.id, str(e)))
            return outcome
        self._complete([(doc, action, vector, stream, n_passages, text_hash, embedded)], outcome)
        return outcome

    def _retract(self, changed: Iterable[Document]) -> None:
        """Remove the own points of changed documents before any of their new points is written: until the new own
        point lands, no search shows either version (the passages of each are hidden without their own point)."""
        ids = tuple(point_id(doc.id) for doc in changed)
        if ids:
            self.emit(DeletePoints(ids))

    def _complete(self, finished: list[tuple[Document, str, Any, TokenStream, int, str, int]],
                  outcome: WriteOutcome) -> None:
        """Write the own points of documents whose passages are all written, and account for them: one delete of
        their stale passages, one upsert of their points. A crash before the upsert leaves them without an own
        point (a changed one's was retracted), so the next sync redoes them."""
        job = self.job
        # Passages beyond the new count belong to an older version of the text: an updated document's, or an added
        # one's whose earlier sync was stopped before its own point (nothing else told of them).
        stale = tuple((doc.id, n_passages) for doc, _, _, _, n_passages, _, _ in finished)
        if stale:
            self.emit(DeleteStalePassages(stale))
        points = []
        for doc, _, vector, stream, n_passages, text_hash, _ in finished:
            payload = document_payload(doc.id, doc.text, doc.metadata, stream.tokens, job.root, job.settings.store_text,
                                       n_passages, text_hash)
            sparse = self.bm25.embed_document(doc.text) if self.bm25 is not None else None
            points.append(StoredPoint(point_id(doc.id), payload, point_vectors(job.layout, vector, sparse)))
        # The document points go last: a content hash marks its document as complete.
        if points:
            self.emit(Upsert(tuple(points)))
        for doc, action, _, stream, _, _, embedded in finished:
            if stream.truncated:
                outcome.warnings.append((doc.id, f"truncated to its first {stream.tokens} tokens (max_tokens)"))
            outcome.warnings.extend((doc.id, note) for note in stream.notes)
            if (stream is not _UNTOKENIZED and not stream.truncated and len(doc.text) >= FEW_TOKENS_MIN_CHARS
                    and stream.tokens * FEW_TOKENS_CHARS_PER_TOKEN < len(doc.text)):  # max_tokens is not the text's
                outcome.warnings.append((doc.id, (
                    f"its {len(doc.text):,} characters gave only {stream.tokens:,} tokens, so its embedding "
                    "carries little of its content (a tokenizer makes a long run of letters without spaces or "
                    "punctuation one unknown token)")))
            outcome.embedded_tokens += embedded  # the document's own pass (none: a given vector, or passages only)
            outcome.finished.append((doc.id, action))


@dataclass(frozen=True)
class _Untokenized:
    """What a document embedded whole by an external model has instead of a token stream."""

    tokens: int = 0
    truncated: bool = False
    notes: tuple[str, ...] = ()


_UNTOKENIZED = _Untokenized()


def _short(doc_id: str, width: int = 30) -> str:
    """An id for a progress bar's label: escaped (a bar is printed on the terminal), its end if it is long."""
    doc_id = escape(doc_id)
    return doc_id if len(doc_id) <= width else "..." + doc_id[-(width - 3):]
