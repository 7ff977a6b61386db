"""The interface every store implements (``Store``), what it speaks in (``StoredPoint``, ``SearchRequest``,
``CollectionInfo``, the vector names and layouts) and its errors. Apart from ``open_store`` (``stores/__init__.py``),
which imports the engines that implement it: an engine imports this module, never the package."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from recemb_integrations.sparse import SparseVector

__all__ = ["COMPACT_LAYOUTS", "CollectionInfo", "DEFAULT_LAYOUT", "DENSE_VECTOR", "INT8_QUANTILE", "INTEGER",
           "KEYWORD", "LAYOUT_COMPACT", "LAYOUT_LEAN", "LAYOUT_RAM", "SPARSE_VECTOR", "STORE_KINDS", "STORE_LAYOUTS",
           "SearchRequest", "Store", "StoreDamagedError", "StoreError", "StoreFullError", "StoredPoint"]

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
        holding its best ``group_size`` points, best first. A full page: where the collection holds ``limit``
        groups matching the request, that many come back, a hybrid search's candidates widened as needed (a fusion
        ranks only the candidates each side brings; long documents' passages can fill them with few groups)."""

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
