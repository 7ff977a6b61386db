"""A Qdrant Edge store folder's own files: the marker that makes a folder a recemb store, each collection's record
(``collection.json``: its name, vector layout, recemb metadata and the point count at the last close), the lock that
lets one process at a time open the store, and the atomic, durable replacement every one of them is written with."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from recemb_integrations.stores.edge_checks import RECOVER, SPACE_FLOOR, file_usage, free_space, one_line, size_text
from recemb_integrations.stores.interface import StoreDamagedError, StoreError, StoreFullError

__all__ = ["COLLECTION_FILE", "EDGE_LOCK", "EDGE_MARKER", "STORE_FORMAT", "copy_store", "fsync_dir",
           "holds_other_files", "lock", "read_marker", "read_record", "write_file", "write_json"]

EDGE_MARKER = "recemb-edge.json"
STORE_FORMAT = 1
COLLECTION_FILE = "collection.json"
EDGE_LOCK = ".lock"


def holds_other_files(folder: Path) -> bool:
    """Whether a folder with no store marker holds anything but a store's lock: the process creating a store holds
    the lock before it writes the marker (another process is then refused by the lock, as in use), and one killed
    in between leaves the lock alone, in a folder that is still new."""
    return any(entry.name != EDGE_LOCK for entry in folder.iterdir())


def read_marker(marker: Path) -> int:
    """The store format the marker records; a ``StoreDamagedError`` with the way to mend it if it cannot be read."""
    try:
        found = json.loads(marker.read_text(encoding="utf-8"))
        version = found.get("format", 0) if isinstance(found, dict) else None
        if not isinstance(version, int):
            raise ValueError(f"its format is {version!r}, not a number")
    except (ValueError, UnicodeDecodeError) as e:
        raise StoreDamagedError(
            f"{marker.absolute()} is damaged ({one_line(e)}); it marks the folder as a recemb store: write "
            f'{{"format": {STORE_FORMAT}, "engine": "qdrant-edge"}} into it, or restore the store from a '
            "backup") from None
    return version


def read_record(path: Path) -> dict[str, Any] | None:
    """A collection's record; None if it has none (not a collection, or one whose creation stopped)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict) or not isinstance(record.get("name"), str) \
                or not isinstance(record.get("dense_size"), int) or not isinstance(record.get("sparse"), bool):
            raise ValueError("it lacks the collection's name or vector layout")
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError) as e:
        damage = f"{path.absolute()} is damaged ({one_line(e)})"
        raise StoreDamagedError(f"{damage}; " + RECOVER.format(folder=path.parent.absolute()), damage) from None
    return record


def lock(path: Path, where: str):
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


def write_file(where: str, path: Path, data: dict[str, Any], doing: str) -> None:
    """``write_json``, a full disk reported as the store's one-line ``StoreFullError`` (``where``: the store)."""
    try:
        write_json(path, data)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFullError(f"no space left for the embedded store at {where}: {doing} failed, its disk is full; "
                                 "free some space there and run the command again (nothing written before is "
                                 "lost)") from e
        raise


def write_json(path: Path, data: dict[str, Any]) -> None:
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
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
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


def copy_store(root: Path, where: str, why: str) -> Path:
    """A private copy of the read-only store at ``root``, in a new temporary folder (its lock left behind), for a
    search; a ``StoreError`` that says why where the temporary folder's disk cannot hold it (nothing copied)."""
    scratch = Path(tempfile.mkdtemp(prefix="recemb-read-only-"))
    taken = file_usage(root)[0]
    if free_space(scratch) < taken + SPACE_FLOOR:
        shutil.rmtree(scratch, ignore_errors=True)
        raise StoreError(f"the embedded store at {where} cannot be written ({why}), and Qdrant Edge writes to its "
                         f"files even to search; a copy to search in would take {size_text(taken)}, more than the "
                         f"{size_text(free_space(scratch.parent))} free under {scratch.parent} ($TMPDIR): copy the "
                         "store to a folder you can write and give that folder (--qdrant-path), or set TMPDIR to a "
                         "disk with room")
    copy = scratch / "store"
    try:
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns(EDGE_LOCK, ".trash-*"), symlinks=True,
                        copy_function=_copy_sparse)
        for folder, _, files in os.walk(copy):  # writable, as Edge needs it (a read-only mount's modes come along)
            os.chmod(folder, 0o700)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o600)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return copy


def _copy_sparse(source: str, destination: str) -> None:
    """Copy a file leaving its runs of zeros as holes: Edge preallocates its files (32 MiB pages, most of them never
    written), and a copy that wrote them out would take many times the store's space."""
    block = 1 << 20
    zeros = bytes(block)
    with open(source, "rb") as src, open(destination, "wb") as dst:
        while chunk := src.read(block):
            if chunk == zeros[:len(chunk)]:
                dst.seek(len(chunk), os.SEEK_CUR)
            else:
                dst.write(chunk)
        dst.truncate()
    shutil.copystat(source, destination)

