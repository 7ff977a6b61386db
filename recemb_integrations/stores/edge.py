"""The Qdrant Edge store: Qdrant's engine in-process (``qdrant-edge-py``), one Edge shard per collection.

Layout of a store folder::

    recemb-edge.json               marks the folder as a recemb Edge store
    .lock                          held (flock) while a process has the store open: one process at a time
    collections/<name>/shard/      the collection's Edge shard (segments, write-ahead log)
    collections/<name>/collection.json   its name, vector layout and recemb metadata (Edge has no collection
                                   metadata); written atomically, after the shard: a collection exists once it is

Edge is beta and differs from a server in ways this adapter hides, so ``QdrantSync`` sees the same behaviour on
every store (../shared/reference/qdrant-hybrid-and-edge.md):

- no grouped search in its Python API: ``query_groups`` over-fetches and groups here, fetching more until the page
  is full or the collection is exhausted;
- a boolean in a filter is sent as an integer (``MatchValue(True)`` matches 1, never JSON ``true``): booleans in
  payloads are stored as marker strings and turned back into booleans on every read, and boolean filter values are
  translated to the same markers;
- HNSW is built only by an explicit ``optimize()``: ``optimize`` runs it (with a progress bar) once enough points
  were written since the store was opened; below that, search is exact;
- filtered HNSW search loses recall on fields without a payload index (0.33 recall@10 measured): a filtered dense
  search on such a field uses ACORN; one on indexed fields only (recemb's own, e.g. ``kind``) is left to Qdrant's
  planner, which is faster there at full recall (index-aware HNSW links or an exact search of the matches);
- a killed ``optimize()`` leaves ``temp_segments`` behind: cleaned when a shard is opened (the store lock says
  nobody else has it open);
- its own types: filters arrive as ``qdrant_client.models.Filter`` and are translated.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from recemb_integrations._imports import require
from recemb_integrations.sparse import SparseVector
from recemb_integrations.stores import (
    DENSE_VECTOR,
    INTEGER,
    KEYWORD,
    SPARSE_VECTOR,
    CollectionInfo,
    SearchRequest,
    Store,
    StoredPoint,
    StoreError,
)

__all__ = ["COLLECTION_FILE", "EDGE_MARKER", "EdgeStore", "GROUP_FETCH_MIN", "GROUP_FUSE_ALL_BELOW", "HNSW_EF",
    "OPTIMIZE_AFTER_POINTS", "STORE_FORMAT"]

EDGE_MARKER = "recemb-edge.json"
STORE_FORMAT = 1
COLLECTION_FILE = "collection.json"
OPTIMIZE_AFTER_POINTS = 10_000  # points written since opening that make ``optimize`` build the index
HNSW_EF = 512  # search-time HNSW beam: recall against latency per value in docs/benchmarks.md (stores at scale)
GROUP_FETCH_MIN = 64  # points fetched at least to fill a page of groups
GROUP_FUSE_ALL_BELOW = 2048  # collections up to this many points fuse all of them in a grouped hybrid search
# Booleans as stored in payloads (see the module docstring); NUL-led so no real text collides with them.
_TRUE, _FALSE = "\x00recemb:true", "\x00recemb:false"


def _edge():
    return require("qdrant_edge", "qdrant")


class EdgeStore(Store):
    """A folder of Qdrant Edge collections, opened by one process at a time."""

    kind = "edge"

    def __init__(self, path: str | os.PathLike, optimize_after_points: int = OPTIMIZE_AFTER_POINTS):
        self._edge = _edge()
        self.root = Path(path).expanduser()
        self.location = str(self.root)
        self.optimize_after_points = optimize_after_points
        marker = self.root / EDGE_MARKER
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{self.root} is a file, not a folder; give the folder of an embedded store")
        if self.root.is_dir() and not marker.is_file() and any(self.root.iterdir()):
            raise StoreError(f"{self.root} holds other files but no recemb store; give a new or empty folder (a store "
                             "writes its own files there)")
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock(self.root / ".lock")
        if not marker.is_file():
            _write_json(marker, {"format": STORE_FORMAT, "engine": "qdrant-edge"})
        elif json.loads(marker.read_text()).get("format", 0) > STORE_FORMAT:
            self.close()
            raise StoreError(f"{self.root} was written by a newer recemb (store format "
                             f"{json.loads(marker.read_text())['format']}); upgrade recemb")
        self._collections = self.root / "collections"
        self._collections.mkdir(exist_ok=True)
        for leftover in self._collections.glob(".trash-*"):  # a drop that stopped before its files were gone
            shutil.rmtree(leftover, ignore_errors=True)
        self._shards: dict[str, Any] = {}
        self._written: dict[str, int] = {}  # points upserted per collection since opening
        self._index_keys: dict[str, set[str]] = {}  # payload keys with an index, per collection
        self._mutex = threading.RLock()

    # ------------------------------------------------------------------ collections
    def _folder(self, collection: str) -> Path:
        # The name itself where the filesystem takes it; long names (bytes, not characters, count) by their hash.
        safe = len(collection.encode("utf-8")) <= 120 and not collection.startswith(".")
        return self._collections / (collection if safe else "~" + hashlib.sha256(collection.encode()).hexdigest()[:40])

    def _record(self, collection: str) -> dict[str, Any]:
        path = self._folder(collection) / COLLECTION_FILE
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyError(collection) from None
        if record.get("name") != collection:  # a hashed folder name shared by two names: not this collection
            raise KeyError(collection)
        return record

    def collection_exists(self, collection: str) -> bool:
        try:
            self._record(collection)
            return True
        except KeyError:
            return False

    def collection_info(self, collection: str) -> CollectionInfo:
        record = self._record(collection)
        return CollectionInfo(metadata=record.get("metadata") or {}, dense_size=record["dense_size"],
                              sparse=record["sparse"])

    def list_collections(self) -> list[str]:
        names = []
        for folder in self._collections.iterdir():
            record = folder / COLLECTION_FILE
            if not folder.name.startswith(".") and record.is_file():
                names.append(json.loads(record.read_text(encoding="utf-8"))["name"])
        return sorted(names)

    def create_collection(self, collection: str, dense_size: int, sparse: bool, metadata: dict[str, Any]) -> None:
        E = self._edge
        with self._mutex:
            if self.collection_exists(collection):
                raise ValueError(f"collection {collection!r} already exists")
            folder = self._folder(collection)
            if folder.exists():  # a creation that stopped before its record was written
                self._close_shard(collection)
                shutil.rmtree(folder)
            folder.mkdir()
            self._index_keys.pop(collection, None)
            config = E.EdgeConfig(
                vectors={DENSE_VECTOR: E.EdgeVectorParams(size=dense_size, distance=E.Distance.Cosine)},
                sparse_vectors=({SPARSE_VECTOR: E.EdgeSparseVectorParams(modifier=E.Modifier.Idf)} if sparse
                                else None))
            self._shards[collection] = E.EdgeShard.create(str(folder / "shard"), config)
            _write_json(folder / COLLECTION_FILE, {"name": collection, "dense_size": dense_size, "sparse": sparse,
                                                   "metadata": metadata})

    def update_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        with self._mutex:
            record = self._record(collection)
            _write_json(self._folder(collection) / COLLECTION_FILE, {**record, "metadata": metadata})

    def delete_collection(self, collection: str) -> None:
        with self._mutex:
            self._record(collection)
            self._close_shard(collection)
            folder = self._folder(collection)
            trash = self._collections / f".trash-{uuid.uuid4().hex}"
            os.replace(folder, trash)  # one atomic step: the collection is gone, its files go next
            _fsync_dir(self._collections)
            shutil.rmtree(trash, ignore_errors=True)
            self._written.pop(collection, None)
            self._index_keys.pop(collection, None)

    def create_payload_index(self, collection: str, key: str, schema: str) -> None:
        E = self._edge
        kind = {KEYWORD: E.PayloadSchemaType.Keyword, INTEGER: E.PayloadSchemaType.Integer}[schema]
        with self._mutex:
            self._update(collection, E.UpdateOperation.create_field_index(key, kind))
            record = self._record(collection)
            indexed = sorted(set(record.get("indexed", [])) | {key})
            _write_json(self._folder(collection) / COLLECTION_FILE, {**record, "indexed": indexed})
            self._index_keys[collection] = set(indexed)

    def _indexed(self, collection: str) -> set[str]:
        with self._mutex:
            if collection not in self._index_keys:  # read once per opening; kept in step by create_payload_index
                self._index_keys[collection] = set(self._record(collection).get("indexed", []))
            return self._index_keys[collection]

    def _shard(self, collection: str):
        with self._mutex:
            shard = self._shards.get(collection)
            if shard is None:
                self._record(collection)
                path = self._folder(collection) / "shard"
                # Only this process has the store open (the lock): what an interrupted optimize left is garbage.
                shutil.rmtree(path / "temp_segments", ignore_errors=True)
                shard = self._shards[collection] = self._edge.EdgeShard.load(str(path))
            return shard

    def _close_shard(self, collection: str) -> None:
        shard = self._shards.pop(collection, None)
        if shard is not None:
            shard.close()

    def _update(self, collection: str, operation) -> None:
        with self._mutex:
            self._shard(collection).update(operation)

    # ------------------------------------------------------------------ points
    def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        E = self._edge
        edge_points = []
        for p in points:
            if not isinstance(p.vector, dict):
                raise ValueError("Qdrant Edge collections hold named vectors only (recemb 0.1's unnamed vector is "
                                 "for qdrant-client stores)")
            vector = {name: E.SparseVector(indices=list(v.indices), values=list(v.values))
                      if isinstance(v, SparseVector) else list(v) for name, v in p.vector.items()}
            edge_points.append(E.Point(id=p.id, vector=vector, payload=_encode(p.payload)))
        if edge_points:
            self._update(collection, E.UpdateOperation.upsert_points(edge_points))
            self._written[collection] = self._written.get(collection, 0) + len(edge_points)

    def delete(self, collection: str, filter: Any) -> None:
        self._update(collection, self._edge.UpdateOperation.delete_points_by_filter(self._filter(filter)))

    def set_payload(self, collection: str, payload: dict[str, Any], ids: Sequence[str] | None = None,
                    filter: Any = None) -> None:
        op = self._edge.UpdateOperation
        self._update(collection, op.set_payload(list(ids), _encode(payload)) if ids is not None
                     else op.set_payload_by_filter(self._filter(filter), _encode(payload)))

    def scroll(self, collection: str, limit: int, offset: Any = None, filter: Any = None,
               with_payload: bool | Sequence[str] = True, with_vectors: bool = False
               ) -> tuple[list[StoredPoint], Any]:
        E = self._edge
        selector = with_payload if isinstance(with_payload, bool) else E.PayloadSelector.Include(list(with_payload))
        with self._mutex:
            records, next_offset = self._shard(collection).scroll(E.ScrollRequest(
                offset=offset, limit=limit, filter=self._filter(filter), with_payload=selector,
                with_vector=with_vectors))
        return [_from_edge(r) for r in records], next_offset

    def count(self, collection: str, filter: Any = None) -> int:
        with self._mutex:
            return self._shard(collection).count(self._edge.CountRequest(exact=True, filter=self._filter(filter)))

    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[StoredPoint]:
        with self._mutex:
            records = self._shard(collection).retrieve(list(ids), with_payload=True, with_vector=with_vectors)
        return [_from_edge(r) for r in records]

    # ------------------------------------------------------------------ search
    def query(self, collection: str, request: SearchRequest) -> list[StoredPoint]:
        E = self._edge
        edge_filter = self._filter(request.filter)
        # Filtered HNSW misses matches that sit behind filtered-out neighbours unless the field has a payload index
        # (its HNSW then links within each value); ACORN explores past them where none has.
        acorn = edge_filter is not None and not _filter_keys(request.filter) <= self._indexed(collection)
        dense_params = E.SearchParams(hnsw_ef=max(HNSW_EF, request.limit, request.candidates),
                                      acorn=E.AcornSearchParams(enable=True) if acorn else None)
        dense = (E.Query.Nearest(list(request.dense), using=request.dense_name or DENSE_VECTOR)
                 if request.dense is not None else None)
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
        with self._mutex:
            points = self._shard(collection).query(query)
        return [_from_edge(p) for p in points]

    def query_groups(self, collection: str, request: SearchRequest, group_by: str,
                     group_size: int) -> list[list[StoredPoint]]:
        if not request.with_payload:
            raise ValueError("grouping needs payloads")
        fetch = max(GROUP_FETCH_MIN, request.limit * group_size * 4)
        # A fusion's scores depend on the candidates fused (DBSF scales by their spread): a small collection is
        # fused whole, as qdrant-client's grouping does, a large one over at least as many candidates as fetched.
        everything = self.count(collection) if request.fusion else 0
        while True:
            candidates = max(request.candidates, fetch, min(everything, GROUP_FUSE_ALL_BELOW))
            points = self.query(collection, replace(request, limit=fetch, candidates=candidates))
            groups: dict[Any, list[StoredPoint]] = {}
            for p in points:  # best first, so each group's first point is its best
                key = p.payload.get(group_by)
                if key is None or isinstance(key, (dict, list)):
                    continue
                members = groups.setdefault(key, [])
                if len(members) < group_size:
                    members.append(p)
            if len(groups) >= request.limit or len(points) < fetch:
                return list(groups.values())[: request.limit]
            fetch *= 4

    def optimize(self, collection: str, show_progress_bar: bool | None = None, force: bool = False) -> bool:
        """Build the HNSW index (and merge segments) once ``optimize_after_points`` points were written since the
        store was opened, or when ``force``d. Blocking; a progress bar shows that it is working."""
        if not force and self._written.get(collection, 0) < self.optimize_after_points:
            return False
        from tqdm.auto import tqdm

        done = threading.Event()
        with self._mutex:
            shard = self._shard(collection)
            with tqdm(total=None, desc=f"Indexing {collection}", unit="s", disable=show_progress_bar is False,
                      bar_format="{desc}: {elapsed}") as bar:
                ticker = threading.Thread(target=_tick, args=(bar, done), daemon=True)
                ticker.start()
                try:
                    shard.optimize()
                finally:
                    done.set()
                    ticker.join()
            self._written[collection] = 0
        return True

    def _filter(self, f):
        return None if f is None else _translate_filter(self._edge, f)

    def close(self) -> None:
        with getattr(self, "_mutex", threading.RLock()):
            for name in list(getattr(self, "_shards", {})):
                self._close_shard(name)
            lock_file = getattr(self, "_lock_file", None)
            if lock_file is not None:
                lock_file.close()  # releases the flock
                self._lock_file = None


# ---------------------------------------------------------------------- helpers
def _tick(bar, done: threading.Event) -> None:
    while not done.wait(0.5):
        bar.refresh()


def _lock(path: Path):
    """An exclusive lock on the store, held while the file stays open; a StoreError if another process has it."""
    handle = open(path, "a+")
    try:
        import fcntl
    except ImportError:  # Windows: Edge's own write-ahead-log lock still refuses a second writer
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise StoreError(f"the embedded store {path.parent} is in use by another process (one at a time); wait for "
                         "it to finish, or run a Qdrant server and pass --qdrant-url") from None
    return handle


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically and durably: a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not possible on every platform (Windows): the rename is what matters
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _encode(value):
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value):
    if isinstance(value, str):
        return True if value == _TRUE else False if value == _FALSE else value
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _from_edge(record) -> StoredPoint:
    vector = record.vector
    if isinstance(vector, dict):
        vector = {name: SparseVector(tuple(v.indices), tuple(v.values)) if hasattr(v, "indices") else list(v)
                  for name, v in vector.items()}
    return StoredPoint(id=str(record.id), payload=_decode(record.payload or {}), vector=vector,
                       score=getattr(record, "score", None))


def _filter_keys(f) -> set[str]:
    """The payload keys a ``models.Filter`` tests (an id condition tests none)."""
    from qdrant_client import models

    if f is None:
        return set()
    if isinstance(f, models.Filter):
        parts = [*(f.must or []), *(f.should or []), *(f.must_not or []),
                 *(f.min_should.conditions if f.min_should else [])]
        return set().union(*(_filter_keys(c) for c in (parts if isinstance(parts, list) else [parts])))
    if isinstance(f, list):
        return set().union(*(_filter_keys(c) for c in f))
    if isinstance(f, models.FieldCondition):
        return {f.key}
    if isinstance(f, models.IsEmptyCondition):
        return {f.is_empty.key}
    if isinstance(f, models.IsNullCondition):
        return {f.is_null.key}
    if isinstance(f, models.NestedCondition):
        return {f.nested.key}
    return set()


def _translate_filter(E, f):
    """A ``qdrant_client.models.Filter`` (or condition) in Qdrant Edge's types."""
    from qdrant_client import models

    def many(conditions):
        if conditions is None:
            return None
        return [one(c) for c in (conditions if isinstance(conditions, list) else [conditions])]

    def match(m):
        if isinstance(m, models.MatchValue):
            return E.MatchValue(_encode(m.value))
        if isinstance(m, models.MatchAny):
            return E.MatchAny([_encode(v) for v in m.any])
        if isinstance(m, models.MatchExcept):
            return E.MatchExcept([_encode(v) for v in m.except_])
        if isinstance(m, models.MatchText):
            return E.MatchText(m.text)
        raise ValueError(f"the Qdrant Edge store cannot translate the match {type(m).__name__}")

    def one(c):
        if isinstance(c, models.Filter):
            return E.Filter(must=many(c.must), should=many(c.should), must_not=many(c.must_not),
                            min_should=(E.MinShould(conditions=many(c.min_should.conditions),
                                                    min_count=c.min_should.min_count) if c.min_should else None))
        if isinstance(c, models.FieldCondition):
            if c.range is not None and not isinstance(c.range, models.Range):
                raise ValueError("the Qdrant Edge store translates numeric ranges only")
            rng = (E.RangeFloat(gte=c.range.gte, gt=c.range.gt, lte=c.range.lte, lt=c.range.lt)
                   if c.range is not None else None)
            if c.geo_bounding_box or c.geo_radius or c.geo_polygon or c.values_count:
                raise ValueError("the Qdrant Edge store does not translate geo or values-count conditions")
            return E.FieldCondition(key=c.key, match=match(c.match) if c.match is not None else None, range=rng,
                                    is_empty=c.is_empty, is_null=c.is_null)
        if isinstance(c, models.IsEmptyCondition):
            return E.IsEmptyCondition(c.is_empty.key)
        if isinstance(c, models.IsNullCondition):
            return E.IsNullCondition(c.is_null.key)
        if isinstance(c, models.HasIdCondition):
            return E.HasIdCondition({str(i) for i in c.has_id})
        if isinstance(c, models.NestedCondition):
            return E.NestedCondition(c.nested.key, one(c.nested.filter))
        raise ValueError(f"the Qdrant Edge store cannot translate the filter condition {type(c).__name__}")

    return one(f)

