"""Answers of the compact store layout against the ram layout, on the same points (issue #47).

Each IR collection under the data folder (BEIR layout) and the long-document test (War and Peace, 1,500-word
documents, sentence queries) is synced once with ``QdrantSync`` and the library's default passages into a Qdrant
Edge store whose collections are created in the ram layout (the layout of every collection before store layouts),
then copied with ``recemb migrate``'s ``migrate_collection`` (verified point by point) into a store of the default
compact layout: the embeddings are computed once, so any difference is the layout's (int8 search, float16 originals,
segments). Every query is then searched through ``QdrantSync.search`` in both, in each row's mode (dense, BM25,
hybrid RRF, hybrid DBSF), with hybrid_quality.py's code: mean nDCG@10 and Recall@100 per row, long-document
accuracy@1 per word band, and the differences.

    python3 benchmarks/layout_quality.py                    # every IR collection and the long test
    python3 benchmarks/layout_quality.py --quick             # 2 collections, 20 queries, 20 long documents

Writes benchmarks/results/layout_quality.json (``--out``) and prints markdown tables. Target (issue #47): every
row's mean nDCG@10 and accuracy@1 within 0.002 of the ram layout's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybrid_quality import LIMIT, QUICK, ROWS, search_all  # noqa: E402
from retrieval_eval import (  # noqa: E402
    LONG_BOOK,
    QUERY_TASKS,
    data_dir,
    ir_metrics,
    load_collection,
    long_document_task,
)

TARGET_GAP = 0.002
LAYOUTS = ("ram", "compact")


def stores(folder: Path):
    """(ram store, compact store): two Qdrant Edge folders; the first creates its collections in the ram layout."""
    from recemb_integrations.stores import LAYOUT_RAM
    from recemb_integrations.stores.edge import EdgeStore

    class RamLayoutStore(EdgeStore):
        def create_collection(self, collection, dense_size, sparse, metadata, layout=None):
            super().create_collection(collection, dense_size, sparse, metadata, layout=LAYOUT_RAM)

    return RamLayoutStore(folder / "ram"), EdgeStore(folder / "compact")


def sync_both(ram, compact, name: str, embedder, documents, batch_size: int) -> dict:
    from recemb_integrations.migrate import migrate_collection
    from recemb_integrations.qdrant import QdrantSync

    t0 = time.time()
    report = QdrantSync(ram, name, embedder, batch_size=batch_size).sync(documents, show_progress_bar=False)
    if report.failed:
        raise RuntimeError(f"sync of {name} failed for {len(report.failed)} documents")
    synced = time.time() - t0
    moved = migrate_collection(ram, compact, name, show_progress_bar=False)
    layouts = [s.collection_info(name).layout for s in (ram, compact)]
    assert layouts == list(LAYOUTS), layouts
    return {"points": moved.points, "rounded": moved.rounded, "sync_seconds": round(synced, 1),
            "migrate_seconds": round(moved.seconds, 1)}


def run_ir(ram, compact, embedder, data: Path, collections: list[str], max_queries: int, batch_size: int) -> dict:
    from recemb_integrations.qdrant import Document

    out: dict = {"collections": {}, "scores": {layout: {row: {} for row in ROWS} for layout in LAYOUTS}}
    for coll in collections:
        doc_ids, doc_texts, qids, qtexts, qrels = load_collection(data / "ir" / coll)
        if max_queries:
            qids, qtexts = qids[:max_queries], qtexts[:max_queries]
        setup = sync_both(ram, compact, coll, embedder, [Document(i, t, {}) for i, t in zip(doc_ids, doc_texts)],
                          batch_size)
        out["collections"][coll] = {**setup, "queries": len(qids), "documents": len(doc_ids)}
        for layout, store in zip(LAYOUTS, (ram, compact)):
            for row, found in search_all(store, coll, embedder, qtexts, QUERY_TASKS.get(coll), LIMIT).items():
                out["scores"][layout][row][coll] = {**ir_metrics(found["ranked"], qids, qrels),
                                                    "ms_per_query": 1000 * found["seconds"] / max(len(qids), 1)}
        scores = out["scores"]
        print(f"  {coll:<10} {setup['points']:>7,} points  " + "  ".join(
            f"{row} {scores['ram'][row][coll]['ndcg@10']:.4f}/{scores['compact'][row][coll]['ndcg@10']:.4f}"
            for row in ROWS), flush=True)
    out["mean"] = {layout: {row: {m: float(np.mean([per[c][m] for c in collections]))
                                  for m in ("ndcg@10", "recall@100")} for row, per in rows.items()}
                   for layout, rows in out["scores"].items()}
    return out


def run_long(ram, compact, embedder, data: Path, words: int, n_docs: int, batch_size: int) -> dict:
    from recemb_integrations.qdrant import Document

    docs, queries = long_document_task(data / "long" / LONG_BOOK, words, n_docs)
    setup = sync_both(ram, compact, "long", embedder, [Document(str(i), t, {}) for i, t in enumerate(docs)],
                      batch_size)
    accuracy: dict = {layout: {row: {} for row in ROWS} for layout in LAYOUTS}
    for layout, store in zip(LAYOUTS, (ram, compact)):
        for band, items in queries.items():
            if not items:
                continue
            targets = [str(di) for di, _ in items]
            for row, found in search_all(store, "long", embedder, [q for _, q in items], None, 10).items():
                top1 = [r[0] if r else None for r in found["ranked"]]
                accuracy[layout][row][f"{band[0]}-{band[1]}"] = float(np.mean([t == g for t, g in
                                                                               zip(top1, targets)]))
    n = {f"{a}-{b}": len(v) for (a, b), v in queries.items() if v}
    mean = {layout: {row: float(sum(acc[b] * n[b] for b in acc) / sum(n.values())) for row, acc in rows.items()}
            for layout, rows in accuracy.items()}
    return {"setup": {**setup, "documents": len(docs), "words": words, "queries_per_band": n},
            "accuracy@1": accuracy, "mean": mean}


def tables(results: dict) -> str:
    lines = []
    if results.get("ir"):
        ir = results["ir"]
        lines += ["| row | mean nDCG@10 ram | compact | difference | mean R@100 ram | compact | ms/query ram | "
                  "compact |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in ROWS:
            a, b = ir["mean"]["ram"][row], ir["mean"]["compact"][row]
            ms = [np.mean([v["ms_per_query"] for v in ir["scores"][layout][row].values()]) for layout in LAYOUTS]
            lines.append(f"| {row} | {a['ndcg@10']:.4f} | {b['ndcg@10']:.4f} | {b['ndcg@10'] - a['ndcg@10']:+.4f} | "
                         f"{a['recall@100']:.4f} | {b['recall@100']:.4f} | {ms[0]:.1f} | {ms[1]:.1f} |")
        lines.append("")
        lines.append("Points per collection: " + ", ".join(f"{c} {s['points']:,} ({s['rounded']:,} rounded to "
                                                             "float16 by the copy)"
                                                             for c, s in ir["collections"].items()))
    if results.get("long"):
        long = results["long"]
        bands = list(long["setup"]["queries_per_band"])
        lines += ["", "| row | layout | " + " | ".join(f"words {b}" for b in bands) + " | all |",
                  "|---|---|" + "---:|" * (len(bands) + 1)]
        for row in ROWS:
            for layout in LAYOUTS:
                acc = long["accuracy@1"][layout][row]
                lines.append(f"| {row} | {layout} | " + " | ".join(f"{acc[b]:.3f}" for b in bands)
                             + f" | {long['mean'][layout][row]:.3f} |")
    return "\n".join(lines)


def targets(results: dict) -> str:
    lines = []
    for row in ROWS:
        if results.get("ir"):
            gap = results["ir"]["mean"]["compact"][row]["ndcg@10"] - results["ir"]["mean"]["ram"][row]["ndcg@10"]
            lines.append(f"- {'PASS' if abs(gap) <= TARGET_GAP else 'MISS'}: IR {row} mean nDCG@10 {gap:+.4f} "
                         f"(within {TARGET_GAP})")
        if results.get("long"):
            gap = results["long"]["mean"]["compact"][row] - results["long"]["mean"]["ram"][row]
            lines.append(f"- {'PASS' if abs(gap) <= TARGET_GAP else 'MISS'}: long documents {row} accuracy@1 "
                         f"{gap:+.4f} (within {TARGET_GAP})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="recemb model folder or name (default: the bundled model)")
    ap.add_argument("--collections", help="comma-separated (default: every folder under ir/)")
    ap.add_argument("--queries", type=int, default=0, help="at most this many queries per collection (0: all)")
    ap.add_argument("--long-words", type=int, default=1500, help="words per long document (0 skips the test)")
    ap.add_argument("--long-docs", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "layout_quality.json"))
    args = ap.parse_args(argv)
    from recemb.core import DEFAULT_MODEL, Embedder

    data = data_dir()
    collections = (args.collections.split(",") if args.collections
                   else sorted(p.name for p in (data / "ir").iterdir() if p.is_dir()))
    queries, long_docs = args.queries, args.long_docs
    if args.quick:
        collections, queries, long_docs = collections[:QUICK["collections"]], QUICK["queries"], QUICK["long_docs"]
    embedder = Embedder.from_pretrained(args.model or DEFAULT_MODEL)
    results: dict = {"setup": {"model": args.model or DEFAULT_MODEL, "date": str(datetime.date.today()),
                               "collections": collections, "queries": queries or None, "quick": args.quick}}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="recemb-layout-quality-", dir="/var/tmp") as tmp:
        ram, compact = stores(Path(tmp))
        try:
            results["ir"] = run_ir(ram, compact, embedder, data, collections, queries, args.batch_size)
            if args.long_words:
                results["long"] = run_long(ram, compact, embedder, data, args.long_words, long_docs,
                                           args.batch_size)
        finally:
            ram.close()
            compact.close()
    results["seconds"] = round(time.time() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print("\n" + tables(results) + "\n\n" + targets(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
