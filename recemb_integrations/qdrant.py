"""Keep a Qdrant collection in step with a set of long documents, each embedded whole.

    from contextlib import closing
    from qdrant_client import QdrantClient
    from recemb.core import Embedder
    from recemb_integrations.qdrant import Document, QdrantSync

    with closing(QdrantClient(path="./qdrant")) as client:  # embedded; or QdrantClient(url=...) for a server
        sync = QdrantSync(client, "books", Embedder.from_pretrained("..."))
        report = sync.sync([Document("moby", text, {"author": "Melville"})])
        hits = sync.search("a whale hunt", limit=5)

Invariants that make a killed sync safe to re-run:
- point ids are deterministic (uuid5 of the document id, and of (id, passage index) for passages), so writing a
  document twice overwrites it instead of duplicating it;
- a document's own point, which carries its content hash, is written last, after its passages: a crash leaves the
  old hash (or no point), and the next run redoes that document;
- every write waits for acknowledgement (``wait=True``) and transient server errors are retried;
- the collection's model, dimension and distance are checked before the first write.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from recemb_integrations._imports import require

_qdrant = require("qdrant_client", "qdrant")
models = require("qdrant_client.models", "qdrant")
_tenacity = require("tenacity", "qdrant")

import recemb  # noqa: E402
from recemb.core import Embedder  # noqa: E402

ID_NAMESPACE = uuid.UUID("6f1c2a7e-5b0d-4c8e-9a51-3d2f7c0e4b19")  # recemb's namespace for uuid5 point ids
META_KEY = "recemb"
KIND_DOCUMENT, KIND_PASSAGE = "document", "passage"
DISTANCE = models.Distance.COSINE


class CollectionMismatchError(ValueError):
    """The collection was built with another model, dimension or distance (or not by recemb)."""


@dataclass
class Document:
    """One source document: ``id`` is the stable key (e.g. a file path); ``metadata`` must be JSON-serialisable."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SyncReport:
    added: int = 0
    updated: int = 0  # re-embedded because the text changed
    metadata_updated: int = 0  # text unchanged, only metadata rewritten (no embedding)
    unchanged: int = 0
    deleted: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (document id, error)
    embedded_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SearchHit:
    document_id: str
    score: float
    metadata: dict[str, Any]
    text: str | None = None
    passage: int | None = None  # passage index for passage hits, None for whole-document hits


def point_id(document_id: str, passage: int | None = None) -> str:
    key = document_id if passage is None else f"{document_id}\x00passage\x00{passage}"
    return str(uuid.uuid5(ID_NAMESPACE, key))


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def model_fingerprint(embedder: Embedder) -> str:
    """A short hash of the architecture and a sample of every weight: the same model under another path or name
    matches, a different model does not."""
    import torch

    h = hashlib.sha256(json.dumps(embedder.config.to_transformers_dict(), sort_keys=True, default=str).encode())
    with torch.no_grad():
        for name, p in sorted(embedder.model.state_dict().items()):
            flat = p.detach().reshape(-1)
            sample = torch.cat([flat[:16], flat[-16:]]).double().cpu()
            h.update(name.encode())
            h.update(sample.numpy().tobytes())
            h.update(repr(round(float(flat.double().sum()), 6)).encode())
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
        client: a ``QdrantClient`` (local ``path=``/``":memory:"`` or a server ``url=``). Calls are serialised: local
            mode is not thread-safe.
        collection: collection name; created on first sync (cosine distance, size from the model).
        embedder: the recemb ``Embedder``.
        model_id: the name recorded in the collection (default: the embedder's name).
        store_text: keep each document's text in its payload (returned by ``search``).
        passage_tokens: if set, also store one point per passage of this many tokens (documents stay whole).
        passage_overlap: tokens shared by consecutive passages.
        batch_size: documents embedded (and then written) together.
        retries: attempts for a write or read that fails with a transient server error.
    """

    def __init__(
        self,
        client,
        collection: str,
        embedder: Embedder,
        model_id: str | None = None,
        store_text: bool = False,
        passage_tokens: int | None = None,
        passage_overlap: int = 0,
        batch_size: int = 8,
        retries: int = 5,
    ):
        if passage_tokens is not None and not (0 <= passage_overlap < passage_tokens):
            raise ValueError("passage_overlap must be >= 0 and smaller than passage_tokens")
        self.client = client
        self.collection = collection
        self.embedder = embedder
        self.model_id = model_id or embedder.name or "unnamed"
        self.store_text = store_text
        self.passage_tokens = passage_tokens
        self.passage_overlap = passage_overlap
        self.batch_size = batch_size
        self._lock = threading.RLock()
        self._fingerprint: str | None = None
        self._verified = False  # the collection was checked (or created) once; its settings cannot change under us
        self._retry = _tenacity.Retrying(
            retry=_tenacity.retry_if_exception(_is_transient),
            stop=_tenacity.stop_after_attempt(retries),
            wait=_tenacity.wait_exponential(multiplier=0.5, max=10),
            reraise=True,
        )

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
            "recemb_version": recemb.__version__,
        }

    def _call(self, fn: Callable, *args, **kwargs):
        with self._lock:
            return self._retry(fn, *args, **kwargs)

    def ensure_collection(self, create: bool = True) -> None:
        """Create the collection, or check that it was built with this model, dimension and distance."""
        if self._verified:
            return
        expected = self.expected_metadata()
        if not self._call(self.client.collection_exists, self.collection):
            if not create:
                raise CollectionMismatchError(f"collection {self.collection!r} does not exist; sync documents first")
            self._call(
                self.client.create_collection, self.collection,
                vectors_config=models.VectorParams(size=self.embedder.dim, distance=DISTANCE),
                metadata={META_KEY: expected},
            )
            self._verified = True
            return
        info = self._call(self.client.get_collection, self.collection)
        recorded = (info.config.metadata or {}).get(META_KEY)
        params = info.config.params.vectors
        size = getattr(params, "size", None)
        if recorded is None:
            raise CollectionMismatchError(
                f"collection {self.collection!r} was not created by recemb (no '{META_KEY}' metadata); "
                "use another collection name"
            )
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
        for key in ("passage_tokens", "passage_overlap", "max_length"):
            if recorded.get(key) != expected[key]:
                problems.append(f"{key} {recorded.get(key)} (collection) vs {expected[key]} (now)")
        if problems:
            raise CollectionMismatchError(
                f"collection {self.collection!r} was built differently: " + "; ".join(problems)
                + ". Nothing was written. Sync into a new collection, or delete this one to rebuild it."
            )
        self._verified = True

    # ------------------------------------------------------------------ reading state
    def _existing(self) -> tuple[dict[str, tuple[str, Any]], set[str]]:
        """(document id -> (content hash, metadata)) for document points, and every document id seen in any point
        (passages of a document whose own point was never written included)."""
        documents: dict[str, tuple[str, Any]] = {}
        seen: set[str] = set()
        offset = None
        while True:
            points, offset = self._call(
                self.client.scroll, self.collection, limit=512, offset=offset,
                with_payload=["document_id", "content_hash", "kind", "metadata"], with_vectors=False,
            )
            for p in points:
                payload = p.payload or {}
                doc_id = payload.get("document_id")
                if doc_id is None:
                    continue
                seen.add(doc_id)
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
    ) -> SyncReport:
        """Bring the collection to exactly ``documents``: add new, re-embed changed, skip unchanged, and with
        ``delete_missing`` delete documents no longer present. Bad documents are reported in ``failed`` and do not
        stop the others; their stored versions are kept, as are those of ``keep_ids`` (sources that exist but could
        not be read). ``on_document(id, action)`` is called after each document is written."""
        from tqdm.auto import tqdm

        start = time.perf_counter()
        report = SyncReport()
        docs, bad = _normalise(documents)
        report.failed.extend(bad)
        self.ensure_collection()  # before any write
        existing, seen = self._existing()

        to_embed: list[tuple[Document, str]] = []
        for doc in docs:
            h = content_hash(doc.text)
            old = existing.get(doc.id)
            if old is not None and old[0] == h:
                if old[1] != doc.metadata:
                    self._call(self.client.set_payload, self.collection, payload={"metadata": doc.metadata},
                               points=[point_id(doc.id)], wait=True)
                    self._call(self.client.set_payload, self.collection, payload={"metadata": doc.metadata},
                               points=models.Filter(must=[_match("document_id", doc.id),
                                                          _match("kind", KIND_PASSAGE)]), wait=True)
                    report.metadata_updated += 1
                else:
                    report.unchanged += 1
                continue
            to_embed.append((doc, "updated" if old is not None else "added"))

        total_tokens = None
        show = show_progress_bar if show_progress_bar is not None else len(to_embed) > self.batch_size
        with tqdm(total=len(to_embed), disable=not show, desc=f"Syncing {self.collection}", unit="doc") as bar:
            for start_i in range(0, len(to_embed), self.batch_size):
                batch = to_embed[start_i : start_i + self.batch_size]
                try:
                    ids = self.embedder.tokenize([d.text for d, _ in batch])
                except Exception as e:  # a tokenizer failure is one batch's problem, not the sync's
                    report.failed.extend((d.id, f"tokenization failed: {e}") for d, _ in batch)
                    bar.update(len(batch))
                    continue
                vectors = self.embedder.embed_token_ids(ids, normalize=True, show_progress_bar=show_progress_bar)
                total_tokens = (total_tokens or 0) + sum(len(s) for s in ids)
                for (doc, action), vector, doc_ids in zip(batch, vectors.cpu().numpy(), ids):
                    self._write_document(doc, vector, doc_ids, existing_doc=action == "updated")
                    setattr(report, action, getattr(report, action) + 1)
                    if on_document is not None:
                        on_document(doc.id, action)
                bar.update(len(batch))
        report.embedded_tokens = total_tokens or 0

        if delete_missing:
            source_ids = {d.id for d in docs} | {doc_id for doc_id, _ in bad} | set(keep_ids)
            stale = sorted(seen - source_ids)
            for i in range(0, len(stale), 256):
                chunk = stale[i : i + 256]
                self._call(self.client.delete, self.collection, points_selector=models.FilterSelector(
                    filter=models.Filter(must=[models.FieldCondition(key="document_id",
                                                                     match=models.MatchAny(any=chunk))])), wait=True)
            report.deleted = len([d for d in stale if d in existing])
        report.seconds = time.perf_counter() - start
        return report

    def _write_document(self, doc: Document, vector, token_ids: list[int], existing_doc: bool) -> None:
        payload = {"document_id": doc.id, "kind": KIND_DOCUMENT, "content_hash": content_hash(doc.text),
                   "metadata": doc.metadata, "tokens": len(token_ids)}
        if self.store_text:
            payload["text"] = doc.text
        n_passages = 0
        if self.passage_tokens:
            n_passages = self._write_passages(doc, token_ids)
        if existing_doc or n_passages:
            # Passages beyond the new count belong to an older version of the text.
            self._call(self.client.delete, self.collection, points_selector=models.FilterSelector(
                filter=models.Filter(must=[_match("document_id", doc.id), _match("kind", KIND_PASSAGE),
                                           models.FieldCondition(key="passage", range=models.Range(gte=n_passages))])),
                wait=True)
        # The document point goes last: its content hash marks the document as complete.
        self._call(self.client.upsert, self.collection, wait=True,
                   points=[models.PointStruct(id=point_id(doc.id), vector=vector.tolist(), payload=payload)])

    def _write_passages(self, doc: Document, token_ids: list[int]) -> int:
        """One point per window of ``passage_tokens`` (overlapping by ``passage_overlap``), each embedded with EOS."""
        body = token_ids[:-1]  # without the EOS; each passage gets its own
        eos = token_ids[-1]
        step = self.passage_tokens - self.passage_overlap
        windows = [body[i : i + self.passage_tokens] for i in range(0, max(len(body) - self.passage_overlap, 1), step)]
        windows = [w + [eos] for w in windows if w] or [[eos]]
        vectors = self.embedder.embed_token_ids(windows, normalize=True).cpu().numpy()
        points = []
        for i, (w, v) in enumerate(zip(windows, vectors)):
            payload = {"document_id": doc.id, "kind": KIND_PASSAGE, "passage": i, "metadata": doc.metadata,
                       "tokens": len(w)}
            if self.store_text and self.embedder.tokenizer is not None:
                payload["text"] = self.embedder.tokenizer.tokenizer.decode(w[:-1])
            points.append(models.PointStruct(id=point_id(doc.id, i), vector=v.tolist(), payload=payload))
        for i in range(0, len(points), 64):
            self._call(self.client.upsert, self.collection, points=points[i : i + 64], wait=True)
        return len(points)

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        limit: int = 10,
        instruction: str | None = None,
        filter: dict[str, Any] | Any | None = None,
        granularity: str = KIND_DOCUMENT,
    ) -> list[SearchHit]:
        """Embed ``query`` with the query instruction and return the nearest documents (or passages).

        ``filter``: a qdrant ``models.Filter``, or a dict of metadata key -> value (all must match).
        ``granularity``: "document", "passage" or "any".
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if granularity not in (KIND_DOCUMENT, KIND_PASSAGE, "any"):
            raise ValueError("granularity must be 'document', 'passage' or 'any'")
        self.ensure_collection(create=False)
        vector = self.embedder.encode_queries([query], instruction=instruction)[0]
        conditions = [] if granularity == "any" else [_match("kind", granularity)]
        if isinstance(filter, dict):
            conditions += [_match(f"metadata.{k}", v) for k, v in filter.items()]
            query_filter = models.Filter(must=conditions)
        elif filter is not None:
            query_filter = models.Filter(must=conditions + [filter])
        else:
            query_filter = models.Filter(must=conditions) if conditions else None
        result = self._call(self.client.query_points, self.collection, query=vector.tolist(),
                            query_filter=query_filter, limit=limit, with_payload=True)
        return [
            SearchHit(document_id=p.payload["document_id"], score=float(p.score), metadata=p.payload.get("metadata") or {},
                      text=p.payload.get("text"), passage=p.payload.get("passage"))
            for p in result.points
        ]

    def count(self) -> int:
        """Number of documents (document points) in the collection."""
        return self._call(self.client.count, self.collection, count_filter=models.Filter(
            must=[_match("kind", KIND_DOCUMENT)]), exact=True).count


def _match(key: str, value: Any):
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _normalise(documents: Iterable[Document | tuple]) -> tuple[list[Document], list[tuple[str, str]]]:
    """Documents as ``Document``; problems (bad types, duplicate ids, unserialisable metadata) as failures."""
    docs: dict[str, Document] = {}
    failed: list[tuple[str, str]] = []
    for i, item in enumerate(documents):
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
        docs[doc.id] = doc
    return list(docs.values()), failed
