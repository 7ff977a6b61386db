"""The whole sync on one process vs on Ray actors, on this machine, and where the time goes.

    python3 benchmarks/scale_out.py                      # 1,500 SciFact abstracts + 1 book, bundled model
    python3 benchmarks/scale_out.py --docs 1000 --books 0

Each mode syncs the same corpus (hybrid, passages of 256 tokens) into a fresh Qdrant Edge store:
- local: ``QdrantSync.sync`` in this process (the model uses every core);
- ray, N actors: ``sync(..., executor=RayExecutor(concurrency=N))`` on a local Ray cluster of this machine's CPUs
  (each actor: one CPU, so one torch thread).

Columns: wall seconds and tokens/s of the whole sync (plan, embedding, writes); the driver's time in store writes
(the embedded store is written by the driver alone); for Ray, the cluster start (``ray.init``, paid once per
process) and the time to the first batch's result (actor start and model load). All modes in one run, so their
ratios compare. Writes benchmarks/results/scale_out.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import transformers  # noqa: F401  (before the repo root goes on sys.path: see benchmarks/architectures.py)

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("RECEMB_DATA", HERE.parent.parent / "shared" / "data"))


class TimedStore:
    """The store, with the time spent in writes added up (the driver is the single writer)."""

    def __init__(self, store):
        self.inner, self.write_seconds = store, 0.0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in ("upsert", "delete", "set_payload"):
            return attr

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.write_seconds += time.perf_counter() - start
        return timed


def corpus(n_docs: int, n_books: int):
    from recemb_integrations.qdrant import Document

    docs = []
    with open(DATA / "ir" / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            if len(docs) >= n_docs:
                break
            d = json.loads(line)
            docs.append(Document(f"scifact/{d['_id']}", f"{d.get('title', '')} {d.get('text', '')}".strip()))
    for path in sorted((DATA / "long").glob("*.txt"))[:n_books]:
        docs.append(Document(f"books/{path.name}", path.read_text(encoding="utf-8")))
    return docs


def run(mode: str, actors: int, docs, model: str, threads: int) -> dict:
    import torch

    from recemb.core import Embedder
    from recemb_integrations.qdrant import QdrantSync
    from recemb_integrations.stores import open_store

    torch.set_num_threads(threads)
    emb = Embedder.from_pretrained(model, device="cpu")
    row = {"mode": mode, "actors": actors}
    executor = None
    if mode == "ray":
        import ray

        from recemb_integrations.ray import RayExecutor

        start = time.perf_counter()
        if not ray.is_initialized():
            ray.init(num_cpus=threads, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        row["ray_init_s"] = time.perf_counter() - start
        executor = RayExecutor(concurrency=actors, num_cpus=1)
    first = []
    with tempfile.TemporaryDirectory() as folder, open_store(path=folder, kind="edge") as store:
        timed = TimedStore(store)
        sync = QdrantSync(timed, "docs", emb, passage_tokens=256, passage_overlap=32)
        start = time.perf_counter()
        report = sync.sync(docs, executor=executor, show_progress_bar=False,
                           on_document=lambda d, a: first or first.append(time.perf_counter() - start))
        wall = time.perf_counter() - start
        row.update(seconds=wall, tokens=report.embedded_tokens, tokens_per_s=report.embedded_tokens / wall,
                   documents=report.added, write_s=timed.write_seconds, first_document_s=first[0] if first else None,
                   failed=len(report.failed), points=store.count("docs"))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1500, help="SciFact abstracts (of 5,183)")
    parser.add_argument("--books", type=int, default=1, help="long books from shared/data/long")
    parser.add_argument("--model", default="recemb-mamba2-mini")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scale_out.json")
    args = parser.parse_args()
    import sys

    sys.path.insert(0, str(HERE.parent))
    docs = corpus(args.docs, args.books)
    rows = [run("local", 0, docs, args.model, args.threads)]
    for n in args.actors:
        rows.append(run("ray", n, docs, args.model, args.threads))
    result = {"documents": len(docs), "characters": sum(len(d.text) for d in docs), "model": args.model,
              "threads": args.threads, "cpus": os.cpu_count(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\n{len(docs):,} documents, {result['characters']:,} characters, {args.model}, {args.threads} threads\n")
    print("| mode | actors | wall s | tokens | tokens/s | × local | driver writes s | first document s | "
          "ray.init s | points |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = rows[0]["tokens_per_s"]
    for r in rows:
        print(f"| {r['mode']} | {r['actors'] or '-'} | {r['seconds']:.1f} | {r['tokens']:,} | "
              f"{r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / base:.2f}× | {r['write_s']:.1f} | "
              f"{r['first_document_s'] or 0:.1f} | "
              f"{r.get('ray_init_s', 0):.1f} | {r['points']:,} |")


if __name__ == "__main__":
    main()
