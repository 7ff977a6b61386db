"""Points between recemb's terms and Qdrant Edge's: ``StoredPoint`` to the engine's ``Point`` and back, and the
booleans in payloads kept as marker strings (Edge matches a boolean filter value as an integer, so ``true`` and
``1`` would meet: ``encode`` turns booleans into markers on every write and filter value, ``decode`` turns them back
on every read). Pure: the engine's module is passed in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recemb_integrations.sparse import SparseVector
from recemb_integrations.stores.interface import StoredPoint

__all__ = ["FALSE_MARKER", "TRUE_MARKER", "decode", "encode", "from_edge", "group_points", "payload_bytes",
           "to_edge"]

# Booleans as stored in payloads; NUL-led so no real text collides with them.
TRUE_MARKER, FALSE_MARKER = "\x00recemb:true", "\x00recemb:false"


def to_edge(E: Any, points: Sequence[StoredPoint]) -> tuple[list[Any], int]:
    """The engine's points of these, and about the bytes they take (payloads serialised, vectors)."""
    edge_points = []
    size = 0
    for p in points:
        if not isinstance(p.vector, dict):
            raise ValueError("Qdrant Edge collections hold named vectors only (recemb 0.1's unnamed vector is "
                             "for qdrant-client stores)")
        vector = {name: E.SparseVector(indices=list(v.indices), values=list(v.values))
                  if isinstance(v, SparseVector) else list(v) for name, v in p.vector.items()}
        payload = encode(p.payload)
        size += payload_bytes(payload) + sum(8 * len(v.indices) if isinstance(v, SparseVector) else 4 * len(v)
                                             for v in p.vector.values())
        edge_points.append(E.Point(id=p.id, vector=vector, payload=payload))
    return edge_points, size


def from_edge(record) -> StoredPoint:
    vector = record.vector
    if isinstance(vector, dict):
        vector = {name: SparseVector(tuple(v.indices), tuple(v.values)) if hasattr(v, "indices") else list(v)
                  for name, v in vector.items()}
    return StoredPoint(id=str(record.id), payload=decode(record.payload or {}), vector=vector,
                       score=getattr(record, "score", None))


def encode(value):
    if value is True:
        return TRUE_MARKER
    if value is False:
        return FALSE_MARKER
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def decode(value):
    if isinstance(value, str):
        return True if value == TRUE_MARKER else False if value == FALSE_MARKER else value
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def payload_bytes(value) -> int:
    """About the bytes a payload takes serialised."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + 2
    if isinstance(value, dict):
        return sum(len(str(k)) + 3 + payload_bytes(v) for k, v in value.items()) + 2
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) + 1 for v in value) + 2
    return 8


def group_points(points: Sequence[StoredPoint], group_by: str, size: int) -> list[list[StoredPoint]]:
    """Points (best first) grouped by their payload's ``group_by`` value, each group its best ``size``, in the order
    of their best points; points without a plain value there are left out."""
    groups: dict[Any, list[StoredPoint]] = {}
    for p in points:  # best first, so each group's first point is its best
        key = p.payload.get(group_by)
        if key is None or isinstance(key, (dict, list)):
            continue
        members = groups.setdefault(key, [])
        if len(members) < size:
            members.append(p)
    return list(groups.values())
