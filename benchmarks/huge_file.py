"""Peak memory and speed of `recemb sync` on one huge single-line file, end to end (process, not only model).

Each size runs the real command in its own process with a fresh embedded store and the bundled default model;
peak RSS is the child's own maximum resident set (``os.wait4``), tokens/s is the sync report's embedded tokens
over its seconds (tokenizing and embedding interleave in the stream, so both are in it).

    python3 benchmarks/huge_file.py                    # 1 MB and 50 MB (about 12 minutes on 2 cores)
    python3 benchmarks/huge_file.py --sizes 1,10 --passage-tokens 256

Targets (the robustness issue): the 50 MB file syncs with peak RSS under 1 GB, model included, at a tokens/s
within 20% of the 1 MB file's. Results are written to benchmarks/results/huge_file.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_process import run_recemb_sync  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BOOKS = ROOT.parent / "shared" / "data" / "long"


def single_line_text(n_bytes: int) -> str:
    """The shared public-domain books, whitespace collapsed to single spaces (one line), repeated to size."""
    books = sorted(BOOKS.glob("*.txt"))
    if not books:
        sys.exit(f"no books under {BOOKS}")
    corpus = " ".join(" ".join(b.read_text(encoding="utf-8").split()) for b in books)
    text = (corpus + " ") * (n_bytes // len(corpus.encode()) + 1)
    return text.encode()[:n_bytes].decode("utf-8", "ignore").rsplit(" ", 1)[0]


def run_sync(path: Path, store: Path, extra: list[str]) -> dict:
    report, wall, peak_mib = run_recemb_sync([str(path), "--qdrant-path", str(store), "--collection", "huge", *extra])
    return {"exit": 0, "wall_s": round(wall, 1), "peak_rss_mib": round(peak_mib, 1),
            "tokens": report["embedded_tokens"], "sync_s": round(report["seconds"], 1),
            "tokens_per_s": round(report["embedded_tokens"] / report["seconds"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,50", help="file sizes in MB, comma-separated (default 1,50)")
    parser.add_argument("--passage-tokens", type=int, help="also index passages (slower: every token twice)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "huge_file.json"))
    args = parser.parse_args()
    extra = ["--passage-tokens", str(args.passage_tokens)] if args.passage_tokens else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in [float(s) for s in args.sizes.split(",")]:
            path = Path(tmp) / f"huge-{mb:g}mb.txt"
            path.write_text(single_line_text(int(mb * 1_000_000)), encoding="utf-8")
            row = {"file_mb": mb, "chars": path.stat().st_size, **run_sync(path, Path(tmp) / f"store-{mb:g}", extra)}
            rows.append(row)
            path.unlink()
            print(f"{mb:g} MB done: {row}", file=sys.stderr)
    base = rows[0]["tokens_per_s"]
    print(f"\n| file | tokens | sync s | tokens/s | vs {rows[0]['file_mb']:g} MB | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['file_mb']:g} MB, one line | {r['tokens']:,} | {r['sync_s']} | {r['tokens_per_s']:,.0f} | "
              f"{r['tokens_per_s'] / base:.2f} | {r['peak_rss_mib']:,.0f} |")
    Path(args.out).write_text(json.dumps({"passage_tokens": args.passage_tokens, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
