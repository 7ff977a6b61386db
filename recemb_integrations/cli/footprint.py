"""``recemb info --collection``: what a synced collection takes, on disk and in memory."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from contextlib import closing

from recemb_integrations.cli import resources
from recemb_integrations.cli.output import EXIT_OK, CommandError, emit
from recemb_integrations.stores import COMPACT_LAYOUTS, LAYOUT_LEAN
from recemb_integrations.stores.footprint import (
    PART_NAMES,
    Footprint,
    ProcessMemory,
    process_memory,
    release_freed_heap,
)
from recemb_integrations.terminal import escape

__all__ = ["cmd_collection_info", "footprint_text", "stats_text"]

_KIB, _MIB, _GIB = 1 << 10, 1 << 20, 1 << 30
_SHOWN_FROM = 64 << 10  # parts under this in every column are one "other parts" row unless every part is asked for
_INT8_COPY = "vector_storage-dense (int8)"  # what a compact collection pins in memory, read whole from its files
# What the table's columns mean, printed under it: three measures of the same files, which differ on purpose.
_LEGEND = (
    "on disk: the blocks the files take (du). file size: their length in whole pages; the engine makes its files\n"
    "larger than what they hold, and the pages never written take no disk. resident now: the pages of them this\n"
    "process maps that are in memory now, each counted once: at most the file size, and more than on disk where\n"
    "never-written pages were read (pages of zeros; the engine reads some files whole when it opens a collection).\n"
    "Resident file pages are page cache, which the system drops under memory pressure and reads again when\n"
    "needed; held in memory is the process's own memory, which it cannot drop.")


def cmd_collection_info(args: argparse.Namespace) -> int:
    from recemb_integrations.qdrant import read_record
    from recemb_integrations.qdrant.calls import StoreCalls
    from recemb_integrations.qdrant.collection import collection_stats
    from recemb_integrations.qdrant.record import check_collection_name

    check_collection_name(args.collection)
    before = None

    def load_engine(kind: str) -> None:  # loaded before the baseline: the engine's code is not the collection's
        nonlocal before
        for module in ("qdrant_edge", "recemb_integrations.stores.edge") if kind == "edge" else ("qdrant_client",):
            try:
                importlib.import_module(module)
            except ImportError:
                pass
        release_freed_heap()  # as the store does once the collection is open: the difference is what opening keeps
        before = process_memory()

    store, where = resources.open_qdrant(args, create=False, before_open=load_engine)
    with closing(store):
        if not store.collection_exists(args.collection):
            raise CommandError(f"collection {args.collection!r} does not exist in {where}")
        store.count(args.collection)  # opens the collection; measured before the footprint's own reading of /proc
        after = process_memory()
        found = store.footprint(args.collection)
        record = read_record(store, args.collection)
        stats = collection_stats(StoreCalls(store), args.collection) if args.stats else None
    held = _held(before, after) if store.kind != "server" else None
    data = {**found.as_dict(), "where": where, "model": record.model if record else None,
            "held_in_memory_bytes": held}
    text = footprint_text(found, where, held, record.model if record else None, every_part=stats is not None)
    if stats is not None:
        recorded = _recorded(record)
        data.update(stats.as_dict(), settings=recorded)
        text += "\n\n" + stats_text(stats, recorded)
    emit(args, data, text)
    return EXIT_OK


def _recorded(record) -> dict | None:
    """The settings a collection recorded (what every sync and search of it uses), with its model and BM25."""
    if record is None:
        return None
    cut = record.data.get("passages_cut")  # another library's model: how its passages are cut
    return {**dataclasses.asdict(record.settings), "model": record.model, **({"passages_cut": cut} if cut else {}),
            "bm25": record.bm25, "recemb_version": record.data.get("recemb_version")}


def stats_text(stats, recorded: dict | None) -> str:
    """``recemb info --stats``: the points by kind, the documents by owner and the recorded settings."""
    owner_names = {"": "the folder sync without an id prefix", "framework": "a framework's vector store",
                   "api": "the Python API", None: "written before owners were recorded"}
    lines = [f"{'documents':>18}: {stats.documents:,}", f"{'passages':>18}: {stats.passages:,}"]
    for owner, n in stats.documents_by_owner.items():
        name = owner_names.get(owner) or f"the folder sync with id prefix {owner.rstrip('/')!r}"
        lines.append(f"{'':>18}  {n:,} documents of {escape(name)}")
    for key, value in (recorded or {}).items():
        if key == "passages_cut":
            lines.append(f"{key:>18}: " + ", ".join(f"{k} {escape(_shown(v))}" for k, v in value.items()))
        elif key != "bm25":
            lines.append(f"{key:>18}: {escape(_shown(value))}")
    if recorded and recorded.get("bm25"):
        bm25 = recorded["bm25"]
        lines.append(f"{'bm25':>18}: " + ", ".join(f"{k} {escape(_shown(v))}" for k, v in sorted(bm25.items())))
    return "\n".join(lines)


def _shown(value) -> str:
    """A setting as a user reads it: a float to two decimals at most (BM25's average length is a mean of token
    counts; --json keeps it exact)."""
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return str(value)


def _held(before: ProcessMemory | None, after: ProcessMemory | None) -> int | None:
    """Anonymous memory this process took to open the collection (the store and its shard)."""
    if before is None or after is None:
        return None
    return max(0, after.anonymous - before.anonymous)


def footprint_text(found: Footprint, where: str, held: int | None, model: str | None = None,
                   every_part: bool = False) -> str:
    """The footprint as a user reads it: what it takes on disk, what stays in memory, the file pages resident now,
    and each part, the parts under 64 KiB in every column one row unless ``every_part``; the rows add up to the
    total row. Every figure a point is of something fixed for an unchanged collection (files, their sizes); what
    is measured in this process (held in memory) is given whole, and said to vary."""
    n = max(found.points, 1)
    engine = {"edge": "Qdrant Edge", "local": "qdrant-client local mode", "server": "the Qdrant server"}[found.kind]
    lines = [f"collection {escape(found.collection)!s} in {engine} at {escape(where)}",
             f"{'points':>18}: {found.points:,}" + (f" (model {escape(model)})" if model else ""),
             f"{'layout':>18}: {found.layout or 'unknown'} (dense vectors stored as {found.dense_datatype})"]
    if found.kind == "server":
        lines.append(f"{'memory':>18}: held by the server (its metrics report it)")
        return "\n".join(lines)
    if found.disk:
        lines.append(f"{'on disk':>18}: {_size(found.disk_total)} ({found.disk_total / n:,.0f} B a point)")
    if held is not None:
        rest = "the engine's tables of BM25 terms" if found.layout == LAYOUT_LEAN else "ids and the engine's tables"
        what = ("every point, in Python objects" if found.kind == "local"
                else f"the int8 copy of the dense vectors and {rest}" if found.layout in COMPACT_LAYOUTS
                else "the vectors, the BM25 index and the payloads")
        lines.append(f"{'held in memory':>18}: {_size(held)}: {what}")
        pinned = found.files.get(_INT8_COPY, 0) if found.layout in COMPACT_LAYOUTS else 0
        if pinned:
            lines.append(f"{'':>18}  of it {_size(pinned)} ({pinned / n:,.0f} B a point) the int8 copy "
                         "(its files' size)")
        # A difference of this process's RssAnon: the engine's threads and allocator make it differ by some pages
        # from run to run, so no figure a point is derived from it.
        lines.append(f"{'':>18}  measured as this process opened it, so it differs a little from run to run "
                     "(threads, allocator)")
    if found.disk:
        lines.append(f"{'file pages':>18}: {_size(found.resident_total)} resident now, of "
                     f"{_size(found.files_total)} of files: page cache, dropped under memory pressure")
        lines.append("")
        lines.append(f"{'part':<28} {'on disk':>11} {'file size':>11} {'resident now':>13}")
        parts: dict[str, tuple[int, int, int]] = {}
        for part in {*found.disk, *found.files, *found.resident}:
            name = PART_NAMES.get(part, part)
            disk, files, resident = parts.get(name, (0, 0, 0))
            parts[name] = (disk + found.disk.get(part, 0), files + found.files.get(part, 0),
                           resident + found.resident.get(part, 0))
        other = (0, 0, 0)
        for name, sizes in sorted(parts.items(), key=lambda kv: (-kv[1][0], kv[0])):
            if every_part or max(sizes) >= _SHOWN_FROM:  # not the engine's small files
                lines.append(_row(name, *sizes))
            else:
                other = tuple(a + b for a, b in zip(other, sizes))
        if any(other):
            lines.append(_row("other parts", *other))
        lines.append(_row("total", found.disk_total, found.files_total, found.resident_total))
        lines.append("")
        lines.append(_LEGEND)
    return "\n".join(lines)


def _row(name: str, disk: int, files: int, resident: int) -> str:
    return f"{escape(name):<28} {_size(disk):>11} {_size(files):>11} {_size(resident):>13}"


def _size(size: int) -> str:
    """Bytes in the unit that reads best, to the precision a footprint needs."""
    if size < _MIB:
        return f"{size / _KIB:,.0f} KiB"
    if size < _GIB:
        return f"{size / _MIB:,.1f} MiB"
    return f"{size / _GIB:,.2f} GiB"
