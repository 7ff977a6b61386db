"""Peak memory of `recemb sync` over a whole corpus (1 GB of files by default): bounded by the batch, not the corpus.

Builds a corpus of text files from the shared public-domain books (each file a different slice, sizes cycling
20 KB / 100 KB / 400 KB, so both the batched and the streamed paths run), then runs the real command in its own
process on a fresh embedded store and reports the child's peak RSS (``os.wait4``), model included:

1. the first sync, which reads every file twice (hash, then embed) and writes every point;
2. a second sync of the unchanged corpus (the first pass alone: every file hashed in pieces, nothing embedded).

The model truncates each document to ``--max-tokens`` (64 by default) so that the run takes minutes, not the half
day that embedding 250 M tokens takes on 2 CPU cores: every byte is still read, hashed, tokenized and BM25-encoded,
and the embedding itself runs in bounded batches whatever the documents' lengths (benchmarks/huge_file.py measures
full-length embedding of a 50 MB file). Passages are off for the same reason.

    python3 benchmarks/corpus_rss.py                 # 1 GB, Qdrant Edge
    python3 benchmarks/corpus_rss.py --gb 0.05 --stores edge,local

Target (the scale issue): peak RSS of a 1 GB corpus sync under 1.5 GB. Results: benchmarks/results/corpus_rss.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_process import run_recemb_sync  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BOOKS = ROOT.parent / "shared" / "data" / "long"
SIZES = (20_000, 100_000, 400_000)  # bytes per file, cycled
TARGET_MIB = 1536


def build_corpus(folder: Path, total_bytes: int) -> tuple[int, int]:
    """Files of the books' text, each a different slice with its own first line; (files, bytes) written."""
    books = sorted(BOOKS.glob("*.txt"))
    if not books:
        sys.exit(f"no books under {BOOKS}")
    text = "\n\n".join(b.read_text(encoding="utf-8") for b in books)
    data = text.encode("utf-8")
    written = files = 0
    while written < total_bytes:
        size = SIZES[files % len(SIZES)]
        start = (files * 7919 * 13) % (len(data) - size)
        chunk = data[start : start + size].decode("utf-8", "ignore")
        body = f"file {files}\n{chunk}".encode()
        path = folder / f"part{files // 1000:03d}" / f"doc{files:06d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        written += len(body)
        files += 1
    return files, written


def run_sync(corpus: Path, store: Path, kind: str, max_tokens: int) -> dict:
    report, wall, peak_mib = run_recemb_sync([str(corpus), "--qdrant-path", str(store), "--store", kind,
                                              "--collection", "corpus", "--max-tokens", str(max_tokens),
                                              "--batch-size", "16"])
    return {"wall_s": round(wall, 1), "peak_rss_mib": round(peak_mib, 1), "added": report["added"],
            "unchanged": report["unchanged"], "warnings": len(report["warnings"]),
            "embedded_tokens": report["embedded_tokens"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="corpus size in GB (default 1)")
    parser.add_argument("--stores", default="edge", help="embedded stores to measure: edge, local (comma-separated)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens embedded per document (default 64)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "corpus_rss.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="recemb-corpus-rss-"))
    try:
        corpus = work / "corpus"
        files, size = build_corpus(corpus, int(args.gb * 1e9))
        print(f"corpus: {files:,} files, {size / 1e9:.2f} GB (sizes {', '.join(f'{s // 1000} KB' for s in SIZES)})")
        rows = []
        for kind in args.stores.split(","):
            store = work / f"store-{kind}"
            first = run_sync(corpus, store, kind, args.max_tokens)
            again = run_sync(corpus, store, kind, args.max_tokens)
            store_mb = sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) / 1e6
            rows.append({"store": kind, "first": first, "unchanged": again, "store_mb": round(store_mb, 1)})
            print(f"{kind}: first sync {first['wall_s']} s, peak {first['peak_rss_mib']} MiB "
                  f"({first['added']:,} added); unchanged re-sync {again['wall_s']} s, peak "
                  f"{again['peak_rss_mib']} MiB; store {store_mb:.0f} MB")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n| store | corpus | first sync | its peak RSS | unchanged re-sync | its peak RSS "
          f"| target < {TARGET_MIB} MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        worst = max(r["first"]["peak_rss_mib"], r["unchanged"]["peak_rss_mib"])
        print(f"| {r['store']} | {files:,} files, {size / 1e9:.2f} GB | {r['first']['wall_s']} s | "
              f"{r['first']['peak_rss_mib']} MiB | {r['unchanged']['wall_s']} s | {r['unchanged']['peak_rss_mib']} MiB "
              f"| {'PASS' if worst < TARGET_MIB else 'FAIL'} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"files": files, "bytes": size, "max_tokens": args.max_tokens,
                                          "cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
