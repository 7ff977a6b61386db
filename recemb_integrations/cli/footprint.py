"""``recemb info --collection``: what a synced collection takes, on disk and in memory."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from contextlib import closing

from recemb_integrations.cli import resources
from recemb_integrations.cli.output import EXIT_OK, CommandError, emit
from recemb_integrations.stores import COMPACT_LAYOUTS, LAYOUT_COMPACT, LAYOUT_LEAN
from recemb_integrations.stores.footprint import PART_NAMES, Footprint, ProcessMemory, process_memory
from recemb_integrations.terminal import escape

__all__ = ["cmd_collection_info", "footprint_text", "stats_text"]

_MIB = 1 << 20
_SHOWN_FROM = 64 << 10  # parts smaller than this on disk and in memory are left out of the table
# The parts a compact collection leaves on disk, read into the page cache as searches touch them.
_ON_DISK_PARTS = ("vector_storage-dense", "vector_index-bm25", "vector_storage-bm25", "payload_storage",
                  "payload_index")


def cmd_collection_info(args: argparse.Namespace) -> int:
    from recemb_integrations.qdrant import read_record
    from recemb_integrations.qdrant.calls import StoreCalls
    from recemb_integrations.qdrant.collection import collection_stats
    from recemb_integrations.qdrant.record import check_collection_name

    check_collection_name(args.collection)
    before = None

    def load_engine(kind: str) -> None:  # loaded before the baseline: the engine's code is not the collection's
        nonlocal before
        try:
            importlib.import_module("qdrant_edge" if kind == "edge" else "qdrant_client")
        except ImportError:
            pass
        before = process_memory()

    store, where = resources.open_qdrant(args, create=False, before_open=load_engine)
    with closing(store):
        if not store.collection_exists(args.collection):
            raise CommandError(f"collection {args.collection!r} does not exist in {where}")
        found = store.footprint(args.collection)
        after = process_memory()
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
    return {**dataclasses.asdict(record.settings), "model": record.model, "bm25": record.bm25,
            "recemb_version": record.data.get("recemb_version")}


def stats_text(stats, recorded: dict | None) -> str:
    """``recemb info --stats``: the points by kind, the documents by owner and the recorded settings."""
    owner_names = {"": "the folder sync without an id prefix", "framework": "a framework's vector store",
                   None: "written before owners were recorded"}
    lines = [f"{'documents':>18}: {stats.documents:,}", f"{'passages':>18}: {stats.passages:,}"]
    for owner, n in stats.documents_by_owner.items():
        name = owner_names.get(owner) or f"the folder sync with id prefix {owner.rstrip('/')!r}"
        lines.append(f"{'':>18}  {n:,} documents of {escape(name)}")
    for key, value in (recorded or {}).items():
        if key != "bm25":
            lines.append(f"{key:>18}: {escape(str(value))}")
    if recorded and recorded.get("bm25"):
        bm25 = recorded["bm25"]
        lines.append(f"{'bm25':>18}: " + ", ".join(f"{k} {escape(str(v))}" for k, v in sorted(bm25.items())))
    return "\n".join(lines)


def _held(before: ProcessMemory | None, after: ProcessMemory | None) -> int | None:
    """Anonymous memory this process took to open the collection (the store and its shard)."""
    if before is None or after is None:
        return None
    return max(0, after.anonymous - before.anonymous)


def footprint_text(found: Footprint, where: str, held: int | None, model: str | None = None,
                   every_part: bool = False) -> str:
    """The footprint as a user reads it: what stays in memory, what is read from disk as searched, and each part
    (those under 64 KB left out unless ``every_part``)."""
    n = max(found.points, 1)
    engine = {"edge": "Qdrant Edge", "local": "qdrant-client local mode", "server": "the Qdrant server"}[found.kind]
    lines = [f"collection {escape(found.collection)!s} in {engine} at {escape(where)}",
             f"{'points':>18}: {found.points:,}" + (f" (model {escape(model)})" if model else ""),
             f"{'layout':>18}: {found.layout or 'unknown'} (dense vectors stored as {found.dense_datatype})"]
    if found.kind == "server":
        lines.append(f"{'memory':>18}: held by the server (its metrics report it)")
        return "\n".join(lines)
    if held is not None:
        what = ("every point, in Python objects" if found.kind == "local"
                else "the int8 copy of the dense vectors and the engine's tables of BM25 terms"
                if found.layout == LAYOUT_LEAN
                else "the int8 copy of the dense vectors, ids and the engine's tables" if found.layout == LAYOUT_COMPACT
                else "the vectors, the BM25 index and the payloads")
        lines.append(f"{'held in memory':>18}: {_mib(held)} ({held / n:,.0f} B a point: {what})")
    if found.disk:
        on_disk = sum(found.disk.get(p, 0) for p in _ON_DISK_PARTS) if found.layout in COMPACT_LAYOUTS else 0
        if on_disk:
            lines.append(f"{'read as searched':>18}: up to {_mib(on_disk)} ({on_disk / n:,.0f} B a point) of files "
                         "kept in the page cache while used; the system drops them under memory pressure")
        lines.append(f"{'on disk':>18}: {_mib(found.disk_total)} ({found.disk_total / n:,.0f} B a point)")
        lines.append("")
        lines.append(f"{'part':<28} {'on disk':>12} {'resident now':>14}")
        parts: dict[str, tuple[int, int]] = {}
        for part in {*found.disk, *found.resident}:
            name = PART_NAMES.get(part, part)
            disk, resident = parts.get(name, (0, 0))
            parts[name] = (disk + found.disk.get(part, 0), resident + found.resident.get(part, 0))
        for name, (disk, resident) in sorted(parts.items(), key=lambda kv: -kv[1][0]):
            if every_part or disk >= _SHOWN_FROM or resident >= _SHOWN_FROM:  # not the engine's small files
                lines.append(f"{name:<28} {_mib(disk):>12} {_mib(resident):>14}")
    return "\n".join(lines)


def _mib(size: int) -> str:
    return f"{size / _MIB:,.1f} MiB"
