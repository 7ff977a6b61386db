"""A rebuild: a collection built anew beside the old one, which it replaces only when complete, losing nothing to a
crash at any point:

1. the documents are synced into the staging collection ``<name>.recemb-rebuild`` (incremental: a rebuild stopped
   here resumes where it was; the old collection is untouched);
2. the staging collection is marked complete ("staged");
3. the old collection is dropped, the new one created and marked "copying", the staged points are copied into it
   (no embedding) and the mark is removed; then the staging collection is dropped.

A sync or rebuild that finds the marks of an interrupted step 3 finishes it first; a search refuses until then.
Documents that fail stop the rebuild before step 2 (``RebuildError``): their old versions are kept.

This module holds the rebuild's own rules and steps; ``QdrantSync`` runs them, syncing step 1 with its own first
pass (the documents are read and hashed once). Every change is a ``writes`` value applied through ``StoreCalls``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from recemb_integrations.qdrant.calls import StoreCalls
from recemb_integrations.qdrant.collection import index_writes, read_record, scan_documents
from recemb_integrations.qdrant.documents import DocumentEntry
from recemb_integrations.qdrant.errors import CollectionMismatchError, MassDeletionError, RebuildError
from recemb_integrations.qdrant.plan import StoredDocuments, check_empty, stale_ids
from recemb_integrations.qdrant.points import API_ROOT, FRAMEWORK_ROOT, WRITER_ROOTS, describe_root
from recemb_integrations.qdrant.record import (
    MAX_COLLECTION_NAME,
    META_KEY,
    REBUILD_SUFFIX,
    CollectionRecord,
    RequestedSettings,
    SyncSettings,
    decide_settings,
)
from recemb_integrations.qdrant.writes import CreateCollection, DropCollection, Optimize, UpdateRecord, Upsert
from recemb_integrations.stores import Store, StoreDamagedError, StoredPoint, as_store

__all__ = ["COPY_PAGE", "check_staged", "damaged_rebuild_refusal", "damaged_roots_refusal",
           "finish_interrupted_rebuild", "interrupted_rebuild_hint", "mark_staged", "prepare_rebuild",
           "rebuild_collection", "rebuild_deletions", "staged_rebuild", "staging_name", "swap"]

COPY_PAGE = 256  # points per request when the staged points are copied into place
RECOVERED = ("rebuilt from the documents given: the old collection could not be read, so what it held beyond them "
             "was dropped (it was damaged: ")


def staging_name(collection: str) -> str | None:
    """The staging collection of ``collection``'s rebuild; None where the name would be too long for Qdrant."""
    staging = collection + REBUILD_SUFFIX
    return staging if len(staging) <= MAX_COLLECTION_NAME else None


def staged_rebuild(store: Store, collection: str, call: Any = None) -> CollectionRecord | None:
    """The record ``collection`` will have once an interrupted rebuild's step 3 is finished: its staging collection
    exists and is marked complete ("staged"). None otherwise (no rebuild, one stopped while embedding, which the next
    rebuild resumes, or a staging collection that is not recemb's). The one statement of that rule."""
    call = call or (lambda fn, *a, **k: fn(*a, **k))
    staging = staging_name(collection)
    if staging is None or not call(store.collection_exists, staging):
        return None
    info = call(store.collection_info, staging)
    staged = info.metadata.get(META_KEY) or {}
    if (staged.get("rebuild") or {}).get("state") != "staged":
        return None
    return CollectionRecord(collection, {k: v for k, v in staged.items() if k != "rebuild"}, info.dense_size)


def interrupted_rebuild_hint(store: Store | Any, collection: str) -> str | None:
    """What to do when a collection is missing because a rebuild stopped between dropping it and refilling it."""
    if staged_rebuild(as_store(store), collection) is None:
        return None
    return (f"a rebuild was interrupted before it put the new collection in place. Run the sync again "
            f"(`recemb sync --rebuild ...` or any sync of it) to finish it; the rebuilt points are kept in "
            f"{staging_name(collection)!r}")


def finish_interrupted_rebuild(calls: StoreCalls, collection: str, index_metadata: Mapping[str, str] = ()) -> bool:
    """Complete step 3 of a rebuild that was stopped. True if the collection now holds a completed rebuild
    (finished here or just before the staging collection was dropped)."""
    final = staged_rebuild(calls.store, collection, calls)
    if final is None:
        return False
    current = read_record(calls.store, collection, calls)
    staging = staging_name(collection)
    if current is None:
        swap(calls, collection, final, live_exists=False, index_metadata=index_metadata)  # stopped between the drop
        return True                                                                         # and the creation
    if current.rebuild_state == "copying":
        _copy_points(calls, staging, collection, final)  # upserts are idempotent: copy everything again
        return True
    if current.as_dict() == final.as_dict():
        calls.apply(staging, DropCollection())  # stopped after the copy, before the clean-up
        return True
    return False  # the staged copy was never swapped in and the old collection is intact: a rebuild restages it


def damaged_rebuild_refusal(collection: str, allow: str = "allow_mass_delete=True") -> str:
    """Why a rebuild of a damaged collection needs ``allow_mass_delete``: what it holds cannot be counted, so the
    mass-deletion guard cannot tell a mistyped path from a complete one. ``allow``: how the caller says it (the
    command: its flag)."""
    return (f"collection {collection!r} is damaged, so a rebuild cannot read what it holds: it would keep only the "
            "documents of these paths and drop everything else unread, and the guard against deleting most of a "
            "collection cannot count it. Nothing was written. If these paths are every folder the collection was "
            f"synced from, run the rebuild again with {allow}")


def damaged_roots_refusal(collection: str, record: CollectionRecord | None, root: str,
                          drop: str = "drop_other_writers=True") -> str | None:
    """Why a rebuild of a damaged collection from ``root``'s documents would drop, unread, documents that another
    writer recorded it wrote (a framework's store, the Python API, a folder with another id prefix: no source of
    this rebuild holds them), or None. ``drop``: how the caller says to drop them anyway (the command: its flag)."""
    others = [r for r in (record.roots or ()) if r != root] if record is not None else []
    if not others:
        return None
    who = " and ".join(describe_root(r) for r in others)
    return (f"collection {collection!r} is damaged, and {who} also wrote into it: no source of this rebuild holds "
            "those documents, so it would drop them unread. Nothing was written. Restore the store from a backup "
            f"to keep them, or run the rebuild again with {drop} to drop them (then add them again through their "
            "writer)")


def rebuild_deletions(collection: str, stored: StoredDocuments, root: str, entries: list[DocumentEntry],
                      left_out: list[DocumentEntry], failed: list[tuple[str, str]], keep_ids: Iterable[str],
                      allow_mass_delete: bool) -> list[str]:
    """The stored documents a rebuild from ``entries`` (the documents of ``root``: "" a folder's, ``API_ROOT`` the
    Python API's) drops (the mass-deletion guard applies, ``MassDeletionError``), or a ``RebuildError`` where it
    would drop the stored version of a document that is empty now and left out, or a document another writer owns
    (a framework's store, the Python API, a folder: none of the rebuild's sources names it)."""
    given = {e.id for e in entries} | {e.id for e in left_out} | {d for d, _ in failed} | set(keep_ids)
    # Documents stamped by another writer (what no one can tell, written before writers were recorded, is left to
    # the mass-deletion guard, as every document of an earlier recemb)
    claimable = stored.claimable()
    others: dict[str, list[str]] = {}  # the writer that owns them -> documents the rebuild would drop
    for doc_id, owner in sorted(stored.seen.items()):
        if doc_id not in given and doc_id not in claimable and owner in (*WRITER_ROOTS, "") and owner != root \
                and doc_id in stored.documents:
            others.setdefault(owner, []).append(doc_id)
    if others:  # they have no source among the rebuild's: it would drop them
        owner, dropped = next(iter(sorted(others.items(), key=lambda kv: -len(kv[1]))))
        total = sum(map(len, others.values()))
        whose = _written_by(owner)
        raise RebuildError(
            f"{total} documents of collection {collection!r} ({dropped[0]!r}{', ...' if total > 1 else ''}) were "
            f"written {whose}, not from these sources, so a rebuild from them would drop those documents; the "
            f"collection was not touched. Give each writer a collection of its own, or delete them through their "
            f"writer first.")
    emptied = [e.id for e in left_out if e.id in stored.documents]
    if emptied:  # the rebuilt collection would not hold them: their stored versions would be lost
        raise RebuildError(
            f"{len(emptied)} stored documents are empty now ({emptied[0]}) and skip_empty (--skip-empty) "
            f"leaves them out, so a rebuild would lose their stored versions; collection {collection!r} "
            "was not touched. Rebuild without --skip-empty (they are stored empty), or remove the files.")
    stale = stale_ids(collection, set(stored.seen), entries, failed, keep_ids, allow_mass_delete)
    return [d for d in stale if d in stored.documents]


def _written_by(owner: str) -> str:
    if owner in (FRAMEWORK_ROOT, API_ROOT):
        return f"through {describe_root(owner)}"
    return f"by {describe_root(owner)}"


def mark_staged(calls: StoreCalls, collection: str, staged: CollectionRecord) -> CollectionRecord:
    """Step 2: the staging collection (whose record is ``staged``) is complete. Returns the record ``collection``
    gets."""
    calls.apply(staged.collection, UpdateRecord(staged.updated(rebuild={"state": "staged",
                                                                         "target": collection}).metadata()))
    return CollectionRecord(collection, staged.without("rebuild").as_dict(), staged.dense_size)


def swap(calls: StoreCalls, collection: str, final: CollectionRecord, live_exists: bool,
         index_metadata: Mapping[str, str] = ()) -> None:
    """Step 3: replace the collection (``live_exists``: it is there now) by the staged one's points; ``final``: the
    record it gets."""
    staging = staging_name(collection)
    if live_exists:
        calls.apply(collection, DropCollection())
    calls.apply(collection, CreateCollection(final.dense_size, final.bm25 is not None, final.updated(
        rebuild={"state": "copying", "source": staging}).metadata()))
    for write in index_writes(index_metadata):
        calls.apply(collection, write)
    _copy_points(calls, staging, collection, final)


def _copy_points(calls: StoreCalls, staging: str, collection: str, final: CollectionRecord) -> None:
    offset = None
    while True:
        points, offset = calls(calls.store.scroll, staging, limit=COPY_PAGE, offset=offset, with_payload=True,
                               with_vectors=True)
        if points:
            calls.apply(collection, Upsert(tuple(StoredPoint(p.id, p.payload, p.vector) for p in points)))
        if offset is None:
            break
    calls.apply(collection, UpdateRecord(final.metadata()))
    calls.apply(staging, DropCollection())
    calls.apply(collection, Optimize())


def prepare_rebuild(calls: StoreCalls, collection: str, record: CollectionRecord | None, requested: RequestedSettings,
                    stored: StoredDocuments | None, entries: list[DocumentEntry], bad: list[tuple[str, str]],
                    root: str, keep_ids: Iterable[str], allow_mass_delete: bool, skip_empty: bool,
                    drop_other_writers: bool) -> tuple[CollectionRecord | None, SyncSettings, str | None, list[str]]:
    """Before a rebuild writes anything: (the live collection's record, or None; the settings the rebuilt one
    takes; why the live one cannot be read where it is damaged, else None; the documents the rebuild drops). A
    damaged collection is rebuilt from ``entries`` alone, so that needs ``allow_mass_delete``
    (``MassDeletionError``) and, where its record names other writers, ``drop_other_writers`` (``RebuildError``).
    ``record``/``stored``: the live collection's record and scan where the caller has them."""
    damage = None
    try:
        live = record or read_record(calls.store, collection, calls)
    except StoreDamagedError as e:
        live, damage = None, e.damage
    if live is not None:  # (a collection not made by recemb is refused by read_record)
        settings = decide_settings(live, requested, rebuild=True)
        try:
            stored = stored if stored is not None else scan_documents(calls, collection)
        except StoreDamagedError as e:
            stored, damage = None, e.damage
    else:
        settings = decide_settings(None, requested)
    if damage is not None and not allow_mass_delete:
        raise MassDeletionError(damaged_rebuild_refusal(collection), collection, damaged=True)
    if damage is not None and not drop_other_writers and (
            refusal := damaged_roots_refusal(collection, live, root)) is not None:
        raise RebuildError(refusal)
    stale = []
    if stored is not None:
        kept, left_out, _ = check_empty(entries, skip_empty)
        stale = rebuild_deletions(collection, stored, root, kept, left_out, bad, keep_ids, allow_mass_delete)
    return live, settings, damage, stale


def check_staged(collection: str, staging: str, report: Any, keep_ids: Iterable[str]) -> None:
    """A ``RebuildError`` where a document of the staging collection's sync (``report``) failed or could not be
    read (``keep_ids``): the live collection is then not replaced."""
    unreadable = sorted(set(keep_ids))
    if report.failed or unreadable:
        failed = report.failed + [(d, "could not be read") for d in unreadable]
        raise RebuildError(
            f"{len(failed)} documents failed ({failed[0][0]}: {failed[0][1]}); collection {collection!r} was not "
            f"replaced, so their current versions are kept. Fix or remove them and run the rebuild again: the "
            f"{report.added + report.updated + report.unchanged} documents already rebuilt in {staging!r} are kept "
            "and not embedded again.", report)


def rebuild_collection(sync: Any, entries: list[DocumentEntry], bad: list[tuple[str, str]],
                       stored: StoredDocuments | None, root: str, show_progress_bar: bool | None,
                       on_document: Any, keep_ids: Iterable[str], allow_mass_delete: bool, skip_empty: bool,
                       executor: Any, drop_other_writers: bool = False) -> Any:
    """Rebuild ``sync``'s collection (a ``QdrantSync``) from ``entries`` with its settings (the module docstring):
    the staging collection is synced from the same first pass (``QdrantSync.sync_entries``), and its record is the
    one its sync made. ``root``: the entries' owner ("" a folder's, ``API_ROOT`` the Python API's), kept by the
    rebuilt documents. Returns the staging sync's report."""
    calls, collection = sync.calls, sync.collection
    live, settings, damage, stale = prepare_rebuild(calls, collection, sync.record, sync.requested, stored, entries,
                                                    bad, root, keep_ids, allow_mass_delete, skip_empty,
                                                    drop_other_writers)
    staging = staging_name(collection)
    if staging is None:
        raise ValueError(f"collection name {collection!r} is too long to rebuild beside itself")
    builder = sync.like(staging, settings)
    options = dict(show_progress_bar=show_progress_bar, on_document=on_document, keep_ids=(),
                   allow_mass_delete=True, skip_empty=skip_empty, executor=executor)
    try:
        report = builder.sync_entries(entries, bad, root, True, None, **options)
    except CollectionMismatchError:  # staged by an earlier rebuild with other settings: start it afresh
        # ... but only if it is recemb's staging collection: a foreign one of that name is refused, not dropped
        read_record(calls.store, staging, calls)
        calls.apply(staging, DropCollection())
        builder.forget_checks()
        report = builder.sync_entries(entries, bad, root, True, None, **options)
    check_staged(collection, staging, report, keep_ids)
    final = mark_staged(calls, collection, builder.record)
    swap(calls, collection, final, live_exists=live is not None or damage is not None,
         index_metadata=sync.index_metadata)
    report.deleted = len(stale)
    if damage is not None:
        report.warnings.append((f"collection {collection}", f"{RECOVERED}{damage})"))
    return report
