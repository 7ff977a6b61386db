"""Peak memory and speed of `recemb sync` on one huge file, end to end (process, not only model).

Each size and kind of text runs the real command in its own process with a fresh embedded store and the bundled
default model; peak RSS is the child's own maximum resident set (``os.wait4``), tokens/s is the sync report's
embedded tokens over its seconds (tokenizing and embedding interleave in the stream, so both are in it), and
characters/s the file's characters over the same seconds.

The kinds of text, all made from the shared public-domain books:
- ``single-line``: whitespace collapsed to single spaces, one line;
- ``no-whitespace``: every whitespace character removed, so punctuation is the only boundary left (what minified
  data or text in a script written without spaces looks like to a tokenizer);
- ``one-word``: only the letters, one unbroken "word" of the whole size.

    python3 benchmarks/huge_file.py                    # single-line, 1 MB and 50 MB (about 12 minutes on 2 cores)
    python3 benchmarks/huge_file.py --sizes 1,10 --passage-tokens 256
    python3 benchmarks/huge_file.py --texts no-whitespace,one-word --sizes 10,50 \\
        --out benchmarks/results/huge_file_no_whitespace.json
    python3 benchmarks/huge_file.py --sizes 1,10 --model recemb-mamba2-mini --model NEW_MODEL_FOLDER

With several ``--model``s every file is synced by each model in turn, so their tokens/s are measured in one run,
side by side (the ratio to the first model is printed).

Targets (the robustness issues): a 50 MB file of any of these kinds syncs with peak RSS under 1 GB, model
included; the single-line one at a tokens/s within 20% of the 1 MB file's. Results are written to
benchmarks/results/huge_file.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_process import run_recemb_sync  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BOOKS = ROOT.parent / "shared" / "data" / "long"


def books_text() -> list[str]:
    books = sorted(BOOKS.glob("*.txt"))
    if not books:
        sys.exit(f"no books under {BOOKS}")
    return [b.read_text(encoding="utf-8") for b in books]


def single_line_text(n_bytes: int) -> str:
    """The shared public-domain books, whitespace collapsed to single spaces (one line), repeated to size."""
    corpus = " ".join(" ".join(b.split()) for b in books_text())
    text = (corpus + " ") * (n_bytes // len(corpus.encode()) + 1)
    return text.encode()[:n_bytes].decode("utf-8", "ignore").rsplit(" ", 1)[0]


def repeated_to(corpus: str, n_bytes: int) -> str:
    text = corpus * (n_bytes // len(corpus.encode()) + 1)
    return text.encode()[:n_bytes].decode("utf-8", "ignore")


def no_whitespace_text(n_bytes: int) -> str:
    """The books with every whitespace character removed, repeated to size."""
    return repeated_to("".join("".join(b.split()) for b in books_text()), n_bytes)


def one_word_text(n_bytes: int) -> str:
    """Only the books' letters: one word of the whole size."""
    return repeated_to("".join(c for b in books_text() for c in b if c.isalpha()), n_bytes)


TEXTS = {"single-line": single_line_text, "no-whitespace": no_whitespace_text, "one-word": one_word_text}


def run_sync(path: Path, store: Path, extra: list[str]) -> dict:
    report, wall, peak_mib = run_recemb_sync([str(path), "--qdrant-path", str(store), "--collection", "huge", *extra])
    return {"exit": 0, "wall_s": round(wall, 1), "peak_rss_mib": round(peak_mib, 1),
            "tokens": report["embedded_tokens"], "sync_s": round(report["seconds"], 1),
            "tokens_per_s": round(report["embedded_tokens"] / report["seconds"], 1),
            "seconds": report["seconds"], "warnings": [what for _, what in report["warnings"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,50", help="file sizes in MB, comma-separated (default 1,50)")
    parser.add_argument("--texts", default="single-line",
                        help=f"kinds of text, comma-separated, from {', '.join(TEXTS)} (default single-line)")
    parser.add_argument("--passage-tokens", type=int,
                        help="passage length passed to the sync (default: the sync's own; 0: whole documents only)")
    parser.add_argument("--model", action="append",
                        help="model folder or name for `recemb sync --model` (repeatable; default: the bundled one)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "huge_file.json"))
    args = parser.parse_args()
    extra = [] if args.passage_tokens is None else ["--passage-tokens", str(args.passage_tokens)]
    models = args.model or [None]
    kinds = args.texts.split(",")
    unknown = sorted(set(kinds) - set(TEXTS))
    if unknown:
        parser.error(f"--texts: unknown kinds {unknown}; choose from {', '.join(TEXTS)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            for mb in [float(s) for s in args.sizes.split(",")]:
                path = Path(tmp) / f"huge-{kind}-{mb:g}mb.txt"
                text = TEXTS[kind](int(mb * 1_000_000))
                path.write_text(text, encoding="utf-8")
                chars = len(text)
                del text
                for m, model in enumerate(models):
                    model_args = ["--model", model] if model else []
                    row = {"text": kind, "file_mb": mb, "model": model or "(bundled)", "bytes": path.stat().st_size,
                           "chars": chars, **run_sync(path, Path(tmp) / f"store-{kind}-{mb:g}-{m}", extra + model_args)}
                    row["chars_per_s"] = round(chars / row.pop("seconds"), 1)
                    rows.append(row)
                    print(f"{kind} {mb:g} MB, {row['model']} done: {row}", file=sys.stderr)
                path.unlink()
    first, by_file = {}, {}
    print("\n| file | model | tokens | sync s | tokens/s | characters/s | tokens/s vs the kind's first | "
          "tokens/s vs the first model | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = first.setdefault((r["text"], r["model"]), r["tokens_per_s"])
        same_file = by_file.setdefault((r["text"], r["file_mb"]), r["tokens_per_s"])
        print(f"| {r['file_mb']:g} MB, {r['text']} | {r['model']} | {r['tokens']:,} | {r['sync_s']} | "
              f"{r['tokens_per_s']:,.0f} | {r['chars_per_s']:,.0f} | {r['tokens_per_s'] / base:.2f} | "
              f"{r['tokens_per_s'] / same_file:.2f} | {r['peak_rss_mib']:,.0f} |")
    for r in rows:
        for warning in r["warnings"]:
            print(f"- {r['file_mb']:g} MB, {r['text']}: {warning}")
    Path(args.out).write_text(json.dumps({"passage_tokens": args.passage_tokens, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
