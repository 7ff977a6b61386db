"""What a collection takes: bytes on disk and resident memory, by part of the store.

Three measures of a part's files, which differ on purpose:

- **on disk**: the blocks they take (``du``);
- **file size**: their length in whole pages (``du --apparent-size``, page by page). The engine makes its files
  larger than what they hold (32 MiB pages, 1 MiB flag files) and the pages never written take no disk, so a
  part's file size can be a hundred times its bytes on disk;
- **resident**: the pages of them this process maps that are in memory now. At most the file size, and it can
  exceed the bytes on disk: a never-written page that is read is a page of zeros in memory.

Resident memory comes in two kinds, and only one of them is a cost a machine must carry:

- **anonymous** memory (heap, the pinned int8 copy of the dense vectors) stays while the collection is open;
- **file-backed** pages of the store's mapped files are counted in a process's RSS, but they are page cache: the
  kernel drops them under memory pressure and reads them again when a search touches them.

Linux reports both (``/proc/self/status``, ``/proc/self/smaps``); elsewhere the measured parts are None.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Footprint",
    "PAGE",
    "PART_NAMES",
    "ProcessMemory",
    "disk_by_part",
    "file_sizes_by_part",
    "process_memory",
    "release_freed_heap",
    "resident_by_part",
    "store_part",
]

PAGE = mmap.PAGESIZE

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
    """What one collection takes, bytes by part (``store_part``): ``disk`` the blocks its files take, ``files`` their
    length in whole pages, ``resident`` the pages of them mapped in this process and in memory now (each at most its
    part's ``files``). Empty dicts where the store does not say (a server, local mode)."""

    collection: str
    kind: str
    layout: str | None
    points: int
    dense_datatype: str = "float32"
    disk: dict[str, int] = field(default_factory=dict)
    resident: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)

    @property
    def disk_total(self) -> int:
        return sum(self.disk.values())

    @property
    def files_total(self) -> int:
        return sum(self.files.values())

    @property
    def resident_total(self) -> int:
        return sum(self.resident.values())

    def as_dict(self) -> dict:
        return {"collection": self.collection, "kind": self.kind, "layout": self.layout, "points": self.points,
                "dense_datatype": self.dense_datatype, "disk_bytes": dict(self.disk),
                "file_bytes": dict(self.files), "resident_bytes": dict(self.resident),
                "disk_total_bytes": self.disk_total, "file_total_bytes": self.files_total,
                "resident_total_bytes": self.resident_total}


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


def _by_part(folder: str | os.PathLike, size) -> dict[str, int]:
    folder = Path(folder)
    sizes: dict[str, int] = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = Path(dirpath, name)
            try:
                used = size(path.stat())
            except OSError:  # removed while walking (an optimize replacing a segment)
                continue
            key = store_part(str(path.relative_to(folder)))
            sizes[key] = sizes.get(key, 0) + used
    return dict(sorted(sizes.items()))


def _pages(length: int) -> int:
    return -(-length // PAGE) * PAGE


def disk_by_part(folder: str | os.PathLike) -> dict[str, int]:
    """Bytes allocated on disk (as ``du`` counts them) by part, for the files under ``folder``."""
    return _by_part(folder, lambda st: st.st_blocks * 512)


def file_sizes_by_part(folder: str | os.PathLike) -> dict[str, int]:
    """The length of the files under ``folder`` by part, each rounded up to whole pages: the most of them that can
    be resident (a file's last page is resident whole)."""
    return _by_part(folder, lambda st: _pages(st.st_size))


@dataclass
class _Mapping:
    start: int
    end: int
    offset: int  # in the file, bytes
    file_pages: int = 0  # resident bytes that are the file's pages (Rss less the copied-on-write Anonymous)


def _mappings(prefix: str) -> dict[str, list[_Mapping]]:
    """This process's mappings of files whose path starts with ``prefix``, by path."""
    found: dict[str, list[_Mapping]] = {}
    current = None
    rss = anonymous = 0

    def close() -> None:
        if current is not None:
            current.file_pages = max(0, rss - anonymous)

    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                close()
                fields = line.split(None, 5)
                path = fields[5].rstrip("\n") if len(fields) > 5 else ""
                current, rss, anonymous = None, 0, 0
                if path.startswith(prefix):
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    current = _Mapping(start, end, int(fields[2], 16))
                    found.setdefault(path, []).append(current)
            elif current is not None:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Anonymous:"):
                    anonymous = int(line.split()[1]) * 1024
    close()
    return found


_PRESENT, _FILE_PAGE = 1 << 63, 1 << 61  # /proc/self/pagemap: a page in memory; one of a file (not copied)


def _distinct_file_pages(maps: list[_Mapping]) -> int | None:
    """Bytes of a file's distinct pages resident through ``maps`` (one file mapped more than once, as the engine
    maps a page file both read-only and writable), from /proc/self/pagemap; None where it cannot be read."""
    pages: set[int] = set()
    try:
        with open("/proc/self/pagemap", "rb") as f:
            for m in maps:
                if not m.file_pages:
                    continue
                f.seek(m.start // PAGE * 8)
                entries = array("Q")
                entries.frombytes(f.read((m.end - m.start) // PAGE * 8))
                first = m.offset // PAGE
                pages.update(first + i for i, e in enumerate(entries) if e & _PRESENT and e & _FILE_PAGE)
    except (OSError, ValueError):
        return None
    return len(pages) * PAGE


def resident_by_part(folder: str | os.PathLike) -> dict[str, int] | None:
    """Bytes of the files under ``folder`` resident in this process's mappings of them, by part: each page of a
    file once, however many times it is mapped, and only the file's own pages (not private copies written to, which
    are anonymous memory); None without /proc/self/smaps."""
    prefix = str(Path(folder).resolve()) + "/"
    try:
        by_file = _mappings(prefix)
    except OSError:
        return None
    parts: dict[str, int] = {}
    for path, maps in by_file.items():
        resident = sum(m.file_pages for m in maps)
        if sum(1 for m in maps if m.file_pages) > 1:  # the same page mapped twice is one page of memory
            distinct = _distinct_file_pages(maps)
            if distinct is None:  # without pagemap, at least never more than the file holds
                try:
                    distinct = min(resident, _pages(os.stat(path).st_size))
                except OSError:
                    distinct = resident
            resident = distinct
        key = store_part(path[len(prefix):].removesuffix(" (deleted)"))
        parts[key] = parts.get(key, 0) + resident
    return dict(sorted(parts.items()))


def release_freed_heap() -> bool:
    """Hand the heap memory the process freed back to the system (glibc's ``malloc_trim(0)``); whether it could.

    Qdrant Edge loads a shard's BM25 term tables through buffers it frees again, and glibc keeps freed memory for
    reuse: called once a shard is open, this returns it (measured in docs/benchmarks.md). Elsewhere than glibc it
    does nothing and says so."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` from the symbols the process already has loaded (no library search), or None."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS, Windows): nothing to hand back this way
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim
