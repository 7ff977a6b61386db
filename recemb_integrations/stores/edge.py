"""The Qdrant Edge store: Qdrant's engine in-process (``qdrant-edge-py``), one Edge shard per collection.

Layout of a store folder::

    recemb-edge.json               marks the folder as a recemb Edge store
    .lock                          held (flock) while a process has the store open: one process at a time
    collections/<name>/shard/      the collection's Edge shard (segments, write-ahead log)
    collections/<name>/collection.json   its name, vector layout, recemb metadata (Edge has no collection metadata)
                                   and the number of points it held when last closed; written atomically, after the
                                   shard: a collection exists once it is

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
- it maps its files into memory, so a write into a full disk kills the process (SIGBUS) instead of failing, and on
  tmpfs so does reading a part of a file never written: the free space is checked before every write and every
  opening of a shard (``StoreFullError``), and its own reports of a full disk are the same error;
- it writes to a shard's files when it opens them, even to search: a store on a read-only filesystem is refused
  with the way on (copy it to a writable folder);
- damage (a corrupt or truncated file, a lost segment, vectors zeroed) is reported, never searched around
  (``StoreDamagedError``, naming the file or the collection's folder and the way to recover): the engine's errors
  when it opens or reads a shard, a point count that differs from the one recorded when the collection was last
  closed, points without the dense vector every point carries, and a dense vector that is not unit length (Edge
  normalises every vector it stores for cosine);
- its own types: filters arrive as ``stores.filters`` values or ``qdrant_client.models`` and are translated (the
  main job's own never import qdrant-client).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import math
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from recemb_integrations._imports import require
from recemb_integrations.sparse import SparseVector
from recemb_integrations.stores import (
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
from recemb_integrations.stores.filters import family
from recemb_integrations.stores.footprint import Footprint, disk_by_part, resident_by_part

__all__ = ["COLLECTION_FILE", "COMPACT_HNSW_EF", "COMPACT_SEGMENTS", "EDGE_MARKER", "EdgeStore", "GROUP_FETCH_MIN",
           "GROUP_FUSE_ALL_BELOW", "HNSW_EF", "INDEX_SPACE_PER_POINT", "OPTIMIZE_AFTER_POINTS",
           "OPTIMIZE_SPACE_FACTOR", "RESCORE_OVERSAMPLING", "SEAL_AFTER_POINTS", "SPACE_FLOOR", "STORE_FORMAT",
           "WRITE_SPACE_FACTOR", "edge_config"]

EDGE_MARKER = "recemb-edge.json"
STORE_FORMAT = 1
COLLECTION_FILE = "collection.json"
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
# Free space a step leaves untouched beyond what it writes itself, checked before it starts (Edge's memory maps make a
# full disk a SIGBUS): the fixed costs (a new collection's files, a vector chunk or WAL segment a write starts) with
# room to spare. The measurements behind these numbers: docs/benchmarks.md, "Free space Qdrant Edge needs".
SPACE_FLOOR = 64 << 20
WRITE_SPACE_FACTOR = 3  # an upsert's bytes go to the write-ahead log, the segment and its payload indexes
OPTIMIZE_SPACE_FACTOR = 2  # an optimize writes the segments it merges anew beside them (Edge checks too)
INDEX_SPACE_PER_POINT = 64  # what a new payload index takes per point
VECTOR_SAMPLE = 16  # points whose dense vectors are checked when a shard is opened
UNIT_TOLERANCE = 1e-3  # |norm² - 1| of a stored dense vector; float32 normalisation is within 1e-6
# Booleans as stored in payloads (see the module docstring); NUL-led so no real text collides with them.
_TRUE, _FALSE = "\x00recemb:true", "\x00recemb:false"
_RECOVER = ("delete its folder {folder} and sync it again from its source folder (`recemb sync PATHS`), or restore "
            "the store from a backup")


_MALLOC_TRIM = None  # glibc's malloc_trim once looked up; False where there is none


def _release_freed_memory() -> None:
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


def _edge():
    return require("qdrant_edge", "qdrant")


def edge_config(E: Any, dense_size: int, sparse: bool, layout: str) -> Any:
    """The Edge shard configuration of a collection in ``layout`` (``stores.STORE_LAYOUTS``); the shard keeps it on
    disk, so a collection opens as it was created."""
    dense = dict(size=dense_size, distance=E.Distance.Cosine)
    bm25 = dict(modifier=E.Modifier.Idf)
    extra = {}
    if layout == LAYOUT_COMPACT:
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
    return E.EdgeConfig(vectors={DENSE_VECTOR: E.EdgeVectorParams(**dense)},
                        sparse_vectors={SPARSE_VECTOR: E.EdgeSparseVectorParams(**bm25)} if sparse else None, **extra)


class EdgeStore(Store):
    """A folder of Qdrant Edge collections, opened by one process at a time.

    Raises ``StoreError`` for a folder that is not a store, in use or read-only, ``StoreDamagedError`` for damaged
    files (when opened, or later when a collection's files are read) and ``StoreFullError`` when the disk has too
    little free space for a step (checked before it; nothing written before is lost)."""

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
        if self.root.is_dir() and (why := _not_writable(self.root)):
            raise StoreError(f"the embedded store at {self._where} cannot be opened here: {why}, and Qdrant Edge "
                             "writes to a collection's files when it opens them, even to search; copy the store to a "
                             "folder you can write and give that folder (--qdrant-path)")
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock(self.root / ".lock", self._where)
        self._memory_backed = _memory_backed(self.root)
        if not marker.is_file():
            try:
                self._write_file(marker, {"format": STORE_FORMAT, "engine": "qdrant-edge"}, "creating the store")
            except BaseException:
                self.close()
                raise
        else:
            found = self._read_marker(marker)
            if found > STORE_FORMAT:
                self.close()
                raise StoreError(f"{self.root} was written by a newer recemb (store format {found}); upgrade recemb")
        self._collections = self.root / "collections"
        self._collections.mkdir(exist_ok=True)
        for leftover in self._collections.glob(".trash-*"):  # a drop that stopped before its files were gone
            shutil.rmtree(leftover, ignore_errors=True)
        self._shards: dict[str, Any] = {}
        self._written: dict[str, int] = {}  # points upserted per collection since opening
        self._index_keys: dict[str, set[str]] = {}  # payload keys with an index, per collection
        self._layouts: dict[str, str] = {}  # each collection's layout (stores.STORE_LAYOUTS), read once
        self._unsealed: dict[str, int] = {}  # points upserted per compact collection since it was last indexed
        self._unrecorded: set[str] = set()  # collections written since opening: their point count is recorded on close
        self._mutex = threading.RLock()

    @property
    def _where(self) -> str:
        return str(self.root.absolute())

    def _read_marker(self, marker: Path) -> int:
        try:
            found = json.loads(marker.read_text(encoding="utf-8"))
            version = found.get("format", 0) if isinstance(found, dict) else None
            if not isinstance(version, int):
                raise ValueError(f"its format is {version!r}, not a number")
        except (ValueError, UnicodeDecodeError) as e:
            self.close()
            raise StoreDamagedError(
                f"{marker.absolute()} is damaged ({_one_line(e)}); it marks the folder as a recemb store: write "
                f'{{"format": {STORE_FORMAT}, "engine": "qdrant-edge"}} into it, or restore the store from a '
                "backup") from None
        return version

    # ------------------------------------------------------------------ collections
    def _folder(self, collection: str) -> Path:
        # The name itself where the filesystem takes it; long names (bytes, not characters, count) by their hash.
        safe = len(collection.encode("utf-8")) <= 120 and not collection.startswith(".")
        return self._collections / (collection if safe else "~" + hashlib.sha256(collection.encode()).hexdigest()[:40])

    def _record(self, collection: str) -> dict[str, Any]:
        record = self._read_record(self._folder(collection) / COLLECTION_FILE)
        if record is None or record["name"] != collection:  # a hashed name shared by two names: not this one
            raise KeyError(collection)
        return record

    def _read_record(self, path: Path) -> dict[str, Any] | None:
        """A collection's record; None if it has none (not a collection, or one whose creation stopped)."""
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or not isinstance(record.get("name"), str) \
                    or not isinstance(record.get("dense_size"), int) or not isinstance(record.get("sparse"), bool):
                raise ValueError("it lacks the collection's name or vector layout")
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError) as e:
            raise StoreDamagedError(f"{path.absolute()} is damaged ({_one_line(e)}); "
                                    + _RECOVER.format(folder=path.parent.absolute())) from None
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
                              sparse=record["sparse"], layout=record.get("layout", LAYOUT_RAM),
                              dense_datatype=record.get("dense_datatype", "float32"))

    def list_collections(self) -> list[str]:
        names = []
        for folder in self._collections.iterdir():
            record = None if folder.name.startswith(".") else self._read_record(folder / COLLECTION_FILE)
            if record is not None:
                names.append(record["name"])
        return sorted(names)

    def create_collection(self, collection: str, dense_size: int, sparse: bool, metadata: dict[str, Any],
                          layout: str = DEFAULT_LAYOUT) -> None:
        E = self._edge
        if layout not in STORE_LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(STORE_LAYOUTS)}, got {layout!r}")
        with self._mutex:
            if self.collection_exists(collection):
                raise ValueError(f"collection {collection!r} already exists")
            folder = self._folder(collection)
            if folder.exists():  # a creation that stopped before its record was written
                self._close_shard(collection)
                shutil.rmtree(folder)
            self._ensure_space(SPACE_FLOOR, f"creating collection {collection!r}")
            folder.mkdir()
            self._index_keys.pop(collection, None)
            self._layouts.pop(collection, None)
            self._unrecorded.discard(collection)
            with self._engine_errors(collection, "created"):
                self._shards[collection] = E.EdgeShard.create(str(folder / "shard"),
                                                              edge_config(E, dense_size, sparse, layout))
            self._write_file(folder / COLLECTION_FILE, {"name": collection, "dense_size": dense_size,
                                                        "sparse": sparse, "metadata": metadata, "points": 0,
                                                        "layout": layout,
                                                        "dense_datatype": COMPACT_DATATYPE.lower()
                                                        if layout == LAYOUT_COMPACT else "float32"},
                             f"creating collection {collection!r}")

    def update_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        with self._mutex:
            record = self._record(collection)
            self._write_file(self._folder(collection) / COLLECTION_FILE, {**record, "metadata": metadata},
                             f"writing collection {collection!r}")

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
            self._layouts.pop(collection, None)
            self._unrecorded.discard(collection)

    def create_payload_index(self, collection: str, key: str, schema: str) -> None:
        E = self._edge
        kind = {KEYWORD: E.PayloadSchemaType.Keyword, INTEGER: E.PayloadSchemaType.Integer}[schema]
        with self._mutex:
            self._update(collection, E.UpdateOperation.create_field_index(key, kind),
                         need=INDEX_SPACE_PER_POINT * self.count(collection))
            record = self._record(collection)
            indexed = sorted(set(record.get("indexed", [])) | {key})
            self._write_file(self._folder(collection) / COLLECTION_FILE, {**record, "indexed": indexed},
                             f"writing collection {collection!r}")
            self._index_keys[collection] = set(indexed)

    def _indexed(self, collection: str) -> set[str]:
        with self._mutex:
            if collection not in self._index_keys:  # read once per opening; kept in step by create_payload_index
                self._index_keys[collection] = set(self._record(collection).get("indexed", []))
            return self._index_keys[collection]

    def _layout(self, collection: str) -> str:
        with self._mutex:  # read once per opening: a collection keeps the layout it was created with
            if collection not in self._layouts:
                self._layouts[collection] = self._record(collection).get("layout", LAYOUT_RAM)
            return self._layouts[collection]

    def _shard(self, collection: str):
        with self._mutex:
            shard = self._shards.get(collection)
            if shard is None:
                record = self._record(collection)
                path = self._folder(collection) / "shard"
                # Only this process has the store open (the lock): what an interrupted optimize left is garbage.
                shutil.rmtree(path / "temp_segments", ignore_errors=True)
                # Opening writes (segment state, flags) and, on tmpfs, reading a never-written part of a mapped file
                # takes space too: what the shard's files have not taken yet is the most that can be.
                holes = _file_usage(path, skip="wal")[1] if self._memory_backed else 0
                self._ensure_space(SPACE_FLOOR + holes, f"opening collection {collection!r} (Qdrant Edge writes to "
                                                        "its files as it opens them)")
                with self._engine_errors(collection, "opened"):
                    shard = self._edge.EdgeShard.load(str(path))
                try:
                    self._check_opened(collection, shard, record)
                except BaseException:
                    shard.close()
                    raise
                self._shards[collection] = shard
            return shard

    def _check_opened(self, collection: str, shard, record: dict[str, Any]) -> None:
        """Lost points (a count other than the one recorded at the last close), lost dense vectors (every point
        carries one) and a sample of the dense vectors."""
        E = self._edge
        with self._engine_errors(collection, "read"):
            count = shard.count(E.CountRequest(exact=True))
            with_dense = shard.count(E.CountRequest(exact=True, filter=E.Filter(
                must=[E.HasVectorCondition(DENSE_VECTOR)])))
            sample, _ = shard.scroll(E.ScrollRequest(limit=VECTOR_SAMPLE, with_payload=False,
                                                     with_vector=[DENSE_VECTOR]))
        expected = record.get("points")
        segments = (self._folder(collection) / "shard" / "segments").absolute()
        if isinstance(expected, int) and count != expected:
            raise StoreDamagedError(self._damaged(collection, (
                f"it holds {count:,} points where {expected:,} were written, so points were lost (a segment under "
                f"{segments} is missing or damaged)")))
        if with_dense != count:
            raise StoreDamagedError(self._damaged(collection, (
                f"{count - with_dense:,} of its {count:,} points have lost their dense vector (a file under "
                f"{segments} is damaged)")))
        self._check_vectors(collection, sample)

    def _check_vectors(self, collection: str, records) -> None:
        """Edge stores every dense vector normalised (cosine): one that is not unit length is damage."""
        for r in records:
            vector = r.vector.get(DENSE_VECTOR) if isinstance(r.vector, dict) else None
            if vector is None:
                continue
            square = math.fsum(x * x for x in vector)
            if not abs(square - 1.0) <= UNIT_TOLERANCE:  # also NaN
                what = "all zeros" if square == 0 else f"of length {math.sqrt(square):.4g}, not a unit vector"
                segments = (self._folder(collection) / "shard" / "segments").absolute()
                raise StoreDamagedError(self._damaged(collection, (
                    f"point {r.id}'s dense vector is {what}, so the vector files under {segments} are damaged")))

    def _damaged(self, collection: str, what: str) -> str:
        return (f"collection {collection!r} of the embedded store at {self._where} is damaged: {what}; "
                + _RECOVER.format(folder=self._folder(collection).absolute()))

    def _close_shard(self, collection: str) -> None:
        shard = self._shards.pop(collection, None)
        if shard is not None:
            with self._engine_errors(collection, "closed"):
                shard.close()

    def _update(self, collection: str, operation, need: int = 0) -> None:
        """Apply a write that takes about ``need`` bytes (beyond the floor every step keeps free)."""
        with self._mutex:
            shard = self._shard(collection)
            self._ensure_space(SPACE_FLOOR + need, f"writing to collection {collection!r}")
            if collection not in self._unrecorded:
                # Points change from here on: the count recorded at the last close no longer holds (a process
                # killed before its close records none, and the next opening checks none).
                record = self._record(collection)
                if record.get("points") is not None:
                    self._write_file(self._folder(collection) / COLLECTION_FILE, {**record, "points": None},
                                     f"writing to collection {collection!r}")
                self._unrecorded.add(collection)
            with self._engine_errors(collection, "written"):
                shard.update(operation)

    # ------------------------------------------------------------------ free space and the engine's errors
    def _ensure_space(self, need: int, doing: str) -> None:
        free = _free_space(self.root)
        if free < need:
            raise StoreFullError(f"no space left for the embedded store at {self._where}: {_size(free)} free on its "
                                 f"disk, where {doing} wants {_size(need)}; free some space there and run the "
                                 "command again (nothing written before is lost)")

    def _write_file(self, path: Path, data: dict[str, Any], doing: str) -> None:
        try:
            _write_json(path, data)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreFullError(f"no space left for the embedded store at {self._where}: {doing} failed, its "
                                     "disk is full; free some space there and run the command again (nothing "
                                     "written before is lost)") from e
            raise

    @contextmanager
    def _engine_errors(self, collection: str, done: str) -> Iterator[None]:
        """The engine's reports of a full disk, of files it may not write and of damage, as one-line store errors."""
        try:
            yield
        except Exception as e:
            error = self._engine_error(e, collection, done)
            if error is None:
                raise
            raise error from e
        except BaseException as e:  # a Rust panic (pyo3's PanicException is a BaseException): damage it tripped on
            if type(e).__name__ != "PanicException":
                raise
            raise StoreDamagedError(self._damaged(collection, f"Qdrant Edge failed on its files ({_one_line(e)})")) \
                from e

    def _engine_error(self, e: Exception, collection: str, done: str) -> StoreError | None:
        text = _one_line(e)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) or any(
                s in text for s in ("No space left on device", "os error 28", "Not enough space available",
                                    "Disk quota exceeded")):
            return StoreFullError(f"no space left for the embedded store at {self._where}: collection "
                                  f"{collection!r} could not be {done}, its disk is full ({text}); free some space "
                                  "there and run the command again (nothing written before is lost)")
        if any(s in text for s in ("Read-only file system", "os error 30", "Permission denied", "os error 13")):
            return StoreError(f"the embedded store at {self._where} cannot be written here ({text}), and Qdrant "
                              "Edge writes to a collection's files when it opens them, even to search; copy the "
                              "store to a folder you can write and give that folder (--qdrant-path)")
        if type(e) is Exception and text.startswith(("Service runtime error", "Inconsistent storage")):
            detail = text.replace("Service runtime error: ", "")
            return StoreDamagedError(self._damaged(collection, f"Qdrant Edge cannot read it ({detail})"))
        return None

    # ------------------------------------------------------------------ points
    def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        E = self._edge
        edge_points = []
        size = 0
        for p in points:
            if not isinstance(p.vector, dict):
                raise ValueError("Qdrant Edge collections hold named vectors only (recemb 0.1's unnamed vector is "
                                 "for qdrant-client stores)")
            vector = {name: E.SparseVector(indices=list(v.indices), values=list(v.values))
                      if isinstance(v, SparseVector) else list(v) for name, v in p.vector.items()}
            payload = _encode(p.payload)
            size += _payload_bytes(payload) + sum(8 * len(v.indices) if isinstance(v, SparseVector) else 4 * len(v)
                                                  for v in p.vector.values())
            edge_points.append(E.Point(id=p.id, vector=vector, payload=payload))
        if edge_points:
            with self._mutex:
                self._update(collection, E.UpdateOperation.upsert_points(edge_points),
                             need=WRITE_SPACE_FACTOR * size)
                self._written[collection] = self._written.get(collection, 0) + len(edge_points)
                self._unsealed[collection] = self._unsealed.get(collection, 0) + len(edge_points)
                if self._unsealed[collection] >= SEAL_AFTER_POINTS and self._layout(collection) == LAYOUT_COMPACT:
                    self._seal(collection)

    def delete(self, collection: str, filter: Any) -> None:
        self._update(collection, self._edge.UpdateOperation.delete_points_by_filter(self._filter(filter)))

    def set_payload(self, collection: str, payload: dict[str, Any], ids: Sequence[str] | None = None,
                    filter: Any = None) -> None:
        op = self._edge.UpdateOperation
        encoded = _encode(payload)
        self._update(collection, op.set_payload(list(ids), encoded) if ids is not None
                     else op.set_payload_by_filter(self._filter(filter), encoded),
                     need=WRITE_SPACE_FACTOR * _payload_bytes(encoded) * (len(ids) if ids is not None else 1))

    def scroll(self, collection: str, limit: int, offset: Any = None, filter: Any = None,
               with_payload: bool | Sequence[str] = True, with_vectors: bool = False
               ) -> tuple[list[StoredPoint], Any]:
        E = self._edge
        selector = with_payload if isinstance(with_payload, bool) else E.PayloadSelector.Include(list(with_payload))
        with self._mutex:
            shard = self._shard(collection)
            with self._engine_errors(collection, "read"):
                records, next_offset = shard.scroll(E.ScrollRequest(
                    offset=offset, limit=limit, filter=self._filter(filter), with_payload=selector,
                    with_vector=with_vectors))
        if with_vectors:
            self._check_vectors(collection, records)
        return [_from_edge(r) for r in records], next_offset

    def count(self, collection: str, filter: Any = None) -> int:
        with self._mutex:
            shard = self._shard(collection)
            with self._engine_errors(collection, "read"):
                return shard.count(self._edge.CountRequest(exact=True, filter=self._filter(filter)))

    def retrieve(self, collection: str, ids: Sequence[str], with_vectors: bool = False) -> list[StoredPoint]:
        with self._mutex:
            shard = self._shard(collection)
            with self._engine_errors(collection, "read"):
                records = shard.retrieve(list(ids), with_payload=True, with_vector=with_vectors)
        if with_vectors:
            self._check_vectors(collection, records)
        return [_from_edge(r) for r in records]

    # ------------------------------------------------------------------ search
    def query(self, collection: str, request: SearchRequest) -> list[StoredPoint]:
        E = self._edge
        edge_filter = self._filter(request.filter)
        # Filtered HNSW misses matches that sit behind filtered-out neighbours unless the field has a payload index
        # (its HNSW then links within each value); ACORN explores past them where none has.
        acorn = edge_filter is not None and not _filter_keys(request.filter) <= self._indexed(collection)
        compact = self._layout(collection) == LAYOUT_COMPACT
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
        with self._mutex:
            shard = self._shard(collection)
            with self._engine_errors(collection, "searched"):
                points = shard.query(query)
                # The best hits' dense vectors are checked (zeroed vector files would score them 0.0): a few, since
                # a grouped search fetches thousands of candidates and their vectors would cost more than the search.
                checked = shard.retrieve([p.id for p in points[:VECTOR_SAMPLE]], with_payload=False,
                                         with_vector=[dense_name]) if dense is not None and points else []
        self._check_vectors(collection, checked)
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
            taken = _file_usage(self._folder(collection) / "shard", skip="wal")[0]
            self._ensure_space(SPACE_FLOOR + OPTIMIZE_SPACE_FACTOR * taken, f"indexing collection {collection!r}")
            with tqdm(total=None, desc=f"Indexing {collection}", unit="s", disable=show_progress_bar is False,
                      bar_format="{desc}: {elapsed}") as bar:
                ticker = threading.Thread(target=_tick, args=(bar, done), daemon=True)
                ticker.start()
                try:
                    with self._engine_errors(collection, "indexed"):
                        shard.optimize()
                finally:
                    done.set()
                    ticker.join()
            self._written[collection] = 0
            if self._layout(collection) == LAYOUT_COMPACT:
                self._reopen(collection)
            _release_freed_memory()
        return True

    def _seal(self, collection: str) -> None:
        """Index what was written since the last seal (a compact collection's writes, as they go) and reopen."""
        with self._mutex:
            shard = self._shard(collection)
            taken = _file_usage(self._folder(collection) / "shard", skip="wal")[0]
            self._ensure_space(SPACE_FLOOR + OPTIMIZE_SPACE_FACTOR * taken, f"indexing collection {collection!r}")
            with self._engine_errors(collection, "indexed"):
                shard.optimize()
            self._reopen(collection)
            _release_freed_memory()

    def _reopen(self, collection: str) -> None:
        """Close the shard (its point count recorded, as a close does) so the pages of the files it wrote are
        unmapped; the next call opens it again, with the usual checks."""
        with self._mutex:
            if collection in self._unrecorded:
                self._record_count(collection)
            self._close_shard(collection)
            self._unsealed[collection] = 0

    def footprint(self, collection: str) -> Footprint:
        """What ``collection`` takes: its points and layout, bytes on disk by part and the file pages of it resident
        in this process (the collection is opened first)."""
        found = super().footprint(collection)  # counting opens the shard
        shard = self._folder(collection) / "shard"
        return replace(found, disk=disk_by_part(shard), resident=resident_by_part(shard) or {})

    def _filter(self, f):
        return None if f is None else _translate_filter(self._edge, f)

    def close(self) -> None:
        """Record the point count of each collection written since opening (what the next opening checks), close
        the shards and release the lock."""
        with getattr(self, "_mutex", threading.RLock()):
            failed = None
            for name in list(getattr(self, "_shards", {})):
                if name in self._unrecorded:
                    self._record_count(name)
                try:
                    self._close_shard(name)
                except StoreError as e:  # the others are still closed and the lock released
                    failed = failed or e
            lock_file = getattr(self, "_lock_file", None)
            if lock_file is not None:
                lock_file.close()  # releases the flock
                self._lock_file = None
            if failed is not None:
                raise failed

    def _record_count(self, collection: str) -> None:
        try:
            count = self._shards[collection].count(self._edge.CountRequest(exact=True))
            self._write_file(self._folder(collection) / COLLECTION_FILE, {**self._record(collection),
                                                                          "points": count}, "closing")
            self._unrecorded.discard(collection)
        except Exception:  # a check, not data: left unrecorded, the next opening checks no count
            pass


# ---------------------------------------------------------------------- helpers
def _tick(bar, done: threading.Event) -> None:
    while not done.wait(0.5):
        bar.refresh()


def _lock(path: Path, where: str):
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
        raise StoreError(f"the embedded store at {where} is in use by another process (one at a time); wait for it "
                         "to finish, or run a Qdrant server and pass --qdrant-url") from None
    return handle


def _not_writable(folder: Path) -> str | None:
    """Why ``folder`` cannot be written, or None."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "it is on a read-only filesystem"
    except (AttributeError, OSError):  # no statvfs (Windows)
        pass
    return None if os.access(folder, os.W_OK) else "you may not write to its folder"


def _memory_backed(folder: Path) -> bool:
    """Whether ``folder`` is on tmpfs (Linux), where a memory map's read of a never-written page takes space too."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    target, best, kind = os.path.realpath(folder), "", None
    for line in lines:  # "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS] - FSTYPE SOURCE OPTIONS"
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, right.split()[0]
    return kind == "tmpfs"


def _file_usage(folder: Path, skip: str | None = None) -> tuple[int, int]:
    """(bytes the files under ``folder`` take on disk, bytes of them not written yet: the holes of sparse files),
    leaving out the sub-folder ``skip``."""
    taken = holes = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        if skip in dirnames and Path(dirpath) == folder:
            dirnames.remove(skip)
        for name in filenames:
            try:
                st = os.stat(os.path.join(dirpath, name))
            except OSError:
                continue
            blocks = getattr(st, "st_blocks", None)
            used = st.st_size if blocks is None else blocks * 512
            taken += used
            holes += max(0, st.st_size - used)
    return taken, holes


def _free_space(folder: Path) -> int:
    """Bytes this process may still write on the disk under ``folder``."""
    return shutil.disk_usage(folder).free


def _payload_bytes(value) -> int:
    """About the bytes a payload takes serialised."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + 2
    if isinstance(value, dict):
        return sum(len(str(k)) + 3 + _payload_bytes(v) for k, v in value.items()) + 2
    if isinstance(value, (list, tuple)):
        return sum(_payload_bytes(v) + 1 for v in value) + 2
    return 8


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:1000] + ("..." if len(text) > 1000 else "")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically and durably: a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk must not keep half a file
        raise
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


def _kind(node) -> str:
    """The class name of a filter node of either family (``stores.filters`` or ``qdrant_client.models``): both carry
    the same field names, so one translation reads both without importing qdrant-client."""
    try:
        family(node)
    except TypeError:
        raise ValueError(f"the Qdrant Edge store cannot translate the filter condition {type(node).__name__}") from None
    return type(node).__name__


def _listed(conditions) -> list:
    if conditions is None:
        return []
    return list(conditions) if isinstance(conditions, (list, tuple)) else [conditions]


def _filter_keys(f) -> set[str]:
    """The payload keys a filter tests (an id condition tests none)."""
    if f is None:
        return set()
    if isinstance(f, (list, tuple)):
        return set().union(*(_filter_keys(c) for c in f))
    kind = _kind(f)
    if kind == "Filter":
        min_should = getattr(f, "min_should", None)
        parts = [*_listed(f.must), *_listed(f.should), *_listed(f.must_not),
                 *(_listed(min_should.conditions) if min_should else [])]
        return _filter_keys(parts)
    if kind == "FieldCondition":
        return {f.key}
    if kind == "IsEmptyCondition":
        return {f.is_empty.key}
    if kind == "IsNullCondition":
        return {f.is_null.key}
    if kind == "NestedCondition":
        return {f.nested.key}
    return set()


def _translate_filter(E, f):
    """A filter (``stores.filters`` or ``qdrant_client.models``, or the two nested) in Qdrant Edge's types."""

    def many(conditions):
        return None if conditions is None else [one(c) for c in _listed(conditions)]

    def match(m):
        kind = _kind(m)
        if kind == "MatchValue":
            return E.MatchValue(_encode(m.value))
        if kind == "MatchAny":
            return E.MatchAny([_encode(v) for v in m.any])
        if kind == "MatchExcept":
            return E.MatchExcept([_encode(v) for v in m.except_])
        if kind == "MatchText":
            return E.MatchText(m.text)
        raise ValueError(f"the Qdrant Edge store cannot translate the match {kind}")

    def one(c):
        kind = _kind(c)
        if kind == "Filter":
            min_should = getattr(c, "min_should", None)
            return E.Filter(must=many(c.must), should=many(c.should), must_not=many(c.must_not),
                            min_should=(E.MinShould(conditions=many(min_should.conditions),
                                                    min_count=min_should.min_count) if min_should else None))
        if kind == "FieldCondition":
            if c.range is not None and _kind(c.range) != "Range":
                raise ValueError("the Qdrant Edge store translates numeric ranges only")
            rng = (E.RangeFloat(gte=c.range.gte, gt=c.range.gt, lte=c.range.lte, lt=c.range.lt)
                   if c.range is not None else None)
            if any(getattr(c, name, None) for name in ("geo_bounding_box", "geo_radius", "geo_polygon",
                                                        "values_count")):
                raise ValueError("the Qdrant Edge store does not translate geo or values-count conditions")
            return E.FieldCondition(key=c.key, match=match(c.match) if c.match is not None else None, range=rng,
                                    is_empty=getattr(c, "is_empty", None), is_null=getattr(c, "is_null", None))
        if kind == "IsEmptyCondition":
            return E.IsEmptyCondition(c.is_empty.key)
        if kind == "IsNullCondition":
            return E.IsNullCondition(c.is_null.key)
        if kind == "HasIdCondition":
            return E.HasIdCondition({str(i) for i in c.has_id})
        if kind == "NestedCondition":
            return E.NestedCondition(c.nested.key, one(c.nested.filter))
        raise ValueError(f"the Qdrant Edge store cannot translate the filter condition {kind}")

    return one(f)

