"""How much of a 1,500-word document one d-dimensional vector can hold, for the long-document test.

The test of ``retrieval_eval.py`` (200 documents of War and Peace, a sentence from a word band of each must find its
document) run with bags of tokens instead of a model: TF-IDF over the bundled model's WordPiece tokens, with raw or
sublinear (1 + log) term frequency, in the full vocabulary and squeezed into d dimensions by a random Gaussian
projection (the same projection for documents and queries). No training and no model: it bounds what an embedding
that keeps only which words a document holds can do at a given width.

    python3 benchmarks/long_capacity.py                       # widths 255, 384, 512, 768, 1024 (about a minute)
    python3 benchmarks/long_capacity.py --dims 384 --seeds 3

Prints accuracy@1 per band (0-150 / 150-500 / 500-1000 / 1000-1500 words) as a markdown table and writes
benchmarks/results/long_capacity.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_eval import LONG_BOOK, RESULTS, data_dir, long_document_task  # noqa: E402


def bag_of_tokens(tokenizer, texts: list[str], vocab: int):
    """(n, vocab) sparse token counts."""
    from scipy import sparse

    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    rows = [i for i, seq in enumerate(ids) for _ in seq]
    cols = [t for seq in ids for t in seq]
    return sparse.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(len(texts), vocab))


def band_accuracy(embed, docs_matrix, queries: dict, bag) -> list[float]:
    """Accuracy@1 per band: a query is right when its own document has the highest cosine."""
    d = embed(docs_matrix)
    out = []
    for items in queries.values():
        targets = np.array([i for i, _ in items])
        q = embed(bag([s for _, s in items]))
        out.append(float(((q @ d.T).argmax(1) == targets).mean()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", default="255,384,512,768,1024", help="comma-separated widths")
    parser.add_argument("--seeds", type=int, default=1, help="random projections per width (the mean is printed)")
    parser.add_argument("--out", default=str(RESULTS / "long_capacity.json"))
    args = parser.parse_args()
    from scipy import sparse
    from transformers import AutoTokenizer

    from recemb.core import DEFAULT_MODEL
    from recemb.core.loading import bundled_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(bundled_model_path(DEFAULT_MODEL)))
    vocab = len(tokenizer)
    docs, queries = long_document_task(data_dir() / "long" / LONG_BOOK, 1500, 200)
    counts = bag_of_tokens(tokenizer, docs, vocab)
    df = np.asarray((counts > 0).sum(0)).ravel()
    idf = sparse.diags(np.log((len(docs) + 1) / (df + 1)) + 1)
    sublinear = counts.copy()
    sublinear.data = 1 + np.log(sublinear.data)
    weightings = {"TF-IDF": counts @ idf, "TF-IDF, sublinear TF": sublinear @ idf}

    def query_bag(texts):  # queries: raw counts (a sentence rarely repeats a word) times the same IDF
        return bag_of_tokens(tokenizer, texts, vocab) @ idf

    results: dict[str, dict[str, list[float]]] = {}
    widths: list[int | None] = [None] + [int(x) for x in args.dims.split(",")]
    for name, matrix in weightings.items():
        for dim in widths:
            runs = []
            for seed in range(args.seeds if dim else 1):
                projection = None if dim is None else \
                    np.random.default_rng(seed).standard_normal((vocab, dim)) / np.sqrt(dim)

                def embed(m, p=projection):
                    x = m.toarray() if p is None else np.asarray(m @ p)
                    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

                runs.append(band_accuracy(embed, matrix, queries, query_bag))
            results.setdefault(name, {})[str(dim or "full")] = [round(float(v), 3) for v in np.mean(runs, 0)]
            print(f"  {name:<22} {dim or 'full':>5}: {results[name][str(dim or 'full')]}", file=sys.stderr)
    names = list(weightings)
    print("\n| dimensions | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for dim in widths:
        key = str(dim or "full")
        print(f"| {'full vocabulary' if dim is None else dim} | "
              + " | ".join(" / ".join(f"{v:.3f}" for v in results[n][key]) for n in names) + " |")
    Path(args.out).write_text(json.dumps({"documents": len(docs), "seeds": args.seeds, "accuracy_by_band": results},
                                         indent=1) + "\n")


if __name__ == "__main__":
    main()
