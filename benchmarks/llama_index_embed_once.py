"""A LlamaIndex ingestion pipeline into a recemb collection: what reaches the model, and the seconds, on a first run
and on a rerun over unchanged files, with LlamaIndex's own embedding transformation and with ``EmbedInStore``.

    python3 benchmarks/llama_index_embed_once.py              # 25 files of 1,500 words, Qdrant Edge
    python3 benchmarks/llama_index_embed_once.py --docs 6 --words 600   # a quick look

The files are 1,500-word pieces of the shared long books (../shared/data/long; synthetic text, with a note, where
they are missing). Each run is what a script does: a new ``IngestionPipeline(transformations=[T],
vector_store=RecembVectorStore, docstore=SimpleDocumentStore(), docstore_strategy=UPSERTS_AND_DELETE)`` over
``SimpleDirectoryReader(folder, filename_as_id=True)``, with T the bundled recemb-mamba2-mini's ``RecembEmbedding``
("embed_model") or ``EmbedInStore()``, the model loaded beforehand. Counted at the model: sequences of token ids
embedded (whole texts and passages) and their tokens. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import framework_ingest  # a sibling script (benchmarks/ is on the path when one runs)
from llama_index.core import SimpleDirectoryReader
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.storage.docstore import SimpleDocumentStore

from recemb.core import DEFAULT_MODEL
from recemb_integrations.llama_index import EmbedInStore, RecembEmbedding, RecembVectorStore

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "long"


def pieces(docs: int, words: int) -> dict[str, str]:
    """``docs`` documents of ``words`` words, taken in turn from the long books (skipping their first 2,000); without
    the books, synthetic text (a note says so: its timings are not comparable to the books')."""
    books = sorted(DATA.glob("*.txt"))
    if not books:
        print(f"note: no books under {DATA}; synthetic text instead")
        vocabulary = "tide harbour boat herring dawn net gull lantern rope keel sail anchor pier storm".split()
        return {f"synthetic-{d:02d}.txt": " ".join(random.Random(d).choices(vocabulary, k=words)) for d in range(docs)}
    return framework_ingest.pieces(docs, words)  # the same documents as the LangChain benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=25)
    parser.add_argument("--words", type=int, default=1500)
    args = parser.parse_args()
    model = RecembEmbedding(model_name=DEFAULT_MODEL, model_kwargs={"device": "cpu"})
    embedder = model.embedder
    counts = {"sequences": 0, "tokens": 0}
    embed_token_ids = embedder.embed_token_ids

    def counting(ids, **kw):
        counts["sequences"] += len(ids)
        counts["tokens"] += sum(map(len, ids))
        return embed_token_ids(ids, **kw)

    embedder.embed_token_ids = counting  # the one way in for texts of this size, whole or as passages
    model.get_text_embedding("warm up")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        for name, text in pieces(args.docs, args.words).items():
            (folder / name).write_text(text, encoding="utf-8")
        for label, transformation in (("embed_model (LlamaIndex embeds)", model), ("EmbedInStore()", EmbedInStore())):
            with RecembVectorStore(collection_name="docs", path=Path(tmp) / label[:5], embed_model=model) as store:
                for run in ("first run", "rerun, unchanged"):
                    counts.update(sequences=0, tokens=0)
                    pipeline = IngestionPipeline(transformations=[transformation], vector_store=store,
                                                 docstore=SimpleDocumentStore(),
                                                 docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
                    documents = SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()
                    start = time.perf_counter()
                    pipeline.run(documents=documents)
                    seconds = time.perf_counter() - start
                    rows.append((label, run, seconds, counts["sequences"], counts["tokens"]))
                    print(f"{label}, {run}: {seconds:.1f} s", flush=True)
    print(f"\n{args.docs} files of {args.words:,} words, {DEFAULT_MODEL}, Qdrant Edge, CPU\n")
    print("| transformation | run | seconds | sequences embedded | tokens embedded |")
    print("|---|---|---:|---:|---:|")
    for label, run, seconds, sequences, tokens in rows:
        print(f"| {label} | {run} | {seconds:.1f} | {sequences:,} | {tokens:,} |")


if __name__ == "__main__":
    main()
