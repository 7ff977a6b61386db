"""A rebuild: a collection built anew beside the old one, which it replaces only when complete, losing nothing to a
crash at any point:

1. the documents are synced into the staging collection ``<name>.recemb-rebuild`` (incremental: a rebuild stopped
   here resumes where it was; the old collection is untouched);
2. the staging collection is marked complete ("staged");
3. the old collection is dropped, the new one created and marked "copying", the staged points are copied into it
   (no embedding) and the mark is removed; then the staging collection is dropped.

A sync or rebuild that finds the marks of an interrupted step 3 finishes it first; a search refuses until then.
Documents that fail stop the rebuild before step 2 (``RebuildError``): their old versions are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from recemb_integrations.qdrant.collection import read_record
from recemb_integrations.qdrant.documents import SyncReport, read_entries
from recemb_integrations.qdrant.errors import CollectionMismatchError, RebuildError
from recemb_integrations.qdrant.plan import StoredDocuments, check_empty, sources_root, stale_ids
from recemb_integrations.qdrant.record import (
    MAX_COLLECTION_NAME,
    META_KEY,
    REBUILD_SUFFIX,
    CollectionRecord,
    check_collection_name,
)
from recemb_integrations.stores import StoredPoint

if TYPE_CHECKING:
    from recemb_integrations.qdrant.sync import QdrantSync

__all__ = ["COPY_PAGE", "finish_interrupted_rebuild", "rebuild"]

COPY_PAGE = 256  # points per request when the staged points are copied into place


def rebuild(sync: QdrantSync, documents: list, show_progress_bar: bool | None,
            on_document: Callable[[str, str], None] | None, keep_ids: Iterable[str], allow_mass_delete: bool,
            skip_empty: bool, executor: Any = None, stored: StoredDocuments | None = None) -> SyncReport:
    """Rebuild ``sync``'s collection from ``documents`` with its settings (see the module's docstring). ``stored``:
    a scan of the old collection, if the caller made one."""
    root = sources_root(None, (getattr(d, "root", None) for d in documents))
    if root:
        raise ValueError(f"a rebuild replaces the whole collection, but these documents are the root {root!r} "
                         "(found with an id prefix); rebuild from sources without one; nothing was written")
    if finish_interrupted_rebuild(sync):  # the collection was rebuilt already: bring it up to date
        return sync.sync(documents, show_progress_bar=show_progress_bar, on_document=on_document, keep_ids=keep_ids,
                         allow_mass_delete=allow_mass_delete, skip_empty=skip_empty, executor=executor)
    calls, collection = sync.calls, sync.collection
    staging = check_collection_name(collection + REBUILD_SUFFIX)
    entries, bad = read_entries(documents)
    stale: list[str] = []
    if read_record(sync.store, collection, calls) is not None:  # (a collection not made by recemb is refused)
        stored = stored if stored is not None else sync.scan()
        entries, left_out, _ = check_empty(entries, skip_empty)
        emptied = [e.id for e in left_out if e.id in stored.documents]
        if emptied:  # the rebuilt collection would not hold them: their stored versions would be lost
            raise RebuildError(
                f"{len(emptied)} stored documents are empty now ({emptied[0]}) and skip_empty (--skip-empty) "
                f"leaves them out, so a rebuild would lose their stored versions; collection {collection!r} "
                "was not touched. Rebuild without --skip-empty (they are stored empty), or remove the files.",
                SyncReport())
        stale = stale_ids(collection, set(stored.seen), entries, bad, keep_ids, allow_mass_delete)
        stale = [d for d in stale if d in stored.documents]
    options = dict(show_progress_bar=show_progress_bar, on_document=on_document, allow_mass_delete=True,
                   skip_empty=skip_empty, executor=executor)
    try:
        report = sync.like(staging).sync(documents, **options)
    except CollectionMismatchError:  # staged by an earlier rebuild with other settings: start it afresh
        # ... but only if it is recemb's staging collection: a foreign one of that name is refused, not dropped
        read_record(sync.store, staging, calls)
        calls(sync.store.delete_collection, staging)
        report = sync.like(staging).sync(documents, **options)
    unreadable = sorted(set(keep_ids))
    if report.failed or unreadable:
        failed = report.failed + [(d, "could not be read") for d in unreadable]
        raise RebuildError(
            f"{len(failed)} documents failed ({failed[0][0]}: {failed[0][1]}); collection {collection!r} "
            f"was not replaced, so their current versions are kept. Fix or remove them and run the rebuild "
            f"again: the {report.added + report.updated + report.unchanged} documents already rebuilt in "
            f"{staging!r} are kept and not embedded again.", report)
    staged = read_record(sync.store, staging, calls)
    calls(sync.store.update_metadata, staging,
          staged.updated(rebuild={"state": "staged", "target": collection}).metadata())
    _swap(sync, staging, staged)
    report.deleted = len(stale)
    return report


def finish_interrupted_rebuild(sync: QdrantSync) -> bool:
    """Complete step 3 of a rebuild that was stopped. True if the collection now holds a completed rebuild
    (finished here or just before the staging collection was dropped)."""
    calls, store, collection = sync.calls, sync.store, sync.collection
    staging = collection + REBUILD_SUFFIX
    if len(staging) > MAX_COLLECTION_NAME or not calls(store.collection_exists, staging):
        return False
    staged = calls(store.collection_info, staging).metadata.get(META_KEY) or {}
    if (staged.get("rebuild") or {}).get("state") != "staged":
        return False  # a rebuild stopped while embedding (the next rebuild resumes it), or not recemb's
    final = CollectionRecord(collection, {k: v for k, v in staged.items() if k != "rebuild"})
    current = read_record(store, collection, calls)
    if current is None:
        _swap(sync, staging, final)  # stopped between dropping the old collection and creating the new one
        return True
    if current.rebuild_state == "copying":
        _copy_points(sync, staging, final)  # upserts are idempotent: copy everything again
        return True
    if current.as_dict() == final.as_dict():
        calls(store.delete_collection, staging)  # stopped after the copy, before the clean-up
        return True
    return False  # the staged copy was never swapped in and the old collection is intact: a rebuild restages it


def _swap(sync: QdrantSync, staging: str, staged: CollectionRecord) -> None:
    """Step 3: replace the collection by the staged one's points."""
    calls, store, collection = sync.calls, sync.store, sync.collection
    final = CollectionRecord(collection, staged.without("rebuild").as_dict())
    if calls(store.collection_exists, collection):
        calls(store.delete_collection, collection)
    info = calls(store.collection_info, staging)
    calls(store.create_collection, collection, info.dense_size, info.sparse,
          final.updated(rebuild={"state": "copying", "source": staging}).metadata())
    sync.index_payload(collection)
    _copy_points(sync, staging, final)


def _copy_points(sync: QdrantSync, staging: str, final: CollectionRecord) -> None:
    calls, store, collection = sync.calls, sync.store, sync.collection
    offset = None
    while True:
        points, offset = calls(store.scroll, staging, limit=COPY_PAGE, offset=offset, with_payload=True,
                               with_vectors=True)
        if points:
            calls(store.upsert, collection, [StoredPoint(p.id, p.payload, p.vector) for p in points])
        if offset is None:
            break
    calls(store.update_metadata, collection, final.metadata())
    calls(store.delete_collection, staging)
    calls(store.optimize, collection)
    sync.forget_checks()  # the collection changed under this instance
