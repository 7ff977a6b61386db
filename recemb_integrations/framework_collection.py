"""A recemb collection as a framework's vector store sees it: documents added, got and deleted by id, searched into
texts with their places. What the LangChain and LlamaIndex stores share, on the main job's own path: every write is a
``QdrantSync.sync`` (never deleting what it was not given), every search ``QdrantSync.search``, every text a hit's
original (``EvidenceReader.original``: stored, or re-read from its unchanged file, never a token decode).

    collection = FrameworkCollection("notes", lambda: embedder, path="./store")
    collection.add([Document("a.md", text, {"topic": "owls"})])
    found = collection.search("who hunts at night", k=4)   # [Found(document_id, text, metadata, score, ...)]

What a search returns by default is made for an LLM's context (``RAG_GRANULARITY``): each document's best passage,
its own characters with its place (a document too short for passages: the document), each document at most once
(``per_document``); ``granularity="document"`` returns whole documents. Every document written here belongs to the
framework owner (``points.FRAMEWORK_ROOT``): no folder sync into the same collection deletes it, and a delete here
never touches a folder's documents (``NotOwnedError``).

The store opens on first use (Qdrant Edge by ``path`` by default, qdrant-client's local mode with
``store_kind="local"``, a server by ``url``, or a ``QdrantClient`` / ``Store`` the caller owns). An existing
collection, one written by ``recemb sync`` included, is used with the settings it recorded; a new one takes the
options given, and keeps its documents' texts unless told not to (a framework returns a document's text with it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from recemb_integrations.evidence import EvidenceReader
from recemb_integrations.qdrant.collection import read_record
from recemb_integrations.qdrant.documents import Document, StoredDocument, SyncReport
from recemb_integrations.qdrant.points import KIND_DOCUMENT, KIND_PASSAGE
from recemb_integrations.qdrant.record import check_collection_name
from recemb_integrations.qdrant.search import GRANULARITIES
from recemb_integrations.qdrant.sync import QdrantSync
from recemb_integrations.qdrant.vectors import check_vector
from recemb_integrations.stores import Store, as_store, open_store

__all__ = ["AddError", "FrameworkCollection", "Found", "PER_DOCUMENT", "RAG_GRANULARITY", "STORE_DEFAULT",
           "SYNC_OPTIONS", "check_granularity", "merge_overlaps", "recemb_fields"]

# The main job's options a framework store passes on to ``QdrantSync`` (its docstring says what each does).
SYNC_OPTIONS = ("passage_tokens", "passage_overlap", "passages_above", "long_documents", "store_text", "sparse",
                "sparse_language", "max_tokens", "batch_size", "index_metadata", "model_id", "retries")
# A search's default: passages where the collection has them, else documents (each its own only passage).
RAG_GRANULARITY = None
PER_DOCUMENT = 1  # hits of one document among a search's k, by default: each document once


class _StoreDefault:
    """A search option not given: the framework store's own (``granularity`` and ``per_document`` take None)."""

    def __repr__(self) -> str:
        return "STORE_DEFAULT"


STORE_DEFAULT: Any = _StoreDefault()


def check_granularity(granularity: Any) -> str | None:
    """``granularity`` if a framework store takes it: one of the main job's, or ``RAG_GRANULARITY``."""
    if granularity is not RAG_GRANULARITY and granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be None (passages where the collection has them, else documents) or one "
                         f"of {', '.join(GRANULARITIES)}, got {granularity!r}")
    return granularity


class AddError(ValueError):
    """Some documents given to ``add`` were not written (the others were); ``failed``: (id, why) of each."""

    def __init__(self, failed: list[tuple[str, str]], written: int):
        self.failed, self.written = failed, written
        first = "; ".join(f"{d}: {why}" for d, why in failed[:3])
        super().__init__(f"{len(failed)} of the documents were not added ({first}"
                         f"{'; ...' if len(failed) > 3 else ''}); the other {written} were")


@dataclass(frozen=True)
class Found:
    """One search result as a framework returns it. ``text``: the document's whole text (a document hit) or the
    passage's own characters (a passage hit), None where neither is stored nor on its unchanged file (``note`` says
    why); ``metadata``: the user's, as given; ``start``/``end``: the passage's characters in its document (a document
    hit's best passage), ``line`` or ``page`` where that passage (or the document) starts."""

    document_id: str
    text: str | None
    metadata: dict[str, Any]
    score: float
    kind: str
    passage: int | None = None
    start: int | None = None
    end: int | None = None
    line: int | None = None
    page: int | None = None
    content_hash: str | None = None
    note: str | None = None

    @property
    def whole_document(self) -> bool:
        """A document hit with nothing of recemb's to add: its text is the document's and no passage led to it."""
        return self.kind == KIND_DOCUMENT and self.passage is None and self.note is None


def recemb_fields(found: Found) -> dict[str, Any]:
    """What recemb knows of a hit beyond the user's metadata (for a framework's metadata): the document id, kind,
    passage index and characters, line or page, content hash and note, each where known."""
    fields = {"document_id": found.document_id, "kind": found.kind, "passage": found.passage, "start": found.start,
              "end": found.end, "line": found.line, "page": found.page, "content_hash": found.content_hash,
              "note": found.note}
    return {k: v for k, v in fields.items() if v is not None}


class FrameworkCollection:
    """One collection of one store, for a framework's vector store.

    Args:
        collection_name: the collection (created on the first add).
        embedder: a callable returning the main job's embedder (a recemb ``Embedder``, or an ``ExternalEmbedder`` for
            another library's model), called on first use so that constructing a store touches no model.
        path / url / client: where the collection lives (one of them): an embedded store's folder, a Qdrant
            server's URL (``api_key``), or a ``QdrantClient`` / ``Store`` the caller opened (and closes).
        store_kind: for ``path``: "auto" (what the folder holds, Qdrant Edge for a new one), "edge" or "local".
        instruction: the query instruction (recemb's own model; None: its default).
        options: ``SYNC_OPTIONS``, for a new collection; an existing one keeps what it recorded, and an option that
            contradicts it is refused (``SettingsConflict``).
    """

    def __init__(self, collection_name: str, embedder: Callable[[], Any], *, path: str | os.PathLike | None = None,
                 url: str | None = None, api_key: str | None = None, client: Any = None, store_kind: str = "auto",
                 instruction: str | None = None, **options: Any):
        unknown = sorted(set(options) - set(SYNC_OPTIONS))
        if unknown:
            raise TypeError(f"unknown option {unknown[0]!r}; the store takes {', '.join(SYNC_OPTIONS)}")
        if sum(x is not None for x in (path, url, client)) != 1:
            raise ValueError("give one of path= (an embedded store's folder), url= (a Qdrant server) or client= "
                             "(a QdrantClient or recemb Store)")
        self.collection_name = check_collection_name(collection_name)
        self.instruction = instruction
        self._make_embedder = embedder
        self._where = dict(path=path, url=url, api_key=api_key, kind=store_kind) if client is None else None
        self._given_store = client
        self._options = options
        self._store: Store | None = None
        self._sync: QdrantSync | None = None
        self._seen = False  # the collection was found (or made) once: a search does not ask again
        self._lock = threading.RLock()  # one opening of the store, one QdrantSync, whatever thread asks first
        self._writing = threading.Lock()  # writes one at a time (async callers run them in threads): each plan is
        # made from what the previous write left

    # ------------------------------------------------------------------ opening
    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                if self._given_store is not None:
                    self._store = as_store(self._given_store)
                else:
                    where = self._where
                    self._store = (open_store(url=where["url"], api_key=where["api_key"]) if where["url"] else
                                   open_store(path=where["path"], kind=where["kind"]))
            return self._store

    @property
    def sync(self) -> QdrantSync:
        """The collection's ``QdrantSync``: with its recorded settings where it exists, else the options given (a
        new collection stores its documents' texts unless ``store_text=False``)."""
        with self._lock:
            if self._sync is None:
                record = read_record(self.store, self.collection_name)
                options = dict(self._options)
                if record is None and options.get("store_text") is None:
                    options["store_text"] = True
                self._sync = QdrantSync(self.store, self.collection_name, self._make_embedder(), **options,
                                        record=record)
            return self._sync

    @property
    def embedder(self) -> Any:
        return self.sync.embedder

    def exists(self) -> bool:
        """Whether the collection exists; once it has been seen the answer is kept (a search finds out otherwise:
        ``search``)."""
        if not self._seen:
            self._seen = self.sync.calls(self.store.collection_exists, self.collection_name)
        return self._seen

    def recorded_dim(self) -> int | None:
        """The vector size the collection recorded (None: no collection yet), read without a model: what a store
        that brings its own vectors opens with."""
        record = read_record(self.store, self.collection_name)
        return record.data.get("dim") if record is not None else None

    def close(self) -> None:
        """Release the store, where this instance opened it (a given client stays the caller's)."""
        with self._lock:
            if self._store is not None and self._given_store is None:
                self._store.close()
            self._store, self._sync, self._seen = None, None, False

    def __enter__(self) -> FrameworkCollection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def add(self, documents: Sequence[Document], show_progress_bar: bool | None = None) -> SyncReport:
        """Write these documents (new ones added, changed ones re-embedded with their passages, unchanged ones
        left), deleting nothing else, under the framework owner. Raises ``AddError`` if any could not be written
        (a folder's document of the same id among them: its version is kept), after the others were; a given
        vector that cannot be the model's (``vectors.check_vector``) is a ``VectorError`` before any write."""
        if not documents:
            return SyncReport()
        documents = list(documents)
        given = [d for d in documents if d.vector is not None]
        if given:  # every given vector checked before any write: one bad node stops the whole add
            sync = self.sync
            documents = [Document(d.id, d.text, d.metadata, check_vector(
                d.vector, sync.embedder.dim, unit=sync.unit_vectors, what=f"the embedding of {d.id!r}"))
                if d.vector is not None else d for d in documents]
        with self._writing:
            report = self.sync.sync(documents, delete_missing=False, show_progress_bar=show_progress_bar,
                                    framework=True)
        if report.failed:
            raise AddError(report.failed, report.added + report.updated + report.metadata_updated
                           + report.unchanged)
        return report

    def delete(self, document_ids: Sequence[str], keep_foreign: bool = False) -> int:
        """Delete these documents and their passages (an empty list deletes nothing; None or one string is a
        TypeError); returns how many were deleted. A document a folder's sync wrote is never deleted here: naming
        one is a ``NotOwnedError`` before anything is deleted (``keep_foreign``: it is left alone)."""
        with self._writing:
            return self.sync.delete_documents(document_ids, framework=True, keep_foreign=keep_foreign)

    def get(self, document_ids: Sequence[str]) -> list[StoredDocument]:
        return self.sync.get_documents(document_ids)

    def document_ids(self, filter: dict[str, Any] | None = None, owned: bool = False) -> list[str]:
        """The ids of the collection's documents (matching ``filter``); ``owned``: only those written through a
        framework's store (what ``delete`` may delete)."""
        return self.sync.document_ids(filter, framework=owned)

    # ------------------------------------------------------------------ reads
    def search(self, query: str, k: int = 4, filter: dict[str, Any] | Any | None = None, mode: str | None = None,
               granularity: str | None = RAG_GRANULARITY, query_vector: Sequence[float] | None = None,
               per_document: int | None = PER_DOCUMENT) -> list[Found]:
        """The ``k`` best hits for ``query`` with their original texts; [] where the collection does not exist yet.

        ``granularity``: None (the default, for an LLM's context) is "passage" where the collection has passages,
        else "document"; "document" gives each document whole (its best passage as evidence), "passage" passages
        (and documents too short to have any), "any" both. ``per_document``: at most this many hits of one document
        (passage and "any" granularity; None: no limit); where a document gives several, those whose characters
        overlap or touch are merged into one (``merge_overlaps``), so no character comes twice."""
        check_granularity(granularity)
        if query_vector is None and not (isinstance(query, str) and query.strip()):
            raise ValueError(f"a search needs a query's text or its vector, got {query!r} and no vector; nothing was "
                             "searched")
        if not self.exists():
            return []
        sync = self.sync
        if granularity is RAG_GRANULARITY:
            sync.ensure_collection(create=False)
            granularity = KIND_PASSAGE if sync.settings.passages else KIND_DOCUMENT
        try:
            hits = sync.search(query, limit=k, instruction=self.instruction, filter=filter, granularity=granularity,
                               mode=mode, query_vector=query_vector,
                               per_document=per_document if granularity != KIND_DOCUMENT else None)
        except Exception:
            self._seen = False  # deleted since it was seen (another process): as if never made, else the error
            if not self.exists():
                return []
            raise
        reader = EvidenceReader()
        found = []
        for hit in hits:  # a passage hit's line comes from its document's text, read with the hit where stored
            original = reader.original(hit, hit.document_text if hit.passage is not None else None)
            start, end = hit.span if hit.span is not None else (None, None)
            kind = KIND_PASSAGE if hit.passage is not None else KIND_DOCUMENT
            found.append(Found(hit.document_id, original.text, dict(hit.metadata), hit.score, kind,
                               hit.passage if hit.passage is not None else hit.best_passage, start, end,
                               original.line if start is not None else None,
                               original.page if start is not None else None, hit.content_hash, original.note))
        return merge_overlaps(found) if per_document != 1 else found


def merge_overlaps(found: Sequence[Found]) -> list[Found]:
    """Passage hits of one document whose characters overlap or touch, merged into one hit over all of them: its
    text their union (each hit's text is ``text[start:end]``, so the union is exact without the document), its
    score the best, its passage and line the first's, at the place of its best member. Hits without a span or a
    text are kept as they are. Pure."""
    spans: dict[str, list[int]] = {}
    for i, f in enumerate(found):
        if f.kind == KIND_PASSAGE and f.text is not None and f.start is not None and f.end is not None:
            spans.setdefault(f.document_id, []).append(i)
    merged_into: dict[int, Found] = {}  # the index of a merged run's best member -> the merged hit
    dropped: set[int] = set()
    for members in spans.values():
        run: list[int] = []
        for i in sorted(members, key=lambda i: (found[i].start, found[i].end)) + [-1]:
            if run and (i < 0 or found[i].start > max(found[j].end for j in run)):
                best = min(run)  # hits come best first
                merged_into[best] = _union([found[j] for j in run], found[best].score)
                dropped.update(j for j in run if j != best)
                run = []
            if i >= 0:
                run.append(i)
    return [merged_into.get(i, f) for i, f in enumerate(found) if i not in dropped]


def _union(run: list[Found], score: float) -> Found:
    """One hit over a run of overlapping passage hits of one document (in order of their starts)."""
    first, text, end = run[0], run[0].text, run[0].end
    for f in run[1:]:
        if f.end > end:
            text += f.text[end - f.start:]
            end = f.end
    return Found(first.document_id, text, first.metadata, score, KIND_PASSAGE, first.passage, first.start, end,
                 first.line, first.page, first.content_hash, first.note)
