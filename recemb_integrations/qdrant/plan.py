"""A sync's plan, from the documents given and what the collection holds: what to add, re-embed, rewrite the
metadata of, leave, stamp with its root and delete, and the guard against deleting most of a collection. Pure:
the collection's state comes in as data (``StoredDocuments``, one scan), the plan goes out as data: the documents
to embed, and every other change as ``writes`` (applied before and after the embedding)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from recemb_integrations.qdrant.documents import DocumentEntry
from recemb_integrations.qdrant.errors import MassDeletionError
from recemb_integrations.qdrant.points import (
    API_ROOT,
    FRAMEWORK_ROOT,
    WRITER_ROOTS,
    claimable_ids,
    foreign_id_message,
    from_a_file,
    id_spellings,
    owned_ids,
    scope_root,
)
from recemb_integrations.qdrant.writes import DeleteDocuments, SetMetadata, StampRoot, Write

__all__ = ["DELETE_BATCH", "MASS_DELETE_FRACTION", "StoredDocuments", "SyncPlan", "check_empty", "check_sync_options",
           "incomplete_passages", "mass_deletion_summary", "plan_sync", "respelled", "sources_root", "stale_ids",
           "sync_root", "within_root"]

DELETE_BATCH = 256  # documents deleted (or stamped) per write

# A sync may delete less than this fraction of the documents it manages without allow_mass_delete, at any size:
# one file named out of a folder of two, or a mistyped path into a small collection, must not empty it.
MASS_DELETE_FRACTION = 0.5
ALL_FAILED = ("every document given failed, so nothing was deleted (a sync deletes what is gone only when it read "
              "what is there)")
EMPTIED = ("; its stored version is kept (skip_empty leaves it out). Delete the file to remove it, or sync "
           "without --skip-empty to store it empty")


@dataclass(frozen=True)
class StoredDocuments:
    """What one scan of a collection found: each document point's (content hash, metadata), every document id
    seen in any point (passages of a document whose own point was never written included) -> the root that wrote
    it (None for points of a recemb that did not record roots), the documents whose points are incomplete
    (``incomplete``: id -> (passages found, passages its own point records); ``incomplete_passages`` computes it),
    and those read from a file (``from_files``)."""

    documents: Mapping[str, tuple[str, Any]] = field(default_factory=dict)
    seen: Mapping[str, str | None] = field(default_factory=dict)
    incomplete: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    files: frozenset[str] = frozenset()  # ids whose passages record a file (a document point may be missing)

    def from_files(self) -> set[str]:
        """The documents whose metadata (on their own point or a passage) records the file a folder sync read them
        from."""
        return set(self.files) | {doc_id for doc_id, (_, metadata) in self.documents.items() if from_a_file(metadata)}

    def owned(self, root: str) -> set[str]:
        """The stored document ids that belong to ``root`` (``points.owned_ids``)."""
        return owned_ids(self.seen, root, self.from_files())

    def claimable(self) -> set[str]:
        """The stored document ids any writer may take over by writing them (``points.claimable_ids``)."""
        return claimable_ids(self.seen, self.from_files())


def incomplete_passages(recorded: Mapping[str, tuple[str | None, int | None]],
                        found: Mapping[tuple[str, str | None], int]) -> dict[str, tuple[int, int]]:
    """The documents whose passages are not all there (pure). ``recorded``: each document point's (content hash,
    passages it records; None where an earlier recemb did not record the count); ``found``: (document id, the
    document hash a passage records, None for passages written before they recorded it) -> how many passage points of
    that document carry it. A passage of another version does not count, so a document
    whose passage was overwritten or deleted by anything but its own sync is found here: id -> (found, recorded)."""
    incomplete = {}
    for doc_id, (text_hash, passages) in recorded.items():
        if not isinstance(passages, int) or passages <= 0:
            continue
        have = found.get((doc_id, text_hash), 0) + found.get((doc_id, None), 0)
        if have < passages:
            incomplete[doc_id] = (have, passages)
    return incomplete


@dataclass(frozen=True)
class SyncPlan:
    """What a sync will do. ``to_embed``: (entry, "added" | "updated"), in the documents' order; ``before``: the
    writes made before the embedding (metadata rewritten, roots stamped), ``after``: those made after it (what is
    gone, deleted)."""

    to_embed: list[tuple[DocumentEntry, str]]
    before: tuple[Write, ...]
    after: tuple[Write, ...]
    metadata_updated: int  # text unchanged, metadata changed: rewritten, not embedded
    unchanged: int
    deleted: int  # documents deleted that had their own point (what the report counts)
    failed: list[tuple[str, str]]  # documents another root stores: not synced
    warnings: list[tuple[str, str]]  # blank documents left out


def check_empty(entries: list[DocumentEntry], skip_empty: bool
                ) -> tuple[list[DocumentEntry], list[DocumentEntry], list[tuple[str, str]]]:
    """(documents to sync, blank ones that ``skip_empty`` leaves out, warnings for blank ones synced)."""
    kept, left_out, warnings = [], [], []
    for entry in entries:
        if not entry.blank:
            kept.append(entry)
        elif skip_empty:
            left_out.append(entry)
        else:
            warnings.append((entry.id, entry.describe_blank() + "; synced (its embedding carries no content)"))
            kept.append(entry)
    return kept, left_out, warnings


def stale_ids(collection: str, managed: set[str], entries: list[DocumentEntry], failed: list[tuple[str, str]],
              keep_ids: Iterable[str], allow_mass_delete: bool) -> list[str]:
    """Stored document ids (``managed``: those this sync manages) absent from the sources; a MassDeletionError when
    they are ``MASS_DELETE_FRACTION`` (half) of them or more (1 of 2, 2 of 4, 4 of 5, 1 of 1)."""
    # every spelling: a stored id an earlier recemb kept in NFD is the same document as the NFC one given
    source_ids = {s for d in [*(e.id for e in entries), *(doc_id for doc_id, _ in failed), *keep_ids]
                  for s in id_spellings(d)}
    stale = sorted(managed - source_ids)
    if stale and not allow_mass_delete and len(stale) >= MASS_DELETE_FRACTION * len(managed):
        raise MassDeletionError(
            f"{mass_deletion_summary(collection, stale, len(managed), len(entries))}; nothing was written. Check the "
            "documents given; if the deletion is intended, pass allow_mass_delete=True, or keep them with "
            "delete_missing=False; to keep several sets of documents in one collection, give each sync its own "
            "scope=.", collection, tuple(stale), len(managed), len(entries))
    return stale


def mass_deletion_summary(collection: str, stale: list[str], managed: int, given: int) -> str:
    """What a refused mass deletion would have deleted, in words every caller shares (the API's message, the
    command's)."""
    shown = ", ".join(repr(d) for d in stale[:3]) + (", ..." if len(stale) > 3 else "")
    return (f"this sync would delete {len(stale)} of the {managed} documents it manages in collection {collection!r} "
            f"({shown}) because they are not among the {given} given")


def sources_root(scope: str | None, declared: Iterable[str | None]) -> str:
    """The root of a sync given ``scope`` (already a root: "prefix/", or None when none was given) and the roots
    its sources declare (``DocumentSource.root``: where ``folder_sources`` found them; None: not declared). Sources
    of one root make the sync that root's; documents that declare none, without a scope, are the Python API's
    (``points.API_ROOT``); a scope that contradicts them, or sources of several roots, are a
    ValueError before anything is written: a sync must never manage (and delete) a root its documents are not of."""
    roots = sorted({r for r in declared if r is not None})
    if len(roots) > 1:
        raise ValueError(f"the documents come from {len(roots)} sync roots ({', '.join(map(repr, roots))}); sync each "
                         "root on its own (each folder_sources() result with its own scope); nothing was written")
    if not roots:
        return scope if scope is not None else API_ROOT
    if scope is not None and scope != roots[0]:
        raise ValueError(f"the documents were found under {_root_name(roots[0])}, but the sync was given "
                         f"scope={scope!r}; pass the sources' own scope (folder_sources(...).scope) or none; nothing "
                         "was written")
    return roots[0]


def check_sync_options(rebuild: bool, delete_missing: bool, scope: str | None, framework: bool) -> None:
    """``QdrantSync.sync``'s options that cannot go together, refused before anything is read."""
    if rebuild and not delete_missing:
        raise ValueError("a rebuild builds the collection from `documents` alone; delete_missing=False cannot "
                         "keep documents that are not among them")
    if rebuild and scope is not None:
        raise ValueError("a rebuild replaces the whole collection; it cannot be limited to a scope")
    if framework and (rebuild or scope is not None):
        raise ValueError("a framework's documents have an owner of their own; they are synced without scope= "
                         "or rebuild=")


def sync_root(scope: str | None, entries: list[DocumentEntry], framework: bool, rebuild: bool) -> str:
    """The root a sync of ``entries`` writes as: the framework owner's for a framework's store, else
    ``sources_root`` (sources found by folder_sources know their root: the sync is that root's, never another's)."""
    root = sources_root(scope_root(scope) if scope is not None else None,
                        (scope_root(e.root) if e.root else e.root for e in entries))
    if framework:
        if any(e.root is not None for e in entries):
            raise ValueError("these documents were found by folder_sources (a folder's root); a framework's "
                             "store cannot take them over; nothing was written")
        root = FRAMEWORK_ROOT
    if rebuild and root not in ("", API_ROOT):
        raise ValueError(f"a rebuild replaces the whole collection, but these documents are the root {root!r} "
                         "(found with an id prefix); rebuild from sources without one; nothing was written")
    return root


def within_root(entries: list[DocumentEntry], root: str) -> tuple[list[DocumentEntry], list[tuple[str, str]]]:
    """(the entries whose ids are under ``root``, a failure for each of the others); a writer's root (the Python
    API's, a framework's) and the unprefixed root take every id."""
    if root in ("", *WRITER_ROOTS):
        return entries, []
    return ([e for e in entries if e.id.startswith(root)],
            [(e.id, f"id is outside this sync's scope {root!r}") for e in entries if not e.id.startswith(root)])


def _root_name(root: str) -> str:
    return f"the id prefix {root.rstrip('/')!r} (scope {root!r})" if root else "no id prefix (scope None)"


def respelled(entries: list[DocumentEntry], seen: Mapping[str, Any]) -> list[DocumentEntry]:
    """The entries under the spelling the collection stores their id in, where it holds another one (an earlier
    recemb stored API ids as given, NFD among them): the document is updated in place, not written twice."""
    out = []
    for entry in entries:
        if entry.id not in seen:
            stored = next((s for s in id_spellings(entry.id) if s in seen), None)
            entry = replace(entry, id=stored) if stored is not None else entry
        out.append(entry)
    return out


def plan_sync(collection: str, entries: list[DocumentEntry], left_out: list[DocumentEntry],
              failed: list[tuple[str, str]], stored: StoredDocuments, root: str, delete_missing: bool,
              keep_ids: Iterable[str], allow_mass_delete: bool) -> SyncPlan:
    """The plan of a sync of ``entries`` (``left_out``: blank ones skip_empty leaves out; ``failed``: documents that
    could not be read, whose stored versions are kept) under ``root``."""
    existing, seen = stored.documents, stored.seen
    entries, left_out = respelled(entries, seen), respelled(left_out, seen)
    owned = stored.owned(root)
    # Another root's documents are neither overwritten nor deleted; an emptied document keeps its stored version.
    # A document no writer owns (``claimable``) is taken over by writing it.
    writable = owned | stored.claimable()
    foreign = [e for e in entries if e.id in seen and e.id not in writable]
    entries = [e for e in entries if not (e.id in seen and e.id not in writable)]
    kept = [e for e in left_out if e.id in existing and e.id in owned]
    warnings = [(e.id, e.describe_blank() + (EMPTIED if e in kept else "; left out (skip_empty)")) for e in left_out]
    stale: list[str] = []
    all_failed = bool(foreign or failed) and not entries and not left_out
    if delete_missing and all_failed:
        warnings.append((f"collection {collection}", ALL_FAILED))
    elif delete_missing:
        stale = stale_ids(collection, owned, entries, failed, [*keep_ids, *(e.id for e in kept)], allow_mass_delete)
    to_embed, metadata_updates, unstamped, unchanged = [], [], [], 0
    for entry in entries:
        old = existing.get(entry.id)
        if old is not None and old[0] == entry.hash and entry.id in stored.incomplete:
            have, want = stored.incomplete[entry.id]
            warnings.append((entry.id, f"{want - have} of its {want} passages were missing from the collection "
                                       "(overwritten or deleted by something other than its sync); re-embedded"))
        elif old is not None and old[0] == entry.hash:
            if seen.get(entry.id) != root:  # unstamped, or taken over (claimable: written before its writer had a root)
                unstamped.append(entry.id)
            if old[1] != entry.metadata:
                metadata_updates.append(SetMetadata(entry.id, entry.metadata))
            else:
                unchanged += 1
            continue
        to_embed.append((entry, "updated" if old is not None else "added"))
    stamps = [StampRoot(tuple(unstamped[i:i + DELETE_BATCH]), root) for i in range(0, len(unstamped), DELETE_BATCH)]
    deletes = [DeleteDocuments(tuple(stale[i:i + DELETE_BATCH]), root) for i in range(0, len(stale), DELETE_BATCH)]
    return SyncPlan(to_embed=to_embed, before=(*metadata_updates, *stamps), after=tuple(deletes),
                    metadata_updated=len(metadata_updates), unchanged=unchanged,
                    deleted=len([d for d in stale if d in existing]),
                    failed=[(e.id, foreign_id_message(seen[e.id], root)) for e in foreign], warnings=warnings)
