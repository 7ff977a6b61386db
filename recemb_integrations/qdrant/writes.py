"""Every change the main job makes to a store, as data, and the one step that applies it.

A sync, a rebuild and a migration never call a store's writing methods themselves: the plan, the writer and the
collection's preparation make ``Write`` values (plain data in recemb's terms: document ids, roots, passage counts,
points), and ``apply`` turns each into its store call. So what a sync will do can be read, tested and sent between
processes before anything happens (Ray's actors hand their writes back to the driver, which applies them here in
the order they were made), and there is one place where recemb's terms become Qdrant filters.

Nothing here imports qdrant-client until a write is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from recemb_integrations.qdrant.points import KIND_PASSAGE, ROOT_KEY, match, point_id
from recemb_integrations.stores import Store, StoredPoint, filters

__all__ = ["CreateCollection", "CreateIndex", "DeleteDocuments", "DeletePoints", "DeleteStalePassages",
           "DropCollection", "Optimize", "SetMetadata", "StampRoot", "UpdateRecord", "Upsert", "Write", "apply"]


@dataclass(frozen=True)
class Upsert:
    """Write these points (each overwrites the point of its id)."""

    points: tuple[StoredPoint, ...]


@dataclass(frozen=True)
class DeleteStalePassages:
    """For each (document id, passages it has now): delete its passages from that index on (an older, longer version
    of its text left them)."""

    documents: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class DeleteDocuments:
    """Delete every point of these documents that ``root`` wrote (or that records no root: an earlier recemb's);
    ``root`` None: whichever root wrote them (documents named one by one, ``QdrantSync.delete_documents``)."""

    document_ids: tuple[str, ...]
    root: str | None


@dataclass(frozen=True)
class DeletePoints:
    """Delete these points, by id."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class SetMetadata:
    """A document's metadata changed, its text did not: rewrite it on its own point and on its passages."""

    document_id: str
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class StampRoot:
    """Record ``root`` on every point of these documents (written by a recemb that did not record roots, or by a
    framework's store before it had an owner of its own)."""

    document_ids: tuple[str, ...]
    root: str


@dataclass(frozen=True)
class CreateCollection:
    """Create the collection: a dense vector of ``dense_size`` (cosine), a BM25 vector if ``sparse``, ``metadata``
    (recemb's record under its key)."""

    dense_size: int
    sparse: bool
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class CreateIndex:
    """A payload index on ``key`` ("keyword" or "integer")."""

    key: str
    schema: str


@dataclass(frozen=True)
class UpdateRecord:
    """Replace the collection's metadata (recemb's record, a rebuild's or a migration's mark)."""

    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class DropCollection:
    """Delete the collection and its points."""


@dataclass(frozen=True)
class Optimize:
    """Let the store index what was written (Qdrant Edge builds its HNSW graph only when asked; ``force``: now,
    whatever was written)."""

    force: bool = False
    show_progress_bar: bool | None = field(default=None, compare=False)


Write = (Upsert | DeleteStalePassages | DeleteDocuments | DeletePoints | SetMetadata | StampRoot | CreateCollection
         | CreateIndex | UpdateRecord | DropCollection | Optimize)


def apply(store: Store, collection: str, write: Write) -> None:
    """Make ``write`` in ``collection`` of ``store``: the one place where a write becomes a store call. A deletion
    that names nothing deletes nothing: its filter would have no condition left, and an empty filter matches every
    point."""
    if isinstance(write, (DeleteStalePassages, DeleteDocuments, DeletePoints)) and not (
            getattr(write, "documents", None) or getattr(write, "document_ids", None) or getattr(write, "ids", None)):
        return
    if isinstance(write, Upsert):
        store.upsert(collection, list(write.points))
    elif isinstance(write, DeleteStalePassages):
        store.delete(collection, filters.Filter(should=tuple(
            filters.Filter(must=(match("document_id", doc_id), match("kind", KIND_PASSAGE),
                                 filters.FieldCondition(key="passage", range=filters.Range(gte=first))))
            for doc_id, first in write.documents)))
    elif isinstance(write, DeleteDocuments):
        named = filters.FieldCondition(key="document_id", match=filters.MatchAny(any=tuple(write.document_ids)))
        if write.root is None:
            store.delete(collection, filters.Filter(must=(named,)))
            return
        # Only this root's points (or unstamped ones it owns): another root's never match, whatever their id.
        this_root = filters.Filter(should=(match(ROOT_KEY, write.root), filters.IsEmptyCondition(
            is_empty=filters.PayloadField(key=ROOT_KEY))))
        store.delete(collection, filters.Filter(must=(named, this_root)))
    elif isinstance(write, DeletePoints):
        store.delete(collection, filters.Filter(must=(filters.HasIdCondition(has_id=tuple(write.ids)),)))
    elif isinstance(write, SetMetadata):
        payload = {"metadata": dict(write.metadata)}
        store.set_payload(collection, payload, ids=[point_id(write.document_id)])
        store.set_payload(collection, payload, filter=filters.Filter(must=(match("document_id", write.document_id),
                                                                           match("kind", KIND_PASSAGE))))
    elif isinstance(write, StampRoot):
        store.set_payload(collection, {ROOT_KEY: write.root}, filter=filters.Filter(must=(
            filters.FieldCondition(key="document_id", match=filters.MatchAny(any=tuple(write.document_ids))),)))
    elif isinstance(write, CreateCollection):
        store.create_collection(collection, write.dense_size, write.sparse, dict(write.metadata))
    elif isinstance(write, CreateIndex):
        store.create_payload_index(collection, write.key, write.schema)
    elif isinstance(write, UpdateRecord):
        store.update_metadata(collection, dict(write.metadata))
    elif isinstance(write, DropCollection):
        store.delete_collection(collection)
    elif isinstance(write, Optimize):
        kwargs = {"force": True} if write.force else {}
        store.optimize(collection, show_progress_bar=write.show_progress_bar, **kwargs)
    else:
        raise TypeError(f"not a write: {write!r}")
