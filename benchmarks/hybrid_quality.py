"""Retrieval quality through the real path: QdrantSync into an embedded Qdrant, searched dense, BM25 and hybrid.

    python3 benchmarks/hybrid_quality.py --quick                 # smoke test: 2 collections, 20 queries, 20 long docs
    python3 benchmarks/hybrid_quality.py                         # everything (the bundled recemb-mamba2-mini)
    python3 benchmarks/hybrid_quality.py --model path/to/model   # any recemb-loadable model

- **IR**: every collection under ../shared/data/ir (BEIR layout) is synced with ``QdrantSync`` into
  ``QdrantClient(path=<temp folder>)`` (document id = corpus id, text = title + text as in retrieval_eval.py; hybrid
  collections: dense + BM25 sparse vectors, the BM25 average length chosen from the corpus and recorded). Every query
  then goes through ``QdrantSync.search(query, limit=100, instruction=...)`` with mode "dense", "sparse", and
  "hybrid" fused by RRF and by DBSF. nDCG@10 / Recall@100 as retrieval_eval.py computes them, beside
  all-MiniLM-L6-v2 and BM25 (bm25s) run in the same process through retrieval_eval.py's own code.
- **Long documents**: retrieval_eval.py's War and Peace test (documents of 1,500 words; a query is a sentence from a
  word band of its document and must find it), synced without passages and with passages (``--passages``, default
  256/32 and 128/16 tokens); accuracy@1 per band for the four search rows at document granularity (with passages a
  search groups passages into their documents).
- Targets: hybrid mean nDCG@10 >= 1.05 x all-MiniLM-L6-v2 and >= 1.05 x BM25 (bm25s); long-document accuracy@1 >=
  BM25 (bm25s) in every band. Ratios and misses are printed.

Writes benchmarks/results/hybrid_quality.json (``--out``; ``--quick`` writes to the temp folder) and prints markdown
tables. Data: ../shared/data (override with RECEMB_DATA). Queries without BM25 terms are searched dense-only by
QdrantSync (a SearchNotice); they are counted and reported.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import warnings
from contextlib import closing
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_eval import (  # noqa: E402
    LONG_BOOK,
    QUERY_TASKS,
    RESULTS,
    TeacherSystem,
    data_dir,
    ir_metrics,
    ir_ranking,
    load_collection,
    long_accuracy,
    long_document_task,
)

BM25_NAME = "BM25 (bm25s)"
# Search rows: name -> (mode, fusion).
ROWS = {
    "dense": ("dense", None),
    "sparse (BM25)": ("sparse", None),
    "hybrid rrf": ("hybrid", "rrf"),
    "hybrid dbsf": ("hybrid", "dbsf"),
}
HYBRID_ROWS = ("hybrid rrf", "hybrid dbsf")
TARGET_RATIO = 1.05
LIMIT = 100
QUICK = {"collections": 2, "queries": 20, "long_docs": 20}


def parse_passages(spec: str) -> list[tuple[int, int]]:
    """'256:32,128:16' -> [(256, 32), (128, 16)]; '' or 'none' -> []."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if part.lower() == "none":
            continue
        size, _, overlap = part.partition(":")
        out.append((int(size), int(overlap or 0)))
    return out


def store_label(passages: tuple[int, int] | None) -> str:
    return "no passages" if passages is None else f"passages {passages[0]}/{passages[1]}"


class Notices:
    """Runs searches, counting those that raised a SearchNotice; other warnings are shown once each."""

    def __init__(self):
        self.count = 0
        self.messages: set[str] = set()
        self._shown: set[str] = set()

    def search(self, sync, query: str, **kwargs):
        from recemb_integrations.qdrant import SearchNotice

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hits = sync.search(query, **kwargs)
        noticed = False
        for w in caught:
            if issubclass(w.category, SearchNotice):
                noticed = True
                self.messages.add(str(w.message))
            elif str(w.message) not in self._shown:
                self._shown.add(str(w.message))
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        self.count += noticed
        return hits


def sync_store(client, name: str, embedder, docs, batch_size: int, passages: tuple[int, int] | None) -> dict:
    """Sync ``docs`` (Documents) into a new collection; returns its setup (BM25 settings, points, seconds)."""
    from recemb_integrations.qdrant import QdrantSync, collection_settings

    kwargs = {} if passages is None else {"passage_tokens": passages[0], "passage_overlap": passages[1]}
    sync = QdrantSync(client, name, embedder, batch_size=batch_size, **kwargs)
    t0 = time.time()
    report = sync.sync(docs, show_progress_bar=False)
    seconds = time.time() - t0
    if report.failed:
        raise RuntimeError(f"sync of {name} failed for {len(report.failed)} documents: {report.failed[:3]}")
    settings = collection_settings(client, name) or {}
    points = client.count(name, exact=True).count
    return {"collection": name, "documents": sync.count(), "points": points, "sync_seconds": seconds,
            "embedded_tokens": report.embedded_tokens, "warnings": len(report.warnings),
            "bm25": settings.get("sparse"), "passage_tokens": settings.get("passage_tokens"),
            "passage_overlap": settings.get("passage_overlap")}


def search_all(client, name: str, embedder, queries: list[str], instruction: str | None, limit: int) -> dict:
    """Every query through QdrantSync.search in each row's mode; ranked document ids, notices and seconds per row."""
    from recemb_integrations.qdrant import QdrantSync

    sync = QdrantSync.open(client, name, embedder)  # the search side of a separate process: settings from the store
    out = {}
    for row, (mode, fusion) in ROWS.items():
        notices = Notices()
        t0 = time.time()
        kwargs = {"mode": mode} if fusion is None else {"mode": mode, "fusion": fusion}
        ranked = [[h.document_id for h in notices.search(sync, q, limit=limit, instruction=instruction, **kwargs)]
                  for q in queries]
        out[row] = {"ranked": ranked, "no_bm25_terms": notices.count, "notice_messages": sorted(notices.messages),
                    "seconds": time.time() - t0}
    return out


# --------------------------------------------------------------------------------------------- the two tests


def run_ir(client, embedder, teacher, collections, data: Path, max_queries: int | None, batch_size: int) -> dict:
    from recemb_integrations.qdrant import Document

    results: dict = {"scores": {}, "stores": {}, "seconds": {}}

    def record(row: str, coll: str, metrics: dict, seconds: float, **extra) -> None:
        results["scores"].setdefault(row, {})[coll] = {**metrics, **extra}
        results["seconds"].setdefault(row, 0.0)
        results["seconds"][row] += seconds
        print(f"  {coll:<10} {row:<28} nDCG@10 {metrics['ndcg@10']:.4f}  R@100 {metrics['recall@100']:.4f}"
              f"  ({seconds:.1f} s)" + (f"  no BM25 terms: {extra['no_bm25_terms']}" if extra.get("no_bm25_terms")
                                         else ""), flush=True)

    for coll in collections:
        doc_ids, doc_texts, qids, qtexts, qrels = load_collection(data / "ir" / coll)
        if max_queries:
            qids, qtexts = qids[:max_queries], qtexts[:max_queries]
        size = {"queries": len(qids), "documents": len(doc_ids)}
        task = QUERY_TASKS.get(coll)
        for row, system in ((TeacherSystem.name, teacher), (BM25_NAME, None)):
            t0 = time.time()
            ranked = [[doc_ids[j] for j in r] for r in ir_ranking(system, qtexts, doc_texts, task, LIMIT)]
            record(row, coll, ir_metrics(ranked, qids, qrels), time.time() - t0, **size)
        store = sync_store(client, coll, embedder, [Document(i, t, {}) for i, t in zip(doc_ids, doc_texts)],
                           batch_size, None)
        results["stores"][coll] = store
        print(f"  {coll:<10} synced {store['documents']} documents in {store['sync_seconds']:.1f} s; BM25 avg_len "
              f"{store['bm25']['avg_len']:.1f}", flush=True)
        for row, found in search_all(client, coll, embedder, qtexts, task, LIMIT).items():
            record(row, coll, ir_metrics(found["ranked"], qids, qrels), found["seconds"],
                   no_bm25_terms=found["no_bm25_terms"], notice_messages=found["notice_messages"],
                   ms_per_query=1000 * found["seconds"] / max(len(qids), 1), **size)
    results["mean"] = {row: {m: float(np.mean([per[c][m] for c in collections])) for m in ("ndcg@10", "recall@100")}
                       for row, per in results["scores"].items()}
    return results


def run_long(client, embedder, teacher, data: Path, words: int, n_docs: int, passage_configs, batch_size: int) -> dict:
    from recemb_integrations.qdrant import Document

    docs, queries = long_document_task(data / "long" / LONG_BOOK, words, n_docs)
    results: dict = {"setup": {"book": LONG_BOOK, "words_per_document": words, "documents": len(docs),
                               "queries_per_band": {f"{a}-{b}": len(v) for (a, b), v in queries.items()}},
                     "baselines": {}, "stores": {}, "seconds": {}}
    for row, system in ((TeacherSystem.name, teacher), (BM25_NAME, None)):
        t0 = time.time()
        results["baselines"][row] = long_accuracy(system, docs, queries)
        results["seconds"][row] = time.time() - t0
        print(f"  long       {row:<28} {fmt_bands(results['baselines'][row])}", flush=True)
    documents = [Document(str(i), text, {}) for i, text in enumerate(docs)]
    for passages in [None, *passage_configs]:
        label = store_label(passages)
        name = "long" if passages is None else f"long-p{passages[0]}-o{passages[1]}"
        store = sync_store(client, name, embedder, documents, batch_size, passages)
        print(f"  long       {label}: synced {store['points']} points in {store['sync_seconds']:.1f} s; BM25 "
              f"avg_len {store['bm25']['avg_len']:.1f}"
              + (f", passage_avg_len {store['bm25']['passage_avg_len']:.1f}" if passages else ""), flush=True)
        per_row: dict = {}
        notices: dict = {}
        seconds: dict = {}
        for band, items in queries.items():
            if not items:
                continue
            targets = [str(di) for di, _ in items]
            found = search_all(client, name, embedder, [q for _, q in items], None, 10)
            for row, f in found.items():
                top1 = [r[0] if r else None for r in f["ranked"]]
                per_row.setdefault(row, {})[f"{band[0]}-{band[1]}"] = float(np.mean([t == g for t, g in
                                                                                      zip(top1, targets)]))
                notices[row] = notices.get(row, 0) + f["no_bm25_terms"]
                seconds[row] = seconds.get(row, 0.0) + f["seconds"]
        for row in per_row:
            print(f"  long       {label:<18} {row:<12} {fmt_bands(per_row[row])}  ({seconds[row]:.1f} s)", flush=True)
        results["stores"][label] = {**store, "accuracy@1": per_row, "no_bm25_terms": notices,
                                    "search_seconds": seconds}
    return results


# --------------------------------------------------------------------------------------------- report


def fmt_bands(acc: dict[str, float]) -> str:
    return " ".join(f"{b} {v:.3f}" for b, v in acc.items())


def ir_table(ir: dict, collections: list[str], model: str) -> str:
    lines = ["| system | " + " | ".join(collections) + " | mean nDCG@10 | mean R@100 |",
             "|---|" + "---:|" * (len(collections) + 2)]
    for row, per in ir["scores"].items():
        label = f"{model} {row} (QdrantSync)" if row in ROWS else row
        lines.append(f"| {label} | " + " | ".join(f"{per[c]['ndcg@10']:.3f}" for c in collections)
                     + f" | **{ir['mean'][row]['ndcg@10']:.3f}** | {ir['mean'][row]['recall@100']:.3f} |")
    return "\n".join(lines)


def recall_table(ir: dict, collections: list[str], model: str) -> str:
    lines = ["| system | " + " | ".join(collections) + " |", "|---|" + "---:|" * len(collections)]
    for row, per in ir["scores"].items():
        label = f"{model} {row} (QdrantSync)" if row in ROWS else row
        lines.append(f"| {label} | " + " | ".join(f"{per[c]['recall@100']:.3f}" for c in collections) + " |")
    return "\n".join(lines)


def store_table(ir: dict, collections: list[str]) -> str:
    lines = ["| collection | documents | queries | BM25 avg_len | queries without BM25 terms | sync s "
             "| ms/query dense | sparse | hybrid rrf | hybrid dbsf |", "|---|" + "---:|" * 9]
    for c in collections:
        st, sc = ir["stores"][c], {row: ir["scores"][row][c] for row in ROWS}
        lines.append(f"| {c} | {st['documents']} | {sc['dense']['queries']} | {st['bm25']['avg_len']:.1f} "
                     f"| {sc['hybrid rrf']['no_bm25_terms']} | {st['sync_seconds']:.1f} | "
                     + " | ".join(f"{sc[row]['ms_per_query']:.0f}" for row in ROWS) + " |")
    return "\n".join(lines)


def long_table(long: dict, model: str) -> str:
    bands = list(long["setup"]["queries_per_band"])
    lines = ["| system | store | " + " | ".join(bands) + " | mean |", "|---|---|" + "---:|" * (len(bands) + 1)]
    for row, acc in long["baselines"].items():
        lines.append(f"| {row} | — | " + " | ".join(f"{acc.get(b, float('nan')):.3f}" for b in bands)
                     + f" | {np.mean(list(acc.values())):.3f} |")
    for label, store in long["stores"].items():
        for row, acc in store["accuracy@1"].items():
            lines.append(f"| {model} {row} | {label} | " + " | ".join(f"{acc.get(b, float('nan')):.3f}" for b in bands)
                         + f" | {np.mean(list(acc.values())):.3f} |")
    return "\n".join(lines)


def long_store_table(long: dict) -> str:
    lines = ["| store | points | BM25 avg_len (documents) | BM25 avg_len (passages) | sync s "
             "| search s dense | sparse | hybrid rrf | hybrid dbsf |", "|---|" + "---:|" * 8]
    for label, st in long["stores"].items():
        pal = st["bm25"].get("passage_avg_len")
        lines.append(f"| {label} | {st['points']} | {st['bm25']['avg_len']:.1f} | "
                     f"{'—' if pal is None else f'{pal:.1f}'} | {st['sync_seconds']:.1f} | "
                     + " | ".join(f"{st['search_seconds'].get(row, 0):.1f}" for row in ROWS) + " |")
    return "\n".join(lines)


def targets(ir: dict | None, long: dict | None) -> dict:
    """Ratios against the targets; ``met`` and the shortfall for each."""
    out: dict = {"ir": {}, "long": {}}
    if ir:
        means = {row: m["ndcg@10"] for row, m in ir["mean"].items()}
        for row in HYBRID_ROWS:
            for ref in (TeacherSystem.name, BM25_NAME, "sparse (BM25)", "dense"):
                ratio = means[row] / means[ref] if means[ref] else float("nan")
                need = TARGET_RATIO if ref in (TeacherSystem.name, BM25_NAME) else None
                out["ir"].setdefault(row, {})[ref] = {
                    "ratio": ratio, "target": need, "met": None if need is None else ratio >= need,
                    "missing_ndcg": None if need is None else max(0.0, need * means[ref] - means[row])}
    if long:
        bm25 = long["baselines"][BM25_NAME]
        for label, store in long["stores"].items():
            for row, acc in store["accuracy@1"].items():
                diff = {b: acc[b] - bm25[b] for b in acc}
                out["long"].setdefault(label, {})[row] = {"minus_bm25": diff, "met": all(d >= 0 for d in diff.values())}
    return out


def default_fusion() -> str | None:
    import recemb_integrations.qdrant as q

    return getattr(q, "DEFAULT_FUSION", None)


def targets_text(t: dict) -> str:
    lines = []
    default = f"hybrid {default_fusion()}"
    for row, refs in t["ir"].items():
        parts = []
        for ref, r in refs.items():
            s = f"{r['ratio']:.3f}x {ref}"
            if r["target"] is not None:
                s += (" (target 1.05x: met)" if r["met"] else
                      f" (target 1.05x: MISSED by {r['missing_ndcg']:.3f} nDCG@10, {TARGET_RATIO - r['ratio']:.3f}x)")
            parts.append(s)
        lines.append(f"- IR {row}{' (the default fusion)' if row == default else ''}: mean nDCG@10 = "
                     + "; ".join(parts))
    for label, rows in t["long"].items():
        for row, r in rows.items():
            if row not in HYBRID_ROWS and row != "sparse (BM25)":
                continue
            diff = ", ".join(f"{b} {d:+.3f}" for b, d in r["minus_bm25"].items())
            lines.append(f"- long, {label}, {row}: accuracy@1 minus bm25s per band: {diff} -> "
                         + ("met (>= bm25s in every band)" if r["met"] else
                            "MISSED in " + ", ".join(b for b, d in r["minus_bm25"].items() if d < 0)))
    return "\n".join(lines)


def retrieval_eval_reference(model_name: str, collections: list[str]) -> dict | None:
    """The model's mean nDCG@10 / Recall@100 as retrieval_eval.py last recorded them, when it covers the same
    collections: a check that the dense row through Qdrant matches encode + numpy ranking."""
    path = RESULTS / "retrieval.json"
    try:
        per = json.loads(path.read_text())["ir"][model_name]
        return {"file": str(path.relative_to(RESULTS.parent.parent)),
                **{m: float(np.mean([per[c][m] for c in collections])) for m in ("ndcg@10", "recall@100")}}
    except (OSError, KeyError, ValueError):
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="recemb model folder or name (default: the bundled recemb-mamba2-mini)")
    parser.add_argument("--collections", help="comma-separated (default: every folder under ir/)")
    parser.add_argument("--queries", type=int, default=0, help="at most this many queries per collection (0: all)")
    parser.add_argument("--long-words", type=int, default=1500, help="words per long document (0 skips the test)")
    parser.add_argument("--long-docs", type=int, default=200)
    parser.add_argument("--passages", default="256:32,128:16",
                        help="passage settings TOKENS:OVERLAP, comma-separated, for the long-document stores (a store "
                             "without passages is always built; 'none' for only that one)")
    parser.add_argument("--batch-size", type=int, default=16, help="QdrantSync batch_size")
    parser.add_argument("--no-ir", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: the {QUICK['collections']} smallest collections, {QUICK['queries']} "
                             f"queries each, {QUICK['long_docs']} long documents, passages 256/32 only")
    parser.add_argument("--out", help="JSON results (default: benchmarks/results/hybrid_quality.json; "
                                      "hybrid_quality_quick.json with --quick)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(min(torch.get_num_threads(), os.cpu_count() or 1))
    from qdrant_client import QdrantClient

    from recemb.core import DEFAULT_MODEL, Embedder

    data = data_dir()
    available = sorted(p.name for p in (data / "ir").iterdir() if (p / "corpus.jsonl").is_file())
    collections = args.collections.split(",") if args.collections else available
    passage_configs = parse_passages(args.passages)
    if args.quick:
        if not args.collections:
            collections = sorted(collections, key=lambda c: (data / "ir" / c / "corpus.jsonl").stat().st_size
                                 )[:QUICK["collections"]]
        args.queries = args.queries or QUICK["queries"]
        args.long_docs = min(args.long_docs, QUICK["long_docs"])
        passage_configs = passage_configs[:1]
    out = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / "hybrid_quality_quick.json" if args.quick
                                           else RESULTS / "hybrid_quality.json")
    model = args.model or DEFAULT_MODEL
    model_name = Path(model).name if Path(model).exists() else model

    started = time.time()
    t0 = time.time()
    embedder = Embedder.from_pretrained(model)
    teacher = TeacherSystem()
    load_seconds = time.time() - t0
    print(f"model {model_name} on {embedder.device}; torch threads {torch.get_num_threads()}; collections "
          f"{', '.join(collections)}" + (f"; at most {args.queries} queries each" if args.queries else ""), flush=True)

    results: dict = {"setup": {
        "model": model_name, "date": datetime.date.today().isoformat(), "quick": args.quick,
        "collections": [] if args.no_ir else collections, "max_queries_per_collection": args.queries or None,
        "limit": LIMIT, "batch_size": args.batch_size, "default_fusion": default_fusion(),
        "store": "QdrantClient(path=<temp folder>) (local mode)",
        "search_rows": {row: {"mode": m, "fusion": f} for row, m_f in ROWS.items() for m, f in [m_f]},
        "long_passages": [{"passage_tokens": p, "passage_overlap": o} for p, o in passage_configs],
        "cpu_threads": torch.get_num_threads(), "device": str(embedder.device)},
        "seconds": {"load_models": load_seconds}}
    with tempfile.TemporaryDirectory(prefix="hybrid_quality-") as folder, closing(QdrantClient(path=folder)) as client:
        ir = long = None
        if not args.no_ir:
            t0 = time.time()
            ir = run_ir(client, embedder, teacher, collections, data, args.queries or None, args.batch_size)
            results["ir"] = ir
            results["seconds"]["ir"] = time.time() - t0
        if args.long_words:
            t0 = time.time()
            long = run_long(client, embedder, teacher, data, args.long_words, args.long_docs, passage_configs,
                            args.batch_size)
            results["long"] = long
            results["seconds"]["long"] = time.time() - t0
    results["targets"] = targets(ir, long)
    reference = retrieval_eval_reference(model_name, collections) if ir and not args.queries else None
    if reference is not None:
        results["reference_retrieval_eval"] = reference
    results["seconds"]["total"] = time.time() - started

    # Ranked lists are not kept in the JSON (only their scores).
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print()
    if ir:
        n_q = sum(ir["scores"]["dense"][c]["queries"] for c in collections)
        print(f"IR: nDCG@10 per collection ({n_q} queries; search limit {LIMIT}):\n")
        print(ir_table(ir, collections, model_name))
        print("\nRecall@100 per collection:\n")
        print(recall_table(ir, collections, model_name))
        print("\nStores and search cost:\n")
        print(store_table(ir, collections))
        print()
    if long:
        s = long["setup"]
        print(f"Long documents ({s['documents']} x {s['words_per_document']} words of {s['book']}; queries per band "
              f"{s['queries_per_band']}), accuracy@1:\n")
        print(long_table(long, model_name))
        print()
        print(long_store_table(long))
        print()
    if reference is not None:
        print(f"Check: {model_name} dense through QdrantSync {ir['mean']['dense']['ndcg@10']:.3f} mean nDCG@10 vs "
              f"{reference['ndcg@10']:.3f} recorded by retrieval_eval.py in {reference['file']} (encode + numpy "
              "top-k; should agree to rounding)\n")
    print("Targets:\n")
    print(targets_text(results["targets"]))
    print(f"\nTotal {results['seconds']['total']:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
