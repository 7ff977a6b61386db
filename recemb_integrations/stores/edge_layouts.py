"""Qdrant Edge's configuration of a collection in each store layout, and the engine's tuning that goes with it: when a
compact collection is indexed as it is written, how many segments it keeps, the HNSW beams, the rescoring, and the
heap handed back after indexing. What ``EdgeStore`` creates and searches with; the measurements behind the numbers
are in docs/benchmarks.md."""

from __future__ import annotations

import ctypes
from typing import Any

from recemb_integrations.stores.interface import (
    COMPACT_LAYOUTS,
    DENSE_VECTOR,
    INT8_QUANTILE,
    INTEGER,
    KEYWORD,
    LAYOUT_LEAN,
    SPARSE_VECTOR,
)

__all__ = ["COMPACT_DATATYPE", "COMPACT_HNSW_EF", "COMPACT_SEGMENTS", "GROUP_FETCH_MIN", "GROUP_FUSE_ALL_BELOW",
           "HNSW_EF", "OPTIMIZE_AFTER_POINTS", "RESCORE_OVERSAMPLING", "SEAL_AFTER_POINTS", "edge_config",
           "edge_query", "payload_index_schema", "release_freed_memory"]

OPTIMIZE_AFTER_POINTS = 10_000  # points written since opening that make ``optimize`` build the index
# A compact collection is indexed as it is written: every SEAL_AFTER_POINTS points the engine indexes what came in
# (a segment of its own, merged only down to COMPACT_SEGMENTS) and the shard is reopened, so the file pages written
# are unmapped. One optimize over everything at the end peaked at several times the store's size (docs/benchmarks.md).
SEAL_AFTER_POINTS = 20_000
COMPACT_SEGMENTS = 8
# The beam is walked in every segment: a compact collection's segments are small, and 256 keeps its recall at
# HNSW_EF's on one large segment for a fraction of the time (docs/benchmarks.md).
COMPACT_HNSW_EF = 256
RESCORE_OVERSAMPLING = 2.0  # a compact collection's search takes twice the candidates by int8, rescored from disk
COMPACT_DATATYPE = "Float16"  # how a compact collection stores its original dense vectors (edge_config)
HNSW_EF = 512  # search-time HNSW beam: recall against latency per value in docs/benchmarks.md (stores at scale)
GROUP_FETCH_MIN = 64  # points fetched at least to fill a page of groups
GROUP_FUSE_ALL_BELOW = 2048  # collections up to this many points fuse all of them in a grouped hybrid search
INDEX_ANY_SEGMENT_KB = 1  # a lean collection's indexing threshold (KB of vectors): every segment with points

_MALLOC_TRIM = None  # glibc's malloc_trim once looked up; False where there is none


def release_freed_memory() -> None:
    """Hand the heap the engine freed back to the system (glibc's malloc_trim). An optimize frees most of what it
    allocated, but the allocator keeps it for reuse, several times what the collection then holds
    (docs/benchmarks.md, "Memory per point"). Nothing where the C library has no malloc_trim."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


def edge_config(E: Any, dense_size: int, sparse: bool, layout: str) -> Any:
    """The Edge shard configuration of a collection in ``layout`` (``stores.STORE_LAYOUTS``); the shard keeps it on
    disk, so a collection opens as it was created."""
    dense = dict(size=dense_size, distance=E.Distance.Cosine)
    bm25 = dict(modifier=E.Modifier.Idf)
    extra: dict[str, Any] = {}
    if layout in COMPACT_LAYOUTS:
        # The int8 copy (a quarter of the fp32 vectors) stays pinned in memory for the graph walk; the originals
        # are read back only to rescore the candidates. The BM25 inverted index held in memory was the largest part
        # of a point (docs/benchmarks.md); on disk, only the posting lists a query touches are read. The originals
        # are kept as float16: a rescore reads them at random, and the kernel's read-ahead soon keeps all of them
        # in the page cache, so their size is what searching a collection keeps resident.
        dense.update(memory=E.Memory.Cold, datatype=getattr(E.VectorStorageDatatype, COMPACT_DATATYPE),
                     quantization_config=E.ScalarQuantizationConfig(
                         type=E.ScalarType.Int8, quantile=INT8_QUANTILE, memory=E.Memory.Pinned))
        bm25.update(memory=E.Memory.Cold)
        extra.update(payload_memory=E.Memory.Cold,
                     optimizers=E.EdgeOptimizersConfig(default_segment_number=COMPACT_SEGMENTS))
    if layout == LAYOUT_LEAN:
        # A segment below the engine's indexing threshold (20 MB of vectors by default) stays appendable, and an
        # appendable segment builds its BM25 index in memory when it is opened: with many distinct terms that was
        # most of what a reopened compact collection held (docs/benchmarks.md). Indexed whatever its size, every
        # sealed segment keeps its BM25 postings on disk; and the point-id tracker is mapped, not loaded.
        extra.update(id_tracker_memory=E.Memory.Cold,
                     optimizers=E.EdgeOptimizersConfig(default_segment_number=COMPACT_SEGMENTS,
                                                       indexing_threshold=INDEX_ANY_SEGMENT_KB))
    return E.EdgeConfig(vectors={DENSE_VECTOR: E.EdgeVectorParams(**dense)},
                        sparse_vectors={SPARSE_VECTOR: E.EdgeSparseVectorParams(**bm25)} if sparse else None, **extra)


def payload_index_schema(E: Any, schema: str, layout: str) -> Any:
    """A payload index's schema in ``layout``: held in memory, or in a lean collection mapped from its files (the
    keyword index of ``document_id`` alone was about a hundred bytes a point held in memory)."""
    if layout != LAYOUT_LEAN:
        return {KEYWORD: E.PayloadSchemaType.Keyword, INTEGER: E.PayloadSchemaType.Integer}[schema]
    return (E.KeywordIndexParams(on_disk=True) if schema == KEYWORD else
            E.IntegerIndexParams(lookup=True, range=True, on_disk=True))


def edge_query(E: Any, request: Any, edge_filter: Any, acorn: bool, compact: bool) -> tuple[Any, str | None]:
    """(the engine's query for a ``SearchRequest``, the dense vector's name where it searches by one): dense, BM25
    or both prefetched and fused, with the layout's beam and rescoring, and ACORN where the filter tests fields
    without a payload index."""
    rescore = E.QuantizationSearchParams(rescore=True, oversampling=RESCORE_OVERSAMPLING) if compact else None
    dense_params = E.SearchParams(hnsw_ef=max(COMPACT_HNSW_EF if compact else HNSW_EF, request.limit,
                                              request.candidates),
                                  acorn=E.AcornSearchParams(enable=True) if acorn else None, quantization=rescore)
    dense_name = request.dense_name or DENSE_VECTOR
    dense = (E.Query.Nearest(list(request.dense), using=dense_name) if request.dense is not None else None)
    sparse = (E.Query.Nearest(E.SparseVector(indices=list(request.sparse.indices),
                                             values=list(request.sparse.values)), using=SPARSE_VECTOR)
              if request.sparse is not None else None)
    if dense is not None and sparse is not None:
        query = E.QueryRequest(
            limit=request.limit, with_payload=request.with_payload,
            prefetches=[E.Prefetch(limit=request.candidates, query=dense, filter=edge_filter, params=dense_params),
                        E.Prefetch(limit=request.candidates, query=sparse, filter=edge_filter)],
            query=E.Fusion.Rrf(k=request.rrf_k) if request.fusion == "rrf" else E.Fusion.Dbsf())
    else:
        query = E.QueryRequest(limit=request.limit, query=dense or sparse, filter=edge_filter,
                               with_payload=request.with_payload, params=dense_params if dense else None)
    return query, dense_name if dense is not None else None
