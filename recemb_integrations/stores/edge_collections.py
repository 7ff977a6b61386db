"""A Qdrant Edge store's collections: the store folder opened (one process at a time), each collection's record and
shard, created, opened with its damage checks, written under the free-space check and closed with its point count
recorded, and the engine's errors turned into store errors. ``edge.EdgeStore`` builds the points and searches on
it; the folder's layout is in ``edge``'s docstring."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recemb_integrations._imports import require
from recemb_integrations.stores.edge_checks import (
    INDEX_SPACE_PER_POINT,
    RECOVER,
    SPACE_FLOOR,
    VECTOR_SAMPLE,
    engine_error,
    ensure_space,
    file_usage,
    memory_backed,
    not_writable,
    one_line,
    opened_damage,
    vector_damage,
)
from recemb_integrations.stores.edge_files import (
    COLLECTION_FILE,
    EDGE_LOCK,
    EDGE_MARKER,
    STORE_FORMAT,
    copy_store,
    fsync_dir,
    holds_other_files,
    lock,
    read_marker,
    read_record,
    write_file,
)
from recemb_integrations.stores.edge_layouts import (
    COMPACT_DATATYPE,
    OPTIMIZE_AFTER_POINTS,
    edge_config,
    payload_index_schema,
)
from recemb_integrations.stores.footprint import release_freed_heap
from recemb_integrations.stores.interface import (
    COMPACT_LAYOUTS,
    DEFAULT_LAYOUT,
    DENSE_VECTOR,
    INTEGER,
    KEYWORD,
    LAYOUT_RAM,
    STORE_LAYOUTS,
    CollectionInfo,
    Store,
    StoreDamagedError,
    StoreError,
)

__all__ = ["EdgeCollections"]


def _edge():
    return require("qdrant_edge", "qdrant")


class EdgeCollections(Store):
    """A folder of Qdrant Edge collections, opened by one process at a time: the folder, its lock and its files, each
    collection's record and shard (opened with the damage checks, written under the free-space check), and the
    engine's errors as store errors. ``EdgeStore`` adds the points and the searches.

    Raises ``StoreError`` for a folder that is not a store, in use or read-only, ``StoreDamagedError`` for damaged
    files (when opened, or later when a collection's files are read) and ``StoreFullError`` when the disk has too
    little free space for a step (checked before it; nothing written before is lost)."""

    kind = "edge"

    def __init__(self, path: str | os.PathLike, optimize_after_points: int = OPTIMIZE_AFTER_POINTS,
                 read_only: str = "refuse"):
        if read_only not in ("refuse", "copy"):
            raise ValueError(f"read_only must be 'refuse' or 'copy', got {read_only!r}")
        self._edge = _edge()
        self.root = Path(path).expanduser()
        self._origin = self.root  # where the store is (self.root: where it is opened, a copy of a read-only one)
        self.location = str(self.root)
        self.optimize_after_points = optimize_after_points
        self.note: str | None = None  # what a user should know of how the store was opened (a copy)
        self._copy: Path | None = None
        marker = self.root / EDGE_MARKER
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{self.root} is a file, not a folder; give the folder of an embedded store")
        if self.root.is_dir() and not marker.is_file() and holds_other_files(self.root):
            raise StoreError(f"{self.root} holds other files but no recemb store; give a new or empty folder (a store "
                             "writes its own files there)")
        if self.root.is_dir() and (why := not_writable(self.root)) and read_only == "copy" and marker.is_file():
            # Qdrant Edge writes to a shard's files even to search: the search reads a private copy
            self._copy = copy_store(self.root, self._where, why)
            self.root = self._copy
            self.note = (f"the embedded store at {self._where} cannot be written ({why}), and Qdrant Edge writes to "
                         f"its files even to search: searched in a copy at {self._copy}, removed when done")
        elif self.root.is_dir() and (why := not_writable(self.root)):
            raise StoreError(f"the embedded store at {self._where} cannot be opened here: {why}, and Qdrant Edge "
                             "writes to a collection's files when it opens them, even to search; copy the store to a "
                             "folder you can write and give that folder (--qdrant-path)")
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_file = lock(self.root / EDGE_LOCK, self._where)
        self._memory_backed = memory_backed(self.root)
        if not marker.is_file():
            try:
                self._write_file(marker, {"format": STORE_FORMAT, "engine": "qdrant-edge"}, "creating the store")
            except BaseException:
                self.close()
                raise
        else:
            try:
                found = read_marker(marker)
            except StoreDamagedError:
                self.close()
                raise
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
        return str(self._origin.absolute())

    # ------------------------------------------------------------------ collections
    def _folder(self, collection: str) -> Path:
        # The name itself where the filesystem takes it; long names (bytes, not characters, count) by their hash.
        safe = len(collection.encode("utf-8")) <= 120 and not collection.startswith(".")
        return self._collections / (collection if safe else "~" + hashlib.sha256(collection.encode()).hexdigest()[:40])

    def _record(self, collection: str) -> dict[str, Any]:
        record = read_record(self._folder(collection) / COLLECTION_FILE)
        if record is None or record["name"] != collection:  # a hashed name shared by two names: not this one
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
                              sparse=record["sparse"], layout=record.get("layout", LAYOUT_RAM),
                              dense_datatype=record.get("dense_datatype", "float32"))

    def list_collections(self) -> list[str]:
        names = []
        for folder in self._collections.iterdir():
            record = None if folder.name.startswith(".") else read_record(folder / COLLECTION_FILE)
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
                                                        if layout in COMPACT_LAYOUTS else "float32"},
                             f"creating collection {collection!r}")

    def update_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        with self._mutex:
            record = self._record(collection)
            self._write_file(self._folder(collection) / COLLECTION_FILE, {**record, "metadata": metadata},
                             f"writing collection {collection!r}")

    def delete_collection(self, collection: str) -> None:
        """Drop the collection and its files; a damaged one too (its record unreadable: a rebuild replaces it)."""
        with self._mutex:
            try:
                self._record(collection)
            except StoreDamagedError:
                if not self._folder(collection).is_dir():
                    raise
            try:
                self._close_shard(collection)
            except StoreDamagedError:  # closing a shard whose files are damaged: they are dropped next
                self._shards.pop(collection, None)
            folder = self._folder(collection)
            trash = self._collections / f".trash-{uuid.uuid4().hex}"
            os.replace(folder, trash)  # one atomic step: the collection is gone, its files go next
            fsync_dir(self._collections)
            shutil.rmtree(trash, ignore_errors=True)
            self._written.pop(collection, None)
            self._index_keys.pop(collection, None)
            self._layouts.pop(collection, None)
            self._unrecorded.discard(collection)

    def create_payload_index(self, collection: str, key: str, schema: str) -> None:
        E = self._edge
        if schema not in (KEYWORD, INTEGER):
            raise ValueError(f"a payload index is {KEYWORD!r} or {INTEGER!r}, got {schema!r}")
        with self._mutex:
            kind = payload_index_schema(E, schema, self._layout(collection))
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
                holes = file_usage(path, skip="wal")[1] if self._memory_backed else 0
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
                release_freed_heap()  # what loading the shard's term tables freed (glibc keeps it otherwise)
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
        if (what := opened_damage(count, record.get("points"), with_dense, self._segments(collection))) is not None:
            raise self._damaged(collection, what)
        self._check_vectors(collection, sample)

    def _check_vectors(self, collection: str, records) -> None:
        if (what := vector_damage(records, self._segments(collection))) is not None:
            raise self._damaged(collection, what)

    def _segments(self, collection: str) -> Path:
        return (self._folder(collection) / "shard" / "segments").absolute()

    def _damaged(self, collection: str, what: str) -> StoreDamagedError:
        damage = f"collection {collection!r} of the embedded store at {self._where} is damaged: {what}"
        return StoreDamagedError(f"{damage}; " + RECOVER.format(folder=self._folder(collection).absolute()), damage)

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
        ensure_space(self.root, self._where, need, doing)

    def _write_file(self, path: Path, data: dict[str, Any], doing: str) -> None:
        write_file(self._where, path, data, doing)

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
            raise self._damaged(collection, f"Qdrant Edge failed on its files ({one_line(e)})") from e

    def _engine_error(self, e: Exception, collection: str, done: str) -> StoreError | None:
        return engine_error(e, self._where, collection, done, lambda what: self._damaged(collection, what))

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
            if getattr(self, "_copy", None) is not None:
                shutil.rmtree(self._copy.parent, ignore_errors=True)
                self._copy = None
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



