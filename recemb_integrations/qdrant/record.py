"""A collection's record: what recemb wrote into a collection's metadata when it created it (the model, its
fingerprint and dimension, passages, truncation, the BM25 settings, the point layout), read once and checked
without a model.

This is the one definition of a sync's settings (``SyncSettings``), of how requested settings meet recorded ones
(``decide_settings``: the only place, for the command before any model loads and for ``QdrantSync``), of when a
model may use a collection (``CollectionRecord.check_model``), of a search's preconditions
(``CollectionRecord.search_refusal``) and of the BM25 encoders a collection's vectors are made with
(``bm25_encoders``). Pure: nothing here touches a store or loads a model.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from recemb_integrations.qdrant.errors import CollectionMismatchError, InvalidSetting, SettingsConflict
from recemb_integrations.sparse import Bm25
from recemb_integrations.stores import DENSE_VECTOR, SPARSE_VECTOR

__all__ = ["CollectionRecord", "DEFAULT_LONG_DOCUMENTS", "DEFAULT_PASSAGES_ABOVE", "DEFAULT_PASSAGE_OVERLAP",
           "DEFAULT_PASSAGE_TOKENS", "DISTANCE_NAME", "INVALID_COLLECTION_CHARS", "LAYOUT_VERSION",
           "LONG_DOCUMENT_MODES", "MAX_COLLECTION_NAME", "META_KEY", "ModelFacts", "NO_PASSAGES", "ONE_PASS",
           "PASSAGES_ONLY", "REBUILD_SUFFIX", "RequestedSettings", "SyncSettings", "WHOLE_AND_PASSAGES",
           "bm25_encoders", "check_collection_name", "check_long_documents", "check_passage_settings",
           "decide_settings", "default_passages_above", "legacy_hybrid_refusal"]

META_KEY = "recemb"  # the collection metadata key under which recemb keeps its record
# Layout 1 (recemb 0.1.0): one unnamed dense vector. Layout 2: a named dense vector and, unless dense-only, a named
# BM25 sparse vector with IDF computed by Qdrant.
LAYOUT_VERSION = 2
DISTANCE_NAME = "Cosine"  # Qdrant's name of the distance every recemb collection uses
REBUILD_SUFFIX = ".recemb-rebuild"  # the staging collection of a rebuild
# Characters Qdrant's server refuses in collection names (local mode checks the same set), and its length limit.
INVALID_COLLECTION_CHARS = '<>:"/\\|?*\x00\x1f'
MAX_COLLECTION_NAME = 255
POOLING = "last token (appended EOS), L2-normalised"
# A new collection's passages where none are named, chosen by benchmarks/hybrid_quality.py (docs/quality.md): they
# pay on long documents and not on short ones, which they only make slower to sync.
DEFAULT_PASSAGE_TOKENS = 128
DEFAULT_PASSAGE_OVERLAP = 16
DEFAULT_PASSAGES_ABOVE = 512
# How a document long enough for passages gets its vectors (docs/quality.md measures each):
WHOLE_AND_PASSAGES = "whole+passages"  # two passes: the document whole, and each passage on its own
PASSAGES_ONLY = "passages"  # each passage on its own; the document's vector is their normalised mean
ONE_PASS = "one-pass"  # one pass over the document; each passage's vector is an EOS run from the state at its end
LONG_DOCUMENT_MODES = (WHOLE_AND_PASSAGES, PASSAGES_ONLY, ONE_PASS)
# Passages only by default: the answers of both passes at 1.6x their speed (docs/quality.md, long documents).
DEFAULT_LONG_DOCUMENTS = PASSAGES_ONLY
RECORDED_BEFORE_LONG_DOCUMENTS = WHOLE_AND_PASSAGES  # what a collection that does not record it was built with


def default_passages_above(passage_tokens: int | None) -> int:
    """Documents of at most this many tokens get no passages where none is named: one that fits in a passage would
    be its own only passage, a second point of the same text."""
    return passage_tokens or 0


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


def check_long_documents(mode: str) -> str:
    """``mode`` if it names a way to embed long documents (``LONG_DOCUMENT_MODES``), else an ``InvalidSetting``."""
    if mode not in LONG_DOCUMENT_MODES:
        raise InvalidSetting(f"long_documents must be one of {', '.join(LONG_DOCUMENT_MODES)}, got {mode!r}",
                             "long_documents", mode)
    return mode


def check_passage_settings(passage_tokens: int | None, passage_overlap: int | None,
                           passages_above: int | None = 0) -> None:
    """Passages of passage_tokens >= 1 tokens sharing 0 <= passage_overlap < passage_tokens tokens, cut from documents
    of more than passages_above >= 0 tokens (``InvalidSetting`` otherwise); passage_tokens None: no passages."""
    if passage_tokens is None:
        return
    if isinstance(passage_tokens, bool) or not isinstance(passage_tokens, int) or passage_tokens < 1:
        raise InvalidSetting(f"passage_tokens must be a positive int (or 0 for no passages), got {passage_tokens!r}",
                             "passage_tokens", passage_tokens)
    overlap = passage_overlap or 0
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < passage_tokens:
        raise InvalidSetting(f"passage_overlap must be an int from 0 to passage_tokens - 1 = {passage_tokens - 1}, "
                             f"got {passage_overlap!r}", "passage_overlap", passage_overlap, passage_tokens)
    above = passages_above or 0
    if isinstance(above, bool) or not isinstance(above, int) or above < 0:
        raise InvalidSetting(f"passages_above must be an int >= 0 (0: every document gets passages), got "
                             f"{passages_above!r}", "passages_above", passages_above, passage_tokens)


@dataclass(frozen=True)
class SyncSettings:
    """How a collection's points are made, besides the model: passages of ``passage_tokens`` tokens sharing
    ``passage_overlap`` (``passage_tokens`` None: no passages, the one way to say it) of the documents longer than
    ``passages_above`` tokens, truncation (``max_tokens``), BM25 vectors (``sparse``, in ``sparse_language``) and
    whether the points keep their text (``store_text``). Valid by construction; what a collection records and what
    a sync runs with (``decide_settings``)."""

    passage_tokens: int | None = None
    passage_overlap: int = 0
    max_tokens: int | None = None
    sparse: bool = True
    sparse_language: str = "english"
    passages_above: int = 0
    store_text: bool = False
    long_documents: str = DEFAULT_LONG_DOCUMENTS

    def __post_init__(self) -> None:
        check_passage_settings(self.passage_tokens, self.passage_overlap, self.passages_above)
        check_long_documents(self.long_documents)
        if self.passage_tokens is None and (self.passage_overlap or self.passages_above):
            raise InvalidSetting("passage_overlap and passages_above need passages (passage_tokens is None)",
                                 "passage_overlap" if self.passage_overlap else "passages_above",
                                 self.passage_overlap or self.passages_above)
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):
            raise InvalidSetting(f"max_tokens must be a positive int, got {self.max_tokens!r}", "max_tokens",
                                 self.max_tokens)
        if not isinstance(self.sparse, bool):
            raise TypeError(f"sparse must be True or False, got {self.sparse!r}")
        if not isinstance(self.store_text, bool):
            raise TypeError(f"store_text must be True or False, got {self.store_text!r}")

    @property
    def passages(self) -> bool:
        return self.passage_tokens is not None

    def as_requested(self) -> RequestedSettings:
        """Every setting named: a sync given these settings is held to them (a collection with others refuses)."""
        return RequestedSettings(passage_tokens=self.passage_tokens or NO_PASSAGES,
                                 passage_overlap=self.passage_overlap, passages_above=self.passages_above,
                                 max_tokens=self.max_tokens, sparse=self.sparse, sparse_language=self.sparse_language,
                                 store_text=self.store_text, long_documents=self.long_documents)


NO_PASSAGES = 0  # what a request names for "no passages" (None there is "not named": the collection's, or the default)


@dataclass(frozen=True)
class RequestedSettings:
    """What a caller asked for; None where it named nothing (the collection's setting is used then, or for a new
    collection the default). ``passage_tokens=NO_PASSAGES`` (0): no passages. ``max_tokens`` None cannot be named
    (no truncation is the default and what a collection without one records)."""

    passage_tokens: int | None = None
    passage_overlap: int | None = None
    max_tokens: int | None = None
    sparse: bool | None = None  # False: dense-only, True: with BM25 vectors
    passages_above: int | None = None
    store_text: bool | None = None
    sparse_language: str | None = None
    long_documents: str | None = None


@dataclass(frozen=True)
class ModelFacts:
    """What a collection records of the model that embeds it, and checks against the one that syncs or searches."""

    model_id: str
    fingerprint: str
    dim: int
    max_length: int | None = None
    passages_cut: Mapping[str, Any] | None = None  # another library's model: how its passages are cut (cutting.py)


@dataclass(frozen=True)
class CollectionRecord:
    """A collection's recemb metadata, parsed. ``as_dict()`` is what the collection stores under ``META_KEY``."""

    collection: str
    data: Mapping[str, Any]
    dense_size: int | None = None  # the dense vectors' size the collection was created with, where known
    # False when ``data`` holds what the collection's metadata lacks (read off its points, a recemb that did not
    # record it, or recorded from now on): the next sync writes it.
    persisted: bool = True

    @classmethod
    def parse(cls, metadata: Mapping[str, Any] | None, collection: str,
              dense_size: int | None = None) -> CollectionRecord:
        """The record in a collection's metadata (``dense_size``: from the collection's info); a collection
        without one was not made by recemb."""
        recorded = (metadata or {}).get(META_KEY)
        if recorded is None:
            raise CollectionMismatchError(f"collection {collection!r} was not created by recemb (no '{META_KEY}' "
                                          "metadata); use another collection name")
        return cls(collection, copy.deepcopy(dict(recorded)), dense_size)

    @classmethod
    def new(cls, collection: str, model: ModelFacts, settings: SyncSettings, bm25: Mapping[str, Any] | None,
            version: str) -> CollectionRecord:
        """The record of a collection about to be created (``bm25``: its BM25 settings, None when dense-only)."""
        return cls(collection, {
            "model": model.model_id,
            "model_fingerprint": model.fingerprint,
            "dim": model.dim,
            "distance": DISTANCE_NAME,
            "pooling": POOLING,
            "document_prompt": "",
            "max_length": model.max_length,
            **({"passages_cut": dict(model.passages_cut)} if model.passages_cut and settings.passages else {}),
            "passage_tokens": settings.passage_tokens,
            "passage_overlap": settings.passage_overlap if settings.passages else None,
            "passages_above": settings.passages_above if settings.passages else None,
            "max_tokens": settings.max_tokens,
            "store_text": settings.store_text,
            "long_documents": settings.long_documents if settings.passages else None,
            "layout": LAYOUT_VERSION,
            "point_roots": True,  # every point records its root, indexed
            "roots": [],  # every root that wrote into it (WRITER_ROOTS and folder roots), recorded before it writes
            "vectors": {"dense": DENSE_VECTOR, "sparse": SPARSE_VECTOR if settings.sparse else None},
            "sparse": dict(bm25) if bm25 is not None and settings.sparse else None,
            "recemb_version": version,
        }, model.dim)

    def as_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.data))

    def metadata(self) -> dict[str, Any]:
        """The collection metadata that holds this record."""
        return {META_KEY: self.as_dict()}

    def updated(self, **changes: Any) -> CollectionRecord:
        """This record with some keys set (a value None removes nothing: it is recorded as null)."""
        return replace(self, data={**self.as_dict(), **changes})

    def without(self, key: str) -> CollectionRecord:
        return replace(self, data={k: v for k, v in self.as_dict().items() if k != key})

    # ------------------------------------------------------------------ what it says
    @property
    def layout(self) -> int:
        """1 for collections of recemb 0.1.0 (one unnamed dense vector), else the recorded version."""
        return int(self.data.get("layout", 1))

    @property
    def model(self) -> str | None:
        return self.data.get("model")

    @property
    def bm25(self) -> dict[str, Any] | None:
        """The BM25 settings the points' sparse vectors were made with (None: dense-only)."""
        settings = self.data.get("sparse") if self.layout >= 2 else None
        return dict(settings) if settings else None

    @property
    def settings(self) -> SyncSettings:
        """The settings the points were made with (a recemb 0.1 collection is dense-only; a collection of a recemb
        that did not record ``passages_above`` gave every document passages, one that did not record
        ``store_text`` and holds no document kept no texts)."""
        data = self.data
        tokens = data.get("passage_tokens") or None
        return SyncSettings(passage_tokens=tokens, passage_overlap=data.get("passage_overlap") or 0 if tokens else 0,
                            passages_above=data.get("passages_above") or 0 if tokens else 0,
                            max_tokens=data.get("max_tokens"), sparse=self.bm25 is not None,
                            sparse_language=(data.get("sparse") or {}).get("language", "english"),
                            store_text=bool(data.get("store_text")),
                            long_documents=data.get("long_documents") or RECORDED_BEFORE_LONG_DOCUMENTS)

    @property
    def roots(self) -> tuple[str, ...] | None:
        """Every root that wrote into the collection ("" the folder sync without an id prefix, "wiki/" a prefixed
        one, ``points.FRAMEWORK_ROOT``, ``points.API_ROOT``); None where a recemb that did not record them made it
        (what it holds may have been written by any of them)."""
        roots = self.data.get("roots")
        return tuple(roots) if roots is not None else None

    def with_roots(self, roots: Iterable[str]) -> CollectionRecord | None:
        """This record with ``roots`` among its writers, or None where they are there already."""
        known = set(self.roots or ())
        if self.roots is not None and known >= set(roots):
            return None
        return self.updated(roots=sorted(known | set(roots)))

    @property
    def found_by_passages(self) -> bool:
        """Whether a long document is found by its passages alone: another library's model whose documents have no
        vector of their own (``external.DOCUMENT_VECTORS``: "none"; their own point holds their passages' mean, which
        no search reads)."""
        return (self.data.get("passages_cut") or {}).get("document_vector") == "none"

    @property
    def rebuild_state(self) -> str | None:
        """"staged" (a staging collection complete), "copying" (being refilled from one), or None."""
        return (self.data.get("rebuild") or {}).get("state")

    def refusal(self) -> str | None:
        """Why the collection cannot be used now (a migration or a rebuild's copy not finished), or None."""
        if self.data.get("migration"):
            return (f"collection {self.collection!r} is being filled by `recemb migrate`, which has not finished (or "
                    "was interrupted); run the same migrate command again to complete it")
        if self.rebuild_state == "copying":
            return (f"collection {self.collection!r} is being filled by a rebuild that was interrupted; run the sync "
                    "again (`recemb sync --rebuild ...` or any sync of it) to finish it. Nothing was lost: the "
                    f"rebuilt points are kept in {self.collection + REBUILD_SUFFIX!r} until then.")
        return None

    def model_problems(self, model: ModelFacts) -> list[str]:
        """How a model differs from the one the collection was built with (empty: it matches)."""
        problems = []
        if self.data.get("dim") != model.dim or (self.dense_size is not None and self.dense_size != model.dim):
            problems.append(f"dimension {self.data.get('dim')} (collection) vs {model.dim} (model)")
        if self.data.get("model_fingerprint") != model.fingerprint:
            if self.model == model.model_id:  # same name, other weights (e.g. a retrained model)
                problems.append(f"model {model.model_id!r} has other weights than when the collection was built "
                                f"(fingerprint {self.data.get('model_fingerprint')} vs {model.fingerprint})")
            else:
                problems.append(f"model {self.model!r} (collection) vs {model.model_id!r} (this embedder)")
        if self.data.get("distance") != DISTANCE_NAME:
            problems.append(f"distance {self.data.get('distance')} vs {DISTANCE_NAME}")
        return problems

    def check_model(self, model: ModelFacts, for_sync: bool) -> None:
        """The collection can be used now (``refusal``) with this model: a ``CollectionMismatchError`` naming every
        difference otherwise. A sync also needs the model's ``max_length`` and a layout this recemb knows."""
        if (refusal := self.refusal()) is not None:
            raise CollectionMismatchError(refusal)
        problems = self.model_problems(model)
        if not for_sync:
            if problems:
                raise CollectionMismatchError(
                    f"collection {self.collection!r} cannot be searched with this model: " + "; ".join(problems)
                    + f". Search it with the model it was built with ({self.model!r}).")
            return
        if self.layout > LAYOUT_VERSION:
            raise CollectionMismatchError(f"collection {self.collection!r} has layout {self.layout}, newer than this "
                                          "recemb knows; upgrade recemb")
        if self.data.get("max_length") != model.max_length:
            problems.append(f"max_length {self.data.get('max_length')} (collection) vs {model.max_length} (now)")
        recorded, now = self.data.get("passages_cut"), model.passages_cut
        if recorded and now:  # another library's model: its passages cut and prefixed as before
            for key in ("by", "window", "tokens", "characters", "overlap", "document_prefix", "document_vector"):
                if recorded.get(key) != now.get(key):
                    problems.append(f"passages' {key} {recorded.get(key)!r} (collection) vs {now.get(key)!r} (now)")
        if problems:
            raise CollectionMismatchError(
                f"collection {self.collection!r} was built differently: " + "; ".join(problems)
                + ". Nothing was written. Sync with the collection's settings, into a new collection, or rebuild it "
                "with the new ones (`recemb sync --rebuild`).")

    def search_refusal(self, mode: str | None, granularity: str) -> str | None:
        """Why a search in ``mode`` at ``granularity`` cannot run on this collection (checked before the model
        loads), or None: the one statement of a search's preconditions."""
        if mode in ("hybrid", "sparse") and self.bm25 is None:
            built = "built by recemb 0.1" if self.layout == 1 else "built dense-only"
            return (f"collection {self.collection!r} has no BM25 vectors ({built}); search it in dense mode "
                    "(--mode dense, mode='dense'), or rebuild it (`recemb sync --rebuild`)")
        if granularity == "passage" and not self.settings.passages:
            return (f"collection {self.collection!r} has no passages (it was synced without them); search documents "
                    "instead")
        return None


def bm25_encoders(settings: Mapping[str, Any] | None) -> tuple[Bm25 | None, Bm25 | None]:
    """(documents' BM25, passages' BM25) from a collection's recorded BM25 settings (``CollectionRecord.bm25``);
    (None, None) when dense-only."""
    if not settings:
        return None, None
    bm25 = Bm25.from_settings({k: v for k, v in settings.items() if k != "passage_avg_len"})
    return bm25, bm25.with_avg_len(settings.get("passage_avg_len", bm25.avg_len))


def legacy_hybrid_refusal(collection: str) -> str:
    """Why a hybrid sync into a recemb 0.1 collection is refused, and the ways on."""
    return (f"collection {collection!r} was built by recemb 0.1 with dense vectors only; hybrid search needs a BM25 "
            "vector on every point. Nothing was written. Rebuild it with `recemb sync --rebuild PATHS` "
            "(QdrantSync.sync(..., rebuild=True): the new collection is built beside the old one, which is dropped "
            "only when the new one is complete), or keep syncing it dense-only with --dense-only (sparse=False).")


# ---------------------------------------------------------------------- the one decision of a sync's settings
def decide_settings(record: CollectionRecord | None, requested: RequestedSettings,
                    rebuild: bool = False) -> SyncSettings:
    """The settings a sync runs with: what ``requested`` names, else the collection's (a later sync need not repeat
    them), else for a new collection the defaults (passages of ``DEFAULT_PASSAGE_TOKENS`` tokens sharing
    ``DEFAULT_PASSAGE_OVERLAP``, of documents longer than ``DEFAULT_PASSAGES_ABOVE`` tokens; BM25 in English; no
    stored texts). Named passages without an overlap share none and, without a threshold, are cut from every
    document longer than one passage.

    On an existing collection a named setting that contradicts it is a ``SettingsConflict`` (its ``key``,
    ``recorded`` and ``requested`` let a caller word it in its own terms); a hybrid sync of a recemb 0.1 collection is
    a ``CollectionMismatchError``. A rebuild takes what is named and the collection's settings for the rest, but
    builds BM25 vectors unless ``sparse=False`` is named.
    Impossible values, and an overlap or threshold named where passages are off, are an ``InvalidSetting``."""
    kept = record.settings if record is not None else None
    if record is not None and not rebuild:
        _check_conflicts(record, kept, requested)
    tokens, overlap, above = _passages(kept, requested)
    language = requested.sparse_language or (kept.sparse_language if kept is not None else "english")
    if record is not None and not rebuild and record.layout == 1 and requested.sparse is not False:
        raise CollectionMismatchError(legacy_hybrid_refusal(record.collection))
    # A rebuild is made hybrid unless dense-only is asked for (what it is for, from a recemb 0.1 collection).
    sparse = requested.sparse if requested.sparse is not None else (
        kept.sparse if kept is not None and not rebuild else True)
    return SyncSettings(passage_tokens=tokens, passage_overlap=overlap, passages_above=above,
                        max_tokens=requested.max_tokens if requested.max_tokens is not None or kept is None
                        else kept.max_tokens,
                        sparse=sparse, sparse_language=language,
                        store_text=requested.store_text if requested.store_text is not None
                        else (kept.store_text if kept is not None else False),
                        long_documents=requested.long_documents or (
                            kept.long_documents if kept is not None and kept.passages else DEFAULT_LONG_DOCUMENTS))


def _passages(kept: SyncSettings | None, requested: RequestedSettings) -> tuple[int | None, int, int]:
    """(passage_tokens or None, passage_overlap, passages_above) as ``decide_settings`` says."""
    tokens, overlap, above = requested.passage_tokens, requested.passage_overlap, requested.passages_above
    if tokens is None:
        source = kept or SyncSettings(DEFAULT_PASSAGE_TOKENS, DEFAULT_PASSAGE_OVERLAP,
                                      passages_above=DEFAULT_PASSAGES_ABOVE)
        tokens = source.passage_tokens
        overlap = source.passage_overlap if overlap is None else overlap
        above = source.passages_above if above is None else above
    elif tokens == NO_PASSAGES:
        tokens = None
    if tokens is None:
        named = [(k, v) for k, v in (("passage_overlap", overlap), ("passages_above", above)) if v]
        if named:
            raise InvalidSetting(f"{named[0][0]}={named[0][1]!r} needs passages, which are off (passage_tokens="
                                 f"{NO_PASSAGES} or a collection without them)", *named[0])
        return None, 0, 0
    check_passage_settings(tokens, overlap, above)
    return tokens, overlap or 0, default_passages_above(tokens) if above is None else above


def _check_conflicts(record: CollectionRecord, kept: SyncSettings, requested: RequestedSettings) -> None:
    """A ``SettingsConflict`` for the first named setting that the collection contradicts."""
    recorded_text = record.data.get("store_text")  # None: not known (an empty collection of an earlier recemb)
    named = {"passage_tokens": (requested.passage_tokens, None if requested.passage_tokens == NO_PASSAGES else
                                requested.passage_tokens, kept.passage_tokens),
             "passage_overlap": (requested.passage_overlap, requested.passage_overlap, kept.passage_overlap),
             "passages_above": (requested.passages_above, requested.passages_above, kept.passages_above),
             "max_tokens": (requested.max_tokens, requested.max_tokens, kept.max_tokens),
             "store_text": (requested.store_text, requested.store_text,
                            requested.store_text if recorded_text is None else recorded_text),
             "long_documents": (requested.long_documents, requested.long_documents,
                                kept.long_documents if kept.passages else requested.long_documents)}
    for key, (given, meant, recorded) in named.items():
        if given is None or meant == recorded:
            continue
        if key in ("passage_overlap", "passages_above") and given == 0 and not kept.passages:
            continue  # "none" named where passages are off
        raise SettingsConflict(f"collection {record.collection!r} was built with {key}={recorded!r}, not "
                               f"{given!r}; use the collection's setting, another collection, or rebuild it",
                               key, recorded, given)
    if requested.sparse is False and kept.sparse:
        raise SettingsConflict(f"collection {record.collection!r} was built with BM25 vectors (hybrid); sync it "
                               "hybrid, or rebuild it dense-only", "sparse", True, False)
    if requested.sparse is True and not kept.sparse and record.layout >= 2:
        raise SettingsConflict(f"collection {record.collection!r} was built dense-only (no BM25 vectors); sync it "
                               "dense-only, or rebuild it hybrid", "sparse", False, True)
    if kept.sparse and requested.sparse_language not in (None, kept.sparse_language):
        raise SettingsConflict(f"collection {record.collection!r} was built with BM25 in {kept.sparse_language}, "
                               f"not {requested.sparse_language}; use the collection's language, another collection, "
                               "or rebuild it", "sparse_language", kept.sparse_language, requested.sparse_language)
