"""Qdrant Edge vs qdrant-client local mode at scale: sync, memory, disk, reopen, search; Edge at 1M points.

    python3 benchmarks/store_scale.py --quick        # smoke test, a few minutes (results in the temp folder)
    python3 benchmarks/store_scale.py                # everything at full size (hours on 2 shared cores)
    python3 benchmarks/store_scale.py --sections million --million 500000 --hnsw-ef 128,256

Sections (``--sections``, comma-separated; sizes by flags):

- **short** (``--short``, default 100,000 documents): short real texts (the IR collections' passages,
  paragraphs and sentences of the public-domain books, STS-B sentences; deduplicated, shuffled, cycled with an
  id suffix only if more are asked for than exist) through ``QdrantSync.sync`` into a fresh Qdrant Edge store
  and a fresh local-mode store, each in its own process. Metadata ``{"source": ..., "bucket": i % 10}``.
- **long** (``--long``, default 1,000 documents): slices of 20-50 KB of the books (cut at whitespace,
  consecutive, wrapping around the books, so texts overlap across the cycles but no two are equal), synced
  with passages of ``--passage-tokens`` 256 tokens, ``--passage-overlap`` 32 (hybrid_quality.py's default
  setting).
- **million** (``--million``, default 1,000,000 points): Edge alone, vectors only, through
  ``EdgeStore.upsert`` in batches of ``--upsert-batch``. The dense vectors are REAL embeddings of the short
  texts (the short section's cache, extended for at most ``--real-budget-s`` seconds), the rest convex
  mixtures of two random real embeddings plus small noise, re-normalised. Payloads ``{"document_id", "kind":
  "passage", "group": i % 10}`` with an integer payload index on ``group``. Upsert, ``optimize(force=True)``,
  reopen; then the IR queries' real query embeddings through ``EdgeStore.query(SearchRequest(...))``: latency
  and recall@10 against exact search (numpy, float32, brute force over the same vectors), unfiltered and
  ``group == 3`` (10%), for each ``--hnsw-ef`` value (set through ``recemb_integrations.stores.edge_layouts.HNSW_EF``,
  read at query time).

How each number is measured, per configuration in a child process of its own (peak RSS: the child's VmHWM; a
sampler thread keeps the peak per phase; the RSS just before the store is opened is the baseline: Python,
torch, the model and any cached vectors):

- *store time*: the store object is wrapped in a proxy (``__getattr__`` forwarding, timing every call, wall
  and process CPU time); ``QdrantSync`` accepts it as a store. *model time*: the embedder is wrapped the same
  way, timing ``embed_token_ids``. The rest of a sync (tokenizing, BM25, payloads, Python) is *other*. Shares
  are given by wall time and by CPU time (less sensitive to other load on a shared machine).
- *embedding mode*: the sync's non-store work is first timed on ``--probe`` documents (a sync into a store
  that keeps nothing). If a live sync would exceed ``--live-limit-min`` minutes per store, the embeddings are
  computed ONCE (that same sync into the null store, recording every vector keyed by its token ids, cached
  under ``--cache-dir``) and both stores are synced with an embedder that answers from the cache: the store
  side is measured, and the whole-sync time is ESTIMATED as the cached sync's time minus its cache look-ups
  plus the model time measured once (the model cost is the same for both stores). Each row says which mode it
  is.
- *reopen*: close, then ``open_store(path=..., kind=...)`` + the first ``count``. *disk*: the folder's
  allocated size (``du``) and apparent size. *search*: ``QdrantSync.open`` on the reopened store,
  ``QdrantSync.search`` end to end (query embedding included) and the store's part of it,
  p50/p95, after one cold query (reported) and 3 warm-up queries; each mode stops after ``--search-budget-s``
  seconds (local mode is slow: the number of queries run is reported).
- torch runs on ``--torch-threads`` threads (default 1) for all embedding: on a shared machine, OpenMP threads
  that wait for a descheduled sibling make a multi-threaded model many times slower (see ``TORCH_THREADS``).

Targets printed as PASS/FAIL: 1M points p95 <= 50 ms and recall@10 >= 0.95, unfiltered and filtered; Edge sync
store share < 10%. (The 1 GB RSS target of a large corpus is measured by benchmarks/corpus_rss.py, not here.)

Writes benchmarks/results/store_scale.json (``--out``; ``--quick`` writes to the temp folder) and prints
markdown tables. Data: ../shared/data (override with RECEMB_DATA).
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_eval import QUERY_TASKS, RESULTS, data_dir, load_collection  # noqa: E402

SEED = 20240607
SECTIONS = ("short", "long", "million")
STORES = ("edge", "local")
COLLECTION = "scale"
LIMIT = 10
FILTER_BUCKET = 3  # metadata bucket / payload group searched by the filtered rows (i % 10 == 3: 10%)
TARGET_P95_MS = 50.0
TARGET_RECALL = 0.95
TARGET_STORE_SHARE = 0.10
WARMUP_QUERIES = 3
RSS_POLL_S = 0.1
# torch threads for every embedding here (--torch-threads). One: on this shared 2-core machine two OpenMP
# threads at a lower priority than another process spin at every barrier; measured, 300 short documents took
# 2.6 s on one thread and 42-52 s on two.
TORCH_THREADS = 1
QUICK = {"short": 1500, "long": 6, "million": 20_000, "queries": 30, "probe": 200, "long_probe": 2,
         "real_budget_s": 20.0, "search_budget_s": 20.0, "long_min_kb": 8, "long_max_kb": 16}
SEARCH_ROWS = {  # row -> (mode, filtered)
    "dense": ("dense", False),
    "hybrid": ("hybrid", False),
    "dense, filtered 10%": ("dense", True),
    "hybrid, filtered 10%": ("hybrid", True),
}


# ------------------------------------------------------------------------------------- data


def short_pool(data: Path) -> list[tuple[str, str]]:
    """(source, text) of every short real text, deduplicated and shuffled (a fixed order: prefixes are
    stable)."""
    items: list[tuple[str, str]] = []
    for folder in sorted(p for p in (data / "ir").iterdir() if (p / "corpus.jsonl").is_file()):
        with open(folder / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                text = f"{d.get('title', '')} {d.get('text', '')}".strip()
                if text:
                    items.append((f"ir:{folder.name}", text))
    for book in sorted((data / "long").glob("*.txt")):
        for para in re.split(r"\n\s*\n", book.read_text(encoding="utf-8")):
            para = " ".join(para.split())
            if len(para) >= 80:
                items.append((f"paragraph:{book.stem}", para))
            for sentence in split_sentences(para):
                if len(sentence) >= 40:
                    items.append((f"sentence:{book.stem}", sentence))
    for tsv in sorted((data / "sts").glob("*/*.tsv")):
        if tsv.name == "provenance.tsv":
            continue
        with open(tsv, encoding="utf-8") as f:
            next(f)
            for line in f:
                parts = line.rstrip("\n").split("\t")
                items.extend(("sts", s) for s in parts[:2] if len(s) >= 10)
    seen: set[str] = set()
    unique = []
    for source, text in items:
        if text not in seen:
            seen.add(text)
            unique.append((source, text))
    random.Random(SEED).shuffle(unique)
    return unique


def split_sentences(paragraph: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z\"“‘'])", paragraph)


def short_documents(pool: list[tuple[str, str]], n: int):
    """The first ``n`` documents: the pool in order, cycled with an id suffix ``#k`` past its end."""
    from recemb_integrations.qdrant import Document

    docs = []
    for i in range(n):
        cycle, j = divmod(i, len(pool))
        source, text = pool[j]
        doc_id = f"s{j}" + (f"#{cycle}" if cycle else "")
        docs.append(Document(doc_id, text, {"source": source, "bucket": i % 10}))
    return docs


def books(data: Path) -> list[tuple[str, str]]:
    return [(b.stem, b.read_text(encoding="utf-8")) for b in sorted((data / "long").glob("*.txt"))]


def long_documents(data: Path, n: int, min_kb: int, max_kb: int):
    """``n`` consecutive slices of ``min_kb``-``max_kb`` KB of the books joined (wrapping around), cut at
    whitespace."""
    from recemb_integrations.qdrant import Document

    parts = books(data)
    starts, text = [], ""
    for name, body in parts:
        starts.append(len(text))
        text += body.strip() + "\n\n"
    names = [name for name, _ in parts]
    doubled = text + text
    rng = random.Random(SEED)
    docs, pos = [], 0
    for i in range(n):
        size = rng.randint(min_kb * 1000, max_kb * 1000)
        start = pos % len(text)
        while start > 0 and not text[start - 1].isspace():  # begin at a word
            start += 1
        end = start + size
        while end < len(doubled) and not doubled[end].isspace():
            end += 1
        book = names[bisect.bisect_right(starts, start) - 1]
        docs.append(Document(f"long-{i}", doubled[start:end].strip(), {"book": book, "bucket": i % 10}))
        pos = end
    return docs


def ir_queries(data: Path, n: int) -> list[tuple[str, str | None]]:
    """``n`` real IR queries (text, instruction), drawn from every collection."""
    out = []
    for folder in sorted(p for p in (data / "ir").iterdir() if (p / "corpus.jsonl").is_file()):
        _, _, _, texts, _ = load_collection(folder)
        out.extend((t, QUERY_TASKS.get(folder.name)) for t in texts)
    random.Random(SEED).shuffle(out)
    return out[: n + WARMUP_QUERIES]


def book_queries(data: Path, n: int) -> list[tuple[str, str | None]]:
    """``n`` sentences of the books (40-200 characters) as queries for the long documents."""
    sentences = [s for _, body in books(data) for para in re.split(r"\n\s*\n", body)
                 for s in split_sentences(" ".join(para.split())) if 40 <= len(s) <= 200]
    random.Random(SEED).shuffle(sentences)
    return [(s, None) for s in sentences[: n + WARMUP_QUERIES]]


def short_cache_id(pool: list[tuple[str, str]]) -> str:
    """The short pool's cache name: its first documents identify it (prefixes are stable)."""
    return corpus_id("short", short_documents(pool, min(len(pool), 5000)))


def corpus_id(kind: str, docs, extra: str = "") -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.text.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return f"{kind}{extra}-{h.hexdigest()[:12]}"


# ------------------------------------------------------------------------------------- measuring tools


def ids_key(seq) -> bytes:
    return hashlib.blake2b(np.asarray(seq, dtype=np.int32).tobytes(), digest_size=16).digest()


class VectorCache:
    """Vectors keyed by the token ids they embed (16-byte hashes), appended to two files, and a json record of
    which prefix of a corpus' documents is covered and what embedding it cost (measured when recorded)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.keys_path, self.vectors_path, self.meta_path = (folder / "keys.bin", folder / "vectors.npy.bin",
                                                             folder / "meta.json")
        self.meta = json.loads(self.meta_path.read_text()) if self.meta_path.is_file() else {"covered": 0,
                                                                                             "chunks": []}

    def load(self, dim: int) -> tuple[dict[bytes, int], np.ndarray]:
        if not self.keys_path.is_file():
            return {}, np.zeros((0, dim), np.float32)
        raw = self.keys_path.read_bytes()
        vectors = np.fromfile(self.vectors_path, dtype=np.float32)
        n = min(len(raw) // 16, vectors.size // dim)
        vectors = vectors[: n * dim].reshape(n, dim)
        return {raw[i * 16:(i + 1) * 16]: i for i in range(n)}, vectors

    def save_meta(self) -> None:
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.meta, indent=1))
        os.replace(tmp, self.meta_path)

    def model_seconds(self, n: int, key: str = "model_s") -> float | None:
        """Model time (``key`` "model_cpu_s": CPU time) measured for the first ``n`` documents (pro rata
        within a chunk); None if not covered."""
        if self.meta["covered"] < n:
            return None
        total = 0.0
        for c in self.meta["chunks"]:
            overlap = max(0, min(c["end"], n) - c["start"])
            if c.get(key) is None:
                return None
            total += c[key] * overlap / max(c["end"] - c["start"], 1)
        return total


class Recorder:
    """Appends new (key, vector) pairs to a VectorCache's files as they are embedded."""

    def __init__(self, cache: VectorCache, dim: int):
        self.cache = cache
        known, _ = cache.load(dim)
        self.known = set(known)
        n = len(self.known)
        # Truncate a half-written tail (an interrupted run) so the two files stay aligned.
        with open(cache.keys_path, "ab") as f:
            f.truncate(n * 16)
        with open(cache.vectors_path, "ab") as f:
            f.truncate(n * dim * 4)
        self._keys = open(cache.keys_path, "ab")
        self._vectors = open(cache.vectors_path, "ab")

    def add(self, keys: list[bytes], vectors: np.ndarray) -> None:
        for k, v in zip(keys, vectors):
            if k not in self.known:
                self.known.add(k)
                self._vectors.write(np.ascontiguousarray(v, dtype=np.float32).tobytes())
                self._keys.write(k)

    def close(self) -> None:
        self._vectors.close()
        self._keys.close()


class TimedEmbedder:
    """The real Embedder, forwarded attribute by attribute, with ``embed_token_ids``, ``encode_queries``
    (and ``embed_stream``) timed. ``replay``: (key -> row, vectors): answer from cached vectors, embedding
    only what is missing. ``recorder``: record what is embedded."""

    def __init__(self, real, replay=None, recorder: Recorder | None = None):
        self._real = real
        self._replay = replay
        self._recorder = recorder
        self.model_seconds = 0.0
        self.model_cpu_seconds = 0.0  # process CPU time (all threads): the model's cost, whatever the load
        self.model_tokens = 0
        self.lookup_seconds = 0.0
        self.lookup_cpu_seconds = 0.0
        self.looked_up = 0
        self.misses = 0
        self.query_seconds = 0.0  # encode_queries (a search's query embedding)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def embed_token_ids(self, sequences, normalize: bool = False, batch_size: int = 8,
                        show_progress_bar: bool | None = None, vertical_chunk_size: int | None = None):
        import torch

        seqs = [list(s) for s in sequences]
        kwargs = dict(normalize=normalize, batch_size=batch_size, show_progress_bar=show_progress_bar,
                      vertical_chunk_size=vertical_chunk_size)
        if self._replay is not None and normalize:
            t0, c0 = time.perf_counter(), time.process_time()
            index, vectors = self._replay
            keys = [ids_key(s) for s in seqs]
            rows = [index.get(k) for k in keys]
            out = np.empty((len(seqs), self._real.dim), np.float32)
            hit = [i for i, r in enumerate(rows) if r is not None]
            if hit:
                out[hit] = vectors[[rows[i] for i in hit]]
            self.lookup_seconds += time.perf_counter() - t0
            self.lookup_cpu_seconds += time.process_time() - c0
            self.looked_up += len(hit)
            missing = [i for i, r in enumerate(rows) if r is None]
            if missing:
                self.misses += len(missing)
                out[missing] = self._embed([seqs[i] for i in missing], kwargs).cpu().numpy()
            return torch.from_numpy(out)
        return self._embed(seqs, kwargs)

    def _embed(self, seqs, kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        vectors = self._real.embed_token_ids(seqs, **kwargs)
        self.model_seconds += time.perf_counter() - t0
        self.model_cpu_seconds += time.process_time() - c0
        self.model_tokens += sum(map(len, seqs))
        if self._recorder is not None and kwargs["normalize"]:
            self._recorder.add([ids_key(s) for s in seqs], vectors.cpu().numpy())
        return vectors

    def encode_queries(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._real.encode_queries(*args, **kwargs)
        finally:
            self.query_seconds += time.perf_counter() - t0

    def embed_stream(self, pieces, *args, **kwargs):  # documents over 256K characters (none at these sizes)
        t0 = time.perf_counter()
        try:
            return self._real.embed_stream(pieces, *args, **kwargs)
        finally:
            self.model_seconds += time.perf_counter() - t0


class TimedStore:
    """A store proxy: every method call forwarded to the real store and timed (per method)."""

    def __init__(self, store):
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "seconds", defaultdict(float))
        object.__setattr__(self, "calls", defaultdict(int))
        object.__setattr__(self, "cpu_seconds", defaultdict(float))

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.cpu_seconds[name] += time.process_time() - c0
                self.calls[name] += 1

        return timed

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    @property
    def total_cpu(self) -> float:
        return sum(self.cpu_seconds.values())


def null_store():
    """A store that keeps nothing: a sync into it does all of its non-store work (and records the
    embeddings)."""
    from recemb_integrations.stores import CollectionInfo, Store

    class NullStore(Store):
        kind, location = "null", "nowhere"

        def __init__(self):
            self.collections: dict[str, CollectionInfo] = {}

        def collection_exists(self, c):
            return c in self.collections

        def collection_info(self, c):
            return self.collections[c]

        def list_collections(self):
            return sorted(self.collections)

        def create_collection(self, c, dense_size, sparse, metadata):
            self.collections[c] = CollectionInfo(metadata, dense_size, sparse)

        def update_metadata(self, c, metadata):
            info = self.collections[c]
            self.collections[c] = CollectionInfo(metadata, info.dense_size, info.sparse)

        def delete_collection(self, c):
            self.collections.pop(c)

        def create_payload_index(self, c, key, schema):
            pass

        def upsert(self, c, points):
            pass

        def delete(self, c, filter):
            pass

        def set_payload(self, c, payload, ids=None, filter=None):
            pass

        def scroll(self, c, limit, offset=None, filter=None, with_payload=True, with_vectors=False):
            return [], None

        def count(self, c, filter=None):
            return 0

        def retrieve(self, c, ids, with_vectors=False):
            return []

        def query(self, c, request):
            return []

        def query_groups(self, c, request, group_by, group_size):
            return []

    return NullStore()


class RssMonitor:
    """Peak resident set size per phase (psutil, polled), and the current RSS on demand."""

    def __init__(self):
        import psutil

        self._proc = psutil.Process()
        self.phase = "start"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss_mib(self) -> float:
        return self._proc.memory_info().rss / 2**20

    def _run(self):
        while not self._stop.wait(RSS_POLL_S):
            self.sample()

    def sample(self):
        rss = self.rss_mib()
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), rss)

    def enter(self, phase: str) -> float:
        self.sample()
        self.phase = phase
        rss = self.rss_mib()
        self.peaks[phase] = max(self.peaks.get(phase, 0.0), rss)
        return rss

    def stop(self) -> dict[str, float]:
        self.sample()
        self._stop.set()
        self._thread.join()
        return {k: round(v, 1) for k, v in self.peaks.items()}


def disk_usage(path: Path) -> dict[str, float]:
    allocated = apparent = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    return {"allocated_mib": round(allocated / 2**20, 1), "apparent_mib": round(apparent / 2**20, 1),
            "files": files}


def percentiles(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50_ms": None, "p95_ms": None, "mean_ms": None}
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "mean_ms": round(float(ms.mean()), 2)}


def load_embedder(model: str, threads: int):
    import torch

    from recemb.core import Embedder

    torch.set_num_threads(threads)
    return Embedder.from_pretrained(model)


def versions() -> dict[str, str | None]:
    out = {}
    for pkg in ("qdrant-client", "qdrant-edge-py", "torch", "numpy", "recemb"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def machine() -> dict:
    facts = {"cpu_count": os.cpu_count(), "platform": platform.platform(),
             "python": platform.python_version(), "machine": platform.machine(),
             **{f"version_{k}": v for k, v in versions().items()}}
    try:
        facts["cpu_model"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                                  if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        facts["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
        facts["load_average_at_start"] = os.getloadavg()
    except (OSError, ValueError, AttributeError):
        pass
    return facts


# ------------------------------------------------------------------------------------- embedding (parent)


def null_sync(embedder, docs, batch_size: int, passages: tuple[int, int] | None,
              recorder: Recorder | None) -> dict:
    """A sync of ``docs`` into a store that keeps nothing: its seconds are the sync's non-store work."""
    from recemb_integrations.qdrant import QdrantSync

    timed = TimedEmbedder(embedder, recorder=recorder)
    kwargs = {} if passages is None else {"passage_tokens": passages[0], "passage_overlap": passages[1]}
    sync = QdrantSync(null_store(), COLLECTION, timed, batch_size=batch_size, **kwargs)
    sync._fingerprint = "benchmark"  # not the work being measured (computed once per real sync)
    c0 = time.process_time()
    report = sync.sync(docs, show_progress_bar=False)
    cpu = time.process_time() - c0
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} documents failed: {report.failed[:3]}")
    return {"docs": len(docs), "sync_s": report.seconds, "sync_cpu_s": cpu, "model_s": timed.model_seconds,
            "model_cpu_s": timed.model_cpu_seconds, "tokens": report.embedded_tokens,
            "model_tokens": timed.model_tokens, "load_average": os.getloadavg()}


def chunk_record(start: int, end: int, r: dict) -> dict:
    """What recording documents ``start``-``end`` cost (a null sync's result ``r``): kept in the cache's
    meta."""
    return {"start": start, "end": end, "sync_s": round(r["sync_s"], 3), "model_s": round(r["model_s"], 3),
            "model_cpu_s": round(r["model_cpu_s"], 3), "tokens": r["tokens"],
            "load_average": r["load_average"],
            "recorded": datetime.datetime.now().isoformat(timespec="seconds")}


def extend_cache(embedder, cache: VectorCache, docs, batch_size: int, passages, upto: int, chunk: int,
                 budget_s: float | None = None, label: str = "") -> None:
    """Record embeddings until the first ``upto`` documents are covered (or ``budget_s`` is spent)."""
    recorder = Recorder(cache, embedder.dim)
    started = time.time()
    try:
        while cache.meta["covered"] < upto:
            if budget_s is not None and time.time() - started >= budget_s:
                break
            start = cache.meta["covered"]
            end = min(upto, start + chunk)
            r = null_sync(embedder, docs[start:end], batch_size, passages, recorder)
            cache.meta["chunks"].append(chunk_record(start, end, r))
            cache.meta["covered"] = end
            cache.save_meta()
            done = time.time() - started
            print(f"  {label}embedded documents {start:,}-{end:,} ({r['tokens']:,} tokens, model "
                  f"{r['model_s']:.0f} s ({r['model_cpu_s']:.0f} s CPU), sync without store "
                  f"{r['sync_s']:.0f} s; {done:.0f} s so far; load average {r['load_average'][0]:.1f})",
                  flush=True)
    finally:
        recorder.close()


def probe(embedder, cache: VectorCache, docs, batch_size: int, passages, n: int) -> dict:
    """The sync's non-store speed on the first ``n`` documents (recorded into the cache as a side effect)."""
    recorder = Recorder(cache, embedder.dim)
    try:
        r = null_sync(embedder, docs[:n], batch_size, passages, recorder)
    finally:
        recorder.close()
    if cache.meta["covered"] == 0:  # the probe's documents are the cache's first chunk
        cache.meta["chunks"].append(chunk_record(0, n, r))
        cache.meta["covered"] = n
        cache.save_meta()
    r["docs_per_s"] = n / r["sync_s"]
    r["tokens_per_s"] = r["tokens"] / r["sync_s"]
    return r


# ------------------------------------------------------------------------------------- children


SPEC_PATHS = ("work", "result", "record")  # spec keys that do not change what a configuration measures


def same_spec(a: dict, b: dict) -> bool:
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))  # tuples as lists, as read back
    return ({k: v for k, v in a.items() if k not in SPEC_PATHS}
            == {k: v for k, v in b.items() if k not in SPEC_PATHS})


def run_child(spec: dict, label: str, resume: bool = False) -> dict:
    """One configuration in its own process; its result, with its wall time. ``resume``: a result that an
    earlier run left in the work folder for the same spec is taken instead (a run killed midway goes on)."""
    folder = Path(spec["work"])
    folder.mkdir(parents=True, exist_ok=True)
    spec_path = folder / f"{label}.spec.json"
    result_path = folder / f"{label}.result.json"
    if resume and spec_path.is_file() and result_path.is_file() and same_spec(
            json.loads(spec_path.read_text()), spec):
        result = json.loads(result_path.read_text())
        written = result_path.stat().st_mtime
        result["reused"] = (f"measured by an earlier run of this script (result written "
                            f"{datetime.datetime.fromtimestamp(written):%Y-%m-%d %H:%M})")
        result.setdefault("process_wall_s", round(written - spec_path.stat().st_mtime, 1))
        print(f"[{label}] reusing the result of an earlier run with the same settings ({result_path})",
              flush=True)
        return result
    spec["result"] = str(result_path)
    spec_path.write_text(json.dumps(spec))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path)])
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or not result_path.is_file():
        raise SystemExit(f"{label}: child exited {code}")
    result = json.loads(result_path.read_text())
    result["ru_maxrss_mib"] = round(usage.ru_maxrss / 1024, 1)  # the parent's RSS at fork too: see vm_hwm_mib
    result["process_wall_s"] = round(time.perf_counter() - start, 1)
    return result


def child_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    warnings.filterwarnings("ignore", message=".*(Local mode|local mode|Payload indexes).*")
    result = {"sync": child_sync, "million": child_million}[spec["task"]](spec)
    result["peak_rss_mib"] = vm_hwm_mib()
    Path(spec["result"]).write_text(json.dumps(result))


def vm_hwm_mib() -> float | None:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries a parent's RSS at fork into the
    child's ru_maxrss across exec, and the parent here holds the model."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def child_sync(spec: dict) -> dict:
    """Sync the documents into a fresh store, reopen it, search it."""
    from recemb_integrations.qdrant import QdrantSync, SearchNotice
    from recemb_integrations.stores import open_store

    monitor = RssMonitor()
    data = Path(spec["data"])
    embedder = load_embedder(spec["model"], spec["torch_threads"])
    if spec["section"] == "short":
        docs = short_documents(short_pool(data), spec["n"])
        queries = ir_queries(data, spec["queries"])
    else:
        docs = long_documents(data, spec["n"], spec["long_min_kb"], spec["long_max_kb"])
        queries = book_queries(data, spec["queries"])
    passages = spec.get("passages")
    kwargs = {} if passages is None else {"passage_tokens": passages[0], "passage_overlap": passages[1]}
    replay = recorder = None
    if spec["mode"] == "cached":
        replay = VectorCache(Path(spec["cache"])).load(embedder.dim)
    elif spec.get("record"):
        recorder = Recorder(VectorCache(Path(spec["cache"])), embedder.dim)
    timed = TimedEmbedder(embedder, replay=replay, recorder=recorder)
    path = Path(spec["work"]) / f"{spec['section']}-{spec['kind']}"
    shutil.rmtree(path, ignore_errors=True)
    out: dict = {"section": spec["section"], "kind": spec["kind"], "mode": spec["mode"],
                 "documents": len(docs)}
    # The model (and any cached vectors) loaded, no store yet:
    out["rss_baseline_mib"] = round(monitor.enter("sync"), 1)
    tag = f"[{spec['section']}/{spec['kind']}]"
    print(f"{tag} syncing {len(docs):,} documents ({spec['mode']} embeddings) ...", flush=True)

    store = TimedStore(open_store(path=path, kind=spec["kind"]))
    sync = QdrantSync(store, COLLECTION, timed, batch_size=spec["batch_size"], **kwargs)
    load_before, c0 = os.getloadavg(), time.process_time()
    report = sync.sync(docs, show_progress_bar=False)
    sync_cpu = time.process_time() - c0
    if recorder is not None:
        recorder.close()
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} documents failed: {report.failed[:3]}")
    store_s, store_cpu = store.total, store.total_cpu
    by_method, calls = dict(store.seconds), dict(store.calls)
    points = store.count(COLLECTION)
    out["sync"] = {
        "seconds": report.seconds, "added": report.added, "points": points,
        "embedded_tokens": report.embedded_tokens,
        "store_s": store_s, "store_s_by_method": {k: round(v, 3) for k, v in by_method.items()},
        "store_calls": calls,
        "cpu_s": sync_cpu, "store_cpu_s": store_cpu, "model_cpu_s": timed.model_cpu_seconds,
        "lookup_cpu_s": timed.lookup_cpu_seconds, "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "model_s": timed.model_seconds, "model_tokens": timed.model_tokens, "lookup_s": timed.lookup_seconds,
        "cache_hits": timed.looked_up, "cache_misses": timed.misses,
        "warnings": [w for _, w in report.warnings][:3], "n_warnings": len(report.warnings)}
    print(f"{tag} synced {points:,} points in {report.seconds:.1f} s (store {store_s:.1f} s: "
          + ", ".join(f"{k} {v:.1f}" for k, v in by_method.items() if v >= 0.05) + ")", flush=True)
    monitor.enter("close+reopen")
    store.close()
    out["disk"] = disk_usage(path)
    t0 = time.perf_counter()
    reopened = open_store(path=path, kind=spec["kind"])
    opened_s = time.perf_counter() - t0
    count = reopened.count(COLLECTION)
    out["reopen"] = {"open_s": opened_s, "open_and_count_s": time.perf_counter() - t0, "count": count}
    print(f"{tag} disk {out['disk']['allocated_mib']:.0f} MiB; reopen + count "
          f"{out['reopen']['open_and_count_s']:.2f} s", flush=True)

    monitor.enter("search")
    store = TimedStore(reopened)
    query_embedder = TimedEmbedder(embedder)
    searcher = QdrantSync.open(store, COLLECTION, query_embedder)
    warm, measured = queries[:WARMUP_QUERIES], queries[WARMUP_QUERIES:]
    rows: dict = {}
    no_terms = violations = 0

    def one(text, instruction, mode, filtered):
        nonlocal no_terms, violations
        before, embedded = store.total, query_embedder.query_seconds
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hits = searcher.search(text, limit=LIMIT, instruction=instruction, mode=mode,
                                   filter={"bucket": FILTER_BUCKET} if filtered else None)
        elapsed = time.perf_counter() - t0
        no_terms += any(issubclass(w.category, SearchNotice) for w in caught)
        if filtered:  # a store that ignored the filter would look fast: counted, reported
            violations += sum(h.metadata.get("bucket") != FILTER_BUCKET for h in hits)
        return elapsed, store.total - before, query_embedder.query_seconds - embedded, len(hits)

    cold = one(*warm[0], "hybrid", False)
    out["first_query_after_reopen_ms"] = round(cold[0] * 1000, 2)
    for q in warm[1:]:
        one(*q, "hybrid", False)
    for row, (mode, filtered) in SEARCH_ROWS.items():
        total, store_part, embed_part, started, empty = [], [], [], time.perf_counter(), 0
        for text, instruction in measured:
            if time.perf_counter() - started > spec["search_budget_s"]:
                break
            e, s, q, n = one(text, instruction, mode, filtered)
            total.append(e)
            store_part.append(s)
            embed_part.append(q)
            empty += n == 0
        r = rows[row] = {"queries": len(total), "end_to_end": percentiles(total),
                         "store": percentiles(store_part), "query_embedding": percentiles(embed_part),
                         "slowest_ms": round(max(total, default=0) * 1000, 1), "empty_results": empty,
                         "stopped_by_budget": len(total) < len(measured)}
        print(f"{tag} {row:<22} {len(total)} queries: p50 {r['end_to_end']['p50_ms']} ms, p95 "
              f"{r['end_to_end']['p95_ms']} ms (store p50 {r['store']['p50_ms']} ms, p95 "
              f"{r['store']['p95_ms']} ms; query embedding p95 {r['query_embedding']['p95_ms']} ms)",
              flush=True)
    out["search"] = rows
    out["load_average_after_search"] = os.getloadavg()
    out["queries_without_bm25_terms"] = no_terms
    out["filtered_hits_outside_filter"] = violations
    out["rss_peaks_mib"] = monitor.stop()
    reopened.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


def child_million(spec: dict) -> dict:
    """Edge at N points: upsert, optimize, reopen, then latency and recall@10 per hnsw_ef."""
    from qdrant_client import models

    import recemb_integrations.stores.edge_layouts as edge
    from recemb_integrations.stores import INTEGER, SearchRequest, StoredPoint
    from recemb_integrations.stores.edge import EdgeStore

    monitor = RssMonitor()
    n, batch = spec["n"], spec["upsert_batch"]
    t0 = time.perf_counter()
    real = np.load(spec["real"])
    queries = np.load(spec["queries"])
    vectors, n_real = build_vectors(real, n, spec["noise"])
    del real
    build_s = time.perf_counter() - t0
    groups = np.arange(n) % 10
    filtered_rows = np.flatnonzero(groups == FILTER_BUCKET)
    print(f"[million] {n:,} vectors ({n_real:,} real embeddings, {n - n_real:,} mixtures) built in "
          f"{build_s:.1f} s; exact search ...", flush=True)
    t0 = time.perf_counter()
    exact = exact_top(vectors, queries, LIMIT)
    exact_filtered = filtered_rows[exact_top(vectors[filtered_rows], queries, LIMIT)]
    exact_s = time.perf_counter() - t0
    out: dict = {"points": n, "real_embeddings": n_real, "mixtures": n - n_real, "build_vectors_s": build_s,
                 "exact_search_s": exact_s, "queries": len(queries), "upsert_batch": batch}
    out["rss_baseline_mib"] = round(monitor.enter("upsert"), 1)  # the vectors held for exact search, no store

    path = Path(spec["work"]) / "million-edge"
    shutil.rmtree(path, ignore_errors=True)
    store = EdgeStore(path)
    store.create_collection(COLLECTION, vectors.shape[1], False, {})
    store.create_payload_index(COLLECTION, "group", INTEGER)
    t0, c0 = time.perf_counter(), time.process_time()
    report_every = max(n // 10, batch)
    for start in range(0, n, batch):
        end = min(n, start + batch)
        store.upsert(COLLECTION, [StoredPoint(str(uuid.UUID(int=i)), {"document_id": f"doc-{i // 8}",
                                                                     "kind": "passage", "group": int(i % 10)},
                                              {"dense": vectors[i].tolist()}) for i in range(start, end)])
        if end % report_every < batch or end == n:
            print(f"[million] upserted {end:,} ({time.perf_counter() - t0:.0f} s)", flush=True)
    out["upsert_s"] = time.perf_counter() - t0
    out["upsert_cpu_s"] = time.process_time() - c0
    out["load_average_after_upsert"] = os.getloadavg()
    out["upsert_points_per_s"] = n / out["upsert_s"]
    out["disk_before_optimize"] = disk_usage(path)
    monitor.enter("optimize")
    t0, c0 = time.perf_counter(), time.process_time()
    store.optimize(COLLECTION, show_progress_bar=False, force=True)
    out["optimize_s"] = time.perf_counter() - t0
    out["optimize_cpu_s"] = time.process_time() - c0
    out["load_average_after_optimize"] = os.getloadavg()
    print(f"[million] upsert {out['upsert_s']:.0f} s, optimize {out['optimize_s']:.0f} s", flush=True)
    monitor.enter("close+reopen")
    store.close()
    out["disk"] = disk_usage(path)
    t0 = time.perf_counter()
    store = EdgeStore(path)
    count = store.count(COLLECTION)
    out["reopen"] = {"open_and_count_s": time.perf_counter() - t0, "count": count}
    monitor.enter("search")
    flt = models.Filter(must=[models.FieldCondition(key="group",
                                                    match=models.MatchValue(value=FILTER_BUCKET))])
    violations = [0]

    def search(q, filtered):
        t = time.perf_counter()
        hits = store.query(COLLECTION, SearchRequest(limit=LIMIT, dense=q.tolist(), candidates=LIMIT,
                                                     filter=flt if filtered else None, with_payload=True))
        elapsed = time.perf_counter() - t
        found = [uuid.UUID(h.id).int for h in hits]
        if filtered:
            violations[0] += sum(f % 10 != FILTER_BUCKET for f in found)
        return elapsed, found

    out["first_query_after_reopen_ms"] = round(search(queries[0], False)[0] * 1000, 2)
    for q in queries[1:1 + WARMUP_QUERIES]:
        search(q, False)
    default_ef = edge.HNSW_EF
    out["module_hnsw_ef"] = default_ef
    sweeps = []
    for ef in spec["hnsw_ef"]:
        edge.HNSW_EF = ef
        row = {"hnsw_ef": ef, "effective_ef": max(ef, LIMIT)}
        for name, filtered, truth in (("unfiltered", False, exact), ("filtered", True, exact_filtered)):
            lat, recall = [], []
            for qi, q in enumerate(queries):
                e, found = search(q, filtered)
                lat.append(e)
                recall.append(len(set(found) & set(truth[qi].tolist())) / LIMIT)
            row[name] = {"recall@10": round(float(np.mean(recall)), 4), **percentiles(lat),
                         "min_recall@10": round(float(np.min(recall)), 2)}
        sweeps.append(row)
        print(f"[million] hnsw_ef {ef}: recall@10 {row['unfiltered']['recall@10']:.3f} p95 "
              f"{row['unfiltered']['p95_ms']} ms; filtered recall@10 {row['filtered']['recall@10']:.3f} p95 "
              f"{row['filtered']['p95_ms']} ms", flush=True)
    edge.HNSW_EF = default_ef
    out["sweep"] = sweeps
    out["load_average_after"] = os.getloadavg()
    out["filtered_hits_outside_filter"] = violations[0]
    out["rss_peaks_mib"] = monitor.stop()
    store.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


def build_vectors(real: np.ndarray, n: int, noise: float) -> tuple[np.ndarray, int]:
    """The real embeddings first, then convex mixtures of two random real ones plus Gaussian noise of norm
    about ``noise``, re-normalised."""
    real = real / np.linalg.norm(real, axis=1, keepdims=True)
    n_real = min(len(real), n)
    d = real.shape[1]
    out = np.empty((n, d), np.float32)
    out[:n_real] = real[:n_real]
    rng = np.random.default_rng(SEED)
    for start in range(n_real, n, 65536):
        end = min(n, start + 65536)
        m = end - start
        a, b = rng.integers(0, len(real), m), rng.integers(0, len(real), m)
        w = rng.uniform(0.0, 1.0, (m, 1)).astype(np.float32)
        jitter = rng.standard_normal((m, d)).astype(np.float32) * (noise / d ** 0.5)
        mix = w * real[a] + (1 - w) * real[b] + jitter
        out[start:end] = mix / np.linalg.norm(mix, axis=1, keepdims=True)
    return out, n_real


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the ``k`` highest cosine scores per query (unit vectors: dot products), brute force."""
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    best_s = np.full((len(q), 0), -np.inf, np.float32)
    best_i = np.zeros((len(q), 0), np.int64)
    for start in range(0, len(vectors), 131072):
        s = q @ vectors[start:start + 131072].T
        top = np.argpartition(-s, min(k, s.shape[1] - 1), axis=1)[:, :k]
        best_s = np.concatenate([best_s, np.take_along_axis(s, top, 1)], 1)
        best_i = np.concatenate([best_i, top + start], 1)
        keep = np.argsort(-best_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    return best_i


# ------------------------------------------------------------------------------------- sections (parent)


def decide_mode(requested: str, section: str, estimate_s: float, limit_min: float) -> str:
    """``requested``: "auto", "live", "cached", or per section ("short:live,long:auto")."""
    if ":" in requested:
        requested = dict(part.split(":", 1) for part in requested.split(",")).get(section, "auto")
    if requested not in ("auto", "live", "cached"):
        raise SystemExit(f"--embedding: unknown mode {requested!r} for {section}")
    if requested != "auto":
        return requested
    return "cached" if estimate_s > limit_min * 60 else "live"


def run_sync_section(section: str, args, embedder, data: Path, work: Path) -> dict:
    if section == "short":
        pool = short_pool(data)
        docs = short_documents(pool, args.short)
        passages, batch_size, probe_n, chunk = None, args.batch_size, args.probe, 5000
        cid = short_cache_id(pool)
    else:
        docs = long_documents(data, args.long, args.long_min_kb, args.long_max_kb)
        passages = (args.passage_tokens, args.passage_overlap)
        batch_size, probe_n, chunk = args.long_batch_size, args.long_probe, 50
        cid = corpus_id("long", docs[:50],
                        f"-{args.long_min_kb}-{args.long_max_kb}-p{passages[0]}-o{passages[1]}")
    cache = VectorCache(Path(args.cache_dir) / f"{Path(embedder.name).name}-{cid}")
    n = len(docs)
    chars = sum(len(d.text) for d in docs)
    print(f"\n== {section}: {n:,} documents, {chars / 1e6:.1f} M characters"
          + (f", passages {passages[0]}/{passages[1]} tokens" if passages else "")
          + f"; cache {cache.folder}", flush=True)
    probe_n = min(probe_n, n)
    p = probe(embedder, cache, docs, batch_size, passages, probe_n)
    per_doc = p["sync_s"] / probe_n
    estimate = per_doc * n
    mode = decide_mode(args.embedding, section, estimate, args.live_limit_min)
    print(f"  probe: {probe_n} documents, sync without a store {p['sync_s']:.1f} s ({p['docs_per_s']:.1f} "
          f"docs/s, {p['tokens_per_s']:,.0f} tokens/s, model {p['model_s']:.1f} s) -> a live sync of {n:,} "
          f"would take about {estimate / 60:.1f} min per store: {mode} embeddings", flush=True)
    out: dict = {"documents": n, "characters": chars, "passages": passages, "batch_size": batch_size,
                 "probe": p, "live_estimate_min_per_store": estimate / 60, "mode": mode,
                 "cache": str(cache.folder), "stores": {}}
    if mode == "cached":
        t0 = time.time()
        extend_cache(embedder, cache, docs, batch_size, passages, n, chunk, label=f"{section}: ")
        out["embed_once_wall_s"] = time.time() - t0
        out["model_s_measured_once"] = cache.model_seconds(n)
        out["model_cpu_s_measured_once"] = cache.model_seconds(n, "model_cpu_s")
        out["cache_chunks"] = [c for c in cache.meta["chunks"] if c["start"] < n]
    for i, kind in enumerate(STORES):
        spec = {"task": "sync", "section": section, "kind": kind, "mode": mode, "n": n, "data": str(data),
                "model": args.model, "queries": args.queries, "batch_size": batch_size, "passages": passages,
                "cache": str(cache.folder), "work": str(work), "search_budget_s": args.search_budget_s,
                "long_min_kb": args.long_min_kb, "long_max_kb": args.long_max_kb,
                "torch_threads": args.torch_threads,
                # a live sync records its embeddings once, for the million section's real vectors
                "record": mode == "live" and section == "short" and i == 0 and cache.meta["covered"] < n}
        r = run_child(spec, f"{section}-{kind}", args.resume)
        if spec["record"]:
            cache.meta["chunks"] = [{"start": 0, "end": n, "sync_s": None,
                                     "model_s": round(r["sync"]["model_s"], 3),
                                     "model_cpu_s": round(r["sync"]["model_cpu_s"], 3),
                                     "tokens": r["sync"]["embedded_tokens"], "recorded": "live sync (edge)"}]
            cache.meta["covered"] = n
            cache.save_meta()
        derive_sync(r, out)
        out["stores"][kind] = r
    return out


def derive_sync(r: dict, section: dict) -> None:
    """Whole-sync time (measured live, or estimated for cached embeddings) and its shares."""
    s = r["sync"]
    if r["mode"] == "cached":
        model = section["model_s_measured_once"] + s["model_s"]  # misses (if any) were embedded live
        total = s["seconds"] - s["lookup_s"] - s["model_s"] + model
        how = ("estimated: this sync's measured seconds with cached embeddings, minus its cache look-ups, "
               "plus the model time measured once for the same documents")
    else:
        model, total = s["model_s"], s["seconds"]
        how = "measured: the sync ran the model live"
    if r["mode"] == "cached":
        model_cpu = (section.get("model_cpu_s_measured_once") or 0.0) + s["model_cpu_s"]
        total_cpu = s["cpu_s"] - s["lookup_cpu_s"] - s["model_cpu_s"] + model_cpu
    else:
        model_cpu, total_cpu = s["model_cpu_s"], s["cpu_s"]
    s.update({"total_s": total, "total_how": how, "model_total_s": model,
              "docs_per_s": r["documents"] / total, "tokens_per_s": s["embedded_tokens"] / total,
              "store_share": s["store_s"] / total, "model_share": model / total,
              "other_share": max(0.0, 1 - (s["store_s"] + model) / total),
              # CPU time of the process (all threads): the same shares, less sensitive to other load
              "total_cpu_s": total_cpu, "model_total_cpu_s": model_cpu,
              "store_share_cpu": s["store_cpu_s"] / total_cpu if total_cpu > 0 else None})


def run_million(args, embedder, data: Path, work: Path) -> dict:
    pool = short_pool(data)
    docs = short_documents(pool, min(len(pool), args.million))
    cid = short_cache_id(pool)
    cache = VectorCache(Path(args.cache_dir) / f"{Path(embedder.name).name}-{cid}")
    print(f"\n== million: Edge at {args.million:,} points; real embeddings from {cache.folder} "
          f"({cache.meta['covered']:,} documents covered)", flush=True)
    t0 = time.time()
    if cache.meta["covered"] < len(docs) and args.real_budget_s > 0:
        if cache.meta["covered"] == 0:
            probe(embedder, cache, docs, args.batch_size, None, min(args.probe, len(docs)))
        extend_cache(embedder, cache, docs, args.batch_size, None, len(docs), 2000,
                     budget_s=args.real_budget_s, label="million: ")
    embed_wall = time.time() - t0
    _, real = cache.load(embedder.dim)
    real = real[: args.million]
    if len(real) == 0:
        raise SystemExit("no real embeddings to build the million section's vectors from")
    queries_text = ir_queries(data, args.million_queries)[: args.million_queries]
    t0 = time.time()
    by_instruction: dict = defaultdict(list)
    for i, (text, instruction) in enumerate(queries_text):
        by_instruction[instruction].append(i)
    q = np.empty((len(queries_text), embedder.dim), np.float32)
    for instruction, idx in by_instruction.items():
        q[idx] = embedder.encode_queries([queries_text[i][0] for i in idx], instruction=instruction,
                                         show_progress_bar=False)
    query_s = time.time() - t0
    real_path, query_path = work / "million-real.npy", work / "million-queries.npy"
    np.save(real_path, real)
    np.save(query_path, q)
    del real
    spec = {"task": "million", "n": args.million, "real": str(real_path), "queries": str(query_path),
            "noise": args.noise, "upsert_batch": args.upsert_batch, "hnsw_ef": args.hnsw_ef,
            "work": str(work)}
    r = run_child(spec, "million", args.resume)
    r.update({"embedding_wall_s_this_run": embed_wall, "query_embedding_s": query_s, "noise_norm": args.noise,
              "vectors_how": (f"{r['real_embeddings']:,} real embeddings of real short texts (the short "
                              "section's documents, embedded by the bundled model)"
                              + (f"; the other {r['mixtures']:,} are convex mixtures w*a + (1-w)*b of two "
                                 "random real embeddings (w uniform in [0, 1]) plus Gaussian noise of norm "
                                 f"~{args.noise}, re-normalised: SYNTHETIC, derived from real ones"
                                 if r["mixtures"] else "")),
              "queries_how": f"{len(queries_text)} real IR queries embedded with encode_queries (their "
                             "collection's instruction), not in the collection"})
    for path in (real_path, query_path):
        path.unlink(missing_ok=True)
    return r


# ------------------------------------------------------------------------------------- report


def fmt(v, digits=1, pct=False):
    if v is None:
        return "—"
    if pct:
        return f"{100 * v:.{digits}f}%"
    return f"{v:,.{digits}f}"


def md_row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def md_header(names: list[str], left: int) -> list[str]:
    return [md_row(names), "|" + "---|" * left + "---:|" * (len(names) - left)]


def sync_stores(results: dict):
    for section in ("short", "long"):
        for kind, r in (results.get(section) or {}).get("stores", {}).items():
            yield section, kind, r


def sync_table(results: dict) -> str:
    lines = md_header(["section", "store", "embeddings", "docs", "points", "sync s", "docs/s", "tokens/s",
                       "store s", "store share", "store share (CPU time)", "model share", "other share",
                       "peak RSS MiB", "RSS before store MiB", "disk MiB (du)", "reopen + count s",
                       "configuration wall min"], 3)
    for section, kind, r in sync_stores(results):
        s = r["sync"]
        est = "*" if r["mode"] == "cached" else ""
        lines.append(md_row([
            section, kind, r["mode"], f"{r['documents']:,}", f"{s['points']:,}", fmt(s["total_s"]) + est,
            fmt(s["docs_per_s"]) + est, fmt(s["tokens_per_s"], 0) + est, fmt(s["store_s"]),
            fmt(s["store_share"], 1, True) + est, fmt(s["store_share_cpu"], 1, True) + est,
            fmt(s["model_share"], 1, True) + est, fmt(s["other_share"], 1, True) + est,
            fmt(r["peak_rss_mib"], 0), fmt(r["rss_baseline_mib"], 0), fmt(r["disk"]["allocated_mib"], 0),
            fmt(r["reopen"]["open_and_count_s"], 2), fmt((r.get("process_wall_s") or 0) / 60)]))
    return "\n".join(lines)


def store_methods_table(results: dict) -> str:
    lines = md_header(["section", "store", "upsert s", "optimize s", "other store calls s", "upsert calls"],
                      2)
    for section, kind, r in sync_stores(results):
        by = r["sync"]["store_s_by_method"]
        other = sum(v for k, v in by.items() if k not in ("upsert", "optimize"))
        lines.append(md_row([section, kind, fmt(by.get("upsert", 0)), fmt(by.get("optimize", 0)), fmt(other),
                             f"{r['sync']['store_calls'].get('upsert', 0):,}"]))
    return "\n".join(lines)


def search_table(results: dict) -> str:
    lines = md_header(["section", "store", "search", "queries", "p50 ms", "p95 ms", "store p50 ms",
                       "store p95 ms", "query embedding p50 ms", "p95 ms", "slowest ms"], 3)
    for section, kind, r in sync_stores(results):
        for row, s in r["search"].items():
            queries = f"{s['queries']}" + (" (budget)" if s["stopped_by_budget"] else "")
            lines.append(md_row([section, kind, row, queries, fmt(s["end_to_end"]["p50_ms"]),
                                 fmt(s["end_to_end"]["p95_ms"]), fmt(s["store"]["p50_ms"]),
                                 fmt(s["store"]["p95_ms"]), fmt(s["query_embedding"]["p50_ms"]),
                                 fmt(s["query_embedding"]["p95_ms"]), fmt(s["slowest_ms"])]))
        lines.append(md_row([section, kind, "first query after reopen (hybrid, cold)", 1,
                             fmt(r["first_query_after_reopen_ms"]), "", "", "", "", "", ""]))
    return "\n".join(lines)


def million_tables(m: dict) -> str:
    phases = ", ".join(f"{k} {v:,.0f}" for k, v in m["rss_peaks_mib"].items())
    lines = md_header(["points", "real embeddings", "upsert s", "points/s", "optimize s", "reopen + count s",
                       "disk MiB (du)", "peak RSS MiB", "RSS before store MiB", "RSS peaks by phase MiB"], 0)
    lines.append(md_row([f"{m['points']:,}", f"{m['real_embeddings']:,}", fmt(m["upsert_s"]),
                         fmt(m["upsert_points_per_s"], 0), fmt(m["optimize_s"]),
                         fmt(m["reopen"]["open_and_count_s"], 2), fmt(m["disk"]["allocated_mib"], 0),
                         fmt(m["peak_rss_mib"], 0), fmt(m["rss_baseline_mib"], 0), phases]))
    lines.append("")
    lines += md_header(["hnsw_ef", "recall@10", "p50 ms", "p95 ms", "filtered recall@10", "filtered p50 ms",
                        "filtered p95 ms"], 0)
    for row in m["sweep"]:
        u, f = row["unfiltered"], row["filtered"]
        ef = f"{row['hnsw_ef']}" + (" (module default)" if row["hnsw_ef"] == m["module_hnsw_ef"] else "")
        lines.append(md_row([ef, f"{u['recall@10']:.3f}", fmt(u["p50_ms"], 2), fmt(u["p95_ms"], 2),
                             f"{f['recall@10']:.3f}", fmt(f["p50_ms"], 2), fmt(f["p95_ms"], 2)]))
    return "\n".join(lines)


def meets(row: dict) -> bool:
    return all(row[k]["recall@10"] >= TARGET_RECALL and row[k]["p95_ms"] <= TARGET_P95_MS
               for k in ("unfiltered", "filtered"))


def targets(results: dict) -> list[dict]:
    out = []
    m = results.get("million")
    if m:
        default = next((r for r in m["sweep"] if r["hnsw_ef"] == m["module_hnsw_ef"]), m["sweep"][0])
        for name in ("unfiltered", "filtered"):
            r = default[name]
            where = f"{m['points']:,} points, {name}"
            out.append({"target": f"{where}: p95 <= {TARGET_P95_MS:g} ms (hnsw_ef {default['hnsw_ef']})",
                        "value": r["p95_ms"], "met": r["p95_ms"] <= TARGET_P95_MS})
            out.append({"target": f"{where}: recall@10 >= {TARGET_RECALL} (hnsw_ef {default['hnsw_ef']})",
                        "value": r["recall@10"], "met": r["recall@10"] >= TARGET_RECALL})
        ok = [r["hnsw_ef"] for r in m["sweep"] if meets(r)]
        out.append({"target": "smallest hnsw_ef tried meeting both targets, unfiltered and filtered",
                    "value": min(ok) if ok else None, "met": bool(ok)})
    for section in ("short", "long"):
        sec = results.get(section)
        if sec and "edge" in sec["stores"]:
            s = sec["stores"]["edge"]["sync"]
            out.append({"target": f"{section} sync on Edge: store share < {TARGET_STORE_SHARE:.0%}"
                                  + (" (of the estimated whole sync)" if sec["mode"] == "cached" else ""),
                        "value": round(s["store_share"], 4), "met": s["store_share"] < TARGET_STORE_SHARE,
                        "note": f"by CPU time {fmt(s['store_share_cpu'], 1, True)}"})
    out.append({"target": "RSS of a 1 GB corpus sync", "value": None, "met": None,
                "note": "measured by another script (benchmarks/huge_file.py), not here"})
    return out


def targets_text(ts: list[dict]) -> str:
    lines = []
    for t in ts:
        verdict = "n/a" if t["met"] is None else ("PASS" if t["met"] else "FAIL")
        lines.append(f"- {verdict}: {t['target']}: {t['value'] if t['value'] is not None else '—'}"
                     + (f" ({t['note']})" if t.get("note") else ""))
    return "\n".join(lines)


def print_report(results: dict) -> None:
    print()
    if results.get("short") or results.get("long"):
        print("Sync (* = cached embeddings: whole-sync time estimated, see notes; store time measured):\n")
        print(sync_table(results))
        print("\nStore time by call:\n")
        print(store_methods_table(results))
        print(f"\nSearch through QdrantSync.search (limit {LIMIT}; end to end includes embedding the query; "
              f"filter: metadata bucket == {FILTER_BUCKET}, 10% of documents):\n")
        print(search_table(results))
        print()
    m = results.get("million")
    if m:
        print(f"Edge at {m['points']:,} points (EdgeStore.query with SearchRequest(limit={LIMIT}, "
              f"candidates={LIMIT}); {m['queries']} queries; recall@10 against numpy exact search; filtered: "
              f"group == {FILTER_BUCKET}):\n")
        print(million_tables(m))
        print(f"\nVectors: {m['vectors_how']}.\n")
    print("Targets:\n")
    print(targets_text(results["targets"]))
    print("\nNotes:")
    for note in results["notes"]:
        print(f"- {note}")


# ------------------------------------------------------------------------------------- main


def parse_ef(spec: str) -> list[int]:
    return [int(x) for x in spec.split(",") if x.strip()]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child_main(argv[1])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--sections", default=",".join(SECTIONS), help="comma-separated: short,long,million")
    add("--short", type=int, default=100_000, help="short documents (section short)")
    add("--long", type=int, default=1000, help="long documents (section long)")
    add("--long-min-kb", type=int, default=20)
    add("--long-max-kb", type=int, default=50)
    add("--passage-tokens", type=int, default=256)
    add("--passage-overlap", type=int, default=32)
    add("--million", type=int, default=1_000_000, help="points of the Edge-only section")
    add("--million-queries", type=int, default=200)
    add("--upsert-batch", type=int, default=512)
    add("--hnsw-ef", type=parse_ef, default=None,
        help="comma-separated hnsw_ef values for the million section (default: 64, the module's HNSW_EF, "
             "256, 512)")
    add("--noise", type=float, default=0.05, help="norm of the noise added to mixed vectors")
    add("--real-budget-s", type=float, default=600.0,
        help="seconds the million section may spend embedding more real texts than are cached")
    add("--queries", type=int, default=200, help="search queries per row (sections short, long)")
    add("--search-budget-s", type=float, default=120.0,
        help="a search row stops after this many seconds (local mode at 100K points is slow)")
    add("--batch-size", type=int, default=32, help="QdrantSync batch_size for short documents")
    add("--long-batch-size", type=int, default=8, help="QdrantSync batch_size for long documents")
    add("--probe", type=int, default=500, help="short documents timed to choose the embedding mode")
    add("--long-probe", type=int, default=10, help="long documents timed to choose the mode")
    add("--embedding", default="auto",
        help="auto, live or cached, or per section (short:live,long:auto); auto: cached if a live sync would "
             "exceed --live-limit-min per store")
    add("--live-limit-min", type=float, default=25.0)
    add("--model", help="recemb model (default: the bundled recemb-mamba2-mini)")
    add("--torch-threads", type=int, default=TORCH_THREADS,
        help="torch threads for all embedding (default 1: see TORCH_THREADS)")
    add("--cache-dir", default=str(Path(tempfile.gettempdir()) / "recemb-store-scale-cache"))
    add("--work-dir", help="where the stores are built and each configuration's result is kept (default: a "
                           "temporary folder, removed)")
    add("--resume", action="store_true",
        help="with --work-dir: take the results an earlier (interrupted) run left there for configurations "
             "with the same settings")
    add("--quick", action="store_true",
        help="smoke test, a few minutes: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()))
    add("--out", help="JSON results (default benchmarks/results/store_scale.json; with --quick "
                      "store_scale_quick.json in the temp folder)")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}")
    if args.quick:
        defaults = parser.parse_args([])
        for key, value in QUICK.items():
            if getattr(args, key) == getattr(defaults, key):
                setattr(args, key, value)
        args.million_queries = min(args.million_queries, QUICK["queries"])
    import recemb_integrations.stores.edge_layouts as edge
    from recemb.core import DEFAULT_MODEL

    args.model = args.model or DEFAULT_MODEL
    if args.hnsw_ef is None:
        args.hnsw_ef = sorted({64, edge.HNSW_EF, 256, 512})
    if args.out:
        out = Path(args.out)
    elif args.quick:
        out = Path(tempfile.gettempdir()) / "store_scale_quick.json"
    else:
        out = RESULTS / "store_scale.json"
    data = data_dir()
    started = time.time()
    embedder = load_embedder(args.model, args.torch_threads)
    print(f"model {args.model} (dim {embedder.dim}) on {embedder.device}; sections {', '.join(sections)}; "
          f"{os.cpu_count()} CPUs; qdrant-client {versions()['qdrant-client']}, qdrant-edge-py "
          f"{versions()['qdrant-edge-py']}", flush=True)
    results: dict = {"setup": {
        "date": datetime.date.today().isoformat(), "quick": args.quick, "sections": sections,
        "model": Path(args.model).name, "dim": embedder.dim, "args": dict(vars(args)),
        "machine": machine(), "module_hnsw_ef": edge.HNSW_EF, "search_limit": LIMIT,
        "search_rows": {k: {"mode": m, "filtered": f} for k, (m, f) in SEARCH_ROWS.items()},
        "filter": f"metadata bucket == {FILTER_BUCKET} (documents i % 10), 10%",
        "torch_threads": args.torch_threads}, "seconds": {}}
    work_ctx = tempfile.TemporaryDirectory(prefix="store_scale-") if not args.work_dir else None
    work = Path(args.work_dir or work_ctx.name)
    try:
        for section in sections:
            t0 = time.time()
            if section == "million":
                results["million"] = run_million(args, embedder, data, work)
            else:
                results[section] = run_sync_section(section, args, embedder, data, work)
            results["seconds"][section] = time.time() - t0
            print(f"== {section} took {results['seconds'][section] / 60:.1f} min", flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)  # what is done so far, in case the run is stopped
            out.write_text(json.dumps({**results, "incomplete": True}, indent=1, default=str) + "\n")
    finally:
        if work_ctx is not None:
            work_ctx.cleanup()
    results["seconds"]["total"] = time.time() - started
    results["targets"] = targets(results)
    results["notes"] = notes(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print_report(results)
    print("\nSections took " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in results["seconds"].items())
          + f"; results in {out}")
    return 0


def notes(results: dict) -> list[str]:
    out = []
    for section in ("short", "long"):
        sec = results.get(section)
        if not sec:
            continue
        what = (f"{section}: {sec['documents']:,} documents"
                + (f", passages {sec['passages'][0]}/{sec['passages'][1]} tokens" if sec["passages"] else ""))
        if sec["mode"] == "cached":
            estimate, probed = sec["live_estimate_min_per_store"], sec["probe"]["docs"]
            out.append(f"{what}: a live sync was estimated at {estimate:.0f} min per store (probe "
                       f"of {probed} documents), so the embeddings were computed once (model "
                       f"{sec['model_s_measured_once']:.0f} s) and both stores were synced from the cache. "
                       "MEASURED: store time and its split by call, peak RSS, disk, reopen, search. "
                       "ESTIMATED: the whole-sync seconds, docs/s, tokens/s and the shares (measured seconds "
                       "with cached vectors - look-ups + the model time measured once).")
        else:
            out.append(f"{what}: embeddings computed live in each store's sync; every number measured.")
    m = results.get("million")
    if m:
        out.append(f"million: {m['vectors_how']}. Queries: {m['queries_how']}. Ground truth: numpy float32 "
                   "brute force over the same vectors (filtered: over the group's rows only).")
        out.append("million: SearchRequest(candidates=limit) so Edge's hnsw_ef is max(HNSW_EF, 10); through "
                   "QdrantSync.search (candidates >= 100) the effective ef is at least 100.")
    out.append("RSS: peak = the configuration's own process' high-water mark (VmHWM; model, Python and "
               "any cached vectors included; ru_maxrss from wait4 is also in the JSON but carries the "
               "parent's RSS at fork); 'RSS before store' is that process just before the store was opened.")
    out.append("Search rows stop after --search-budget-s seconds each; a row marked '(budget)' ran fewer "
               "queries. End-to-end latencies include embedding the query; the store's "
               "part is timed through the store proxy.")
    out.append("The 1 GB corpus RSS target is measured by benchmarks/huge_file.py, not by this script.")
    for section, kind, r in sync_stores(results):
        if r.get("reused"):
            out.append(f"{section}/{kind}: {r['reused']} (--resume); this run's section seconds do not "
                       "include it.")
    if (results.get("million") or {}).get("reused"):
        out.append(f"million: {results['million']['reused']} (--resume).")
    return out


if __name__ == "__main__":
    sys.exit(main())
