"""Documents by id: what the collection holds of some ids, which of them a framework's store may delete, and the
ids it holds. ``QdrantSync.get_documents``, ``delete_documents`` and ``document_ids`` run these; every read goes
through ``StoreCalls`` and every delete is a ``writes`` value, applied in order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recemb_integrations.qdrant.calls import StoreCalls
from recemb_integrations.qdrant.collection import SCAN_PAGE
from recemb_integrations.qdrant.documents import StoredDocument
from recemb_integrations.qdrant.errors import NotOwnedError
from recemb_integrations.qdrant.plan import DELETE_BATCH
from recemb_integrations.qdrant.points import (
    FRAMEWORK_ROOT,
    KIND_DOCUMENT,
    ROOT_KEY,
    WRITER_ROOTS,
    describe_root,
    from_a_file,
    id_spellings,
    match,
    owned_among,
    point_id,
)
from recemb_integrations.qdrant.search import metadata_condition
from recemb_integrations.qdrant.writes import DeleteDocuments
from recemb_integrations.stores import filters

__all__ = ["delete_documents", "document_ids", "get_documents", "not_owned_message", "own_points"]


def own_points(calls: StoreCalls, collection: str, document_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The payloads of these documents' own points (document id, as given -> payload; absent: not stored), under
    any spelling the collection holds the id in (``points.id_spellings``: NFD, where an earlier recemb kept it)."""
    asked = {s: d for d in document_ids for s in id_spellings(d)}
    spellings = list(asked)
    found: dict[str, dict[str, Any]] = {}
    for i in range(0, len(spellings), DELETE_BATCH):
        for p in calls(calls.store.retrieve, collection, [point_id(s) for s in spellings[i:i + DELETE_BATCH]]):
            payload = p.payload or {}
            if payload.get("kind") == KIND_DOCUMENT and payload.get("document_id") in asked:
                found.setdefault(asked[payload["document_id"]], payload)
    return found


def get_documents(calls: StoreCalls, collection: str, ids: list[str]) -> list[StoredDocument]:
    """The documents of ``ids`` as the collection holds them, in the order asked (missing ones left out)."""
    found = {d: StoredDocument(d, p.get("text"), p.get("metadata") or {}, p.get("content_hash"),
                               p.get("passages") or 0) for d, p in own_points(calls, collection, ids).items()}
    return [found[d] for d in ids if d in found]


def not_owned_message(collection: str, foreign: list[str], owner: str | None, metadata: Any) -> str:
    """Why a framework's delete refuses documents another writer wrote, and the way on for each kind of writer."""
    shown = ", ".join(repr(d) for d in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
    if owner == "" and not from_a_file(metadata):  # claimable: written before its writer was recorded
        whose = ("were written before recemb recorded who writes a document (by the Python API or a framework's "
                 "store of an earlier recemb), so no framework's delete takes them")
        way = ("Add them again through this store to make them its own, or delete them with "
               "QdrantSync.delete_documents")
    else:
        whose = f"were not written through a framework's store: {describe_root(owner)} of collection {collection!r} " \
                "keeps them, and a framework's delete never touches them"
        way = ("Remove the file and sync its folder" if owner not in WRITER_ROOTS else
               "Delete them through their writer") + ", or delete them with QdrantSync.delete_documents"
    return f"{len(foreign)} of the documents named ({shown}) {whose}; nothing was deleted. {way}."


def delete_documents(calls: StoreCalls, collection: str, ids: list[str], framework: bool, keep_foreign: bool) -> int:
    """``QdrantSync.delete_documents`` on ids already checked, in a collection that exists: the documents named
    (only the framework owner's with ``framework``), passages included; how many the collection held."""
    held = own_points(calls, collection, ids)
    if framework:
        owners = {d: p.get(ROOT_KEY) for d, p in held.items()}
        mine = owned_among(held, FRAMEWORK_ROOT)
        foreign = [d for d in dict.fromkeys(ids) if d in held and d not in mine]
        if foreign and keep_foreign:
            ids, held = [d for d in ids if d in mine or d not in held], {d: held[d] for d in mine}
        elif foreign:
            raise NotOwnedError(not_owned_message(collection, foreign, owners[foreign[0]],
                                                  held[foreign[0]].get("metadata")),
                                foreign, [owners[d] for d in foreign])
    # the stored spelling of each, and the id as given (passages of a document whose own point is gone)
    named = list(dict.fromkeys([*ids, *(p["document_id"] for p in held.values())]))
    for i in range(0, len(named), DELETE_BATCH):
        calls.apply(collection, DeleteDocuments(tuple(named[i:i + DELETE_BATCH]),
                                                FRAMEWORK_ROOT if framework else None))
    return len(held)


def document_ids(calls: StoreCalls, collection: str, filter: Mapping[str, Any] | None, framework: bool) -> list[str]:
    """The ids of an existing collection's documents (sorted), of those whose metadata matches ``filter``, and with
    ``framework`` only the framework owner's."""
    conditions = [match("kind", KIND_DOCUMENT)] + [metadata_condition(k, v) for k, v in (filter or {}).items()]
    found, offset = {}, None
    while True:
        points, offset = calls(calls.store.scroll, collection, limit=SCAN_PAGE, offset=offset,
                               filter=filters.Filter(must=tuple(conditions)),
                               with_payload=["document_id", ROOT_KEY, "metadata"] if framework else ["document_id"])
        found.update((p.payload["document_id"], p.payload) for p in points if (p.payload or {}).get("document_id"))
        if offset is None:
            break
    return sorted(owned_among(found, FRAMEWORK_ROOT) if framework else found)
