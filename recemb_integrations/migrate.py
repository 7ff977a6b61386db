"""Copy a recemb collection from one store to another, metadata included, resumably and verified.

Moving a collection between stores (qdrant-client's local mode, Qdrant Edge, a Qdrant server) does not need the
documents or the model: the points are read from the source and written to the target as they are (ids, payloads,
dense and BM25 vectors), so the copy searches exactly like the original and later syncs carry on incrementally.

Why not qdrant-client's ``QdrantClient.migrate()``: it drops the collection's metadata, and recemb's record there
(under "recemb": model, fingerprint, passage and BM25 settings) is what lets a later sync or search check that it
uses the same model. Nor does it speak to Qdrant Edge, resume, or check what it wrote.

How it goes:

1. Checks before any write: the source collection exists, is recemb's, and no rebuild or migration of it is under
   way; the target collection does not exist, or is an unfinished copy of the same source.
2. The target is created with the source's vector layout, recemb's payload indexes, and the source's metadata plus a
   mark, ``recemb["migration"] = {"state": "copying", "source": ..., "points": ...}``: while the mark is there, the
   collection is not complete, and ``QdrantSync`` refuses to use it.
3. The source is read in pages of ``batch_size`` points and each page upserted into the target (same ids: writing a
   page twice is harmless). Every ``CHECKPOINT_PAGES`` pages the mark records where the copy stands, so a rerun may
   skip what was copied; nothing depends on it, since verification checks every point.
4. Verification (``verify=True``): the target holds as many points as the source, and a digest over every point is
   the same on both sides (``collection_digest``). A target that rounds dense vectors differently (qdrant-client's
   local mode normalises every cosine vector again, in float64, changing the last bit of some float32 values) makes
   the digests differ, and so does a compact target, which keeps its dense vectors as float16: the points are then
   compared one by one, dense vectors within ``DENSE_TOLERANCE`` of the source's values as the target keeps them
   (as given, normalised again, or rounded to float16), and the report counts those as ``rounded``. Any other
   difference is a ``MigrationError`` naming it; the mark stays, and the next run copies everything again.
5. The mark is removed (the metadata becomes the source's): the copy is complete. An embedded Qdrant Edge target
   builds its search index first.

Killed at any point, the migration is finished by running it again with the same arguments. The source is only
read; it should not be synced while it is copied (a change is caught by the verification, and a rerun then copies
the collection as it is).

    from recemb_integrations.stores import open_store
    from recemb_integrations.migrate import migrate_collection

    with open_store(path="./recemb-store") as source, open_store(url="http://localhost:6333") as target:
        report = migrate_collection(source, target, "docs")
        print(report.copied, "points copied, digest", report.target_digest)
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from recemb_integrations.qdrant.collection import index_writes
from recemb_integrations.qdrant.record import META_KEY, REBUILD_SUFFIX, check_collection_name
from recemb_integrations.qdrant.writes import (
    CreateCollection,
    DeletePoints,
    Optimize,
    UpdateRecord,
    Upsert,
    apply,
)
from recemb_integrations.sparse import SparseVector
from recemb_integrations.stores import Store, StoredPoint, as_store

MIGRATION_KEY = "migration"  # inside the target's recemb metadata while a copy is under way
CHECKPOINT_PAGES = 64  # pages copied between two records of the copy's position in the mark
DENSE_TOLERANCE = 1e-6  # largest difference per dense value taken for a store's float rounding, not a change
_SHOWN_DIFFERENCES = 5  # differing points named in a verification error
_DIGEST_MODULUS = 1 << 256


class MigrationError(ValueError):
    """The collection cannot be migrated as asked (nothing was written), or the copy does not verify."""


@dataclass
class MigrationReport:
    collection: str
    target_collection: str
    points: int  # points in the source
    copied: int  # points written to the target by this run (a resumed run may skip what an earlier one wrote)
    resumed: bool  # the target held an unfinished copy of the same source
    seconds: float
    source_digest: str  # collection_digest of each side; "" when not verified
    target_digest: str
    rounded: int = 0  # points whose dense vector the target stored with float rounding differences (local mode)


def migrate_collection(source: Store, target: Store, collection: str, target_collection: str | None = None,
                       batch_size: int = 256, show_progress_bar: bool | None = None,
                       verify: bool = True) -> MigrationReport:
    """Copy recemb's ``collection`` from ``source`` to ``target`` (as ``target_collection``, by default the same
    name): points, payload indexes and metadata; resumable and verified (see the module docstring). ``source`` and
    ``target``: ``Store``s (or ``QdrantClient``s). ``show_progress_bar`` None: shown for more than one page."""
    start = time.perf_counter()
    source, target = as_store(source), as_store(target)
    target_collection = collection if target_collection is None else target_collection
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    try:
        check_collection_name(target_collection)
    except ValueError as e:
        raise MigrationError(str(e)) from None
    if target_collection.endswith(REBUILD_SUFFIX):
        raise MigrationError(f"collection names ending in {REBUILD_SUFFIX!r} are kept for rebuilds; choose another "
                             "target name")
    source_name = _source_name(source, collection)
    if collection == target_collection and (
            source is target or (source.kind == target.kind == "server" and source_name == _source_name(
                target, target_collection))):
        raise MigrationError(f"source and target are the same collection ({source_name}); give another target store "
                             "or another target collection name")

    # ---- the source: recemb's, complete, with named vectors
    if not source.collection_exists(collection):
        raise MigrationError(f"collection {collection!r} does not exist in {source.location}")
    info = source.collection_info(collection)
    recorded = (info.metadata or {}).get(META_KEY)
    if not isinstance(recorded, dict):
        raise MigrationError(f"collection {collection!r} in {source.location} was not created by recemb (no "
                             f"'{META_KEY}' metadata); recemb migrates its own collections only")
    if recorded.get("rebuild"):
        raise MigrationError(f"collection {collection!r} is in the middle of a rebuild (or one was interrupted); "
                             "finish it first by running the sync again, then migrate")
    if recorded.get(MIGRATION_KEY):
        raise MigrationError(f"collection {collection!r} is itself an unfinished migration's copy (from "
                             f"{recorded[MIGRATION_KEY].get('source')}); run that migration again to complete it "
                             "first")
    if not info.named or info.dense_size is None:
        raise MigrationError(f"collection {collection!r} was built by recemb 0.1 (one unnamed dense vector), which "
                             "other stores do not hold; rebuild it first with `recemb sync --rebuild PATHS`, then "
                             "migrate it")
    points = source.count(collection)

    # ---- the target: new, or an unfinished copy of the same source
    mark = {"state": "copying", "source": source_name, "points": points}
    checkpoint = None
    resumed = target.collection_exists(target_collection)
    if resumed:
        target_info = target.collection_info(target_collection)
        found = ((target_info.metadata or {}).get(META_KEY) or {})
        found = found.get(MIGRATION_KEY) if isinstance(found, dict) else None
        if not isinstance(found, dict):
            raise MigrationError(f"collection {target_collection!r} already exists in {target.location}; nothing was "
                                 "written. Pick another target name (--to-collection, target_collection=) or delete "
                                 "that collection first")
        if found.get("source") != source_name:
            raise MigrationError(f"collection {target_collection!r} in {target.location} is an unfinished copy of "
                                 f"{found.get('source')}, not of {source_name}; run that migration again to complete "
                                 "it, or delete the collection")
        if (target_info.dense_size, target_info.sparse, target_info.named) != (info.dense_size, info.sparse, True):
            raise MigrationError(f"the unfinished copy {target_collection!r} has other vectors than {source_name} now "
                                 f"(dense size {target_info.dense_size} vs {info.dense_size}, BM25 "
                                 f"{target_info.sparse} vs {info.sparse}); delete it and migrate again")
        if found.get("points") == points and isinstance(found.get("checkpoint"), dict):
            checkpoint = found["checkpoint"]  # the source looks unchanged: skip what was copied
            mark["checkpoint"] = checkpoint
        apply(target, target_collection, UpdateRecord(_marked(info.metadata, mark)))
    else:
        threshold = target.threshold_points
        if threshold is not None and points > threshold:
            warnings.warn(f"{target.location} is a {target.kind} store, made for collections of up to some "
                          f"{threshold:,} points; {collection!r} has {points:,}", stacklevel=2)
        apply(target, target_collection, CreateCollection(info.dense_size, info.sparse, _marked(info.metadata, mark)))
    for write in index_writes():
        apply(target, target_collection, write)

    # ---- copy, then tidy what an earlier run copied of points the source no longer has
    show = show_progress_bar if show_progress_bar is not None else points > batch_size
    copied = _copy(source, target, collection, target_collection, info.metadata, mark, checkpoint, batch_size, show)
    if target.count(target_collection) != source.count(collection):
        _prune(source, target, collection, target_collection, batch_size)

    # Qdrant Edge builds its HNSW index only when asked
    apply(target, target_collection, Optimize(force=target.kind == "edge", show_progress_bar=show_progress_bar))

    source_digest = target_digest = ""
    rounded = 0
    if verify:
        source_digest, target_digest, rounded = _verify(source, target, collection, target_collection, info.metadata,
                                                        mark, batch_size, show)
    if source.collection_info(collection).metadata != info.metadata:
        _fail(target, target_collection, info.metadata, mark,
              f"collection {collection!r} changed while it was copied (its metadata differs now); run the migration "
              "again, with nothing syncing the source meanwhile")
    apply(target, target_collection, UpdateRecord(info.metadata))  # the mark goes: the copy is complete
    return MigrationReport(collection=collection, target_collection=target_collection, points=points, copied=copied,
                           resumed=resumed, seconds=time.perf_counter() - start, source_digest=source_digest,
                           target_digest=target_digest, rounded=rounded)


# ---------------------------------------------------------------------- digests
def point_digest(point: StoredPoint) -> bytes:
    """sha256 over a point's id, payload (JSON with sorted keys) and vectors, each field length-prefixed: dense
    values as little-endian float32, a sparse vector's indices (ascending) as little-endian uint32 and its values
    as float32, vector names in sorted order; a missing vector contributes nothing."""
    h = hashlib.sha256()

    def field(tag: bytes, data: bytes) -> None:
        h.update(tag + len(data).to_bytes(8, "little") + data)

    field(b"id", str(point.id).encode("utf-8"))
    field(b"payload", _canonical_json(point.payload))
    vectors = point.vector if isinstance(point.vector, dict) else {"": point.vector}  # "": recemb 0.1's unnamed one
    for name in sorted(vectors):
        vector = vectors[name]
        if vector is None:
            continue
        field(b"name", name.encode("utf-8"))
        if isinstance(vector, SparseVector):
            indices, values = _sparse_arrays(vector)
            field(b"sparse.indices", indices.tobytes())
            field(b"sparse.values", values.tobytes())
        else:
            field(b"dense", _dense_array(vector).tobytes())
    return h.digest()


def collection_digest(store: Store, collection: str, batch_size: int = 256, bar=None) -> tuple[int, str]:
    """(points, digest) of a collection: the digest is the sum of every ``point_digest`` (as a 256-bit integer)
    modulo 2**256, in hexadecimal. It does not depend on the order of the points: two collections holding the same
    points have the same digest whichever store holds them."""
    store = as_store(store)
    total = count = 0
    for page in _pages(store, collection, batch_size):
        for point in page:
            total = (total + int.from_bytes(point_digest(point), "big")) % _DIGEST_MODULUS
        count += len(page)
        if bar is not None:
            bar.update(len(page))
    return count, f"{total:064x}"


# ---------------------------------------------------------------------- steps
def _copy(source: Store, target: Store, collection: str, target_collection: str, metadata: dict[str, Any],
          mark: dict[str, Any], checkpoint: dict[str, Any] | None, batch_size: int, show: bool) -> int:
    from tqdm.auto import tqdm

    offset = checkpoint.get("offset") if checkpoint else None
    done = int(checkpoint.get("done") or 0) if checkpoint else 0
    copied = pages = 0
    with tqdm(total=mark["points"], initial=min(done, mark["points"]), disable=not show, unit="point",
              desc=f"Migrating {collection}") as bar:
        while True:
            page, next_offset = source.scroll(collection, batch_size, offset=offset, with_payload=True,
                                              with_vectors=True)
            if page:
                apply(target, target_collection, Upsert(tuple(page)))
                copied += len(page)
                done += len(page)
                bar.update(len(page))
            if next_offset is None:
                return copied
            offset = next_offset
            pages += 1
            position = _json_offset(offset)
            if pages % CHECKPOINT_PAGES == 0 and position is not None:  # the pages before it are written (durably)
                mark["checkpoint"] = {"offset": position, "done": done}
                apply(target, target_collection, UpdateRecord(_marked(metadata, mark)))


def _prune(source: Store, target: Store, collection: str, target_collection: str, batch_size: int) -> None:
    """Delete the target's points the source does not have (copied by an earlier run, deleted from the source since)."""
    wanted = {p.id for page in _pages(source, collection, batch_size, with_payload=False, with_vectors=False)
              for p in page}
    extra = [p.id for page in _pages(target, target_collection, batch_size, with_payload=False, with_vectors=False)
             for p in page if p.id not in wanted]
    for i in range(0, len(extra), batch_size):
        apply(target, target_collection, DeletePoints(tuple(extra[i:i + batch_size])))


def _verify(source: Store, target: Store, collection: str, target_collection: str, metadata: dict[str, Any],
            mark: dict[str, Any], batch_size: int, show: bool) -> tuple[str, str, int]:
    from tqdm.auto import tqdm

    source_count, target_count = source.count(collection), target.count(target_collection)
    if source_count != target_count:
        _fail(target, target_collection, metadata, mark,
              f"verification failed: the source {collection!r} holds {source_count} points, the target "
              f"{target_collection!r} {target_count}")
    with tqdm(total=source_count + target_count, disable=not show, unit="point",
              desc=f"Verifying {target_collection}") as bar:
        source_count, source_digest = collection_digest(source, collection, batch_size, bar)
        target_count, target_digest = collection_digest(target, target_collection, batch_size, bar)
    if source_count == target_count and source_digest == target_digest:
        return source_digest, target_digest, 0
    rounded, differences = 0, []
    if source_count == target_count:  # rounding by the target's store, or real differences: compare point by point
        float16 = target.collection_info(target_collection).dense_datatype == "float16"
        rounded, differences = _compare(source, target, collection, target_collection, batch_size, float16)
        if not differences:
            return source_digest, target_digest, rounded
    shown = "; ".join(differences[:_SHOWN_DIFFERENCES]) + (
        f"; and {len(differences) - _SHOWN_DIFFERENCES} more" if len(differences) > _SHOWN_DIFFERENCES else "")
    _fail(target, target_collection, metadata, mark,
          f"verification failed: the source {collection!r} holds {source_count} points (digest {source_digest}), the "
          f"target {target_collection!r} {target_count} (digest {target_digest})" + (f": {shown}" if shown else ""))


def _compare(source: Store, target: Store, collection: str, target_collection: str,
             batch_size: int, float16: bool = False) -> tuple[int, list[str]]:
    """Points whose dense vectors differ by rounding only, and a description of every other difference.
    ``float16``: the target keeps its dense vectors as float16 (a compact collection), so each of its values is
    the source's rounded to float16."""
    rounded, differences = 0, []
    for page in _pages(source, collection, batch_size):
        found = {p.id: p for p in target.retrieve(target_collection, [p.id for p in page], with_vectors=True)}
        for point in page:
            other = found.get(point.id)
            if other is None:
                differences.append(f"point {point.id} is missing from the target")
                continue
            problem = _difference(point, other, float16)
            if problem == "rounded":
                rounded += 1
            elif problem:
                differences.append(f"point {point.id}: {problem}")
    return rounded, differences


def _difference(a: StoredPoint, b: StoredPoint, float16: bool = False) -> str | None:
    """None if equal, "rounded" if only dense values differ within DENSE_TOLERANCE (of the source's values rounded
    to float16, where ``float16``), else what differs."""
    if _canonical_json(a.payload) != _canonical_json(b.payload):
        return "payload differs"
    va = a.vector if isinstance(a.vector, dict) else {"": a.vector}
    vb = b.vector if isinstance(b.vector, dict) else {"": b.vector}
    va = {k: v for k, v in va.items() if v is not None}
    vb = {k: v for k, v in vb.items() if v is not None}
    if sorted(va) != sorted(vb):
        return f"vectors {sorted(va)} vs {sorted(vb)}"
    rounded = False
    for name in sorted(va):
        x, y = va[name], vb[name]
        if isinstance(x, SparseVector) != isinstance(y, SparseVector):
            return f"vector {name!r} is sparse on one side only"
        if isinstance(x, SparseVector):
            (xi, xv), (yi, yv) = _sparse_arrays(x), _sparse_arrays(y)
            if not (np.array_equal(xi, yi) and np.array_equal(xv, yv)):
                return f"sparse vector {name!r} differs"
            continue
        x, y = _dense_array(x), _dense_array(y)
        if x.shape != y.shape:
            return f"dense vector {name!r} has {x.size} values vs {y.size}"
        if x.tobytes() != y.tobytes():
            gap = min(float(np.max(np.abs(stored - y.astype(np.float64)))) for stored in _as_stored(x, float16))
            if not gap <= DENSE_TOLERANCE:
                return f"dense vector {name!r} differs by up to {gap:.3g}"
            rounded = True
    return "rounded" if rounded else None


def _as_stored(x: np.ndarray, float16: bool) -> list[np.ndarray]:
    """The forms a store may keep a (cosine) dense vector in, in float64: as given, normalised again (local mode
    does so in float64), and rounded to float16 (a compact collection, ``float16``)."""
    given = x.astype(np.float64)
    norm = float(np.linalg.norm(given))
    forms = [given] + ([given / norm] if norm > 0 else [])
    if float16:
        forms.append(x.astype(np.float16).astype(np.float64))
    return forms


def _fail(target: Store, target_collection: str, metadata: dict[str, Any], mark: dict[str, Any], message: str):
    """Keep the mark, without a checkpoint (the next run copies everything again), and raise."""
    mark.pop("checkpoint", None)
    apply(target, target_collection, UpdateRecord(_marked(metadata, mark)))
    raise MigrationError(message + ". The target keeps its migration mark: run the migration again to copy it anew")


# ---------------------------------------------------------------------- helpers
def _pages(store: Store, collection: str, batch_size: int, with_payload: bool = True, with_vectors: bool = True):
    offset = None
    while True:
        page, offset = store.scroll(collection, batch_size, offset=offset, with_payload=with_payload,
                                    with_vectors=with_vectors)
        if page:
            yield page
        if offset is None:
            return


def _marked(metadata: dict[str, Any], mark: dict[str, Any]) -> dict[str, Any]:
    return {**metadata, META_KEY: {**metadata[META_KEY], MIGRATION_KEY: dict(mark)}}


def _source_name(store: Store, collection: str) -> str:
    """The store and collection, as recorded in the mark: a folder by its real path (however it was spelt)."""
    location = str(store.location)
    if store.kind in ("edge", "local") and os.path.isdir(location):
        location = os.path.realpath(location)
    return f"{location}/{collection}"


def _json_offset(offset: Any) -> Any:
    """A scroll offset as JSON (a point id), or None for one that cannot be recorded."""
    if isinstance(offset, uuid.UUID):
        return str(offset)
    if isinstance(offset, str) or (isinstance(offset, int) and not isinstance(offset, bool)):
        return offset
    return None


def _canonical_json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload or {}, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _dense_array(vector) -> np.ndarray:
    return np.asarray(vector, dtype="<f4")


def _sparse_arrays(vector: SparseVector) -> tuple[np.ndarray, np.ndarray]:
    indices = np.asarray(vector.indices, dtype="<u4")
    values = np.asarray(vector.values, dtype="<f4")
    order = np.argsort(indices, kind="stable")
    return indices[order], values[order]


__all__ = ["CHECKPOINT_PAGES", "DENSE_TOLERANCE", "MIGRATION_KEY", "MigrationError", "MigrationReport",
           "collection_digest", "migrate_collection", "point_digest"]
