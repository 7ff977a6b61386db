"""Where a ``QdrantSync`` keeps its collections: a small interface and its two implementations.

- ``ClientStore`` (``stores/client.py``): qdrant-client, for a Qdrant server or cluster (``url=``) and for
  qdrant-client's local mode (``path=``; brute-force search, every point pickled into SQLite: small collections).
- ``EdgeStore`` (``stores/edge.py``): Qdrant Edge, Qdrant's engine in-process (HNSW, a write-ahead log, segments
  on disk): the embedded store for collections of millions of points.

The interface speaks in recemb's terms (``StoredPoint``, ``SearchRequest``, named vectors "dense" and "bm25") and
takes filters in Qdrant's filter language: recemb's own as plain values (``stores/filters.py``, so that the embedded
store's sync and search never import qdrant-client), a user's as ``qdrant_client.models.Filter``, or the two nested;
each store translates them to its own. It is deliberately small: what ``QdrantSync`` needs to sync crash-safely,
rebuild, search and migrate, and nothing else. A new store implements ``Store`` and passes
``tests/integrations/test_stores.py`` (every sync and search test of ``test_qdrant.py`` then runs on it too).

Errors: ``StoreError`` when a store cannot be opened or used as asked (in use, not a store, read-only), and two
kinds of it that a command reports in one line with exit code 1: ``StoreFullError`` (the disk is too full for a
step; Qdrant Edge checks before it writes, and nothing written before is lost) and ``StoreDamagedError`` (its
files are damaged; the message names the file and the way to recover).

    from recemb_integrations.stores import open_store
    store = open_store(path="./recemb-store")        # Qdrant Edge (or a local-mode folder it finds there)
    store = open_store(url="http://localhost:6333")  # a server
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recemb_integrations._imports import require
from recemb_integrations.sparse import SparseVector

DENSE_VECTOR, SPARSE_VECTOR = "dense", "bm25"  # the vector names of every recemb collection (layout 2)
STORE_KINDS = ("edge", "local", "server")
KEYWORD, INTEGER = "keyword", "integer"  # payload index types
# Where a collection keeps its parts (docs/benchmarks.md, "Memory per point"): "ram" holds the dense vectors, the BM25
# index and the payloads in memory (every collection before recemb 0.1's store layouts); "compact" keeps an int8 copy
# of the dense vectors in memory for the search, which then rescores its candidates with the originals read from disk,
# and leaves the originals, the BM25 index and the payloads on disk (mapped: the kernel keeps what is used). New
# "lean" is compact with what compact still kept in memory beside the int8 copy moved to disk: the payload indexes and
# the point-id tracker mapped, and every segment's BM25 index built on disk (a segment not yet indexed keeps its
# BM25 index in memory, a table entry for every distinct term). New collections are lean; a collection keeps the
# layout it was created with (`recemb migrate` or a rebuild moves it).
LAYOUT_RAM, LAYOUT_COMPACT, LAYOUT_LEAN = "ram", "compact", "lean"
STORE_LAYOUTS = (LAYOUT_RAM, LAYOUT_COMPACT, LAYOUT_LEAN)
COMPACT_LAYOUTS = (LAYOUT_COMPACT, LAYOUT_LEAN)  # those with the int8 copy, rescored from float16 originals on disk
DEFAULT_LAYOUT = LAYOUT_LEAN
INT8_QUANTILE = 0.99  # the int8 range of a compact collection's dense copy: the middle 99% of the values


class StoreError(RuntimeError):
    """A store cannot be opened or used as asked (in use by another process, not a store, missing extra...)."""


class StoreFullError(StoreError):
    """The disk under an embedded store has too little free space to write (checked before writing, or reported by
    the engine). Nothing written before is lost: the same command completes once space is freed."""


class StoreDamagedError(StoreError):
    """An embedded store's files are damaged (corrupt, truncated or missing): the message names the file and the way
    to recover; ``damage`` is what is damaged alone (for a report made after that way was taken)."""

    def __init__(self, message: str, damage: str | None = None):
        super().__init__(message)
        self.damage = damage or message


@dataclass
class StoredPoint:
    """A point as written to or read from a store.

    ``vector``: ``{"dense": [...], "bm25": SparseVector}`` (either may be missing), or a plain list for the one
    unnamed vector of a recemb 0.1 collection; None when vectors were not asked for. ``score``: set by searches."""

    id: str
    payload: dict[str, Any]
    vector: dict[str, Any] | list[float] | None = None
    score: float | None = None


@dataclass(frozen=True)
class CollectionInfo:
    metadata: dict[str, Any]  # the collection's metadata (recemb's record under "recemb"), {} when none
    dense_size: int | None  # dimension of the dense vector
    sparse: bool  # whether points have a BM25 vector
    named: bool = True  # False: one unnamed dense vector (recemb 0.1)
    layout: str | None = None  # STORE_LAYOUTS, where the store knows it
    dense_datatype: str = "float32"  # how the store keeps the dense vectors: "float32" or "float16" (read back so)


@dataclass
class SearchRequest:
    """One search: by the dense vector, by the BM25 vector, or by both fused (``fusion`` "rrf" or "dbsf", each side
    bringing ``candidates`` points). ``dense_name`` None searches the unnamed vector of a recemb 0.1 collection."""

    limit: int
    dense: list[float] | None = None
    sparse: SparseVector | None = None
    filter: Any = None  # a stores.filters.Filter, or a qdrant_client.models.Filter
    fusion: str | None = None
    candidates: int = 100
    rrf_k: int = 61
    dense_name: str | None = DENSE_VECTOR
    with_payload: bool = True

    def __post_init__(self) -> None:
        if self.dense is None and self.sparse is None:
            raise ValueError("a search needs a dense or a sparse query vector")
        if self.dense is not None and self.sparse is not None and self.fusion not in ("rrf", "dbsf"):
            raise ValueError(f"a search by both vectors needs fusion 'rrf' or 'dbsf', got {self.fusion!r}")


class Store(ABC):
    """Collections of points with a dense and (optionally) a BM25 vector, payloads, and collection metadata.

    Every write is durable when it returns (acknowledged by a server, or in the write-ahead log / database of an
    embedded store): ``QdrantSync``'s crash-safety rests on that. Methods raise ``KeyError`` for a collection that
    does not exist, except ``collection_exists``."""

    kind: str  # "edge", "local" or "server"
    location: str  # a URL or a folder, for messages
    threshold_points: int | None = None  # above this many points the store is the wrong tool (a warning says so)

    # collections
    @abstractmethod
    def collection_exists(self, collection: str) -> bool: ...

    @abstractmethod
    def collection_info(self, collection: str) -> CollectionInfo: ...

    @abstractmethod
    def list_collections(self) -> list[str]: ...

    @abstractmethod
    def create_collection(self, collection: str, dense_size: int, sparse: bool, metadata: dict[str, Any],
                          layout: str = DEFAULT_LAYOUT) -> None:
        """A collection with a cosine dense vector ``"dense"`` and, if ``sparse``, a BM25 vector ``"bm25"`` with IDF
        applied by the store, its parts kept as ``layout`` says (``STORE_LAYOUTS``)."""

    @abstractmethod
    def update_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        """Replace the collection's metadata."""

    @abstractmethod
    def delete_collection(self, collection: str) -> None: ...

    @abstractmethod
    def create_payload_index(self, collection: str, key: str, schema: str) -> None:
        """An index on a payload field (``KEYWORD`` or ``INTEGER``) for the filters syncs and searches use."""

    # points
    @abstractmethod
    def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None: ...

    @abstractmethod
    def delete(self, collection: str, filter: Any) -> None:
        """Delete the points matching ``filter`` (a ``models.Filter``)."""

    @abstractmethod
    def set_payload(self, collection: str, payload: dict[str, Any], ids: Sequence[str] | None = None,
                    filter: Any = None) -> None:
        """Set (merge) payload keys on the points of ``ids`` or, if None, those matching ``filter``."""

    @abstractmethod
    def scroll(self, collection: str, limit: int, offset: Any = None, filter: Any = None,
               with_payload: bool | Sequence[str] = True, with_vectors: bool = False
               ) -> tuple[list[StoredPoint], Any]:
        """A page of points and the offset of the next page (None after the last)."""

    @abstractmethod
    def count(self, collection: str, filter: Any = None) -> int:
        """Exact number of points (matching ``filter``)."""

    @abstractmethod
    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[StoredPoint]: ...

    # search
    @abstractmethod
    def query(self, collection: str, request: SearchRequest) -> list[StoredPoint]:
        """The best ``request.limit`` points, best first, with scores."""

    @abstractmethod
    def query_groups(self, collection: str, request: SearchRequest, group_by: str,
                     group_size: int) -> list[list[StoredPoint]]:
        """The best ``request.limit`` groups of points sharing the payload value ``group_by``, best group first, each
        holding its best ``group_size`` points, best first."""

    def optimize(self, collection: str, show_progress_bar: bool | None = None) -> bool:
        """Build search indexes after a large write, where the store does not do it by itself. True if it ran."""
        return False

    def footprint(self, collection: str):
        """What ``collection`` takes (``stores.footprint.Footprint``): its points and layout, and where the store
        keeps its files, the bytes on disk and resident in this process by part."""
        from recemb_integrations.stores.footprint import Footprint

        info = self.collection_info(collection)
        return Footprint(collection=collection, kind=self.kind, layout=info.layout, points=self.count(collection),
                         dense_datatype=info.dense_datatype)

    def close(self) -> None:
        """Release the store (files, locks, connections)."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def as_store(client_or_store) -> Store:
    """A ``Store`` (or an object that acts like one, e.g. a wrapper) as is; anything else is taken for a
    ``QdrantClient``."""
    if isinstance(client_or_store, Store) or hasattr(client_or_store, "collection_info"):
        return client_or_store
    from recemb_integrations.stores.client import ClientStore

    return ClientStore(client_or_store)


LOCAL_MARKER = "meta.json"  # qdrant-client's local mode keeps this file at the top of its folder


def detect_store_kind(path: str | os.PathLike) -> str | None:
    """"local" or "edge" for a folder that holds that kind of store, None for a new or empty folder."""
    from recemb_integrations.stores.edge import EDGE_MARKER

    folder = Path(path)
    if (folder / LOCAL_MARKER).is_file():
        return "local"
    if (folder / EDGE_MARKER).is_file():
        return "edge"
    return None


def open_store(url: str | None = None, path: str | os.PathLike | None = None, kind: str = "auto",
               api_key: str | None = None, timeout: int = 60, read_only: str = "refuse") -> Store:
    """A server's store (``url``), or the embedded store in folder ``path``: ``kind`` "edge" or "local", or "auto"
    for whatever the folder holds (Qdrant Edge for a new folder). ``read_only``: what a Qdrant Edge store that
    cannot be written (a read-only mount) does, as Edge writes to its files even to search: "refuse" (a
    ``StoreError`` that says so) or "copy" (for reading: it is opened from a private temporary copy, removed on
    close; ``store.note`` says so).

    A store in use by another process, or one that is not a store, raises ``StoreError``; one whose files are
    damaged, or whose disk is too full to open it, raises ``StoreDamagedError`` / ``StoreFullError``."""
    if (url is None) == (path is None):
        raise ValueError("give a url (a Qdrant server) or a path (an embedded store), not both or neither")
    if url is not None:
        from recemb_integrations.stores.client import ClientStore

        QdrantClient = require("qdrant_client", "qdrant").QdrantClient
        return ClientStore(QdrantClient(url=url, api_key=api_key, timeout=timeout), location=url)
    if kind not in ("auto", "edge", "local"):
        raise ValueError(f"kind must be 'auto', 'edge' or 'local', got {kind!r}")
    found = detect_store_kind(path)
    if kind == "auto":
        kind = found or "edge"
    elif found is not None and found != kind:
        raise StoreError(f"{path} holds a {_describe(found)}, not a {_describe(kind)}; give another folder, or "
                         f"open it as {found!r} (move its collections with `recemb migrate`)")
    if kind == "local":
        from recemb_integrations.stores.client import open_local

        return open_local(path)
    from recemb_integrations.stores.edge import EdgeStore

    return EdgeStore(path, read_only=read_only)


def _describe(kind: str) -> str:
    return {"edge": "Qdrant Edge store", "local": "qdrant-client local-mode store"}.get(kind, kind)


__all__ = ["COMPACT_LAYOUTS", "CollectionInfo", "DEFAULT_LAYOUT", "DENSE_VECTOR", "INT8_QUANTILE", "INTEGER",
           "KEYWORD", "LAYOUT_COMPACT", "LAYOUT_LEAN", "LAYOUT_RAM", "SPARSE_VECTOR", "STORE_KINDS", "STORE_LAYOUTS",
           "SearchRequest", "Store",
           "StoreDamagedError", "StoreError", "StoreFullError", "StoredPoint", "as_store", "detect_store_kind",
           "open_store"]
