"""The qdrant-client store: a Qdrant server or cluster, or qdrant-client's local mode.

A thin translation of ``Store`` calls to ``QdrantClient`` calls; every write waits for the server's acknowledgement
(``wait=True``). Local mode is qdrant-client's own in-process emulation: exact numpy search, one pickled row per
point in SQLite; it suits small collections (its documentation says "small-scale data, demos, and tests") and warns
itself above 20,000 points. Its file errors are store errors with the way on: a full disk (SQLite's "database or disk
is full", ENOSPC) is a ``StoreFullError``, a damaged ``meta.json`` or ``storage.sqlite`` a ``StoreDamagedError``
naming the file, a read-only folder a ``StoreError``. It writes no memory maps, so a full disk fails a write cleanly
and a search needs no free space.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import pickle
import sqlite3
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from recemb_integrations._imports import require
from recemb_integrations.sparse import SparseVector
from recemb_integrations.stores.filters import to_client
from recemb_integrations.stores.interface import (
    COMPACT_LAYOUTS,
    DEFAULT_LAYOUT,
    DENSE_VECTOR,
    INT8_QUANTILE,
    INTEGER,
    KEYWORD,
    LAYOUT_COMPACT,
    LAYOUT_RAM,
    SPARSE_VECTOR,
    STORE_LAYOUTS,
    CollectionInfo,
    SearchRequest,
    Store,
    StoreDamagedError,
    StoredPoint,
    StoreError,
    StoreFullError,
)

__all__ = ["ClientStore", "LOCAL_MODE_LARGE", "open_local"]

models = require("qdrant_client.models", "qdrant")

LOCAL_MODE_LARGE = 20_000  # qdrant-client's own warning threshold for local mode (LARGE_DATA_THRESHOLD)
_SCHEMAS = {KEYWORD: models.PayloadSchemaType.KEYWORD, INTEGER: models.PayloadSchemaType.INTEGER}
_STORAGE_FILE = "storage.sqlite"  # local mode's file of a collection's points, in collection/<name>/


def open_local(path) -> "ClientStore":
    """qdrant-client's local mode in folder ``path`` (created if missing)."""
    from qdrant_client import QdrantClient

    os.makedirs(path, exist_ok=True)
    where = os.path.abspath(path)
    try:
        return ClientStore(QdrantClient(path=str(path)), location=str(path))
    except Exception as e:  # it loads meta.json, then every collection's points from its SQLite file, then locks
        if isinstance(e, RuntimeError) and "already accessed" in str(e):
            raise StoreError(f"the embedded store at {where} is in use by another process (local mode allows one at "
                             "a time); wait for it to finish, or run a Qdrant server and pass --qdrant-url") from e
        if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise StoreError(f"the embedded store at {where} cannot be opened here ({os.strerror(e.errno).lower()}), "
                             "and qdrant-client's local mode writes its lock file when it opens a store, even to "
                             "search; copy the store to a folder you can write and give that folder (--qdrant-path)"
                             ) from e
        error = _local_error(e, where, opening=True)
        if error is None:
            raise
        raise error from e


def _local_error(e: BaseException, where: str, collection: str | None = None, opening: bool = False
                 ) -> StoreError | None:
    """A local-mode file error as a store error with the way on, or None for another error."""
    text = " ".join(str(e).split())
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) or (
            isinstance(e, sqlite3.OperationalError) and "disk is full" in text):
        return StoreFullError(f"no space left for the embedded store at {where}: its disk is full ({text}); free "
                              "some space there and run the command again (nothing written before is lost)")
    meta = os.path.join(where, "meta.json")
    if opening and isinstance(e, json.JSONDecodeError):
        return StoreDamagedError(f"{meta} is damaged ({text}); it lists the store's collections: delete the store "
                                 f"folder {where} and sync its collections again from their source folders (`recemb "
                                 "sync PATHS`), or restore the store from a backup")
    if isinstance(e, sqlite3.DatabaseError) or (opening and isinstance(e, (pickle.UnpicklingError, EOFError))):
        found = _storage_file(e) or (os.path.join(where, "collection", collection, _STORAGE_FILE) if collection
                                     else os.path.join(where, "collection", "*", _STORAGE_FILE))
        return StoreDamagedError(f"{found} is damaged ({text}); delete it and sync the collection again from its "
                                 "source folder (`recemb sync PATHS`; its settings are kept in meta.json), or restore "
                                 "the store from a backup")
    return None


def _storage_file(error: BaseException) -> str | None:
    """The SQLite file local mode was reading when it failed: its ``CollectionPersistence`` is on the traceback."""
    tb, found = error.__traceback__, None
    while tb is not None:
        location = getattr(tb.tb_frame.f_locals.get("self"), "location", None)
        if isinstance(location, Path) and location.name == _STORAGE_FILE:
            found = str(location.absolute())
        tb = tb.tb_next
    return found


def _local_errors(method):
    """A method of ``ClientStore`` whose local-mode file errors are store errors (a server's errors pass as they
    are)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (OSError, sqlite3.Error) as e:
            collection = args[0] if args and isinstance(args[0], str) else None
            error = _local_error(e, os.path.abspath(self.location), collection) if self.kind == "local" else None
            if error is None:
                raise
            raise error from e

    return call


class ClientStore(Store):
    def __init__(self, client, location: str | None = None):
        self.client = client
        inner = getattr(client, "_client", None)
        self.kind = "local" if type(inner).__name__ == "QdrantLocal" else "server"
        self.threshold_points = LOCAL_MODE_LARGE if self.kind == "local" else None
        self.location = location or getattr(inner, "location", None) or getattr(inner, "rest_uri", None) or self.kind

    # ------------------------------------------------------------------ collections
    @_local_errors
    def collection_exists(self, collection: str) -> bool:
        return self.client.collection_exists(collection)

    @_local_errors
    def collection_info(self, collection: str) -> CollectionInfo:
        if not self.client.collection_exists(collection):
            raise KeyError(collection)
        config = self.client.get_collection(collection).config
        vectors = config.params.vectors
        named = isinstance(vectors, dict)
        dense = vectors.get(DENSE_VECTOR) if named else vectors
        sparse = config.params.sparse_vectors or {}
        quantized = getattr(dense, "quantization_config", None) or config.quantization_config
        return CollectionInfo(metadata=dict(config.metadata or {}), dense_size=getattr(dense, "size", None),
                              sparse=SPARSE_VECTOR in sparse, named=named,
                              layout=LAYOUT_COMPACT if quantized is not None else LAYOUT_RAM,
                              dense_datatype="float16" if getattr(dense, "datatype", None) == models.Datatype.FLOAT16
                              else "float32")

    @_local_errors
    def list_collections(self) -> list[str]:
        return sorted(c.name for c in self.client.get_collections().collections)

    @_local_errors
    def create_collection(self, collection: str, dense_size: int, sparse: bool, metadata: dict[str, Any],
                          layout: str = DEFAULT_LAYOUT) -> None:
        if layout not in STORE_LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(STORE_LAYOUTS)}, got {layout!r}")
        # Local mode keeps every point in Python objects whatever the configuration says: it is created plain.
        # A server's lean collection is its compact one: what lean moves to disk is Qdrant Edge's in-process memory.
        compact = layout in COMPACT_LAYOUTS and self.kind == "server"
        quantization = models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(
            type=models.ScalarType.INT8, quantile=INT8_QUANTILE, always_ram=True)) if compact else None
        self.client.create_collection(
            collection,
            vectors_config={DENSE_VECTOR: models.VectorParams(size=dense_size, distance=models.Distance.COSINE,
                                                              on_disk=compact or None,
                                                              datatype=models.Datatype.FLOAT16 if compact else None,
                                                              quantization_config=quantization)},
            sparse_vectors_config=({SPARSE_VECTOR: models.SparseVectorParams(
                modifier=models.Modifier.IDF, index=models.SparseIndexParams(on_disk=True) if compact else None)}
                if sparse else None),
            on_disk_payload=compact or None,
            metadata=metadata)

    @_local_errors
    def update_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        self.client.update_collection(collection, metadata=metadata)

    @_local_errors
    def delete_collection(self, collection: str) -> None:
        self.client.delete_collection(collection)

    @_local_errors
    def create_payload_index(self, collection: str, key: str, schema: str) -> None:
        with warnings.catch_warnings():  # local mode has no indexes and says so in a warning
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            self.client.create_payload_index(collection, key, field_schema=_SCHEMAS[schema], wait=True)

    # ------------------------------------------------------------------ points
    @_local_errors
    def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        self.client.upsert(collection, wait=True, points=[
            models.PointStruct(id=p.id, vector=_to_client_vector(p.vector), payload=p.payload) for p in points])

    @_local_errors
    def delete(self, collection: str, filter: Any) -> None:
        self.client.delete(collection, points_selector=models.FilterSelector(filter=to_client(filter)), wait=True)

    @_local_errors
    def set_payload(self, collection: str, payload: dict[str, Any], ids: Sequence[str] | None = None,
                    filter: Any = None) -> None:
        self.client.set_payload(collection, payload=payload, points=list(ids) if ids is not None else to_client(filter),
                                wait=True)

    @_local_errors
    def scroll(self, collection: str, limit: int, offset: Any = None, filter: Any = None,
               with_payload: bool | Sequence[str] = True, with_vectors: bool = False
               ) -> tuple[list[StoredPoint], Any]:
        points, next_offset = self.client.scroll(collection, scroll_filter=to_client(filter), limit=limit,
                                                 offset=offset, with_payload=_payload_selector(with_payload),
                                                 with_vectors=with_vectors)
        return [_from_client(p) for p in points], next_offset

    @_local_errors
    def count(self, collection: str, filter: Any = None) -> int:
        return self.client.count(collection, count_filter=to_client(filter), exact=True).count

    @_local_errors
    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[StoredPoint]:
        return [_from_client(p) for p in self.client.retrieve(collection, list(ids), with_payload=True,
                                                               with_vectors=with_vectors)]

    # ------------------------------------------------------------------ search
    @_local_errors
    def query(self, collection: str, request: SearchRequest) -> list[StoredPoint]:
        result = self.client.query_points(collection, limit=request.limit, with_payload=request.with_payload,
                                          **_query_arguments(request))
        return [_from_client(p) for p in result.points]

    @_local_errors
    def query_groups(self, collection: str, request: SearchRequest, group_by: str,
                     group_size: int) -> list[list[StoredPoint]]:
        everything = None
        while True:
            result = self.client.query_points_groups(collection, group_by=group_by, limit=request.limit,
                                                     group_size=group_size, with_payload=request.with_payload,
                                                     **_query_arguments(request))
            if request.fusion is None or len(result.groups) >= request.limit:
                break
            # a fusion of the prefetched candidates only: fewer groups than asked, more candidates where they exist
            everything = self.count(collection) if everything is None else everything
            if request.candidates >= everything:
                break
            request = replace(request, candidates=min(request.candidates * 4, everything))
        return [[_from_client(p) for p in group.hits] for group in result.groups]

    def close(self) -> None:
        self.client.close()


def _query_arguments(request: SearchRequest) -> dict[str, Any]:
    request = replace(request, filter=to_client(request.filter))
    if request.sparse is None:
        return {"query": request.dense, "using": request.dense_name, "query_filter": request.filter}
    if request.dense is None:
        return {"query": _to_client_sparse(request.sparse), "using": SPARSE_VECTOR, "query_filter": request.filter}
    return {"prefetch": [
        models.Prefetch(query=request.dense, using=request.dense_name, filter=request.filter,
                        limit=request.candidates),
        models.Prefetch(query=_to_client_sparse(request.sparse), using=SPARSE_VECTOR, filter=request.filter,
                        limit=request.candidates)],
        "query": (models.RrfQuery(rrf=models.Rrf(k=request.rrf_k)) if request.fusion == "rrf"
                  else models.FusionQuery(fusion=models.Fusion.DBSF))}


def _payload_selector(with_payload: bool | Sequence[str]):
    return with_payload if isinstance(with_payload, bool) else list(with_payload)


def _to_client_sparse(vector: SparseVector):
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _to_client_vector(vector):
    if not isinstance(vector, dict):
        return vector  # the unnamed vector of a recemb 0.1 collection
    return {name: _to_client_sparse(v) if isinstance(v, SparseVector) else v for name, v in vector.items()}


def _from_client(point) -> StoredPoint:
    vector = getattr(point, "vector", None)
    if isinstance(vector, dict):
        vector = {name: SparseVector(tuple(v.indices), tuple(v.values)) if isinstance(v, models.SparseVector)
                  else list(v) for name, v in vector.items()}
    return StoredPoint(id=str(point.id), payload=point.payload or {}, vector=vector,
                       score=getattr(point, "score", None))
