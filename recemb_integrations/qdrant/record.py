"""A collection's record: what recemb wrote into a collection's metadata when it created it (the model, its
fingerprint and dimension, passages, truncation, the BM25 settings, the point layout), read once and checked
without a model.

This is the one definition of a sync's settings (``SyncSettings``) and of how requested settings meet recorded
ones (``reconcile_settings``): the command checks them before any model loads, and ``QdrantSync``, a rebuild,
``recemb migrate`` and Ray's actors work from the same record. Pure: nothing here touches a store.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from recemb_integrations.qdrant.errors import CollectionMismatchError, SettingsConflict
from recemb_integrations.stores import DENSE_VECTOR, SPARSE_VECTOR

__all__ = ["CollectionRecord", "DISTANCE_NAME", "INVALID_COLLECTION_CHARS", "LAYOUT_VERSION", "MAX_COLLECTION_NAME",
           "DEFAULT_PASSAGES_ABOVE", "DEFAULT_PASSAGE_OVERLAP", "DEFAULT_PASSAGE_TOKENS", "META_KEY", "REBUILD_SUFFIX",
           "RequestedSettings",
           "SyncSettings", "check_collection_name", "check_passage_settings", "choose_passages",
           "default_passages_above", "layout_version", "legacy_hybrid_refusal", "reconcile_settings",
           "recorded_layout"]

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


def check_passage_settings(passage_tokens: int | None, passage_overlap: int | None,
                           passages_above: int | None = 0) -> None:
    """Passages of passage_tokens >= 1 tokens sharing 0 <= passage_overlap < passage_tokens tokens, cut from documents
    of more than passages_above >= 0 tokens."""
    if passage_tokens is None:
        return
    if isinstance(passage_tokens, bool) or not isinstance(passage_tokens, int) or passage_tokens < 1:
        raise ValueError(f"passage_tokens must be a positive int (or 0 for no passages), got {passage_tokens!r}")
    overlap = passage_overlap or 0
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < passage_tokens:
        raise ValueError(f"passage_overlap must be an int from 0 to passage_tokens - 1 = {passage_tokens - 1}, "
                         f"got {passage_overlap!r}")
    above = passages_above or 0
    if isinstance(above, bool) or not isinstance(above, int) or above < 0:
        raise ValueError(f"passages_above must be an int >= 0 (0: every document gets passages), got "
                         f"{passages_above!r}")


@dataclass(frozen=True)
class SyncSettings:
    """What a collection records of how its points were made, besides the model: passages (``passage_tokens``
    tokens sharing ``passage_overlap``, None: none) of the documents longer than ``passages_above`` tokens,
    truncation (``max_tokens``), BM25 vectors (``sparse``, in ``sparse_language``) and whether the points keep their
    text (``store_text``). Valid by construction."""

    passage_tokens: int | None = None
    passage_overlap: int = 0
    max_tokens: int | None = None
    sparse: bool = True
    sparse_language: str = "english"
    passages_above: int = 0
    store_text: bool = False

    def __post_init__(self) -> None:
        check_passage_settings(self.passage_tokens, self.passage_overlap, self.passages_above)
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        if not isinstance(self.sparse, bool):
            raise TypeError(f"sparse must be True or False, got {self.sparse!r}")
        if not isinstance(self.store_text, bool):
            raise TypeError(f"store_text must be True or False, got {self.store_text!r}")

    def as_kwargs(self) -> dict[str, Any]:
        """As ``QdrantSync`` keyword arguments (there ``passage_tokens=0`` is no passages, None the default)."""
        return {"passage_tokens": self.passage_tokens or 0, "passage_overlap": self.passage_overlap,
                "passages_above": self.passages_above, "max_tokens": self.max_tokens, "sparse": self.sparse,
                "sparse_language": self.sparse_language, "store_text": self.store_text}


@dataclass(frozen=True)
class RequestedSettings:
    """Settings a caller asked for; None where it named none (the collection's are used then, or for a new
    collection the defaults). ``passage_tokens=0``: no passages."""

    passage_tokens: int | None = None
    passage_overlap: int | None = None
    max_tokens: int | None = None
    sparse: bool = True  # False: dense-only was asked for
    passages_above: int | None = None
    store_text: bool | None = None  # True: --store-text, False: --no-store-text


@dataclass(frozen=True)
class CollectionRecord:
    """A collection's recemb metadata, parsed. ``as_dict()`` is what the collection stores under ``META_KEY``."""

    collection: str
    data: Mapping[str, Any]
    dense_size: int | None = None  # the dense vectors' size the collection was created with, where known
    # False when ``data`` holds what the collection's metadata lacks (read off its points, a recemb that did not
    # record it): the next sync writes it.
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
    def new(cls, collection: str, *, model_id: str, fingerprint: str, dim: int, max_length: int | None,
            settings: SyncSettings, bm25: Mapping[str, Any] | None, version: str) -> CollectionRecord:
        """The record of a collection about to be created (``bm25``: its BM25 settings, None when dense-only)."""
        return cls(collection, {
            "model": model_id,
            "model_fingerprint": fingerprint,
            "dim": dim,
            "distance": DISTANCE_NAME,
            "pooling": POOLING,
            "document_prompt": "",
            "max_length": max_length,
            "passage_tokens": settings.passage_tokens,
            "passage_overlap": settings.passage_overlap if settings.passage_tokens else None,
            "passages_above": settings.passages_above if settings.passage_tokens else None,
            "max_tokens": settings.max_tokens,
            "store_text": settings.store_text,
            "layout": LAYOUT_VERSION,
            "point_roots": True,  # every point records its root, indexed
            "vectors": {"dense": DENSE_VECTOR, "sparse": SPARSE_VECTOR if settings.sparse else None},
            "sparse": dict(bm25) if bm25 is not None and settings.sparse else None,
            "recemb_version": version,
        }, dim)

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
        return layout_version(self.data)

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
        """The settings the points were made with (a recemb 0.1 collection is dense-only)."""
        kept = recorded_layout(self.data)
        language = (self.data.get("sparse") or {}).get("language", "english")
        return SyncSettings(**{**kept, "sparse": kept["sparse"] and self.layout >= 2}, sparse_language=language)

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

    def model_problems(self, model_id: str, fingerprint: str, dim: int, dense_size: int | None) -> list[str]:
        """How a model differs from the one the collection was built with (empty: it matches)."""
        problems = []
        if self.data.get("dim") != dim or (dense_size is not None and dense_size != dim):
            problems.append(f"dimension {self.data.get('dim')} (collection) vs {dim} (model)")
        if self.data.get("model_fingerprint") != fingerprint:
            if self.model == model_id:  # same name, other weights (e.g. a retrained model)
                problems.append(f"model {model_id!r} has other weights than when the collection was built "
                                f"(fingerprint {self.data.get('model_fingerprint')} vs {fingerprint})")
            else:
                problems.append(f"model {self.model!r} (collection) vs {model_id!r} (this embedder)")
        if self.data.get("distance") != DISTANCE_NAME:
            problems.append(f"distance {self.data.get('distance')} vs {DISTANCE_NAME}")
        return problems

    def setting_problems(self, expected: CollectionRecord, sparse: bool, sparse_language: str) -> list[str]:
        """How a sync's settings (its would-be record ``expected``) differ from the collection's."""
        problems = []
        for key in ("passage_tokens", "passage_overlap", "max_length", "max_tokens"):
            if self.data.get(key) != expected.data[key]:
                problems.append(f"{key} {self.data.get(key)} (collection) vs {expected.data[key]} (now)")
        if self.settings.passages_above != expected.settings.passages_above:  # unrecorded before: 0
            problems.append(f"passages_above {self.settings.passages_above} (collection) vs "
                            f"{expected.settings.passages_above} (now)")
        recorded_text = self.data.get("store_text")  # None: not known (an empty collection of an earlier recemb)
        if recorded_text is not None and recorded_text != expected.data["store_text"]:
            problems.append(f"store_text {recorded_text} (collection) vs {expected.data['store_text']} (now)")
        recorded_sparse = self.data.get("sparse")
        if self.layout >= 2 and (recorded_sparse is not None) != sparse:
            problems.append("BM25 vectors " + ("present (collection) vs dense-only (now)" if not sparse
                                               else "absent (collection: dense-only) vs hybrid (now)"))
        elif sparse and recorded_sparse.get("language") != sparse_language:
            problems.append(f"BM25 language {recorded_sparse.get('language')} (collection) vs {sparse_language} "
                            "(now)")
        return problems


def recorded_layout(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The QdrantSync settings a collection records (passages, truncation, BM25 or not), as constructor keywords."""
    tokens = recorded.get("passage_tokens") or None
    return {"passage_tokens": tokens, "passage_overlap": recorded.get("passage_overlap") or 0 if tokens else 0,
            # a collection of a recemb that did not record it gave every document passages
            "passages_above": recorded.get("passages_above") or 0 if tokens else 0,
            "max_tokens": recorded.get("max_tokens"), "sparse": recorded.get("sparse") is not None,
            "store_text": bool(recorded.get("store_text"))}


def layout_version(recorded: Mapping[str, Any]) -> int:
    """1 for collections of recemb 0.1.0 (one unnamed dense vector), else the recorded version."""
    return int(recorded.get("layout", 1))


def legacy_hybrid_refusal(collection: str) -> str:
    """Why a hybrid sync into a recemb 0.1 collection is refused, and the ways on."""
    return (f"collection {collection!r} was built by recemb 0.1 with dense vectors only; hybrid search needs a BM25 "
            "vector on every point. Nothing was written. Rebuild it with `recemb sync --rebuild PATHS` "
            "(QdrantSync.sync(..., rebuild=True): the new collection is built beside the old one, which is dropped "
            "only when the new one is complete), or keep syncing it dense-only with --dense-only (sparse=False).")


def choose_passages(kept: SyncSettings | None, tokens: int | None, overlap: int | None, above: int | None
                    ) -> tuple[int | None, int, int]:
    """(passage_tokens or None, passage_overlap, passages_above): the named ones (``tokens=0``: no passages), else
    ``kept`` (a collection's settings), else the defaults (``DEFAULT_PASSAGE_TOKENS`` / ``_OVERLAP`` / ``_ABOVE``).
    Named tokens without an overlap share none, and without a threshold are cut from every document longer than one
    passage."""
    if tokens is None:
        if kept is not None:
            tokens = kept.passage_tokens
            overlap = kept.passage_overlap if overlap is None else overlap
            above = kept.passages_above if above is None else above
        else:
            tokens = DEFAULT_PASSAGE_TOKENS
            overlap = DEFAULT_PASSAGE_OVERLAP if overlap is None else overlap
            above = DEFAULT_PASSAGES_ABOVE if above is None else above
    if not tokens:
        return None, overlap or 0, above or 0
    return tokens, overlap or 0, default_passages_above(tokens) if above is None else above


def reconcile_settings(record: CollectionRecord | None, requested: RequestedSettings,
                       rebuild: bool = False) -> SyncSettings:
    """The settings a sync uses: those requested where given, else the collection's (a later sync need not repeat
    them), else for a new collection the defaults (passages of ``DEFAULT_PASSAGE_TOKENS`` for documents longer than
    ``DEFAULT_PASSAGES_ABOVE`` tokens; no stored texts). A requested setting that contradicts the collection is a
    ``SettingsConflict`` (a recemb 0.1 collection asked for BM25 vectors, a ``CollectionMismatchError``). A rebuild
    takes the requested ones, and the collection's passages, truncation and stored texts where none are requested.
    Impossible values are a ValueError."""
    if record is None or rebuild:
        kept = record.settings if record is not None else None
        tokens, overlap, above = choose_passages(kept, requested.passage_tokens, requested.passage_overlap,
                                                 requested.passages_above)
        max_tokens = requested.max_tokens if requested.max_tokens is not None or kept is None else kept.max_tokens
        store_text = requested.store_text if requested.store_text is not None or kept is None else kept.store_text
        return SyncSettings(tokens, overlap, max_tokens, sparse=requested.sparse, passages_above=above,
                            store_text=bool(store_text),
                            **({"sparse_language": kept.sparse_language} if kept is not None else {}))
    kept = record.settings
    given = {"passage_tokens": requested.passage_tokens, "passage_overlap": requested.passage_overlap,
             "passages_above": requested.passages_above, "max_tokens": requested.max_tokens}
    for key, value in given.items():
        recorded = getattr(kept, key)
        if value is None or value == recorded or (key == "passage_tokens" and value == 0 and recorded is None):
            continue
        if key in ("passage_overlap", "passages_above") and value == 0 and not kept.passage_tokens:
            continue
        raise SettingsConflict(f"collection {record.collection!r} was built with {key}={recorded!r}, not "
                               f"{value!r}; use the collection's setting, another collection, or rebuild it",
                               key, recorded, value)
    if record.layout == 1 and requested.sparse:
        raise CollectionMismatchError(legacy_hybrid_refusal(record.collection))
    if not requested.sparse and kept.sparse:
        raise SettingsConflict(f"collection {record.collection!r} was built with BM25 vectors (hybrid); sync it "
                               "hybrid, or rebuild it dense-only", "sparse", True, False)
    recorded_text = record.data.get("store_text")  # None: not known (an empty collection of an earlier recemb)
    if requested.store_text is not None and recorded_text is not None and requested.store_text != recorded_text:
        raise SettingsConflict(f"collection {record.collection!r} was built with store_text={recorded_text!r}, not "
                               f"{requested.store_text!r}; use the collection's setting, another collection, or "
                               "rebuild it", "store_text", recorded_text, requested.store_text)
    if recorded_text is None:
        return replace(kept, store_text=bool(requested.store_text))
    return kept
