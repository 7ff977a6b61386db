"""Reading a collection: its record and, in one scan, what its points hold. These touch the store and nothing
else; what the answers mean is decided in ``record`` and ``plan``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from recemb_integrations._imports import require
from recemb_integrations.qdrant.calls import StoreCalls
from recemb_integrations.qdrant.plan import StoredDocuments
from recemb_integrations.qdrant.points import KIND_DOCUMENT, ROOT_KEY, match
from recemb_integrations.qdrant.record import MAX_COLLECTION_NAME, META_KEY, REBUILD_SUFFIX, CollectionRecord
from recemb_integrations.stores import Store, as_store

models = require("qdrant_client.models", "qdrant")

__all__ = ["collection_settings", "interrupted_rebuild_hint", "read_record", "scan_documents"]

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
        documents = models.Filter(must=[match("kind", KIND_DOCUMENT)])
        if call(store.count, collection, documents):
            with_text = models.Filter(must=[match("kind", KIND_DOCUMENT)],
                                      must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key="text"))])
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


def scan_documents(calls: StoreCalls, collection: str) -> StoredDocuments:
    """One pass over every point of the collection: each document point's hash and metadata, and every document id
    with the root that wrote it."""
    documents: dict[str, tuple[str, Any]] = {}
    seen: dict[str, str | None] = {}
    offset = None
    while True:
        points, offset = calls(calls.store.scroll, collection, limit=SCAN_PAGE, offset=offset,
                               with_payload=["document_id", "content_hash", "kind", "metadata", ROOT_KEY],
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
        if offset is None:
            return StoredDocuments(documents, seen)


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
