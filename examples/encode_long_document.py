"""Embed a whole book in one piece with vertical chunking, and show that memory does not grow with its length.

The model runs on growing prefixes of the token ids, then on the text itself as a stream (`encode_stream`). Without
the book (the repository's ../shared/data, or a path given) it embeds a synthetic text instead, and says so.

    python3 examples/encode_long_document.py [path/to/book.txt] [--vertical-chunk-size 1024]
"""

import argparse
import resource
import time
from pathlib import Path

from recemb.core import DEFAULT_MODEL, Embedder

BOOK = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "long" / "moby_dick.txt"
SYNTHETIC = "Call me Ishmael. " * 40_000  # about the length of Moby-Dick (680,000 characters), one sentence repeated


def read_book(path: str | Path) -> tuple[str, str]:
    """(text, what it is, for the report): the file at ``path``, else ``SYNTHETIC``, named as such."""
    path = Path(path)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        return text, f"{path.name}: {len(text):,} characters"
    return SYNTHETIC, (f"no book found at {path}; embedding a synthetic text instead (one sentence repeated): "
                       f"{len(SYNTHETIC):,} characters")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(BOOK))
    parser.add_argument("--vertical-chunk-size", type=int, default=1024)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model folder, bundled name or hub id")
    args = parser.parse_args(argv)
    text, what = read_book(args.path)

    emb = Embedder.from_pretrained(args.model, device="cpu", vertical_chunk_size=args.vertical_chunk_size)
    ids = emb.tokenize([text])[0]
    print(f"{what}, {len(ids):,} tokens; {emb}")
    peak_mib = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # noqa: E731 (Linux: KiB)
    for fraction in (1 / 16, 1 / 4, 1):
        part = ids[: max(2, int(len(ids) * fraction) - 1)] + ids[-1:]  # a prefix, still ending in EOS
        start = time.perf_counter()
        vector = emb.embed_token_ids([part], normalize=True, show_progress_bar=True)[0]
        seconds = time.perf_counter() - start
        print(f"{len(part):>9,} tokens  {seconds:7.1f} s  {len(part) / seconds:8,.0f} tok/s  "
              f"peak RSS so far {peak_mib():7,.0f} MiB  |v| = {vector.norm():.4f}")

    # The text itself, end to end: tokenized in windows and embedded as a stream, so neither the ids nor the
    # tokenizer's buffers of the whole book exist at once (what `recemb sync` does with long files).
    start = time.perf_counter()
    streamed = emb.encode_stream(text, show_progress_bar=True)
    print(f"whole text as a stream: {time.perf_counter() - start:.1f} s, same vector as the token-id path: "
          f"{float(streamed @ vector):.6f} cosine")


if __name__ == "__main__":
    main()
