"""What a collection takes: bytes on disk and resident memory, by part of the store.

Resident memory comes in two kinds, and only one of them is a cost a machine must carry:

- **anonymous** memory (heap, the pinned int8 copy of the dense vectors) stays while the collection is open;
- **file-backed** pages of the store's mapped files are counted in a process's RSS, but they are page cache: the
  kernel drops them under memory pressure and reads them again when a search touches them.

Linux reports both (``/proc/self/status``, ``/proc/self/smaps``); elsewhere the measured parts are None.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Footprint",
    "PART_NAMES",
    "ProcessMemory",
    "disk_by_part",
    "process_memory",
    "resident_by_part",
    "store_part",
]

# A shard's parts as its folders name them, in words; parts not listed are shown by their folder name.
PART_NAMES = {
    "vector_storage-dense": "dense vectors",
    "vector_storage-dense (int8)": "dense vectors, int8 copy",
    "vector_index-dense": "dense graph (HNSW)",
    "vector_storage-bm25": "BM25 vectors",
    "vector_index-bm25": "BM25 index",
    "payload_storage": "payloads",
    "payload_index": "payload indexes",
    "id_tracker": "id tracker",
    "mutable_id_tracker": "id tracker",
    "wal": "write-ahead log",
}


@dataclass(frozen=True)
class ProcessMemory:
    """This process's resident memory in bytes: anonymous and file-backed (mapped files' pages)."""

    anonymous: int
    file_backed: int


@dataclass(frozen=True)
class Footprint:
    """What one collection takes. ``disk`` and ``resident`` are bytes by part (``store_part``); ``resident`` is the
    file-backed pages of the collection's files resident in this process now. Empty dicts where the store does not
    say (a server)."""

    collection: str
    kind: str
    layout: str | None
    points: int
    dense_datatype: str = "float32"
    disk: dict[str, int] = field(default_factory=dict)
    resident: dict[str, int] = field(default_factory=dict)

    @property
    def disk_total(self) -> int:
        return sum(self.disk.values())

    def as_dict(self) -> dict:
        return {"collection": self.collection, "kind": self.kind, "layout": self.layout, "points": self.points,
                "dense_datatype": self.dense_datatype, "disk_bytes": dict(self.disk),
                "resident_bytes": dict(self.resident)}


def process_memory() -> ProcessMemory | None:
    """This process's RssAnon and RssFile, or None where /proc does not report them."""
    values = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("RssAnon", "RssFile"):
                    values[key] = int(line.split()[1]) * 1024
    except OSError:
        return None
    if len(values) < 2:
        return None
    return ProcessMemory(anonymous=values["RssAnon"], file_backed=values["RssFile"])


def store_part(relative: str) -> str:
    """The part of a Qdrant shard a file belongs to, from its path inside the shard:
    ``segments/<uuid>/vector_storage-dense/matrix.dat`` -> ``vector_storage-dense``, ``wal/open-3`` -> ``wal``; the
    quantized copy of a vector apart from its originals (``vector_storage-dense (int8)``)."""
    relative = re.sub(r"^segments/[0-9a-f-]+/", "", relative)
    parts = relative.split("/")
    if parts[0].startswith("vector_storage") and len(parts) > 1 and parts[1].startswith("quantized"):
        return parts[0] + " (int8)"
    return parts[0].split(".")[0]


def disk_by_part(folder: str | os.PathLike) -> dict[str, int]:
    """Bytes allocated on disk (as ``du`` counts them) by part, for the files under ``folder``."""
    folder = Path(folder)
    sizes: dict[str, int] = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = Path(dirpath, name)
            try:
                used = path.stat().st_blocks * 512
            except OSError:  # removed while walking (an optimize replacing a segment)
                continue
            key = store_part(str(path.relative_to(folder)))
            sizes[key] = sizes.get(key, 0) + used
    return dict(sorted(sizes.items()))


def resident_by_part(folder: str | os.PathLike) -> dict[str, int] | None:
    """Resident bytes of this process's mappings of files under ``folder``, by part; None without
    /proc/self/smaps."""
    prefix = str(Path(folder).resolve()) + "/"
    parts: dict[str, int] = {}
    current = None
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                first = line.split(None, 1)[0]
                if "-" in first and not first.endswith(":"):  # a mapping's header line
                    fields = line.split(None, 5)
                    path = fields[5].strip() if len(fields) > 5 else ""
                    current = (store_part(path[len(prefix):].removesuffix(" (deleted)"))
                               if path.startswith(prefix) else None)
                elif current is not None and line.startswith("Rss:"):
                    parts[current] = parts.get(current, 0) + int(line.split()[1]) * 1024
    except OSError:
        return None
    return dict(sorted(parts.items()))
