"""Keep a Qdrant collection in step with a set of long documents, each embedded whole.

    from recemb.core import Embedder
    from recemb_integrations.qdrant import Document, QdrantSync
    from recemb_integrations.stores import open_store

    with open_store(path="./store") as store:  # embedded (Qdrant Edge); open_store(url=...) for a server
        sync = QdrantSync(store, "books", Embedder.from_pretrained("..."))
        report = sync.sync([Document("moby", text, {"author": "Melville"})])
        hits = sync.search("a whale hunt", limit=5)  # hybrid: dense + BM25, fused by Qdrant

Every point carries a named dense vector ("dense") and, unless the collection is dense-only, a BM25 sparse vector
("bm25", IDF applied by Qdrant) from ``recemb_integrations.sparse``; a search prefetches both and fuses them (RRF or
DBSF) in Qdrant's Query API. Where passages are stored, a document search groups points by document: each document
once, scored by its best point, with its best passage as evidence.

Invariants that make a killed sync safe to re-run:
- point ids are deterministic (uuid5 of the document id, and of (id, passage index) for passages), so writing a
  document twice overwrites it instead of duplicating it;
- a document's own point, which carries its content hash, is written last, after its passages: a crash leaves the
  old hash (or no point), and the next run redoes that document (the points of a batch's documents go in one request,
  after all of the batch's passages);
- every write waits for acknowledgement (``wait=True``) and transient server errors are retried;
- the collection's model, dimension and distance are checked before the first write;
- a sync that would delete most of a collection stops before its first write unless told it is intended;
- every point records the root (``scope``) whose sync wrote it, and a sync deletes or overwrites only its own root's.

Documents of any length take bounded memory: long ones are tokenized in windows and embedded as a stream, and
their passages come from the same stream (``recemb.core.Embedder.tokenize_stream``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import asdict, dataclass, field
from typing import Any

from recemb_integrations._imports import require

_qdrant = require("qdrant_client", "qdrant")
models = require("qdrant_client.models", "qdrant")
_tenacity = require("tenacity", "qdrant")

import recemb  # noqa: E402
from recemb.core import Embedder  # noqa: E402
from recemb.core.streaming import TokenizationError, TokenStream  # noqa: E402
from recemb_integrations.sparse import Bm25, SparseVector  # noqa: E402
from recemb_integrations.stores import (DENSE_VECTOR, INTEGER, KEYWORD, SPARSE_VECTOR, SearchRequest,  # noqa: E402
                                        Store, StoredPoint, as_store)
from recemb_integrations.terminal import escape  # noqa: E402

ID_NAMESPACE = uuid.UUID("6f1c2a7e-5b0d-4c8e-9a51-3d2f7c0e4b19")  # recemb's namespace for uuid5 point ids
META_KEY = "recemb"
KIND_DOCUMENT, KIND_PASSAGE = "document", "passage"
DISTANCE = models.Distance.COSINE
# Layout 1 (recemb 0.1.0): one unnamed dense vector. Layout 2: a named dense vector and, unless dense-only, a named
# BM25 sparse vector with IDF computed by Qdrant.
LAYOUT_VERSION = 2  # vector names: DENSE_VECTOR and SPARSE_VECTOR, from recemb_integrations.stores
SEARCH_MODES = ("hybrid", "dense", "sparse")
FUSIONS = ("dbsf", "rrf")
# DBSF by default: it keeps how far each side's best scores stand out, where RRF keeps only ranks and lets a weak side
# pull good matches down. Measured through this path (docs/quality.md): mean nDCG@10 over the shared IR collections
# 0.504 (DBSF) vs 0.475 (RRF) with the bundled model; long documents without passages 0.73-0.79 vs 0.34-0.45.
DEFAULT_FUSION = "dbsf"
# Qdrant scores a list's hit at 0-based position p by 1 / (p + k): k = 61 is Cormack et al.'s (2009) 1 / (60 + rank),
# given explicitly because Qdrant's own default differs between engines.
RRF_K = 61
MAX_SEARCH_LIMIT = 10_000  # hits one search returns at most: its candidates and HNSW beam stay in the stores' range
PREFETCH_MIN = 100  # candidates each side of a hybrid search brings to the fusion, at least
PREFETCH_PER_HIT = 5  # ... and per requested hit
AVG_LEN_SAMPLE_CHARS = 64 << 20  # text read to choose a new collection's BM25 average length
PASSAGE_LEN_SAMPLE_CHARS = 4 << 20  # ... and tokenized by the model to turn passage_tokens into BM25 tokens
REBUILD_SUFFIX = ".recemb-rebuild"  # the staging collection of a rebuild
# The root whose sync wrote a point: "" for a sync without a scope, else the scope ("wiki/"). A sync deletes and
# overwrites only its own root's documents, so an unprefixed folder's "wiki/x.md" is not the "wiki/" root's.
ROOT_KEY = "root"
PAYLOAD_INDEXES = {"document_id": KEYWORD, "kind": KEYWORD, "passage": INTEGER, ROOT_KEY: KEYWORD}  # filtered by
# A sync may delete at most this many documents, or at most half of the collection, without allow_mass_delete:
# an empty or mistyped source must not wipe a collection, a few removed files must not need a flag.
MASS_DELETE_MIN_DOCUMENTS = 5
PASSAGE_WRITE_BATCH = 64  # passages embedded and upserted together
STREAM_HINT_SIZE = 1 << 20  # a document this large shows a progress bar even alone
BATCH_MAX_CHARS = 4 << 20  # text of one batch at most (its token ids are held as Python ints until embedded)
FIRST_PASS_BAR = 1000  # documents from which a sync's first pass (hashing) shows a progress bar
DELETE_BATCH = 256  # stale documents deleted per request
# A document of at least this many characters with fewer than one token per this many is warned of: English
# averages about four characters a token, CJK one or two; a whole file of one unbroken "word" gives three tokens.
FEW_TOKENS_MIN_CHARS = 1000
FEW_TOKENS_CHARS_PER_TOKEN = 100
# Characters Qdrant's server refuses in collection names (local mode checks the same set), and its length limit.
INVALID_COLLECTION_CHARS = '<>:"/\\|?*\x00\x1f'
MAX_COLLECTION_NAME = 255


class CollectionMismatchError(ValueError):
    """The collection was built with another model, dimension or distance (or not by recemb)."""


class MassDeletionError(ValueError):
    """A sync would delete more than half of the collection's documents; nothing was written."""


class NothingReadableError(ValueError):
    """Every document given failed to read; a sync that deletes missing documents stops before its first write."""


class RebuildError(ValueError):
    """A rebuild cannot replace the collection yet (some documents failed); the old collection is untouched."""


class SearchNotice(UserWarning):
    """Something a searcher should know about a result (a dense-only collection, a query without BM25 terms)."""


def check_collection_name(name: str) -> str:
    """The name, or a ValueError saying why Qdrant would refuse it (checked before any model loads)."""
    if not isinstance(name, str) or name.strip() == "" or name in (".", ".."):
        raise ValueError(f"collection name {name!r} is empty or reserved")
    bad = sorted({c for c in name if c in INVALID_COLLECTION_CHARS})
    if bad:
        raise ValueError(f"collection name {name!r} contains {', '.join(map(repr, bad))}, which Qdrant does not "
                         f"allow (nor any of {INVALID_COLLECTION_CHARS[:9]!r})")
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in name):  # a name printed on a terminal must not drive it
        raise ValueError(f"collection name {name!r} contains control characters")
    if len(name) > MAX_COLLECTION_NAME:
        raise ValueError(f"collection name is {len(name)} characters long; Qdrant allows {MAX_COLLECTION_NAME}")
    return name


def check_passage_settings(passage_tokens: int | None, passage_overlap: int | None) -> None:
    """Passages of passage_tokens >= 1 tokens sharing 0 <= passage_overlap < passage_tokens tokens."""
    if passage_tokens is None:
        return
    if isinstance(passage_tokens, bool) or not isinstance(passage_tokens, int) or passage_tokens < 1:
        raise ValueError(f"passage_tokens must be a positive int (or None for no passages), got {passage_tokens!r}")
    overlap = passage_overlap or 0
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < passage_tokens:
        raise ValueError(f"passage_overlap must be an int from 0 to passage_tokens - 1 = {passage_tokens - 1}, "
                         f"got {passage_overlap!r}")


def collection_settings(store: Store | Any, collection: str) -> dict[str, Any] | None:
    """The recemb metadata a collection was built with (model, dim, passages, ...); None if it does not exist.
    A collection without recemb metadata is a CollectionMismatchError. ``store``: a ``Store`` or a ``QdrantClient``."""
    store = as_store(store)
    if not store.collection_exists(collection):
        return None
    return _recorded_metadata(store.collection_info(collection).metadata, collection)


def _recorded_metadata(metadata: dict[str, Any], collection: str) -> dict[str, Any]:
    recorded = (metadata or {}).get(META_KEY)
    if recorded is None:
        raise CollectionMismatchError(f"collection {collection!r} was not created by recemb (no '{META_KEY}' "
                                      "metadata); use another collection name")
    return recorded


def recorded_layout(recorded: dict[str, Any]) -> dict[str, Any]:
    """The QdrantSync settings a collection records (passages, truncation, BM25 or not), as constructor keywords."""
    return {"passage_tokens": recorded.get("passage_tokens"), "passage_overlap": recorded.get("passage_overlap") or 0,
            "max_tokens": recorded.get("max_tokens"), "sparse": recorded.get("sparse") is not None}


def legacy_hybrid_refusal(collection: str) -> str:
    """Why a hybrid sync into a recemb 0.1 collection is refused, and the ways on."""
    return (f"collection {collection!r} was built by recemb 0.1 with dense vectors only; hybrid search needs a BM25 "
            "vector on every point. Nothing was written. Rebuild it with `recemb sync --rebuild PATHS` "
            "(QdrantSync.sync(..., rebuild=True): the new collection is built beside the old one, which is dropped "
            "only when the new one is complete), or keep syncing it dense-only with --dense-only (sparse=False).")


def layout_version(recorded: dict[str, Any]) -> int:
    """1 for collections of recemb 0.1.0 (one unnamed dense vector), else the recorded version."""
    return int(recorded.get("layout", 1))


@dataclass
class Document:
    """One source document: ``id`` is the stable key (e.g. a file path); ``metadata`` must be JSON-serialisable."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class DocumentSource:
    """A document read only when needed, so a sync never holds every text: a file, typically.

    ``read()`` returns the text (an ``OSError`` or ``ValueError`` reports the document as failed and keeps its stored
    version). ``fingerprint()``, if given, returns ``(content_hash(text), text is blank)`` without holding the whole
    text (e.g. by hashing the file in pieces); without it, the first pass reads the text to hash it. A sync reads each
    source once to hash it and again only if it must be embedded."""

    id: str
    read: Callable[[], str]
    metadata: dict[str, Any] = field(default_factory=dict)
    fingerprint: Callable[[], tuple[str, bool]] | None = None
    size: int = 0  # characters or bytes, where known: a hint for the progress bar


@dataclass
class _Entry:
    """What the first pass of a sync keeps of a document: its id, metadata, hash, and how to get its text again."""

    id: str
    metadata: dict[str, Any]
    hash: str
    blank: bool
    size: int
    document: Document | None = None
    source: DocumentSource | None = None

    @property
    def text(self) -> str:
        return self.document.text if self.document is not None else self.source.read()

    def load(self) -> Document:
        if self.document is not None:
            return self.document
        text = self.source.read()
        if not isinstance(text, str):
            raise ValueError(f"read() returned {type(text).__name__}, expected str")
        return Document(self.id, text, self.metadata)


@dataclass
class SyncReport:
    added: int = 0
    updated: int = 0  # re-embedded because the text changed
    metadata_updated: int = 0  # text unchanged, only metadata rewritten (no embedding)
    unchanged: int = 0
    deleted: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (document id, error)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (document id, what to know): synced anyway
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): sources that are not documents
    embedded_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SearchHit:
    document_id: str
    score: float
    metadata: dict[str, Any]
    text: str | None = None  # the document's text (or, for a passage hit, the passage's), where stored
    passage: int | None = None  # passage index for passage hits, None for whole-document hits
    best_passage: int | None = None  # document hits of a collection with passages: the passage that scored best
    best_passage_text: str | None = None  # ... and its text, where stored


def point_id(document_id: str, passage: int | None = None) -> str:
    key = document_id if passage is None else f"{document_id}\x00passage\x00{passage}"
    return str(uuid.uuid5(ID_NAMESPACE, key))


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def model_fingerprint(embedder: Embedder) -> str:
    """A short hash of the architecture and a sample of every weight (``RecurrentEncoder.weight_samples``): the
    same model under another path or name matches, and so does the same checkpoint run in bf16 or int8 on the CPU
    (its vectors within a cosine of 0.999 / 0.995 of fp32's); a different model does not."""
    h = hashlib.sha256(json.dumps(embedder.config.to_dict(), sort_keys=True, default=str).encode())
    for name, sample, total in embedder.model.weight_samples():
        h.update(name.encode())
        h.update(sample)
        h.update(total.encode())
    return h.hexdigest()[:16]


def _is_transient(error: BaseException) -> bool:
    """Server errors worth retrying: connection problems, 429, 5xx. Local-mode errors never are."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(error, ResponseHandlingException):
        return True
    if isinstance(error, UnexpectedResponse):
        return error.status_code is not None and (error.status_code == 429 or error.status_code >= 500)
    return type(error).__name__ in ("RpcError", "_InactiveRpcError") or isinstance(error, (ConnectionError,
                                                                                            TimeoutError))


class QdrantSync:
    """Sync documents into one Qdrant collection and search it.

    Args:
        store: where the collection lives: a ``Store`` (``recemb_integrations.stores.open_store``: Qdrant Edge, a
            server, local mode) or a ``QdrantClient`` (local ``path=``/``":memory:"`` or a server ``url=``). Calls are
            serialised: local mode is not thread-safe.
        collection: collection name; created on first sync (cosine distance, size from the model).
        embedder: the recemb ``Embedder``.
        model_id: the name recorded in the collection (default: the embedder's name).
        store_text: keep each document's text in its payload (returned by ``search``).
        passage_tokens: if set, also store one point per passage of this many tokens (documents stay whole).
        passage_overlap: tokens shared by consecutive passages.
        batch_size: documents read, embedded and written together: their points go in one request (a batch also
            closes at ``BATCH_MAX_CHARS`` of text, so large documents do not pile up in memory).
        retries: attempts for a write or read that fails with a transient server error.
        max_tokens: truncate each document to this many tokens (EOS included), with a warning in the report.
        sparse: also give every point a BM25 sparse vector (hybrid search); False builds a dense-only collection.
        sparse_language: the BM25 stemmer and stopword language.
        index_metadata: metadata keys searches filter by, with their type ("keyword" or "integer"), e.g.
            ``{"topic": "keyword"}``: a payload index on each makes filtered searches fast and exact on a server and
            on Qdrant Edge (without one, Edge falls back to ACORN, tens of milliseconds at 100,000 points).

    ``passage_tokens``, ``passage_overlap``, ``max_tokens`` and ``sparse`` are recorded in the collection: a sync
    must use the same values, a search reads them from there (``QdrantSync.open`` builds an instance with them).
    The BM25 average lengths are chosen when the collection is created (see ``choose_bm25``) and recorded too.
    """

    def __init__(
        self,
        store: Store | Any,
        collection: str,
        embedder: Embedder,
        model_id: str | None = None,
        store_text: bool = False,
        passage_tokens: int | None = None,
        passage_overlap: int = 0,
        batch_size: int = 64,
        retries: int = 5,
        max_tokens: int | None = None,
        sparse: bool = True,
        sparse_language: str = "english",
        index_metadata: dict[str, str] | None = None,
    ):
        check_passage_settings(passage_tokens, passage_overlap)
        for key, schema in (index_metadata or {}).items():
            if not isinstance(key, str) or not key or schema not in (KEYWORD, INTEGER):
                raise ValueError(f"index_metadata maps metadata keys to {KEYWORD!r} or {INTEGER!r}, got "
                                 f"{key!r}: {schema!r}")
        for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(sparse, bool):
            raise TypeError(f"sparse must be True or False, got {sparse!r}")
        self.store = as_store(store)
        self.collection = check_collection_name(collection)
        self.max_tokens = max_tokens
        self.embedder = embedder
        self.model_id = model_id or embedder.name or "unnamed"
        self.store_text = store_text
        self.passage_tokens = passage_tokens
        self.passage_overlap = passage_overlap
        self.batch_size = batch_size
        self.sparse = sparse
        self.sparse_language = sparse_language
        self.index_metadata = dict(index_metadata or {})
        self._retries = retries
        if sparse:
            Bm25(language=sparse_language)  # an unknown language fails here, before any model work
        # The collection's layout, set when it is checked or created: vector names and the BM25 encoders.
        self.layout: int | None = None
        self.bm25: Bm25 | None = None  # documents' BM25 (the collection's average document length)
        self.bm25_passages: Bm25 | None = None  # passages' BM25 (the average passage length)
        self._lock = threading.RLock()
        self._fingerprint: str | None = None
        self._verified = False  # the collection was checked (or created) once; its settings cannot change under us
        self._read_checked = False  # checked for searching (the model only)
        self._retry = _tenacity.Retrying(
            retry=_tenacity.retry_if_exception(_is_transient),
            stop=_tenacity.stop_after_attempt(retries),
            wait=_tenacity.wait_exponential(multiplier=0.5, max=10),
            reraise=True,
        )

    @classmethod
    def open(cls, store: Store | Any, collection: str, embedder: Embedder, **kwargs) -> "QdrantSync":
        """An instance with the settings the collection was built with (passages, truncation, BM25), for searching
        it (or syncing more of the same). The collection must exist."""
        store = as_store(store)
        recorded = collection_settings(store, check_collection_name(collection))
        if recorded is None:
            raise CollectionMismatchError(f"collection {collection!r} does not exist; sync documents first")
        layout = recorded_layout(recorded)
        if layout_version(recorded) == 1:
            layout["sparse"] = False  # a recemb 0.1 collection: dense-only (searchable, syncable with sparse=False)
        if recorded.get("sparse"):
            layout["sparse_language"] = recorded["sparse"].get("language", "english")
        return cls(store, collection, embedder, **{**layout, **kwargs})

    def settings(self) -> dict[str, Any]:
        """This instance's keyword arguments (all but the store, collection and embedder): what another sync with
        the same settings is built from (a rebuild's staging collection, a Ray actor's sync)."""
        return dict(model_id=self.model_id, store_text=self.store_text, passage_tokens=self.passage_tokens,
                    passage_overlap=self.passage_overlap, batch_size=self.batch_size, retries=self._retries,
                    max_tokens=self.max_tokens, sparse=self.sparse, sparse_language=self.sparse_language,
                    index_metadata=dict(self.index_metadata))

    def _like(self, collection: str) -> "QdrantSync":
        """Another collection's sync with this one's settings (the staging collection of a rebuild)."""
        return QdrantSync(self.store, collection, self.embedder, **self.settings())

    # ------------------------------------------------------------------ collection
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.embedder)
        return self._fingerprint

    def expected_metadata(self) -> dict[str, Any]:
        return {
            "model": self.model_id,
            "model_fingerprint": self.fingerprint,
            "dim": self.embedder.dim,
            "distance": str(DISTANCE.value),
            "pooling": "last token (appended EOS), L2-normalised",
            "document_prompt": "",
            "max_length": self.embedder.max_length,
            "passage_tokens": self.passage_tokens,
            "passage_overlap": self.passage_overlap if self.passage_tokens else None,
            "max_tokens": self.max_tokens,
            "layout": LAYOUT_VERSION,
            "point_roots": True,  # every point records its root (ROOT_KEY), indexed
            "vectors": {"dense": DENSE_VECTOR, "sparse": SPARSE_VECTOR if self.sparse else None},
            "sparse": None,  # the BM25 settings, filled in when the collection is created (choose_bm25)
            "recemb_version": recemb.__version__,
        }

    def choose_bm25(self, documents: Iterable[Document] = ()) -> dict[str, Any]:
        """The BM25 settings of a new collection, average lengths included.

        fastembed's default average length (256 tokens) suits short passages. Whole documents are often far longer
        (a book is some 200,000 BM25 tokens): measured against 256, length normalisation would crush every value of
        a long document towards zero. So the average is the mean BM25 length of the first sync's documents (read up
        to ``AVG_LEN_SAMPLE_CHARS``), and the passages' average is what ``passage_tokens`` model tokens hold in BM25
        tokens on the same text. Both are recorded in the collection and every later sync uses them: values written
        with another average would not be comparable."""
        bm25 = Bm25(language=self.sparse_language)
        lengths, budget = [], AVG_LEN_SAMPLE_CHARS
        sample_bm25 = sample_model = 0  # BM25 and model tokens of the text sampled for the passages' ratio
        sample_budget = PASSAGE_LEN_SAMPLE_CHARS
        tokenizer = self.embedder.tokenizer if self.passage_tokens else None
        for doc in documents:
            if budget <= 0:
                break
            try:
                text = doc.text[:budget]
            except (OSError, ValueError):  # a source that cannot be read now is reported by the sync itself
                continue
            budget -= len(text)
            lengths.append(bm25.length(text))
            if tokenizer is not None and text.strip() and sample_budget > 0:
                sample = text[:sample_budget]
                sample_budget -= len(sample)
                sample_bm25 += bm25.length(sample)
                sample_model += sum(map(len, tokenizer.encode_stream(sample))) - 1  # the EOS is not text
        avg_len = sum(lengths) / len(lengths) if lengths and sum(lengths) > 0 else bm25.avg_len
        settings = bm25.with_avg_len(float(avg_len)).settings()
        if self.passage_tokens:
            per_token = sample_bm25 / sample_model if sample_model > 0 and sample_bm25 > 0 else None
            settings["passage_avg_len"] = (float(max(per_token * self.passage_tokens, 1.0)) if per_token
                                           else bm25.avg_len)
        return settings

    def _adopt_layout(self, recorded: dict[str, Any]) -> None:
        """Vector names and BM25 encoders from the collection's record."""
        self.layout = layout_version(recorded)
        settings = recorded.get("sparse") if self.layout >= 2 else None
        if settings:
            self.bm25 = Bm25.from_settings({k: v for k, v in settings.items() if k != "passage_avg_len"})
            self.bm25_passages = self.bm25.with_avg_len(settings.get("passage_avg_len", self.bm25.avg_len))
        else:
            self.bm25 = self.bm25_passages = None

    @property
    def _dense_name(self) -> str | None:
        return None if self.layout == 1 else DENSE_VECTOR

    def _point_vectors(self, dense, sparse: SparseVector | None):
        """A point's vectors in the collection's layout; an empty BM25 vector is left out (the point is found by its
        dense vector alone)."""
        if self.layout == 1:
            return dense.tolist()
        vectors: dict[str, Any] = {DENSE_VECTOR: dense.tolist()}
        if sparse is not None and len(sparse):
            vectors[SPARSE_VECTOR] = sparse
        return vectors

    def _call(self, fn: Callable, *args, **kwargs):
        with self._lock:
            return self._retry(fn, *args, **kwargs)

    def _create(self, documents: Sequence[Document]) -> None:
        expected = self.expected_metadata()
        if self.sparse:
            expected["sparse"] = self.choose_bm25(documents)
        self._call(self.store.create_collection, self.collection, self.embedder.dim, self.sparse, {META_KEY: expected})
        self._index_payload(self.collection)
        self._adopt_layout(expected)

    def _index_payload(self, collection: str) -> None:
        """Payload indexes on the fields every sync filters by (a server and Edge use them; local mode has none)."""
        for key, schema in {**PAYLOAD_INDEXES, **{f"metadata.{k}": v for k, v in self.index_metadata.items()}}.items():
            self._call(self.store.create_payload_index, collection, key, schema)

    def ensure_collection(self, create: bool = True, documents: Sequence[Document] = ()) -> None:
        """Create the collection, or check that it was built with this model, dimension and distance.

        ``documents``: the first sync's documents, from which a new collection's BM25 average lengths are chosen.
        ``create=False`` is the read path: the collection must exist, only the model (and so the dimension) must
        match, and its passage, truncation and BM25 settings are taken from the collection."""
        if self._verified or (not create and self._read_checked):
            return
        expected = self.expected_metadata()
        if not self._call(self.store.collection_exists, self.collection):
            if not create:
                raise CollectionMismatchError(f"collection {self.collection!r} does not exist; "
                                              + (self._call(interrupted_rebuild_hint, self.store, self.collection)
                                                 or "sync documents first"))
            self._create(documents)
            self._verified = True
            return
        info = self._call(self.store.collection_info, self.collection)
        recorded = _recorded_metadata(info.metadata, self.collection)
        if recorded.get("migration"):
            raise CollectionMismatchError(
                f"collection {self.collection!r} is being filled by `recemb migrate`, which has not finished (or was "
                "interrupted); run the same migrate command again to complete it")
        if (recorded.get("rebuild") or {}).get("state") == "copying":
            raise CollectionMismatchError(
                f"collection {self.collection!r} is being filled by a rebuild that was interrupted; run the sync "
                "again (`recemb sync --rebuild ...` or any sync of it) to finish it. Nothing was lost: the rebuilt "
                f"points are kept in {self.collection + REBUILD_SUFFIX!r} until then.")
        size = info.dense_size
        problems = []
        if recorded.get("dim") != self.embedder.dim or (size is not None and size != self.embedder.dim):
            problems.append(f"dimension {recorded.get('dim')} (collection) vs {self.embedder.dim} (model)")
        if recorded.get("model_fingerprint") != self.fingerprint:
            if recorded.get("model") == self.model_id:  # same name, other weights (e.g. a retrained model)
                problems.append(f"model {self.model_id!r} has other weights than when the collection was built "
                                f"(fingerprint {recorded.get('model_fingerprint')} vs {self.fingerprint})")
            else:
                problems.append(f"model {recorded.get('model')!r} (collection) vs {self.model_id!r} (this embedder)")
        if recorded.get("distance") != expected["distance"]:
            problems.append(f"distance {recorded.get('distance')} vs {expected['distance']}")
        if not create:
            if problems:
                raise CollectionMismatchError(
                    f"collection {self.collection!r} cannot be searched with this model: " + "; ".join(problems)
                    + f". Search it with the model it was built with ({recorded.get('model')!r}).")
            for key, value in recorded_layout(recorded).items():
                setattr(self, key, value)
            self._adopt_layout(recorded)
            self._read_checked = True
            return
        version = layout_version(recorded)
        if version == 1 and self.sparse:
            raise CollectionMismatchError(legacy_hybrid_refusal(self.collection))
        if version > LAYOUT_VERSION:
            raise CollectionMismatchError(f"collection {self.collection!r} has layout {version}, newer than this "
                                          f"recemb ({recemb.__version__}) knows; upgrade recemb")
        for key in ("passage_tokens", "passage_overlap", "max_length", "max_tokens"):
            if recorded.get(key) != expected[key]:
                problems.append(f"{key} {recorded.get(key)} (collection) vs {expected[key]} (now)")
        if version >= 2 and (recorded.get("sparse") is not None) != self.sparse:
            problems.append("BM25 vectors " + ("present (collection) vs dense-only (now)" if not self.sparse
                                               else "absent (collection: dense-only) vs hybrid (now)"))
        elif self.sparse and recorded["sparse"].get("language") != self.sparse_language:
            problems.append(f"BM25 language {recorded['sparse'].get('language')} (collection) vs "
                            f"{self.sparse_language} (now)")
        if problems:
            raise CollectionMismatchError(
                f"collection {self.collection!r} was built differently: " + "; ".join(problems)
                + ". Nothing was written. Sync with the collection's settings, into a new collection, or rebuild it "
                "with the new ones (`recemb sync --rebuild`).")
        self._adopt_layout(recorded)
        for key, schema in self.index_metadata.items():  # keys named after the collection was created
            self._call(self.store.create_payload_index, self.collection, f"metadata.{key}", schema)
        if not recorded.get("point_roots"):  # made before points recorded their root: index it once
            self._call(self.store.create_payload_index, self.collection, ROOT_KEY, KEYWORD)
            self._call(self.store.update_metadata, self.collection, {META_KEY: {**recorded, "point_roots": True}})
        self._verified = True

    # ------------------------------------------------------------------ reading state
    def _existing(self) -> tuple[dict[str, tuple[str, Any]], dict[str, str | None]]:
        """(document id -> (content hash, metadata)) for document points, and every document id seen in any point
        (passages of a document whose own point was never written included) -> the root that wrote it (None for
        points of a recemb that did not record roots)."""
        documents: dict[str, tuple[str, Any]] = {}
        seen: dict[str, str | None] = {}
        offset = None
        while True:
            points, offset = self._call(
                self.store.scroll, self.collection, limit=512, offset=offset,
                with_payload=["document_id", "content_hash", "kind", "metadata", ROOT_KEY], with_vectors=False,
            )
            for p in points:
                payload = p.payload or {}
                doc_id = payload.get("document_id")
                if doc_id is None:
                    continue
                if seen.get(doc_id) is None:
                    seen[doc_id] = payload.get(ROOT_KEY)
                if payload.get("kind") == KIND_DOCUMENT:
                    documents[doc_id] = (payload.get("content_hash"), payload.get("metadata"))
            if offset is None:
                return documents, seen

    # ------------------------------------------------------------------ sync
    def sync(
        self,
        documents: Iterable[Document | tuple],
        delete_missing: bool = True,
        show_progress_bar: bool | None = None,
        on_document: Callable[[str, str], None] | None = None,
        keep_ids: Iterable[str] = (),
        allow_mass_delete: bool = False,
        skip_empty: bool = False,
        rebuild: bool = False,
        scope: str | None = None,
        executor: Any = None,
    ) -> SyncReport:
        """Bring the collection to exactly ``documents``: add new, re-embed changed, skip unchanged, and with
        ``delete_missing`` delete documents no longer present. Bad documents are reported in ``failed`` and do not
        stop the others; their stored versions are kept, as are those of ``keep_ids`` (sources that exist but could
        not be read). ``on_document(id, action)`` is called after each document is written.

        A sync that would delete more than half of the collection's documents (and more than
        ``MASS_DELETE_MIN_DOCUMENTS``) raises ``MassDeletionError`` before any write unless ``allow_mass_delete``.
        Empty and whitespace-only documents are synced with a warning, or left out with ``skip_empty``: a new one is
        not stored, and one that is stored already (a file emptied since) keeps its stored version, with a warning.
        Documents cut by ``max_tokens`` are synced with a warning.

        ``rebuild``: build the collection anew with this instance's settings (layout, model, passages, BM25) from
        ``documents`` into a staging collection, then replace the old one with it; see ``_rebuild``.

        ``scope``: an id prefix (e.g. ``"wiki/"``, one path component or more; a missing final "/" is added): this
        sync's root. Every point records the root whose sync wrote it (``""`` without a scope), and a sync deletes,
        overwrites and counts for the mass-deletion guard only its own root's documents: several roots share one
        collection, an unprefixed folder's ``wiki/x.md`` included. A document whose id is another root's is
        reported as failed and the other root's version kept; with a scope, every id must start with it. Points of
        a recemb that did not record roots are judged by their ids (under the scope, and not under a longer root
        that others have recorded) and take this root when this sync finds them among its documents.

        ``executor``: where the embedding runs, e.g. ``recemb_integrations.ray.RayExecutor`` (Ray actors). The plan
        (new, changed, unchanged, gone) is made here from ids and hashes; the executor embeds the documents to
        (re-)embed and this process writes their points in the same order as a local sync (passages, then the
        document point that carries the hash), then deletes what is gone.

        ``documents`` may be ``DocumentSource``s: read once to hash them and again only to embed, a batch at a time.
        If every document fails to read, a sync with ``delete_missing`` raises ``NothingReadableError`` before any
        write."""
        if rebuild:
            if not delete_missing:
                raise ValueError("a rebuild builds the collection from `documents` alone; delete_missing=False "
                                 "cannot keep documents that are not among them")
            if scope is not None:
                raise ValueError("a rebuild replaces the whole collection; it cannot be limited to a scope")
            return self._rebuild(list(documents), show_progress_bar, on_document, keep_ids, allow_mass_delete,
                                 skip_empty, executor)
        from tqdm.auto import tqdm

        root = scope_root(scope)
        start = time.perf_counter()
        report = SyncReport()
        # The first pass: ids, hashes and metadata, no text kept (a bar where there are many to read).
        sized = len(documents) if isinstance(documents, Sized) else 0
        docs, bad = _normalise(tqdm(documents, total=sized or None, desc=f"Reading for {self.collection}",
                                    unit="doc", leave=False, disable=not (show_progress_bar if show_progress_bar
                                                                          is not None else sized > FIRST_PASS_BAR)))
        if root:
            outside = [d for d in docs if not d.id.startswith(root)]
            bad += [(d.id, f"id is outside this sync's scope {root!r}") for d in outside]
            docs = [d for d in docs if d.id.startswith(root)]
        if delete_missing and bad and not docs:
            raise NothingReadableError(f"none of the {len(bad)} documents could be read ({bad[0][0]}: {bad[0][1]}); "
                                       "nothing was synced or deleted")
        report.failed.extend(bad)
        docs, left_out = self._check_empty(docs, report, skip_empty)
        self._finish_interrupted_rebuild()
        self.ensure_collection(documents=docs)  # before any write
        existing, seen = self._existing()
        owned = owned_ids(seen, root)
        # Another root's documents are neither overwritten nor deleted; an emptied document keeps its stored version.
        foreign = [d for d in docs if d.id in seen and d.id not in owned]
        report.failed.extend((d.id, _foreign_id(d.id, seen[d.id], root)) for d in foreign)
        docs = [d for d in docs if not (d.id in seen and d.id not in owned)]
        kept = [d for d in left_out if d.id in existing and d.id in owned]
        report.warnings.extend((d.id, _blank(d) + (_EMPTIED if d in kept else "; left out (skip_empty)"))
                               for d in left_out)
        stale: list[str] = []
        if delete_missing:
            stale = self._stale(owned, docs, bad, [*keep_ids, *(d.id for d in kept)], allow_mass_delete)

        to_embed: list[tuple[_Entry, str]] = []
        unstamped: list[str] = []  # unchanged documents written before points recorded their root
        for doc in docs:
            h = doc.hash
            old = existing.get(doc.id)
            if old is not None and old[0] == h:
                if seen.get(doc.id) is None:
                    unstamped.append(doc.id)
                if old[1] != doc.metadata:
                    self._call(self.store.set_payload, self.collection, {"metadata": doc.metadata},
                               ids=[point_id(doc.id)])
                    self._call(self.store.set_payload, self.collection, {"metadata": doc.metadata},
                               filter=models.Filter(must=[_match("document_id", doc.id),
                                                          _match("kind", KIND_PASSAGE)]))
                    report.metadata_updated += 1
                else:
                    report.unchanged += 1
                continue
            to_embed.append((doc, "updated" if old is not None else "added"))
        for i in range(0, len(unstamped), DELETE_BATCH):
            self._call(self.store.set_payload, self.collection, {ROOT_KEY: root}, filter=models.Filter(must=[
                models.FieldCondition(key="document_id", match=models.MatchAny(any=unstamped[i : i + DELETE_BATCH]))]))

        show = show_progress_bar if show_progress_bar is not None else (
            len(to_embed) > self.batch_size or any(d.size > STREAM_HINT_SIZE for d, _ in to_embed))

        def done(doc: Document, action: str) -> None:
            setattr(report, action, getattr(report, action) + 1)
            if on_document is not None:
                on_document(doc.id, action)

        if executor is not None:  # embedding elsewhere (e.g. Ray actors); the writes stay in this process's order
            executor.run(self, to_embed, report, done, show_progress_bar=show, root=root)
        else:
            with tqdm(total=len(to_embed), disable=not show, desc=f"Syncing {self.collection}", unit="doc") as bar:
                self.embed_and_write(to_embed, report, done, show_progress_bar, show_streams=show,
                                     on_progress=bar.update, root=root)

        if stale:
            # Only this root's points (or unstamped ones it owns): another root's never match, whatever their id.
            this_root = models.Filter(should=[_match(ROOT_KEY, root), models.IsEmptyCondition(
                is_empty=models.PayloadField(key=ROOT_KEY))])
            for i in range(0, len(stale), DELETE_BATCH):
                chunk = stale[i : i + DELETE_BATCH]
                self._call(self.store.delete, self.collection, models.Filter(must=[models.FieldCondition(
                    key="document_id", match=models.MatchAny(any=chunk)), this_root]))
            report.deleted = len([d for d in stale if d in existing])
        if report.added or report.updated:
            self._call(self.store.optimize, self.collection, show_progress_bar=show_progress_bar)
        self._warn_if_too_large(report)
        report.seconds = time.perf_counter() - start
        return report

    def embed_and_write(self, to_embed: Sequence[tuple[_Entry, str]], report: SyncReport, done,
                        show_progress_bar: bool | None = None, show_streams: bool = False,
                        on_progress: Callable[[int], Any] = lambda n: None, root: str = "") -> None:
        """The second pass of a sync: read the texts again, a batch at a time, embed them and write their points
        (each document's passages before its own point). A long document is embedded as a stream as soon as it is
        read. Memory is bounded by the batch (or one long document), not by the corpus. ``on_progress(n)``: n more
        documents are through; ``show_streams``: a bar per streamed document; ``root``: the sync's root, recorded
        on every point. An executor's workers run this on their share of the documents."""
        pending: list[tuple[Document, str]] = []
        pending_chars = 0
        for entry, action in to_embed:
            try:
                doc = entry.load()
            except (OSError, ValueError) as e:  # changed or vanished since the first pass: keep what is stored
                report.failed.append((entry.id, f"cannot read: {getattr(e, 'strerror', None) or e}"))
                on_progress(1)
                continue
            if self.embedder.streams(doc.text):
                self._sync_streamed(doc, action, report, done, show_streams, root)
                on_progress(1)
                continue
            pending.append((doc, action))
            pending_chars += len(doc.text)
            if len(pending) == self.batch_size or pending_chars >= BATCH_MAX_CHARS:
                self._sync_batch(pending, report, done, show_progress_bar, root)
                on_progress(len(pending))
                pending, pending_chars = [], 0
        if pending:
            self._sync_batch(pending, report, done, show_progress_bar, root)
            on_progress(len(pending))

    def _warn_if_too_large(self, report: SyncReport) -> None:
        threshold = self.store.threshold_points
        if threshold is not None and (points := self._points()) > threshold:
            report.warnings.append((f"collection {self.collection}", (
                f"{points:,} points in qdrant-client's local mode, which is made for up to {threshold:,} (exact "
                "search, slow to open); move it to Qdrant Edge or a server with `recemb migrate`")))

    def _stale(self, seen: set[str], docs: list[Document], bad: list[tuple[str, str]], keep_ids: Iterable[str],
               allow_mass_delete: bool) -> list[str]:
        """Stored document ids (``seen``: those this sync manages) absent from the sources; a MassDeletionError when
        they are most of them."""
        source_ids = {d.id for d in docs} | {doc_id for doc_id, _ in bad} | set(keep_ids)
        stale = sorted(seen - source_ids)
        if not allow_mass_delete and len(stale) > max(MASS_DELETE_MIN_DOCUMENTS, len(seen) / 2):
            shown = ", ".join(repr(d) for d in stale[:3]) + (", ..." if len(stale) > 3 else "")
            raise MassDeletionError(
                f"this sync would delete {len(stale)} of the {len(seen)} documents it manages in collection "
                f"{self.collection!r} ({shown}) because they are not among the {len(docs)} given; nothing was "
                "written. Check the paths; if the deletion is intended, pass --allow-mass-delete "
                "(allow_mass_delete=True), or keep them with --keep-missing (delete_missing=False); to keep several "
                "folders in one collection, sync each with its own --id-prefix (scope=).")
        return stale

    # ------------------------------------------------------------------ rebuild
    def _rebuild(self, documents: list, show_progress_bar, on_document, keep_ids, allow_mass_delete,
                 skip_empty, executor=None) -> SyncReport:
        """Build the collection anew, losing nothing to a crash at any point:

        1. the documents are synced into the staging collection ``<name>.recemb-rebuild`` (incremental: a rebuild
           stopped here resumes where it was; the old collection is untouched);
        2. the staging collection is marked complete ("staged");
        3. the old collection is dropped, the new one created and marked "copying", the staged points are copied into
           it (no embedding) and the mark is removed; then the staging collection is dropped.
        A sync or rebuild that finds the marks of an interrupted step 3 finishes it first; a search refuses until
        then. Documents that fail stop the rebuild before step 2 (``RebuildError``): their old versions are kept."""
        if self._finish_interrupted_rebuild():  # the collection was rebuilt already: bring it up to date
            return self.sync(documents, show_progress_bar=show_progress_bar, on_document=on_document,
                             keep_ids=keep_ids, allow_mass_delete=allow_mass_delete, skip_empty=skip_empty,
                             executor=executor)
        staging = check_collection_name(self.collection + REBUILD_SUFFIX)
        docs, bad = _normalise(documents)
        stale: list[str] = []
        if self._call(self.store.collection_exists, self.collection):
            _recorded_metadata(self._call(self.store.collection_info, self.collection).metadata, self.collection)
            existing, seen = self._existing()
            docs, left_out = self._check_empty(docs, SyncReport(), skip_empty)
            emptied = [d.id for d in left_out if d.id in existing]
            if emptied:  # the rebuilt collection would not hold them: their stored versions would be lost
                raise RebuildError(
                    f"{len(emptied)} stored documents are empty now ({emptied[0]}) and skip_empty (--skip-empty) "
                    f"leaves them out, so a rebuild would lose their stored versions; collection {self.collection!r} "
                    "was not touched. Rebuild without --skip-empty (they are stored empty), or remove the files.",
                    SyncReport())
            stale = self._stale(set(seen), docs, bad, keep_ids, allow_mass_delete)
            stale = [d for d in stale if d in existing]
        stage = self._like(staging)
        try:
            report = stage.sync(documents, show_progress_bar=show_progress_bar, on_document=on_document,
                                allow_mass_delete=True, skip_empty=skip_empty, executor=executor)
        except CollectionMismatchError:  # staged by an earlier rebuild with other settings: start it afresh
            # ... but only if it is recemb's staging collection: a foreign one of that name is refused, not dropped
            _recorded_metadata(self._call(self.store.collection_info, staging).metadata, staging)
            self._call(self.store.delete_collection, staging)
            stage = self._like(staging)
            report = stage.sync(documents, show_progress_bar=show_progress_bar, on_document=on_document,
                                allow_mass_delete=True, skip_empty=skip_empty, executor=executor)
        unreadable = sorted(set(keep_ids))
        if report.failed or unreadable:
            failed = report.failed + [(d, "could not be read") for d in unreadable]
            raise RebuildError(
                f"{len(failed)} documents failed ({failed[0][0]}: {failed[0][1]}); collection {self.collection!r} "
                f"was not replaced, so their current versions are kept. Fix or remove them and run the rebuild "
                f"again: the {report.added + report.updated + report.unchanged} documents already rebuilt in "
                f"{staging!r} are kept and not embedded again.", report)
        recorded = _recorded_metadata(self._call(self.store.collection_info, staging).metadata, staging)
        self._call(self.store.update_metadata, staging,
                   {META_KEY: {**recorded, "rebuild": {"state": "staged", "target": self.collection}}})
        self._swap(staging, recorded)
        report.deleted = len(stale)
        return report

    def _swap(self, staging: str, recorded: dict[str, Any]) -> None:
        """Step 3 of a rebuild: replace the collection by the staged one's points (see ``_rebuild``)."""
        recorded = {k: v for k, v in recorded.items() if k != "rebuild"}
        if self._call(self.store.collection_exists, self.collection):
            self._call(self.store.delete_collection, self.collection)
        info = self._call(self.store.collection_info, staging)
        self._call(self.store.create_collection, self.collection, info.dense_size, info.sparse,
                   {META_KEY: {**recorded, "rebuild": {"state": "copying", "source": staging}}})
        self._index_payload(self.collection)
        self._copy_points(staging, recorded)

    def _copy_points(self, staging: str, recorded: dict[str, Any]) -> None:
        offset = None
        while True:
            points, offset = self._call(self.store.scroll, staging, limit=256, offset=offset, with_payload=True,
                                        with_vectors=True)
            if points:
                self._call(self.store.upsert, self.collection, [StoredPoint(p.id, p.payload, p.vector)
                                                                for p in points])
            if offset is None:
                break
        self._call(self.store.update_metadata, self.collection, {META_KEY: recorded})
        self._call(self.store.delete_collection, staging)
        self._call(self.store.optimize, self.collection)
        self._verified = self._read_checked = False  # the collection changed under this instance

    def _finish_interrupted_rebuild(self) -> bool:
        """Complete step 3 of a rebuild that was stopped (see ``_rebuild``). True if the collection now holds a
        completed rebuild (finished here or just before the staging collection was dropped)."""
        staging = self.collection + REBUILD_SUFFIX
        if len(staging) > MAX_COLLECTION_NAME or not self._call(self.store.collection_exists, staging):
            return False
        staged = self._call(self.store.collection_info, staging).metadata.get(META_KEY) or {}
        if (staged.get("rebuild") or {}).get("state") != "staged":
            return False  # a rebuild stopped while embedding (the next rebuild resumes it), or not recemb's
        final = {k: v for k, v in staged.items() if k != "rebuild"}
        if not self._call(self.store.collection_exists, self.collection):
            self._swap(staging, final)  # stopped between dropping the old collection and creating the new one
            return True
        recorded = _recorded_metadata(self._call(self.store.collection_info, self.collection).metadata,
                                      self.collection)
        if (recorded.get("rebuild") or {}).get("state") == "copying":
            self._copy_points(staging, final)  # upserts are idempotent: copy everything again
            return True
        if recorded == final:
            self._call(self.store.delete_collection, staging)  # stopped after the copy, before the clean-up
            return True
        return False  # the staged copy was never swapped in and the old collection is intact: a rebuild restages it

    @staticmethod
    def _check_empty(docs: list[_Entry], report: SyncReport, skip_empty: bool) -> tuple[list[_Entry], list[_Entry]]:
        """(documents to sync, blank ones that ``skip_empty`` leaves out); blank ones synced are warned of here."""
        kept, left_out = [], []
        for doc in docs:
            if not doc.blank:
                kept.append(doc)
            elif skip_empty:
                left_out.append(doc)
            else:
                report.warnings.append((doc.id, _blank(doc) + "; synced (its embedding carries no content)"))
                kept.append(doc)
        return kept, left_out

    def _token_limit(self) -> int | None:
        limits = [n for n in (self.max_tokens, self.embedder.max_length) if n is not None]
        return min(limits) if limits else None

    def _complete(self, finished: list[tuple[Document, str, Any, TokenStream, int]], report: SyncReport,
                  done, root: str = "") -> None:
        """Write the own points of documents whose passages are all written, and account for them: one delete of
        their stale passages, one upsert of their points. A crash before the upsert leaves their old hashes (or no
        point), so the next sync redoes them."""
        stale = [models.Filter(must=[_match("document_id", doc.id), _match("kind", KIND_PASSAGE),
                                     models.FieldCondition(key="passage", range=models.Range(gte=n_passages))])
                 for doc, action, _, _, n_passages in finished if action == "updated" or n_passages]
        if stale:  # passages beyond the new count belong to an older version of the text
            self._call(self.store.delete, self.collection, models.Filter(should=stale))
        points = []
        for doc, _, vector, stream, _ in finished:
            payload = {"document_id": doc.id, "kind": KIND_DOCUMENT, "content_hash": content_hash(doc.text),
                       "metadata": doc.metadata, "tokens": stream.tokens, ROOT_KEY: root}
            if self.store_text:
                payload["text"] = doc.text
            sparse = self.bm25.embed_document(doc.text) if self.bm25 is not None else None
            points.append(StoredPoint(point_id(doc.id), payload, self._point_vectors(vector, sparse)))
        # The document points go last: a content hash marks its document as complete.
        self._call(self.store.upsert, self.collection, points)
        for doc, action, _, stream, _ in finished:
            if stream.truncated:
                report.warnings.append((doc.id, f"truncated to its first {stream.tokens} tokens (max_tokens)"))
            report.warnings.extend((doc.id, note) for note in stream.notes)
            if (not stream.truncated and len(doc.text) >= FEW_TOKENS_MIN_CHARS
                    and stream.tokens * FEW_TOKENS_CHARS_PER_TOKEN < len(doc.text)):  # max_tokens is not the text's
                report.warnings.append((doc.id, (
                    f"its {len(doc.text):,} characters gave only {stream.tokens:,} tokens, so its embedding "
                    "carries little of its content (a tokenizer makes a long run of letters without spaces or "
                    "punctuation one unknown token)")))
            report.embedded_tokens += stream.tokens
            done(doc, action)

    def _sync_batch(self, batch: list[tuple[Document, str]], report: SyncReport, done,
                    show_progress_bar: bool | None, root: str = "") -> None:
        """Documents short enough to tokenize whole, embedded together."""
        try:
            if self.embedder.tokenizer is None:
                self.embedder.tokenize([])  # raises the error that names the missing tokenizer
            whole = self.embedder.tokenizer.encode([d.text for d, _ in batch])
        except Exception as e:  # a tokenizer failure is one batch's problem, not the sync's
            report.failed.extend((d.id, f"tokenization failed: {e}") for d, _ in batch)
            return
        # Truncated through a one-piece TokenStream: one truncation rule for short and streamed documents.
        streams = [TokenStream([seq], self.embedder.tokenizer.eos_token_id, self._token_limit()) for seq in whole]
        ids = [list(itertools.chain.from_iterable(s)) for s in streams]
        vectors = self.embedder.embed_token_ids(ids, normalize=True, show_progress_bar=show_progress_bar)
        vectors = vectors.cpu().numpy()
        finished = []
        for (doc, action), vector, doc_ids, stream in zip(batch, vectors, ids, streams):
            n_passages = 0
            if self.passage_tokens:
                passages = _PassageWriter(self, doc, root)
                passages.feed(doc_ids)
                n_passages = passages.close()
                report.embedded_tokens += passages.tokens
            finished.append((doc, action, vector, stream, n_passages))
        self._complete(finished, report, done, root)  # the batch's own points after all of its passages

    def _sync_streamed(self, doc: Document, action: str, report: SyncReport, done, show: bool,
                       root: str = "") -> None:
        """A long document: tokenized in windows, embedded as a stream, passages cut from the same stream."""
        from tqdm.auto import tqdm

        emb, limit = self.embedder, self._token_limit()
        try:
            total = None
            if emb.needs_whole_length:  # context extension is keyed by the whole length: count first
                with tqdm(total=len(doc.text), disable=not show, unit="char", unit_scale=True, leave=False,
                          desc=_short(doc.id) + " (counting)") as bar:
                    total = emb.count_tokens(doc.text, max_length=limit, on_chars=bar.update)
            with tqdm(total=len(doc.text), disable=not show, unit="char", unit_scale=True, leave=False,
                      desc=_short(doc.id)) as bar:
                stream = emb.tokenize_stream(doc.text, max_length=limit, on_chars=bar.update)
                passages = _PassageWriter(self, doc, root) if self.passage_tokens else None

                def pieces() -> Iterator[list[int]]:  # one pass feeds the document's stream and its passages
                    for piece in stream:
                        if passages is not None:
                            passages.feed(piece)
                        yield piece

                vector = emb.embed_stream(pieces(), total_tokens=total, normalize=True)
                n_passages = passages.close() if passages is not None else 0
                report.embedded_tokens += passages.tokens if passages is not None else 0
        except TokenizationError as e:
            report.failed.append((doc.id, str(e)))
            return
        self._complete([(doc, action, vector.cpu().numpy(), stream, n_passages)], report, done, root)

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        limit: int = 10,
        instruction: str | None = None,
        filter: dict[str, Any] | Any | None = None,
        granularity: str = KIND_DOCUMENT,
        mode: str | None = None,
        fusion: str = DEFAULT_FUSION,
    ) -> list[SearchHit]:
        """The documents (or passages) that best match ``query``.

        ``mode``: "hybrid" (the default where the collection has BM25 vectors: Qdrant prefetches the nearest points
        by the dense vector and by BM25, each under the filter, and fuses the two lists with ``fusion``, "dbsf"
        (distribution-based score fusion: each list's scores scaled by its mean +- 3 standard deviations, then
        summed; the default) or "rrf" (reciprocal rank fusion, 1 / (60 + rank) as Cormack et al.)), "dense" (the
        default of a dense-only collection) or "sparse" (BM25 alone). A fused score ranks the hits of one search
        against each other (DBSF: about 0 to 2); it is neither a similarity nor comparable between searches. When a
        hybrid search finds a single result (a narrow filter), its fused score would compare it with nothing (1.0
        or 0.5), so it is scored by its dense similarity, with a ``SearchNotice``. A query without BM25 terms (empty,
        only stopwords and punctuation, or words over 40 characters such as CJK text without spaces) is searched
        dense-only, with a ``SearchNotice`` that says which. ``limit``: 1 to ``MAX_SEARCH_LIMIT``.
        ``filter``: a qdrant ``models.Filter``, or a dict of metadata key -> value (all must match): a string,
        integer or boolean matches exactly, a list of strings or of integers matches any of them.
        ``granularity``: "document", "passage" or "any". Where the collection has passages, a document search
        returns each document once, scored by the best of its own point and its passages, with the best passage
        (index, and text where stored) as evidence. The collection's own settings are used, whatever this instance
        was built with; only the model must match.
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if granularity not in (KIND_DOCUMENT, KIND_PASSAGE, "any"):
            raise ValueError("granularity must be 'document', 'passage' or 'any'")
        if mode is not None and mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)} (or None for the collection's default), "
                             f"got {mode!r}")
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise ValueError(f"limit must be an int from 1 to {MAX_SEARCH_LIMIT:,}, got {limit!r}")
        metadata_conditions = ([metadata_condition(k, v) for k, v in filter.items()] if isinstance(filter, dict)
                               else [])
        self.ensure_collection(create=False)
        if granularity == KIND_PASSAGE and not self.passage_tokens:
            raise ValueError(f"collection {self.collection!r} has no passages (it was synced without "
                             "passage_tokens); search documents instead")
        mode = self._search_mode(mode)
        sparse_query = self.bm25.embed_query(query) if mode != "dense" else None
        if sparse_query is not None and not len(sparse_query):
            warnings.warn(SearchNotice(f"the query has no BM25 terms ({self.bm25.why_no_terms(query)}): "
                                       + ("nothing to search by BM25" if mode == "sparse" else
                                          "searched by the dense vector alone")), stacklevel=2)
            if mode == "sparse":
                return []
            mode = "dense"
        dense_query = (self.embedder.encode_queries([query], instruction=instruction)[0].tolist()
                       if mode != "sparse" else None)

        conditions = [] if granularity == "any" else [_match("kind", granularity)]
        grouped = granularity == KIND_DOCUMENT and bool(self.passage_tokens)
        if grouped:
            conditions = []  # documents are found by their own points and by their passages
        if isinstance(filter, dict):
            conditions += metadata_conditions
        elif filter is not None:
            conditions.append(filter)
        point_filter = models.Filter(must=conditions) if conditions else None

        def request(candidates: int) -> SearchRequest:
            return SearchRequest(limit=limit, dense=dense_query if mode != "sparse" else None,
                                 sparse=sparse_query if mode != "dense" else None, filter=point_filter,
                                 fusion=fusion if mode == "hybrid" else None, candidates=candidates, rrf_k=RRF_K,
                                 dense_name=self._dense_name)

        candidates = max(PREFETCH_MIN, PREFETCH_PER_HIT * limit)
        if not grouped:
            points = self._call(self.store.query, self.collection, request(candidates))
            hits = [_hit(p.payload, p.score) for p in points]
        else:
            while True:
                # Each group's hits come best first: with two of them, a document whose own point leads still shows
                # its best passage. A hybrid search fuses only the prefetched candidates; when they hold fewer than
                # ``limit`` documents and more exist, the search is repeated with more candidates, so a page is full.
                groups = self._call(self.store.query_groups, self.collection, request(candidates), "document_id", 2)
                if mode != "hybrid" or len(groups) >= limit or candidates >= self._points():
                    break
                candidates = min(candidates * 4, self._points())
            hits = self._document_hits(groups)
        if mode == "hybrid" and len(hits) == 1 < limit:
            # A fusion scores candidates against each other: alone, a hit scores 1.0 (both lists) or 0.5 (one).
            warnings.warn(SearchNotice("only one result matched, so its fused score would compare it with nothing "
                                       "(1.0 or 0.5 whatever its relevance); it is scored by its dense similarity "
                                       "instead"), stacklevel=2)
            return self.search(query, limit=limit, instruction=instruction, filter=filter, granularity=granularity,
                               mode="dense")
        return hits

    def _search_mode(self, mode: str | None) -> str:
        if self.bm25 is None:
            if mode in ("hybrid", "sparse"):
                raise ValueError(f"collection {self.collection!r} has no BM25 vectors (it is dense-only"
                                 + (", built by recemb 0.1" if self.layout == 1 else "")
                                 + "); search it with mode='dense', or rebuild it (`recemb sync --rebuild`)")
            if self.layout == 1:
                warnings.warn(SearchNotice(
                    f"collection {self.collection!r} was built by recemb 0.1 with dense vectors only: searched "
                    "dense-only. Rebuild it with `recemb sync --rebuild PATHS` for hybrid (dense + BM25) search."),
                    stacklevel=3)
            return "dense"
        return mode or "hybrid"

    def _points(self) -> int:
        return self._call(self.store.count, self.collection)

    def _document_hits(self, groups) -> list[SearchHit]:
        """One hit per group (document): its best score, the document's payload, its best passage."""
        hits, missing = [], []
        for group in groups:
            best = group[0]
            own = next((h for h in group if h.payload.get("kind") == KIND_DOCUMENT), None)
            passage = next((h for h in group if h.payload.get("kind") == KIND_PASSAGE), None)
            hit = _hit(own.payload if own is not None else best.payload, best.score)
            hit.passage = None
            if own is None:  # the document point was not among the candidates: its payload is fetched below
                hit.text = None
                missing.append((hit, point_id(hit.document_id)))
            if passage is not None:
                hit.best_passage, hit.best_passage_text = passage.payload.get("passage"), passage.payload.get("text")
            hits.append(hit)
        if missing:
            stored = {p.id: p.payload for p in self._call(
                self.store.retrieve, self.collection, [pid for _, pid in missing])}
            for hit, pid in missing:
                payload = stored.get(pid) or {}
                hit.text = payload.get("text")
                hit.metadata = payload.get("metadata", hit.metadata) or {}
        return hits

    def count(self) -> int:
        """Number of documents (document points) in the collection."""
        return self._call(self.store.count, self.collection, models.Filter(must=[_match("kind", KIND_DOCUMENT)]))


class PassageWindows:
    """Cuts one document's ids (EOS last), fed piece by piece, into passages: windows of ``size`` body tokens
    starting every ``size - overlap`` tokens, each followed by the EOS; the last starts before the body's final
    ``overlap`` tokens, and an empty body gives one passage of EOS alone. Holds at most a window plus a piece."""

    def __init__(self, size: int, overlap: int, eos_token_id: int):
        check_passage_settings(size, overlap)
        self.size, self.overlap, self.step, self.eos = size, overlap, size - overlap, eos_token_id
        self._buffer: list[int] = []  # ids from absolute position self._base on
        self._base = 0
        self._seen = 0  # ids fed so far
        self._last: int | None = None
        self._next = 0  # start of the next window
        self.count = 0  # windows returned so far

    def feed(self, ids: Sequence[int]) -> list[list[int]]:
        """Windows that are complete now. The newest id may be the EOS that ends the body, so no window takes it."""
        ids = list(ids)
        if not ids:
            return []
        self._buffer += ids
        self._seen += len(ids)
        self._last = ids[-1]
        out = []
        while self._next + self.size <= self._seen - 1:
            out.append(self._window(self._next, self._next + self.size))
            self._next += self.step
        return self._emit(out)

    def finish(self) -> list[list[int]]:
        """The remaining windows, once the last id (the EOS) has been fed."""
        if self._last != self.eos:
            raise ValueError("a document's ids must end with its EOS token")
        body_end = self._seen - 1
        out = []
        while self._next < max(body_end - self.overlap, 1):
            if self._next < body_end:
                out.append(self._window(self._next, min(self._next + self.size, body_end)))
            self._next += self.step
        if not out and not self.count:
            out.append([self.eos])
        return self._emit(out)

    def _window(self, start: int, end: int) -> list[int]:
        return self._buffer[start - self._base : end - self._base] + [self.eos]

    def _emit(self, windows: list[list[int]]) -> list[list[int]]:
        drop = min(self._next, self._seen) - self._base
        if drop > 0:  # ids before the next window's start are never needed again
            del self._buffer[:drop]
            self._base += drop
        self.count += len(windows)
        return windows


class _PassageWriter:
    """Embeds and upserts a document's passages in groups as its ids stream in (before its own point)."""

    def __init__(self, sync: QdrantSync, doc: Document, root: str = ""):
        self.sync, self.doc, self.root = sync, doc, root
        self.windows = PassageWindows(sync.passage_tokens, sync.passage_overlap, sync.embedder.tokenizer.eos_token_id)
        self.pending: list[list[int]] = []
        self.written = 0
        self.tokens = 0  # embedded in passages (EOS included), counted in the report beside the document's own

    def feed(self, ids: Sequence[int]) -> None:
        self.pending += self.windows.feed(ids)
        while len(self.pending) >= PASSAGE_WRITE_BATCH:
            self._write(self.pending[:PASSAGE_WRITE_BATCH])
            self.pending = self.pending[PASSAGE_WRITE_BATCH:]

    def close(self) -> int:
        """Writes the rest; returns how many passages the document has."""
        self.pending += self.windows.finish()
        for i in range(0, len(self.pending), PASSAGE_WRITE_BATCH):
            self._write(self.pending[i : i + PASSAGE_WRITE_BATCH])
        self.pending = []
        return self.written

    def _write(self, windows: list[list[int]]) -> None:
        sync, doc = self.sync, self.doc
        vectors = sync.embedder.embed_token_ids(windows, normalize=True).cpu().numpy()
        points = []
        for i, (w, v) in enumerate(zip(windows, vectors), start=self.written):
            payload = {"document_id": doc.id, "kind": KIND_PASSAGE, "passage": i, "metadata": doc.metadata,
                       "tokens": len(w), ROOT_KEY: self.root}
            # The passage's text as its tokens decode: what its BM25 vector counts and what a search shows.
            text = sync.embedder.tokenizer.tokenizer.decode(w[:-1], skip_special_tokens=True) if (
                sync.store_text or sync.bm25_passages is not None) else None
            if sync.store_text:
                payload["text"] = text
            sparse = sync.bm25_passages.embed_document(text) if sync.bm25_passages is not None else None
            points.append(StoredPoint(point_id(doc.id, i), payload, sync._point_vectors(v, sparse)))
        sync._call(sync.store.upsert, sync.collection, points)
        self.written += len(windows)
        self.tokens += sum(map(len, windows))


def scope_root(scope: str | None) -> str:
    """The root a sync with this scope writes under: "" without one, else the prefix as whole path components
    ending in "/" ("wiki" and "wiki/" are "wiki/"), so "wiki/" never claims "wikipedia/x"."""
    if scope is None:
        return ""
    if not isinstance(scope, str) or not scope.strip().strip("/"):
        raise ValueError(f"scope must be a non-empty id prefix such as 'wiki/', got {scope!r}")
    return scope.strip().strip("/") + "/"


def owned_ids(seen: dict[str, str | None], root: str) -> set[str]:
    """The stored document ids that belong to ``root``: those its sync wrote, and unstamped ones (a recemb that did
    not record roots) that the old id rule gives it: under the root, and not under a longer root another sync
    recorded."""
    stamped = {r for r in seen.values() if r is not None}
    longer = [r for r in stamped if len(r) > len(root) and r.startswith(root)]
    return {doc_id for doc_id, r in seen.items()
            if r == root or (r is None and doc_id.startswith(root) and not any(map(doc_id.startswith, longer)))}


def describe_root(root: str | None) -> str:
    """A root as the user named it."""
    if root is None:
        return "a root that recemb could not tell (written before roots were recorded)"
    return "the sync without an id prefix" if not root else f"the sync with id prefix {root.rstrip('/')!r}"


def _foreign_id(doc_id: str, owner: str | None, root: str) -> str:
    return (f"this id is stored by {describe_root(owner)} of this collection, not by {describe_root(root)}; its "
            "stored version is kept. Give each folder its own --id-prefix (scope=) so that their ids cannot meet")


def _blank(doc: _Entry) -> str:
    return "empty document" if doc.size == 0 else "document holds only whitespace"


_EMPTIED = ("; its stored version is kept (skip_empty leaves it out). Delete the file to remove it, or sync "
            "without --skip-empty to store it empty")


def interrupted_rebuild_hint(store: Store | Any, collection: str) -> str | None:
    """What to do when a collection is missing because a rebuild stopped between dropping it and refilling it."""
    store = as_store(store)
    staging = collection + REBUILD_SUFFIX
    if len(staging) > MAX_COLLECTION_NAME or not store.collection_exists(staging):
        return None
    staged = store.collection_info(staging).metadata.get(META_KEY) or {}
    if (staged.get("rebuild") or {}).get("state") != "staged":
        return None
    return (f"a rebuild was interrupted before it put the new collection in place. Run the sync again "
            f"(`recemb sync --rebuild ...` or any sync of it) to finish it; the rebuilt points are kept in "
            f"{staging!r}")


def _short(doc_id: str, width: int = 30) -> str:
    """An id for a progress bar's label: escaped (a bar is printed on the terminal), its end if it is long."""
    doc_id = escape(doc_id)
    return doc_id if len(doc_id) <= width else "..." + doc_id[-(width - 3):]


def metadata_condition(key: str, value: Any):
    """A condition on ``metadata.<key>``: exact for a str, int or bool, any-of for a list of str or of int.
    Anything else (floats, null, objects, mixed lists) is a ValueError that says so, before Qdrant sees it."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"filter key {key!r} must be a non-empty string")
    def int64(v) -> bool:  # Qdrant stores integers as 64-bit
        return isinstance(v, int) and not isinstance(v, bool) and -(2 ** 63) <= v < 2 ** 63

    if isinstance(value, (str, bool)) or int64(value):
        return _match(f"metadata.{key}", value)
    if isinstance(value, list) and value and (all(isinstance(v, str) for v in value) or all(map(int64, value))):
        return models.FieldCondition(key=f"metadata.{key}", match=models.MatchAny(any=value))
    raise ValueError(f"filter {key}={json.dumps(value)}: a value must be a string, a 64-bit integer, true/false, "
                     "or a non-empty list of strings or of integers (any of them matches)")


def _hit(payload: dict[str, Any], score: float) -> SearchHit:
    return SearchHit(document_id=payload["document_id"], score=float(score), metadata=payload.get("metadata") or {},
                     text=payload.get("text"), passage=payload.get("passage"))


def _match(key: str, value: Any):
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _normalise(documents: Iterable[Document | DocumentSource | tuple]) -> tuple[list[_Entry], list[tuple[str, str]]]:
    """The first pass of a sync: each document's id, metadata and content hash (sources are read or fingerprinted
    one at a time, their texts not kept); problems (bad types, duplicate ids, unserialisable metadata, unreadable
    sources) as failures."""
    docs: dict[str, _Entry] = {}
    failed: list[tuple[str, str]] = []
    for i, item in enumerate(documents):
        if isinstance(item, DocumentSource):
            entry = _source_entry(item, i, failed)
            if entry is None:
                continue
            if entry.id in docs:
                failed.append((entry.id, f"duplicate document id {entry.id!r} (item {i}); the first one is kept"))
                continue
            docs[entry.id] = entry
            continue
        if isinstance(item, Document):
            doc = item
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (2, 3):
            doc = Document(*item)
        else:
            failed.append((f"#{i}", f"item {i} is {type(item).__name__}, expected Document or (id, text[, metadata])"))
            continue
        if not isinstance(doc.id, str) or not doc.id:
            failed.append((f"#{i}", f"item {i} has document id {doc.id!r}; ids must be non-empty strings"))
            continue
        if not isinstance(doc.text, str):
            failed.append((doc.id, f"text is {type(doc.text).__name__}, expected str"))
            continue
        try:
            # As Qdrant will store and return it (tuples become lists), so an unchanged document compares equal.
            doc = Document(doc.id, doc.text, json.loads(json.dumps(doc.metadata or {})))
        except (TypeError, ValueError) as e:
            failed.append((doc.id, f"metadata is not JSON-serialisable: {e}"))
            continue
        if doc.id in docs:
            failed.append((doc.id, f"duplicate document id {doc.id!r} (item {i}); the first one is kept"))
            continue
        docs[doc.id] = _Entry(doc.id, doc.metadata, content_hash(doc.text), not doc.text.strip(), len(doc.text),
                              document=doc)
    return list(docs.values()), failed


def _source_entry(source: DocumentSource, i: int, failed: list[tuple[str, str]]) -> _Entry | None:
    if not isinstance(source.id, str) or not source.id:
        failed.append((f"#{i}", f"item {i} has document id {source.id!r}; ids must be non-empty strings"))
        return None
    try:
        metadata = json.loads(json.dumps(source.metadata or {}))
    except (TypeError, ValueError) as e:
        failed.append((source.id, f"metadata is not JSON-serialisable: {e}"))
        return None
    try:
        if source.fingerprint is not None:
            digest, blank = source.fingerprint()
            size = source.size
        else:
            text = source.read()
            if not isinstance(text, str):
                raise ValueError(f"read() returned {type(text).__name__}, expected str")
            digest, blank, size = content_hash(text), not text.strip(), len(text)
    except OSError as e:
        failed.append((source.id, f"cannot read: {e.strerror or e}"))
        return None
    except ValueError as e:
        failed.append((source.id, str(e)))
        return None
    return _Entry(source.id, metadata, digest, blank, size, source=source)
