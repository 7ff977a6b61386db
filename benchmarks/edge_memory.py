"""Resident memory per point of the embedded Qdrant Edge store in each store layout (issues #47 and #57).

For each layout ("ram": dense vectors, BM25 index and payloads in memory; "compact": an int8 copy of the dense
vectors pinned in memory, float16 originals, BM25 index and payloads on disk; "lean": compact with the payload
indexes and the point-id tracker mapped and every segment indexed, so no segment builds its BM25 index in memory)
and each collection size N, two fresh child processes (this script with ``--child``) measure:

- write: ``EdgeStore`` -> ``create_collection(layout=...)`` and the main job's payload indexes -> N passage-like
  points upserted through ``EdgeStore.upsert`` in batches of 256 (a 384-d unit vector from a few hundred random
  centres plus noise, a BM25 vector of 80 terms, ``passage_payload`` with a ~600-character text) ->
  ``optimize(force=True)`` -> measure -> ``close()``; then the entries of the BM25 term tables the segments load
  into memory when opened (their ``indices_tracker.json``: one entry a distinct term a segment holds). Seconds to
  write and to optimize, peak RSS (VmHWM) before the optimize and overall, and after the optimize RssAnon, RssFile
  and the file-backed resident KB per shard component (from /proc/self/smaps: mappings of files under the store
  folder, grouped by the segment folder's component, e.g. ``vector_storage-dense``), the same
  again after ``malloc_trim(0)`` (what the allocator kept but the store no longer uses), and the size on disk per
  component.
- read: a fresh process opens the store, runs 50 hybrid searches through ``EdgeStore.query`` (dense + BM25, DBSF,
  100 candidates each side, as ``recemb_integrations.qdrant.search`` asks) with noisy copies of stored vectors and a
  few of the same point's terms, then 50 dense-only searches whose recall@10 is measured against exact search over
  the regenerated float32 vectors (streamed in batches, after the memory is measured). p50/p95 latency of each; RSS
  and per-component resident KB after the searches.

Per-point numbers are (RSS - baseline) / N, anonymous and file-backed separately, where the baseline is the child's
RSS after its imports and before the store is opened. File-backed pages are counted in RSS but are page cache the
kernel can drop under memory pressure (re-read from disk when touched again); anonymous pages cannot be dropped
(there is no swap). The issue's targets are checked on total RSS minus baseline (anon + file).

    python3 benchmarks/edge_memory.py                                   # 100,000 points, ram and compact
    python3 benchmarks/edge_memory.py --points 5000,100000 --layouts compact
    python3 benchmarks/edge_memory.py --points 1000000                  # slow
    python3 benchmarks/edge_memory.py --vocabulary 50000                # BM25 ids from a 50,000-term vocabulary
    python3 benchmarks/edge_memory.py --tables benchmarks/results/edge_memory.json   # reprint saved results

BM25 term ids are by default uniform in [0, 2**31), so nearly every term belongs to one point only: the worst case
for the sparse index's table of terms. ``--vocabulary V`` draws them from V hashed ids with Zipf-like frequencies,
as the stems of real texts are.

Targets (issue #47): <= 1,600 bytes resident per point (total RSS minus baseline) after writing and after reopening
and searching; recall@10 >= 0.97; compact search p95 <= 1.5x ram's at the same size. Issue #57: <= 1,600 bytes of
anonymous memory a point after reopening and searching, with all-distinct BM25 ids as well; recall@10 >= 0.99;
lean hybrid p95 <= 1.5x compact's in the same run. Prints markdown tables and writes JSON (one record per child,
saved as each arrives) to results/edge_memory.json.

    python3 benchmarks/edge_memory.py --points 120000 --layouts compact,lean                     # all distinct
    python3 benchmarks/edge_memory.py --points 120000 --layouts compact,lean --vocabulary 50000
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIM, TERMS, BATCH, CENTRES, SEED = 384, 80, 256, 300, 20261205
NOISE = 0.6  # per-dimension noise around a unit-variance centre: points of a centre have cosine ~0.74
QUERY_NOISE = 0.03  # per-dimension noise added to a stored unit vector to make a query (cosine ~0.86 to it)
QUERY_TERMS = 4  # of the point's own 80 BM25 terms
SEARCHES = 210  # of each kind; the first WARM_UP of each are left out of the percentiles
WARM_UP = 10
TARGET_BYTES, TARGET_RECALL, TARGET_P95_RATIO = 1600, 0.97, 1.5
TARGET_LEAN_RECALL = 0.99  # issue #57, with TARGET_BYTES of anonymous memory and TARGET_P95_RATIO against compact
WORDS = None


# ---------------------------------------------------------------------------------------------- measuring
def status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem in KB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(line.split()[1])
    return out


def resident_by_component(shard: Path) -> dict[str, int]:
    """Resident KB of this process's mappings of files under ``shard``, per component (``store_part``)."""
    from recemb_integrations.stores.footprint import resident_by_part

    return {part: size // 1024 for part, size in (resident_by_part(shard) or {}).items()}


def disk_by_component(shard: Path) -> dict[str, int]:
    """Bytes allocated on disk per component (st_blocks, as du counts them)."""
    from recemb_integrations.stores.footprint import disk_by_part

    return disk_by_part(shard)


def term_table_entries(shard: Path) -> int:
    """Entries of the BM25 term tables (``indices_tracker.json``, a JSON map of term id -> offset per indexed
    segment) under ``shard``, counted by their ``:`` without parsing the files."""
    entries = 0
    for table in shard.rglob("indices_tracker.json"):
        with open(table, "rb") as f:
            entries += sum(chunk.count(b":") for chunk in iter(lambda: f.read(1 << 20), b"")) - 1
    return entries


def memory(shard: Path) -> dict:
    st = status()
    return {"rss_kb": st["VmRSS"], "anon_kb": st["RssAnon"], "file_kb": st["RssFile"], "shmem_kb": st["RssShmem"],
            "hwm_kb": st["VmHWM"], "components_kb": resident_by_component(shard)}


class Sampler:
    """Peak RssAnon and RssFile (KB), read from /proc every 20 ms by a thread (VmHWM has only their sum). It
    samples only while the engine releases the GIL; ``samples`` says how many it took."""

    def __init__(self):
        import threading

        self.peak = {"RssAnon": 0, "RssFile": 0}
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.02):
            st = status()
            self.samples += 1
            for k in self.peak:
                self.peak[k] = max(self.peak[k], st[k])

    def stop(self) -> dict:
        self._done.set()
        self._thread.join()
        return {"peak_anon_kb": self.peak["RssAnon"], "peak_file_kb": self.peak["RssFile"], "samples": self.samples}


def malloc_trim() -> bool:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


# ---------------------------------------------------------------------------------------------- the points
def centres():
    import numpy as np

    return np.random.default_rng([SEED, 0]).normal(size=(CENTRES, DIM)).astype(np.float32)


def dense_batch(b: int, n: int, c):
    """Batch b's unit vectors (regenerable alone: its own random stream)."""
    import numpy as np

    rng = np.random.default_rng([SEED, 1, b])
    m = min(BATCH, n - b * BATCH)
    v = c[rng.integers(0, CENTRES, m)] + NOISE * rng.normal(size=(m, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


VOCABULARY = 0  # --vocabulary: 0, every term id uniform in [0, 2**31); V, ids of a V-term Zipf-like vocabulary
_VOCAB = None


def sparse_batch(b: int, n: int) -> list[tuple[list[int], list[float]]]:
    """Batch b's BM25 vectors: 80 distinct term ids in [0, 2**31), ascending, values 0.5-2.5. Uniform ids make
    nearly every term unique to its point (the worst case for the index's term table); with ``VOCABULARY`` the ids
    come from a fixed vocabulary of that many hashed ids, term of rank r drawn with probability ~ 1 / (r + 10), as
    a text's stems are."""
    import numpy as np

    global _VOCAB
    rng = np.random.default_rng([SEED, 2, b])
    if VOCABULARY and _VOCAB is None:
        vrng = np.random.default_rng([SEED, 6])
        ids = np.unique(vrng.integers(0, 2**31, VOCABULARY * 2))
        ids = vrng.permutation(ids)[:VOCABULARY]
        cdf = np.cumsum(1.0 / (np.arange(len(ids)) + 10.0))
        _VOCAB = (ids, cdf / cdf[-1])
    out = []
    for _ in range(min(BATCH, n - b * BATCH)):
        if VOCABULARY:
            ids, cdf = _VOCAB
            draw = np.minimum(np.searchsorted(cdf, rng.random(TERMS * 4)), len(ids) - 1)
            _, first = np.unique(draw, return_index=True)
            idx = np.sort(ids[draw[np.sort(first)][:TERMS]])
        else:
            idx = np.unique(rng.integers(0, 2**31, TERMS + 8))[:TERMS]
        out.append((idx.tolist(), rng.uniform(0.5, 2.5, len(idx)).round(4).tolist()))
    return out


def texts(b: int, n: int) -> list[str]:
    """~600 characters of words from a 5,000-word vocabulary per point."""
    import numpy as np

    global WORDS
    if WORDS is None:
        rng = np.random.default_rng([SEED, 3])
        letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
        p = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.2, 2.4, 2.0, 1.9, 1.0,
                      1.5, 2.0, 0.8, 0.15, 0.1, 0.15, 0.07])
        WORDS = ["".join(rng.choice(letters, size=int(rng.integers(2, 10)), p=p / p.sum())) for _ in range(5000)]
    rng = np.random.default_rng([SEED, 4, b])
    out = []
    for _ in range(min(BATCH, n - b * BATCH)):
        words, length = [], 0
        for w in rng.zipf(1.2, 200):
            word = WORDS[(int(w) - 1) % len(WORDS)]
            words.append(word)
            length += len(word) + 1
            if length >= 600:
                break
        text = " ".join(words)
        out.append(text[0].upper() + text[1:] + ".")
    return out


def point_uuid(k: int) -> str:
    return str(uuid.UUID(int=k + 1))


# ---------------------------------------------------------------------------------------------- children
def write_child(folder: Path, layout: str, n: int) -> dict:
    import numpy as np  # noqa: F401  (imported before the baseline)
    import qdrant_edge  # noqa: F401

    from recemb_integrations.qdrant.points import PAYLOAD_INDEXES, passage_payload
    from recemb_integrations.sparse import SparseVector
    from recemb_integrations.stores import StoredPoint
    from recemb_integrations.stores.edge import EdgeStore

    c = centres()
    texts(0, n)  # the vocabulary
    base = status()
    store = EdgeStore(folder)
    shard = folder / "collections" / "c" / "shard"
    store.create_collection("c", DIM, True, {}, layout=layout)
    for key, schema in PAYLOAD_INDEXES.items():  # the payload indexes every collection of the main job has
        store.create_payload_index("c", key, schema)
    sampler = Sampler()
    t = time.perf_counter()
    for b in range((n + BATCH - 1) // BATCH):
        vectors, sparse, text = dense_batch(b, n, c), sparse_batch(b, n), texts(b, n)
        points = []
        for i in range(len(vectors)):
            k = b * BATCH + i
            doc = f"books/volume-{k // 800:05d}.txt"
            start = (k % 800) * 500
            payload = passage_payload(doc, k % 800, {"path": f"/home/reader/{doc}", "suffix": ".txt"}, 128,
                                      "/home/reader", (start, start + len(text[i])),
                                      hashlib.sha256(doc.encode()).hexdigest(), text[i])
            points.append(StoredPoint(point_uuid(k), payload,
                                      {"dense": vectors[i].tolist(), "bm25": SparseVector(*map(tuple, sparse[i]))}))
        store.upsert("c", points)
    write_s = time.perf_counter() - t
    write_peaks = sampler.stop()
    before = memory(shard)
    sampler = Sampler()
    t = time.perf_counter()
    store.optimize("c", show_progress_bar=False, force=True)
    optimize_s = time.perf_counter() - t
    optimize_peaks = sampler.stop()
    after = memory(shard)
    trimmed = malloc_trim()
    after_trim = memory(shard)
    store.close()
    entries = term_table_entries(shard)
    return {"phase": "write", "layout": layout, "points": n, "term_table_entries": entries,
            "write_s": round(write_s, 1),
            "optimize_s": round(optimize_s, 1), "vocabulary": VOCABULARY,
            "write_peaks": write_peaks, "optimize_peaks": optimize_peaks,
            "baseline": {k: base[k] for k in ("VmRSS", "RssAnon", "RssFile")},
            "before_optimize": before, "after_optimize": after, "after_trim": after_trim if trimmed else None,
            "disk_bytes": disk_by_component(shard)}


def percentiles(lat: list[float]) -> tuple[float, float]:
    import numpy as np

    return round(float(np.percentile(lat, 50)) * 1e3, 2), round(float(np.percentile(lat, 95)) * 1e3, 2)


def read_child(folder: Path, layout: str, n: int) -> dict:
    import numpy as np
    import qdrant_edge  # noqa: F401

    from recemb_integrations.sparse import SparseVector
    from recemb_integrations.stores import SearchRequest
    from recemb_integrations.stores.edge import EdgeStore

    c = centres()
    rng = np.random.default_rng([SEED, 5, n])
    targets = rng.choice(n, 2 * SEARCHES, replace=False)  # the stored points the queries are noisy copies of
    queries, sparse_queries = [], []
    for k in targets:
        b, i = divmod(int(k), BATCH)
        v = dense_batch(b, n, c)[i] + QUERY_NOISE * rng.normal(size=DIM).astype(np.float32)
        queries.append(v / np.linalg.norm(v))
        idx, _ = sparse_batch(b, n)[i]
        sparse_queries.append(SparseVector(tuple(sorted(rng.choice(idx, QUERY_TERMS, replace=False).tolist())),
                                           (1.0,) * QUERY_TERMS))
    queries = np.stack(queries)
    base = status()
    t = time.perf_counter()
    store = EdgeStore(folder)
    shard = folder / "collections" / "c" / "shard"
    count = store.count("c")
    open_s = time.perf_counter() - t
    opened = memory(shard)
    hybrid_lat, hybrid_hit = [], []
    for q in range(SEARCHES):
        request = SearchRequest(limit=10, dense=queries[q].tolist(), sparse=sparse_queries[q], fusion="dbsf",
                                candidates=100, rrf_k=61)
        t = time.perf_counter()
        hits = store.query("c", request)
        hybrid_lat.append(time.perf_counter() - t)
        hybrid_hit.append(point_uuid(int(targets[q])) in {h.id for h in hits})
    dense_lat, dense_ids = [], []
    for q in range(SEARCHES, 2 * SEARCHES):
        request = SearchRequest(limit=10, dense=queries[q].tolist(), candidates=100, rrf_k=61)
        t = time.perf_counter()
        hits = store.query("c", request)
        dense_lat.append(time.perf_counter() - t)
        dense_ids.append({uuid.UUID(h.id).int - 1 for h in hits})
    searched = memory(shard)
    store.close()
    # exact top 10 of the dense queries, streaming the regenerated vectors batch by batch
    dq = queries[SEARCHES:]
    best_s = np.full((SEARCHES, 10), -np.inf, dtype=np.float32)
    best_i = np.zeros((SEARCHES, 10), dtype=np.int64)
    for b in range((n + BATCH - 1) // BATCH):
        scores = dq @ dense_batch(b, n, c).T
        all_s = np.concatenate([best_s, scores], axis=1)
        all_i = np.concatenate([best_i, np.broadcast_to(np.arange(b * BATCH, b * BATCH + scores.shape[1]),
                                                        scores.shape)], axis=1)
        top = np.argpartition(-all_s, 10, axis=1)[:, :10]
        best_s, best_i = np.take_along_axis(all_s, top, 1), np.take_along_axis(all_i, top, 1)
    recall = float(np.mean([len(set(best_i[q].tolist()) & dense_ids[q]) / 10 for q in range(SEARCHES)]))
    # The first searches of a fresh process read what they touch from disk (a compact collection maps its parts
    # cold): reported apart, the percentiles are of the searches after them.
    first_ms = round(1000 * hybrid_lat[0], 2)
    warm_ms = round(1000 * sum(hybrid_lat[:WARM_UP]) / WARM_UP, 2)
    hp50, hp95 = percentiles(hybrid_lat[WARM_UP:])
    dp50, dp95 = percentiles(dense_lat[WARM_UP:])
    return {"phase": "read", "layout": layout, "points": n, "vocabulary": VOCABULARY, "count": count,
            "open_s": round(open_s, 2),
            "baseline": {k: base[k] for k in ("VmRSS", "RssAnon", "RssFile")}, "opened": opened, "searched": searched,
            "first_search_ms": first_ms, "warm_up_mean_ms": warm_ms,
            "hybrid_p50_ms": hp50, "hybrid_p95_ms": hp95, "hybrid_source_hit@10": float(np.mean(hybrid_hit)),
            "dense_p50_ms": dp50, "dense_p95_ms": dp95, "recall@10": round(recall, 4)}


# ---------------------------------------------------------------------------------------------- parent
def run_child(phase: str, folder: Path, layout: str, n: int) -> dict:
    cmd = [sys.executable, __file__, "--child", phase, "--folder", str(folder), "--layouts", layout,
           "--points", str(n), "--vocabulary", str(VOCABULARY)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{phase} child for {layout} at {n:,} points failed (exit {proc.returncode})")
    return json.loads(lines[-1])


def per_point(m: dict, base: dict, n: int) -> tuple[float, float, float]:
    anon = (m["anon_kb"] - base["RssAnon"]) * 1024 / n
    file = (m["file_kb"] - base["RssFile"]) * 1024 / n
    return anon, file, anon + file


def tables(records: list[dict]) -> str:
    writes = {(r["layout"], r["points"]): r for r in records if r["phase"] == "write"}
    reads = {(r["layout"], r["points"]): r for r in records if r["phase"] == "read"}
    out = ["### After writing (N points upserted, then optimize)", "",
           "| layout | points | write s | optimize s | peak MiB before optimize (anon / file) | peak MiB "
           "(anon / file) | anon B/point | file B/point | total B/point | anon B/point after malloc_trim | "
           "BM25 term-table entries |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (layout, n), r in writes.items():
        a, f, t = per_point(r["after_optimize"], r["baseline"], n)
        trim = per_point(r["after_trim"], r["baseline"], n)[0] if r.get("after_trim") else float("nan")
        def split(peaks: dict) -> str:  # a split only where the sampler ran (the engine may hold the GIL)
            if peaks["samples"] < 10:
                return f"(- / -: {peaks['samples']} samples)"
            return f"({peaks['peak_anon_kb'] / 1024:,.0f} / {peaks['peak_file_kb'] / 1024:,.0f})"

        out.append(f"| {layout} | {n:,} | {r['write_s']} | {r['optimize_s']} | "
                   f"{r['before_optimize']['hwm_kb'] / 1024:,.0f} {split(r['write_peaks'])} | "
                   f"{r['after_optimize']['hwm_kb'] / 1024:,.0f} {split(r['optimize_peaks'])} | "
                   f"{a:,.0f} | {f:,.0f} | {t:,.0f} | {trim:,.0f} | {r.get('term_table_entries', '-'):,} |")
    out += ["", f"### After reopening and {2 * SEARCHES} searches (fresh process)", "",
            "| layout | points | open s | anon B/point | file B/point | total B/point | peak MiB | first search ms "
            f"(mean of the first {WARM_UP}) | hybrid p50/p95 ms | dense p50/p95 ms | recall@10 (dense) | "
            "hybrid: source point in top 10 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (layout, n), r in reads.items():
        a, f, t = per_point(r["searched"], r["baseline"], n)
        out.append(f"| {layout} | {n:,} | {r['open_s']} | {a:,.0f} | {f:,.0f} | {t:,.0f} | "
                   f"{r['searched']['hwm_kb'] / 1024:,.0f} | {r.get('first_search_ms', '-')} "
                   f"({r.get('warm_up_mean_ms', '-')}) | {r['hybrid_p50_ms']} / {r['hybrid_p95_ms']} | "
                   f"{r['dense_p50_ms']} / {r['dense_p95_ms']} | {r['recall@10']:.3f} | "
                   f"{r['hybrid_source_hit@10']:.2f} |")
    out += ["", "### Resident file-backed KB per shard component (and size on disk)", "",
            "| layout | points | component | resident KB after write | resident KB after reopen + search | "
            "on disk MiB |", "|---|---:|---|---:|---:|---:|"]
    for (layout, n), w in writes.items():
        r = reads.get((layout, n))
        names = sorted(set(w["disk_bytes"]) | set(w["after_optimize"]["components_kb"])
                       | set(r["searched"]["components_kb"] if r else ()))
        for name in names:
            searched = r["searched"]["components_kb"].get(name, 0) if r else "-"
            out.append(f"| {layout} | {n:,} | {name} | {w['after_optimize']['components_kb'].get(name, 0):,} | "
                       f"{searched:,} | {w['disk_bytes'].get(name, 0) / 2**20:,.1f} |")
    out += ["", "Peaks are VmHWM (anon + file); in brackets the largest RssAnon / RssFile a 20 ms sampler saw (none "
            "where it got under 10 samples: the engine's optimize holds the GIL). "
            "Baselines (child RSS after imports, before opening the store, MiB): "
            + "; ".join(f"{r['phase']} {r['layout']} {r['points']:,}: {r['baseline']['VmRSS'] / 1024:.0f} "
                        f"(anon {r['baseline']['RssAnon'] / 1024:.0f})" for r in records)]
    return "\n".join(out)


def targets(records: list[dict]) -> str:
    lines = ["Targets (issue #47); resident bytes per point = (RssAnon + RssFile - the same of the child's baseline "
             "before opening the store) / N, file-backed pages included:"]
    reads = {(r["layout"], r["points"]): r for r in records if r["phase"] == "read"}
    for r in records:
        n, layout = r["points"], r["layout"]
        if r["phase"] == "write":
            t = per_point(r["after_optimize"], r["baseline"], n)[2]
            lines.append(f"- {'PASS' if t <= TARGET_BYTES else 'FAIL'}: {layout} {n:,} after writing: {t:,.0f} "
                         f"B/point (<= {TARGET_BYTES:,})")
        else:
            t = per_point(r["searched"], r["baseline"], n)[2]
            lines.append(f"- {'PASS' if t <= TARGET_BYTES else 'FAIL'}: {layout} {n:,} after reopening + searching: "
                         f"{t:,.0f} B/point (<= {TARGET_BYTES:,})")
            lines.append(f"- {'PASS' if r['recall@10'] >= TARGET_RECALL else 'FAIL'}: {layout} {n:,} recall@10 "
                         f"{r['recall@10']:.3f} (>= {TARGET_RECALL})")
    for (layout, n), r in reads.items():
        compact = reads.get(("compact", n))
        if layout == "lean":
            anon = per_point(r["searched"], r["baseline"], n)[0]
            lines.append(f"- {'PASS' if anon <= TARGET_BYTES else 'FAIL'}: lean {n:,} anonymous after reopening + "
                         f"searching: {anon:,.0f} B/point (<= {TARGET_BYTES:,}; issue #57)")
            lines.append(f"- {'PASS' if r['recall@10'] >= TARGET_LEAN_RECALL else 'FAIL'}: lean {n:,} recall@10 "
                         f"{r['recall@10']:.3f} (>= {TARGET_LEAN_RECALL})")
        if layout == "lean" and compact:
            ratio = r["hybrid_p95_ms"] / compact["hybrid_p95_ms"]
            lines.append(f"- {'PASS' if ratio <= TARGET_P95_RATIO else 'FAIL'}: {n:,} hybrid p95 lean "
                         f"{r['hybrid_p95_ms']} ms = {ratio:.2f}x compact {compact['hybrid_p95_ms']} ms "
                         f"(<= {TARGET_P95_RATIO}x)")
        ram = reads.get(("ram", n))
        if layout == "compact" and ram:
            for kind in ("hybrid", "dense"):
                ratio = r[f"{kind}_p95_ms"] / ram[f"{kind}_p95_ms"]
                lines.append(f"- {'PASS' if ratio <= TARGET_P95_RATIO else 'FAIL'}: {n:,} {kind} p95 compact "
                             f"{r[f'{kind}_p95_ms']} ms = {ratio:.2f}x ram {ram[f'{kind}_p95_ms']} ms "
                             f"(<= {TARGET_P95_RATIO}x)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", default="100000", help="collection sizes, comma-separated")
    ap.add_argument("--layouts", default="ram,compact", help="store layouts, comma-separated")
    ap.add_argument("--workdir", default=None, help="where the stores are written (default: a temporary folder "
                                                    "on disk; not tmpfs, whose pages would all count as memory)")
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "edge_memory.json"))
    ap.add_argument("--vocabulary", type=int, default=0,
                    help="BM25 term ids: 0 (default) uniform in [0, 2**31), nearly every term unique to its point; "
                         "V > 0: drawn from a V-term Zipf-like vocabulary, as real texts' stems are")
    ap.add_argument("--tables", metavar="JSON", help="print the tables of a results file written before, and exit")
    ap.add_argument("--child", choices=("write", "read"), help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global VOCABULARY
    VOCABULARY = args.vocabulary
    sys.path.insert(0, str(ROOT))
    if args.tables:
        records = json.loads(Path(args.tables).read_text())["records"]
        print(tables(records) + "\n\n" + targets(records))
        return
    if args.child:
        fn = write_child if args.child == "write" else read_child
        print(json.dumps(fn(Path(args.folder), args.layouts, int(args.points))), flush=True)
        return
    sizes = [int(p.replace("_", "")) for p in args.points.split(",")]
    layouts = args.layouts.split(",")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="recemb-edge-memory-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "cpus": os.cpu_count(),
              "vocabulary": VOCABULARY,
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "records": []}
    for n in sizes:
        for layout in layouts:
            folder = work / f"{layout}-{n}"
            shutil.rmtree(folder, ignore_errors=True)
            for phase in ("write", "read"):
                t = time.time()
                record = run_child(phase, folder, layout, n)
                print(f"{phase} {layout} {n:,}: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
                result["records"].append(record)
                out.write_text(json.dumps(result, indent=1) + "\n")
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    print(tables(result["records"]))
    print()
    print(targets(result["records"]))


if __name__ == "__main__":
    main()
