"""The Qdrant Edge store: Qdrant's engine in-process (``qdrant-edge-py``), one Edge shard per collection.

``EdgeStore`` is this module's points and searches on ``edge_collections.EdgeCollections`` (the folder, its lock,
each collection's record and shard). Beside them, one module a job: ``edge_layouts`` (each layout's configuration
and the engine's tuning, the query built per layout), ``edge_checks`` (free space, read-only folders, damage, the
engine's errors as store errors), ``edge_files`` (the marker, the records, the lock, atomic writes),
``edge_filters`` (filters in Edge's types) and ``edge_points`` (points in Edge's types, booleans as markers).

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

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from recemb_integrations.stores.edge_checks import (
    INDEX_SPACE_PER_POINT,
    OPTIMIZE_SPACE_FACTOR,
    SPACE_FLOOR,
    VECTOR_SAMPLE,
    WRITE_SPACE_FACTOR,
    file_usage,
)
from recemb_integrations.stores.edge_collections import EdgeCollections
from recemb_integrations.stores.edge_files import (
    COLLECTION_FILE,
    EDGE_MARKER,
    STORE_FORMAT,
)
from recemb_integrations.stores.edge_filters import filter_keys, translate_filter
from recemb_integrations.stores.edge_layouts import (
    COMPACT_HNSW_EF,
    COMPACT_SEGMENTS,
    GROUP_FETCH_MIN,
    GROUP_FUSE_ALL_BELOW,
    HNSW_EF,
    OPTIMIZE_AFTER_POINTS,
    RESCORE_OVERSAMPLING,
    SEAL_AFTER_POINTS,
    edge_config,
    edge_query,
    release_freed_memory,
)
from recemb_integrations.stores.edge_points import encode, from_edge, group_points, payload_bytes, to_edge
from recemb_integrations.stores.footprint import Footprint, disk_by_part, file_sizes_by_part, resident_by_part
from recemb_integrations.stores.interface import (
    COMPACT_LAYOUTS,
    LAYOUT_LEAN,
    SearchRequest,
    StoredPoint,
)

__all__ = ["COLLECTION_FILE", "COMPACT_HNSW_EF", "COMPACT_SEGMENTS", "EDGE_MARKER", "EdgeStore", "GROUP_FETCH_MIN",
           "GROUP_FUSE_ALL_BELOW", "HNSW_EF", "INDEX_SPACE_PER_POINT", "OPTIMIZE_AFTER_POINTS",
           "OPTIMIZE_SPACE_FACTOR", "RESCORE_OVERSAMPLING", "SEAL_AFTER_POINTS", "SPACE_FLOOR", "STORE_FORMAT",
           "WRITE_SPACE_FACTOR", "edge_config"]


class EdgeStore(EdgeCollections):
    """A folder of Qdrant Edge collections, opened by one process at a time (``EdgeCollections``), with their points
    and searches.

    Raises ``StoreError`` for a folder that is not a store, in use or read-only, ``StoreDamagedError`` for damaged
    files (when opened, or later when a collection's files are read) and ``StoreFullError`` when the disk has too
    little free space for a step (checked before it; nothing written before is lost)."""

    kind = "edge"

    # ------------------------------------------------------------------ points
    def upsert(self, collection: str, points: Sequence[StoredPoint]) -> None:
        E = self._edge
        edge_points, size = to_edge(E, points)
        if edge_points:
            with self._mutex:
                self._update(collection, E.UpdateOperation.upsert_points(edge_points),
                             need=WRITE_SPACE_FACTOR * size)
                self._written[collection] = self._written.get(collection, 0) + len(edge_points)
                self._unsealed[collection] = self._unsealed.get(collection, 0) + len(edge_points)
                if self._unsealed[collection] >= SEAL_AFTER_POINTS and self._layout(collection) in COMPACT_LAYOUTS:
                    self._seal(collection)

    def delete(self, collection: str, filter: Any) -> None:
        self._update(collection, self._edge.UpdateOperation.delete_points_by_filter(self._filter(filter)))

    def set_payload(self, collection: str, payload: dict[str, Any], ids: Sequence[str] | None = None,
                    filter: Any = None) -> None:
        op = self._edge.UpdateOperation
        encoded = encode(payload)
        self._update(collection, op.set_payload(list(ids), encoded) if ids is not None
                     else op.set_payload_by_filter(self._filter(filter), encoded),
                     need=WRITE_SPACE_FACTOR * payload_bytes(encoded) * (len(ids) if ids is not None else 1))

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
        return [from_edge(r) for r in records], next_offset

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
        return [from_edge(r) for r in records]

    # ------------------------------------------------------------------ search
    def query(self, collection: str, request: SearchRequest) -> list[StoredPoint]:
        edge_filter = self._filter(request.filter)
        # Filtered HNSW misses matches that sit behind filtered-out neighbours unless the field has a payload index
        # (its HNSW then links within each value); ACORN explores past them where none has.
        acorn = edge_filter is not None and not filter_keys(request.filter) <= self._indexed(collection)
        query, dense_name = edge_query(self._edge, request, edge_filter, acorn,
                                       self._layout(collection) in COMPACT_LAYOUTS)
        with self._mutex:
            shard = self._shard(collection)
            with self._engine_errors(collection, "searched"):
                points = shard.query(query)
                # The best hits' dense vectors are checked (zeroed vector files would score them 0.0): a few, since
                # a grouped search fetches thousands of candidates and their vectors would cost more than the search.
                checked = shard.retrieve([p.id for p in points[:VECTOR_SAMPLE]], with_payload=False,
                                         with_vector=[dense_name]) if dense_name is not None and points else []
        self._check_vectors(collection, checked)
        return [from_edge(p) for p in points]

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
            groups = group_points(points, group_by, group_size)
            if len(groups) >= request.limit or len(points) < fetch:
                return groups[: request.limit]
            fetch *= 4

    def optimize(self, collection: str, show_progress_bar: bool | None = None, force: bool = False) -> bool:
        """Build the HNSW index (and merge segments) once ``optimize_after_points`` points were written since the
        store was opened, or when ``force``d; a lean collection indexes what was written since its last seal in any
        case. Blocking; a progress bar shows that it is working."""
        if not force and self._written.get(collection, 0) < self.optimize_after_points:
            if self._unsealed.get(collection, 0) and self._layout(collection) == LAYOUT_LEAN:
                # what was written since the last seal would stay an appendable segment, its BM25 index rebuilt in
                # memory at every opening: a lean collection is indexed at the end of every write
                self._seal(collection)
                return True
            return False
        from tqdm.auto import tqdm

        done = threading.Event()
        with self._mutex:
            shard = self._shard(collection)
            taken = file_usage(self._folder(collection) / "shard", skip="wal")[0]
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
            if self._layout(collection) in COMPACT_LAYOUTS:
                self._reopen(collection)
            release_freed_memory()
        return True

    def _seal(self, collection: str) -> None:
        """Index what was written since the last seal (a compact collection's writes, as they go) and reopen."""
        with self._mutex:
            shard = self._shard(collection)
            taken = file_usage(self._folder(collection) / "shard", skip="wal")[0]
            self._ensure_space(SPACE_FLOOR + OPTIMIZE_SPACE_FACTOR * taken, f"indexing collection {collection!r}")
            with self._engine_errors(collection, "indexed"):
                shard.optimize()
            self._reopen(collection)
            release_freed_memory()

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
        return replace(found, disk=disk_by_part(shard), files=file_sizes_by_part(shard),
                       resident=resident_by_part(shard) or {})

    def _filter(self, f):
        return None if f is None else translate_filter(self._edge, f)


def _tick(bar, done: threading.Event) -> None:
    while not done.wait(0.5):
        bar.refresh()
