"""A collection as a sync or a search finds it: its record read, the collection prepared for a sync (created, or
checked and brought up to date) and, in one scan, what its points hold. These read the store; what the answers
mean is decided in ``record`` and ``plan``, and every change they make goes through ``StoreCalls.apply``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from recemb_integrations.qdrant.calls import StoreCalls
from recemb_integrations.qdrant.lengths import choose_bm25_settings
from recemb_integrations.qdrant.plan import StoredDocuments, incomplete_passages
from recemb_integrations.qdrant.points import (
    KIND_DOCUMENT,
    KIND_PASSAGE,
    PAYLOAD_INDEXES,
    ROOT_KEY,
    from_a_file,
    match,
)
from recemb_integrations.qdrant.record import (
    CollectionRecord,
    ModelFacts,
    RequestedSettings,
    SyncSettings,
    decide_settings,
)
from recemb_integrations.qdrant.writes import CreateCollection, CreateIndex, UpdateRecord, Write
from recemb_integrations.stores import KEYWORD, Store, as_store, filters

__all__ = ["CollectionStats", "Prepared", "collection_settings", "collection_stats", "existing_collection_writes",
           "index_writes", "new_collection_writes", "prepare_collection", "read_record", "record_root",
           "scan_documents", "too_large_warnings"]

SCAN_PAGE = 512  # points per scroll request of a scan


def read_record(store: Store | Any, collection: str, calls: StoreCalls | None = None) -> CollectionRecord | None:
    """The collection's record; None if the collection does not exist. A collection without recemb metadata is a
    ``CollectionMismatchError``. ``store``: a ``Store`` or a ``QdrantClient``. Whether the points keep their text is
    read off them where an earlier recemb did not record it (``persisted`` False: the next sync records it)."""
    store = as_store(store)
    call = calls or (lambda fn, *a, **k: fn(*a, **k))
    if not call(store.collection_exists, collection):
        return None
    info = call(store.collection_info, collection)
    record = CollectionRecord.parse(info.metadata, collection, info.dense_size)
    if "store_text" not in record.data:  # an earlier recemb did not record it: its points say
        documents = filters.Filter(must=(match("kind", KIND_DOCUMENT),))
        if call(store.count, collection, documents):
            with_text = filters.Filter(must=(match("kind", KIND_DOCUMENT),), must_not=(
                filters.IsEmptyCondition(is_empty=filters.PayloadField(key="text")),))
            record = replace(record.updated(store_text=call(store.count, collection, with_text) > 0), persisted=False)
    return record


def collection_settings(store: Store | Any, collection: str) -> dict[str, Any] | None:
    """The recemb metadata a collection was built with (model, dim, passages, ...) as a dict, as recorded; None if it
    does not exist (``read_record`` gives it parsed, completed from the points where an earlier recemb recorded
    less)."""
    store = as_store(store)
    if not store.collection_exists(collection):
        return None
    return CollectionRecord.parse(store.collection_info(collection).metadata, collection).as_dict()


# ---------------------------------------------------------------------- preparing a collection for a sync
@dataclass(frozen=True)
class Prepared:
    """A collection ready for a sync: its record (as it will be once ``writes`` are made) and the settings the sync
    runs with."""

    record: CollectionRecord
    settings: SyncSettings
    writes: tuple[Write, ...] = ()


def index_writes(index_metadata: Mapping[str, str] = ()) -> list[Write]:
    """The payload indexes of every recemb collection (the fields a sync and a search filter by) and of the metadata
    keys ``index_metadata`` names ({key: "keyword" | "integer"})."""
    return [CreateIndex(key, schema) for key, schema in
            {**PAYLOAD_INDEXES, **{f"metadata.{k}": v for k, v in dict(index_metadata).items()}}.items()]


def new_collection_writes(collection: str, settings: SyncSettings, model: ModelFacts, bm25: Mapping[str, Any] | None,
                          index_metadata: Mapping[str, str], version: str, root: str | None = None) -> Prepared:
    """A collection to create (pure): its record, with the BM25 settings ``bm25`` where it has BM25 vectors, and
    ``root`` as the writer that creates it."""
    record = CollectionRecord.new(collection, model, settings, bm25 if settings.sparse else None, version)
    if root is not None:
        record = record.with_roots([root])
    return Prepared(record, settings, (CreateCollection(model.dim, settings.sparse, record.metadata()),
                                       *index_writes(index_metadata)))


def existing_collection_writes(record: CollectionRecord, requested: RequestedSettings, model: ModelFacts,
                               index_metadata: Mapping[str, str]) -> Prepared:
    """An existing collection checked for a sync with ``model`` and ``requested`` (pure): the settings it runs with
    (``decide_settings``; a conflict raises), indexes on metadata keys named since it was made, and what an earlier
    recemb did not record (roots on points, ``store_text``), recorded once."""
    record.check_model(model, for_sync=True)
    settings = decide_settings(record, requested)
    writes: list[Write] = [CreateIndex(f"metadata.{k}", v) for k, v in dict(index_metadata).items()]
    if not record.data.get("point_roots"):  # made before points recorded their root: index it once
        writes.append(CreateIndex(ROOT_KEY, KEYWORD))
        record = replace(record.updated(point_roots=True), persisted=False)
    if record.data.get("store_text") is None:  # an empty collection that never recorded it: from now on
        record = replace(record.updated(store_text=settings.store_text), persisted=False)
    if not record.persisted:
        record = replace(record, persisted=True)
        writes.append(UpdateRecord(record.metadata()))
    return Prepared(record, settings, tuple(writes))


def prepare_collection(calls: StoreCalls, collection: str, record: CollectionRecord | None,
                       requested: RequestedSettings, model: ModelFacts, index_metadata: Mapping[str, str],
                       version: str, documents: Iterable[Any] = (), tokenizer: Any = None, count_units: Any = None,
                       settings: SyncSettings | None = None, root: str | None = None,
                       found_by_passages: bool = False) -> Prepared:
    """Create the collection (``record`` None: it does not exist; its BM25 average lengths sampled from
    ``documents``, passage lengths measured with ``tokenizer``), or check and bring up to date the one ``record``
    describes; its writes applied. Nothing is written when a check fails. ``settings``: the settings ``requested``
    names whole, if so: a new collection takes them as they are (decided already). ``found_by_passages``: its long
    documents will be found by their passages alone (one BM25 average length, ``lengths.choose_bm25_settings``)."""
    if record is None:
        settings = settings or decide_settings(None, requested)
        bm25 = choose_bm25_settings(documents, settings.sparse_language, tokenizer, settings.passage_tokens,
                                    count_units, settings.passage_overlap, found_by_passages) \
            if settings.sparse else None
        prepared = new_collection_writes(collection, settings, model, bm25, index_metadata, version, root)
    else:
        prepared = existing_collection_writes(record, requested, model, index_metadata)
    for write in prepared.writes:
        calls.apply(collection, write)
    return prepared


# ---------------------------------------------------------------------- what the points hold
def scan_documents(calls: StoreCalls, collection: str) -> StoredDocuments:
    """One pass over every point of the collection: each document point's hash and metadata, every document id
    with the root that wrote it, and the documents whose passages are not all there (``plan.incomplete_passages``)."""
    documents: dict[str, tuple[str, Any]] = {}
    seen: dict[str, str | None] = {}
    recorded: dict[str, tuple[str | None, int | None]] = {}  # document id -> (hash, passages) of its own point
    # (document id, the document hash a passage records) -> passage points found: one entry a version, not a passage
    found: dict[tuple[str, str | None], int] = {}
    files: set[str] = set()  # ids whose passages record a file (their own point may not be written yet)
    offset = None
    while True:
        points, offset = calls(calls.store.scroll, collection, limit=SCAN_PAGE, offset=offset,
                               with_payload=["document_id", "content_hash", "kind", "metadata", ROOT_KEY, "passages",
                                             "document_hash"],
                               with_vectors=False)
        for p in points:
            payload = p.payload or {}
            doc_id = payload.get("document_id")
            if doc_id is None:
                continue
            if seen.get(doc_id) is None:
                seen[doc_id] = payload.get(ROOT_KEY)
            if payload.get("kind") == KIND_DOCUMENT:
                documents[doc_id] = (payload.get("content_hash"), payload.get("metadata"))
                recorded[doc_id] = (payload.get("content_hash"), payload.get("passages"))
            elif payload.get("kind") == KIND_PASSAGE:
                # One point per (document, passage index) by its id, so counting them per version counts passages.
                key = (doc_id, payload.get("document_hash"))
                found[key] = found.get(key, 0) + 1
                if doc_id not in files and from_a_file(payload.get("metadata")):
                    files.add(doc_id)
        if offset is None:
            break
    return StoredDocuments(documents, seen, incomplete_passages(recorded, found), frozenset(files))


@dataclass(frozen=True)
class CollectionStats:
    """What a collection's points are: ``points`` in all, by kind (``documents``, ``passages``), and the documents
    of each owner (``points.ROOT_KEY``: "" the unprefixed folder root, "prefix/" a prefixed one, "framework" a
    framework store's, None those of a recemb that did not record owners)."""

    points: int
    documents: int
    passages: int
    documents_by_owner: Mapping[str | None, int]

    def as_dict(self) -> dict[str, Any]:
        return {"points": self.points, "points_by_kind": {KIND_DOCUMENT: self.documents, KIND_PASSAGE: self.passages},
                "documents_by_owner": {("(unrecorded)" if k is None else k): v
                                       for k, v in self.documents_by_owner.items()}}


def collection_stats(calls: StoreCalls, collection: str) -> CollectionStats:
    """Counts of the collection's points by kind, and of its documents by owner (one scroll of the document
    points' owners)."""
    store = calls.store
    count = {kind: calls(store.count, collection, filters.Filter(must=(match("kind", kind),)))
             for kind in (KIND_DOCUMENT, KIND_PASSAGE)}
    owners: dict[str | None, int] = {}
    offset = None
    while True:
        points, offset = calls(store.scroll, collection, limit=SCAN_PAGE, offset=offset,
                               filter=filters.Filter(must=(match("kind", KIND_DOCUMENT),)), with_payload=[ROOT_KEY])
        for p in points:
            root = (p.payload or {}).get(ROOT_KEY)
            owners[root] = owners.get(root, 0) + 1
        if offset is None:
            break
    return CollectionStats(calls(store.count, collection), count[KIND_DOCUMENT], count[KIND_PASSAGE],
                           dict(sorted(owners.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))))


def record_root(calls: StoreCalls, collection: str, record: CollectionRecord, root: str,
                stored: StoredDocuments) -> CollectionRecord:
    """The collection's record with ``root`` among its writers, written before that root writes (what a damaged
    collection's rebuild reads to know whose documents no source of its holds). A record that predates the list
    gets the roots its points were stamped with, unless some points of an earlier recemb name none."""
    roots = {root}
    if record.roots is None:
        found = set(stored.seen.values())
        if None in found:  # who wrote those cannot be told: no list rather than a wrong one
            return record
        roots |= found
    if (recorded := record.with_roots(roots)) is not None:
        calls.apply(collection, UpdateRecord(recorded.metadata()))
        return recorded
    return record


def too_large_warnings(calls: StoreCalls, collection: str) -> list[tuple[str, str]]:
    """A warning where the collection has outgrown its store (qdrant-client's local mode), else none."""
    threshold = calls.store.threshold_points
    if threshold is not None and (points := calls(calls.store.count, collection)) > threshold:
        return [(f"collection {collection}", (
            f"{points:,} points in qdrant-client's local mode, which is made for up to {threshold:,} (exact "
            "search, slow to open); move it to Qdrant Edge or a server with `recemb migrate`"))]
    return []
