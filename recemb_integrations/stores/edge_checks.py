"""The checks that keep a Qdrant Edge store from losing data: free space before every write and every opening (Edge
maps its files into memory, so a write into a full disk is a SIGBUS, not an error), folders that cannot be written,
damage found when a shard is opened or read, and the engine's own reports of these turned into one-line store
errors that name the way on. Pure apart from reading the filesystem's facts (free space, mounts, file sizes)."""

from __future__ import annotations

import errno
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

from recemb_integrations.stores.interface import DENSE_VECTOR, StoreError, StoreFullError

__all__ = ["INDEX_SPACE_PER_POINT", "OPTIMIZE_SPACE_FACTOR", "RECOVER", "SPACE_FLOOR", "UNIT_TOLERANCE",
           "VECTOR_SAMPLE", "WRITE_SPACE_FACTOR", "engine_error", "ensure_space", "file_usage", "free_space",
           "memory_backed", "not_writable", "one_line", "opened_damage", "size_text", "vector_damage"]

# Free space a step leaves untouched beyond what it writes itself, checked before it starts (Edge's memory maps make a
# full disk a SIGBUS): the fixed costs (a new collection's files, a vector chunk or WAL segment a write starts) with
# room to spare. The measurements behind these numbers: docs/benchmarks.md, "Free space Qdrant Edge needs".
SPACE_FLOOR = 64 << 20
WRITE_SPACE_FACTOR = 3  # an upsert's bytes go to the write-ahead log, the segment and its payload indexes
OPTIMIZE_SPACE_FACTOR = 2  # an optimize writes the segments it merges anew beside them (Edge checks too)
INDEX_SPACE_PER_POINT = 64  # what a new payload index takes per point
VECTOR_SAMPLE = 16  # points whose dense vectors are checked when a shard is opened
UNIT_TOLERANCE = 1e-3  # |norm² - 1| of a stored dense vector; float32 normalisation is within 1e-6
RECOVER = ("rebuild it from every folder it was synced from with `recemb sync PATHS --rebuild --allow-mass-delete` "
           "(what cannot be read is dropped; or delete its folder {folder} and sync it again), or restore the store "
           "from a backup")


def opened_damage(count: int, expected: Any, with_dense: int, segments: Path) -> str | None:
    """What an opened shard's counts say is lost (``expected``: the count recorded at the last close, or None;
    ``with_dense``: points that have the dense vector every point carries), or None."""
    if isinstance(expected, int) and count != expected:
        return (f"it holds {count:,} points where {expected:,} were written, so points were lost (a segment under "
                f"{segments} is missing or damaged)")
    if with_dense != count:
        return (f"{count - with_dense:,} of its {count:,} points have lost their dense vector (a file under "
                f"{segments} is damaged)")
    return None


def vector_damage(records, segments: Path) -> str | None:
    """Edge stores every dense vector normalised (cosine): the first of ``records`` whose vector is not unit length
    is damage, said here; None where all are."""
    for r in records:
        vector = r.vector.get(DENSE_VECTOR) if isinstance(r.vector, dict) else None
        if vector is None:
            continue
        square = math.fsum(x * x for x in vector)
        if not abs(square - 1.0) <= UNIT_TOLERANCE:  # also NaN
            what = "all zeros" if square == 0 else f"of length {math.sqrt(square):.4g}, not a unit vector"
            return f"point {r.id}'s dense vector is {what}, so the vector files under {segments} are damaged"
    return None


def engine_error(e: Exception, where: str, collection: str, done: str, damaged) -> StoreError | None:
    """The engine's report of a full disk, of files it may not write, or of damage, as a one-line store error
    (``damaged(what)``: the ``StoreDamagedError`` of this collection); None for any other error."""
    text = one_line(e)
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) or any(
            s in text for s in ("No space left on device", "os error 28", "Not enough space available",
                                "Disk quota exceeded")):
        return StoreFullError(f"no space left for the embedded store at {where}: collection "
                              f"{collection!r} could not be {done}, its disk is full ({text}); free some space "
                              "there and run the command again (nothing written before is lost)")
    if any(s in text for s in ("Read-only file system", "os error 30", "Permission denied", "os error 13")):
        return StoreError(f"the embedded store at {where} cannot be written here ({text}), and Qdrant "
                          "Edge writes to a collection's files when it opens them, even to search; copy the "
                          "store to a folder you can write and give that folder (--qdrant-path)")
    if type(e) is Exception and text.startswith(("Service runtime error", "Inconsistent storage")):
        detail = text.replace("Service runtime error: ", "")
        return damaged(f"Qdrant Edge cannot read it ({detail})")
    return None


def ensure_space(root: Path, where: str, need: int, doing: str) -> None:
    """A ``StoreFullError`` (nothing written) where the disk under ``root`` has less than ``need`` bytes free for
    ``doing``."""
    free = free_space(root)
    if free < need:
        raise StoreFullError(f"no space left for the embedded store at {where}: {size_text(free)} free on its disk, "
                             f"where {doing} wants {size_text(need)}; free some space there and run the command "
                             "again (nothing written before is lost)")


def not_writable(folder: Path) -> str | None:
    """Why ``folder`` cannot be written, or None."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "it is on a read-only filesystem"
    except (AttributeError, OSError):  # no statvfs (Windows)
        pass
    return None if os.access(folder, os.W_OK) else "you may not write to its folder"


def memory_backed(folder: Path) -> bool:
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


def file_usage(folder: Path, skip: str | None = None) -> tuple[int, int]:
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


def free_space(folder: Path) -> int:
    """Bytes this process may still write on the disk under ``folder``."""
    return shutil.disk_usage(folder).free


def size_text(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:1000] + ("..." if len(text) > 1000 else "")
