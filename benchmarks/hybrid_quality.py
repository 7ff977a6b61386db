"""Retrieval quality through the real path, per passage setting: QdrantSync into an embedded store, searched hybrid.

Dense, BM25 and hybrid search of the same collections synced with several passage settings: to choose, by
measurement, the passage default of a new collection.

    python3 benchmarks/hybrid_quality.py --quick                 # smoke test: 2 collections, 20 queries, 20 long docs
    python3 benchmarks/hybrid_quality.py                         # everything (the bundled recemb-mamba2-mini, Edge)
    python3 benchmarks/hybrid_quality.py --store local           # the same in qdrant-client's local mode
    python3 benchmarks/hybrid_quality.py --ir-passages none,default,256:32 --passages none,128:16:0,default
    python3 benchmarks/hybrid_quality.py --model path/to/model   # any recemb-loadable model

- **Passage settings** (``--ir-passages``, ``--passages``; comma-separated): ``none`` (``passage_tokens=0``: whole
  documents only), ``default`` (no passage keyword given: the library's default, whatever it is; its label shows
  the values read back from the collection, e.g. "passages 128/16 above 128 (default)") and ``TOKENS:OVERLAP[:ABOVE]``
  (passages of TOKENS tokens sharing OVERLAP, for documents longer than ABOVE tokens; ABOVE not given: the library's
  threshold, the passage length). Every label comes from ``passages_label`` and shows what the collection recorded.
  With passages, a search groups passages into their documents (document granularity; the hit's document counts).
- **IR**: every collection under ../shared/data/ir (BEIR layout) is synced with ``QdrantSync`` once per IR passage
  setting (default ``none,default``; collection ``<name>-<setting>``; document id = corpus id, text = title + text
  as in retrieval_eval.py; hybrid collections: dense + BM25 sparse vectors, the BM25 average lengths chosen from the
  corpus and recorded). Every query then goes through ``QdrantSync.search(query, limit=100, instruction=...)`` with
  mode "dense", "sparse", and "hybrid" fused by RRF and by DBSF: four rows per setting. nDCG@10 / Recall@100 as
  retrieval_eval.py computes them, beside all-MiniLM-L6-v2 and BM25 (bm25s), run once per collection in the same
  process through retrieval_eval.py's own code, and "all-MiniLM-L6-v2 + BM25 (DBSF)": the pipeline a user would
  wire up instead of recemb, once per collection (``<name>-minilm`` in the same store): one point per document (no
  splitter; MiniLM truncates at its 256-token window; the teacher row's document embeddings as dense vectors),
  recemb's BM25 vectors (``Bm25("english")``, avg_len the documents' mean BM25 length, as recemb chooses it),
  searched with the request of recemb's default hybrid search (its default fusion, prefetch and RRF k; dense-only
  when the query has no BM25 terms, counted). The store table gives per collection and setting the documents,
  points, embedded tokens, sync seconds and ms per query of each row (the pipeline's sync seconds: BM25 and writes).
- **Long documents**: retrieval_eval.py's War and Peace test (documents of 1,500 words; a query is a sentence from a
  word band of its document and must find it), synced once per ``--passages`` setting (default
  ``none,256:32:0,default``: 256:32:0 gives every document passages, as the 256/32 store measured before);
  accuracy@1 per band for the four search rows at document granularity. RRF over 200 documents often gives the
  best two an equal score (ranks 1 + 2 against 2 + 1); which comes first is then the store's choice (Edge's order
  varied between identical searches on the quick run, local mode's did not): such queries are counted ("tied top
  hit"), so a difference of a few queries between stores or runs can be read as ties.
- **Stores** (``--store``): ``edge`` (default; Qdrant Edge through ``recemb_integrations.stores.open_store(path=...,
  kind="edge")``: HNSW built after a sync that wrote more than ``OPTIMIZE_AFTER_POINTS`` points, exact search
  below) or ``local`` (``QdrantClient(path=...)``, qdrant-client's local mode: every point scored in Python, slow
  on the ~22,000 points an IR collection reaches with passages). One store in a temp folder holds every collection
  of a run; its kind is recorded in ``results["setup"]["store"]``.
- Targets, per passage setting: hybrid mean nDCG@10 >= 1.05 x all-MiniLM-L6-v2 and >= 1.05 x BM25 (bm25s) (DBSF is
  the default fusion; each hybrid row is also compared with its own setting's sparse and dense rows); the default
  hybrid row's mean nDCG@10 >= MiniLM + BM25's; long-document accuracy@1 >= BM25 (bm25s) in every band. Ratios and
  misses are printed.

``--quick``: the 2 smallest collections, 20 queries each, 20 long documents, and of the passage settings only
``none`` and ``default`` (all of those given if they include neither). A full run's duration with these defaults is
still to be measured: it syncs and searches every IR collection twice and the long documents three times (the
previous version, one IR store per collection and three long-document stores, took 34 minutes in local mode on 2
shared cores); ``--quick`` takes a few minutes.

Writes benchmarks/results/hybrid_quality.json (``--out``; ``--quick`` writes to the temp folder) and prints markdown
tables. Data: ../shared/data (override with RECEMB_DATA). Queries without BM25 terms are searched dense-only by
QdrantSync (a SearchNotice); they are counted and reported. Timings are of whatever machine runs it: state its load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_eval import (  # noqa: E402
    LONG_BOOK,
    QUERY_TASKS,
    RESULTS,
    TeacherSystem,
    data_dir,
    dense_rank,
    ir_metrics,
    ir_ranking,
    load_collection,
    long_accuracy,
    long_document_task,
)

BM25_NAME = "BM25 (bm25s)"
# Search rows: name -> (mode, fusion).
ROWS = {
    "dense": ("dense", None),
    "sparse (BM25)": ("sparse", None),
    "hybrid rrf": ("hybrid", "rrf"),
    "hybrid dbsf": ("hybrid", "dbsf"),
}
HYBRID_ROWS = ("hybrid rrf", "hybrid dbsf")
TARGET_RATIO = 1.05
PIPELINE_TARGET = 1.0  # the default hybrid row against the MiniLM + BM25 pipeline: at least as good
PIPELINE_WRITE_BATCH = 256  # points per upsert of the pipeline row
LIMIT = 100
QUICK = {"collections": 2, "queries": 20, "long_docs": 20}
QUICK_PASSAGES = ("none", "default")  # the passage configurations --quick keeps
IR_PASSAGES = "none,default"
LONG_PASSAGES = "none,256:32:0,default"  # 256:32:0: every document gets passages, as the 256/32 store of 2026-12-01
STORES = {
    "edge": "Qdrant Edge in a temp folder (recemb_integrations.stores.open_store(path=..., kind='edge'): HNSW built "
            "by optimize() once a sync wrote more than OPTIMIZE_AFTER_POINTS points, exact search below)",
    "local": "QdrantClient(path=<temp folder>) (qdrant-client local mode: every point scored in Python)",
}


@dataclass(frozen=True)
class PassageConfig:
    """One passage setting of a store: ``spec`` "none" (``passage_tokens=0``), "default" (no passage keyword: the
    library's default) or "TOKENS:OVERLAP[:ABOVE]" (ABOVE not given: the library's threshold for those tokens)."""

    spec: str
    tokens: int | None = None
    overlap: int | None = None
    above: int | None = None

    @property
    def is_default(self) -> bool:
        return self.spec == "default"

    def kwargs(self) -> dict:
        """QdrantSync's passage keyword arguments for this setting."""
        if self.is_default:
            return {}
        if self.spec == "none":
            return {"passage_tokens": 0}
        return {"passage_tokens": self.tokens, "passage_overlap": self.overlap,
                **({} if self.above is None else {"passages_above": self.above})}

    @property
    def slug(self) -> str:
        """The collection-name suffix (distinct per setting)."""
        if self.tokens is None:
            return self.spec
        return f"p{self.tokens}-o{self.overlap}" + ("" if self.above is None else f"-a{self.above}")

    def as_dict(self) -> dict:
        return {"spec": self.spec, "kwargs": self.kwargs()}


def parse_passages(spec: str) -> list[PassageConfig]:
    """'none,256:32:0,default' -> the three settings, in that order; a repeated setting is an error."""
    from recemb_integrations.qdrant.record import check_passage_settings

    out: list[PassageConfig] = []
    for part in filter(None, (p.strip().lower() for p in spec.split(","))):
        if part in ("none", "default"):
            config = PassageConfig(part)
        else:
            try:
                fields = [int(f) for f in part.split(":")]
            except ValueError:
                raise ValueError(f"passage setting {part!r} is not 'none', 'default' or "
                                 "TOKENS:OVERLAP[:ABOVE]") from None
            if not 1 <= len(fields) <= 3:
                raise ValueError(f"passage setting {part!r} is not TOKENS:OVERLAP[:ABOVE]")
            tokens, overlap = fields[0], fields[1] if len(fields) > 1 else 0
            above = fields[2] if len(fields) > 2 else None
            if tokens == 0:
                raise ValueError(f"passage setting {part!r}: write 'none' for no passages")
            check_passage_settings(tokens, overlap, above)
            config = PassageConfig(f"{tokens}:{overlap}" + ("" if above is None else f":{above}"), tokens, overlap,
                                   above)
        if config in out:
            raise ValueError(f"passage setting {config.spec!r} is given twice")
        out.append(config)
    if not out:
        raise ValueError("no passage setting given (e.g. 'none,default')")
    return out


def passages_label(config: PassageConfig, settings: dict | None = None) -> str:
    """The label of a store's passage setting in tables and results: the values the collection recorded
    (``settings``: its ``collection_settings``) where given, else the spec's; "(default)" marks the library's."""
    if settings is not None:
        tokens, overlap, above = (settings.get(k) for k in ("passage_tokens", "passage_overlap", "passages_above"))
    else:
        tokens, overlap, above = config.tokens, config.overlap, config.above
    if config.is_default and settings is None:
        return "library default passages"
    suffix = " (default)" if config.is_default else ""
    if not tokens:
        return "no passages" + suffix
    return f"passages {tokens}/{overlap or 0}" + ("" if above is None else f" above {above}") + suffix


def unique_label(label: str, config: PassageConfig, taken: dict[str, str]) -> str:
    """``label``, or where another setting of ``taken`` (spec -> label) has it already (e.g. 128:16 and 128:16:128),
    the label with this setting's spec added."""
    others = {v for k, v in taken.items() if k != config.spec}
    return label if label not in others else f"{label} [{config.spec}]"


def row_key(row: str, label: str) -> str:
    """A QdrantSync row of one passage setting, e.g. "hybrid dbsf, no passages"."""
    return f"{row}, {label}"


class Notices:
    """Runs searches, counting those that raised a SearchNotice; other warnings are shown once each."""

    def __init__(self):
        self.count = 0
        self.messages: set[str] = set()
        self._shown: set[str] = set()

    def search(self, sync, query: str, **kwargs):
        from recemb_integrations.qdrant import SearchNotice

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hits = sync.search(query, **kwargs)
        noticed = False
        for w in caught:
            if issubclass(w.category, SearchNotice):
                noticed = True
                self.messages.add(str(w.message))
            elif str(w.message) not in self._shown:
                self._shown.add(str(w.message))
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        self.count += noticed
        return hits


def sync_store(store, name: str, embedder, docs, batch_size: int, config: PassageConfig,
               long_documents: str | None = None) -> dict:
    """Sync ``docs`` (Documents) into a new collection with passage setting ``config`` (and ``long_documents``, None:
    the library's default); returns its setup (passage settings read back from the collection and their label, BM25
    settings, documents, points, tokens, seconds)."""
    from recemb_integrations.qdrant import QdrantSync, collection_settings

    sync = QdrantSync(store, name, embedder, batch_size=batch_size, long_documents=long_documents,
                      **config.kwargs())
    t0 = time.time()
    report = sync.sync(docs, show_progress_bar=False)
    seconds = time.time() - t0
    if report.failed:
        raise RuntimeError(f"sync of {name} failed for {len(report.failed)} documents: {report.failed[:3]}")
    settings = collection_settings(store, name) or {}
    passages = {k: settings.get(k) for k in ("passage_tokens", "passage_overlap", "passages_above", "long_documents")}
    return {"collection": name, "passages_spec": config.spec, "label": passages_label(config, settings),
            **passages, "documents": sync.count(), "points": store.count(name), "sync_seconds": seconds,
            "embedded_tokens": report.embedded_tokens, "warnings": len(report.warnings),
            "warning_messages": sorted({w for _, w in report.warnings})[:5], "bm25": settings.get("sparse")}


def search_all(store, name: str, embedder, queries: list[str], instruction: str | None, limit: int) -> dict:
    """Every query through QdrantSync.search in each row's mode; ranked document ids, notices, seconds and the
    queries whose best two hits scored the same to rounding (``tied_top``: 1/(k+1) + 1/(k+2) summed in either order;
    their order, and so accuracy@1, is the store's choice) per row."""
    from recemb_integrations.qdrant import QdrantSync

    sync = QdrantSync.open(store, name, embedder)  # the search side of a separate process: settings from the store
    out = {}
    for row, (mode, fusion) in ROWS.items():
        notices = Notices()
        t0 = time.time()
        kwargs = {"mode": mode} if fusion is None else {"mode": mode, "fusion": fusion}
        found = [notices.search(sync, q, limit=limit, instruction=instruction, **kwargs) for q in queries]
        seconds = time.time() - t0
        out[row] = {"ranked": [[h.document_id for h in hits] for hits in found], "no_bm25_terms": notices.count,
                    "notice_messages": sorted(notices.messages), "seconds": seconds,
                    "tied_top": sum(len(hits) > 1 and math.isclose(hits[0].score, hits[1].score, rel_tol=1e-9)
                                    for hits in found)}
    return out


def pipeline_name() -> str:
    """The key of the MiniLM + BM25 pipeline row, named by the fusion it uses (recemb's default)."""
    from recemb_integrations.qdrant import DEFAULT_FUSION

    return f"all-MiniLM-L6-v2 + BM25 ({DEFAULT_FUSION.upper()})"


def pipeline_ingest(store, name: str, doc_ids: list[str], doc_texts: list[str], dense: np.ndarray) -> tuple:
    """The pipeline a user would wire up instead of recemb, written into a new collection of the same store: one
    point per document (no splitter; all-MiniLM-L6-v2 truncates at its 256-token window), its dense vector
    ``dense`` (the teacher row's document embeddings) and recemb's BM25 vector, the average length the mean BM25
    length of the documents (as recemb chooses it for a new collection), payload ``document_id``. Returns the
    Bm25 and the setup (seconds: BM25 and writes only, the dense embeddings were counted by the teacher row)."""
    from recemb_integrations.sparse import Bm25
    from recemb_integrations.stores import DENSE_VECTOR, KEYWORD, SPARSE_VECTOR, StoredPoint

    t0 = time.time()
    base = Bm25("english")
    lengths = [base.length(t) for t in doc_texts]
    bm25 = base.with_avg_len(float(np.mean(lengths)) if sum(lengths) else base.avg_len)
    store.create_collection(name, int(dense.shape[1]), True, {"pipeline": {"bm25": bm25.settings()}})
    store.create_payload_index(name, "document_id", KEYWORD)
    for start in range(0, len(doc_ids), PIPELINE_WRITE_BATCH):
        points = []
        for doc_id, text, vec in zip(doc_ids[start:start + PIPELINE_WRITE_BATCH],
                                     doc_texts[start:start + PIPELINE_WRITE_BATCH],
                                     dense[start:start + PIPELINE_WRITE_BATCH]):
            sparse = bm25.embed_document(text)
            points.append(StoredPoint(id=str(uuid.uuid5(uuid.NAMESPACE_URL, doc_id)), payload={"document_id": doc_id},
                                      vector={DENSE_VECTOR: vec.tolist(), **({SPARSE_VECTOR: sparse} if len(sparse)
                                                                             else {})}))
        store.upsert(name, points)
    store.optimize(name, show_progress_bar=False)
    return bm25, {"collection": name, "documents": len(doc_ids), "points": store.count(name),
                  "write_seconds": time.time() - t0, "bm25": bm25.settings()}


def pipeline_search(store, name: str, model, bm25, queries: list[str], limit: int) -> dict:
    """Every query as recemb's default hybrid search asks the store (its default fusion, prefetch and RRF_K), the
    query embedded by all-MiniLM-L6-v2 one at a time; dense-only (counted) when it has no BM25 terms. One point per
    document, so a plain ``store.query`` (as QdrantSync searches a collection without passages)."""
    from recemb_integrations.qdrant.search import DEFAULT_FUSION, PREFETCH_MIN, PREFETCH_PER_HIT, RRF_K
    from recemb_integrations.stores import SearchRequest

    ranked, dense_only = [], 0
    t0 = time.time()
    for q in queries:
        dense = model.encode([q], normalize_embeddings=True, convert_to_numpy=True,
                             show_progress_bar=False)[0].tolist()
        sparse = bm25.embed_query(q)
        if not len(sparse):
            sparse, dense_only = None, dense_only + 1
        request = SearchRequest(limit=limit, dense=dense, sparse=sparse,
                                fusion=DEFAULT_FUSION if sparse is not None else None,
                                candidates=max(PREFETCH_MIN, PREFETCH_PER_HIT * limit), rrf_k=RRF_K)
        ranked.append([p.payload["document_id"] for p in store.query(name, request)])
    return {"ranked": ranked, "no_bm25_terms": dense_only, "seconds": time.time() - t0}


def store_line(prefix: str, store: dict) -> str:
    bm25 = store["bm25"] or {}
    pal = bm25.get("passage_avg_len")
    return (f"  {prefix:<10} {store['label']}: synced {store['documents']} documents as {store['points']} points "
            f"({store['embedded_tokens']} tokens embedded) in {store['sync_seconds']:.1f} s; BM25 avg_len "
            f"{bm25.get('avg_len', float('nan')):.1f}" + ("" if pal is None else f", passage_avg_len {pal:.1f}")
            + (f"; {store['warnings']} warnings, e.g. {store['warning_messages'][0]}" if store["warnings"] else ""))


# --------------------------------------------------------------------------------------------- the two tests


def run_ir(store, embedder, teacher, collections, data: Path, max_queries: int | None, batch_size: int,
           configs: list[PassageConfig]) -> dict:
    """Teacher, bm25s and the MiniLM + BM25 pipeline once per collection; the four QdrantSync rows once per
    collection and passage setting.

    ``scores`` is keyed by system: the two baselines, ``pipeline_name()``, and ``row_key(row, label)`` for each
    QdrantSync row and setting (``rows`` says which row and setting each is); ``stores[label][collection]`` is each
    store's setup, ``pipeline[collection]`` the pipeline collection's."""
    from recemb_integrations.qdrant import Document

    results: dict = {"passages": {}, "rows": {}, "scores": {}, "stores": {}, "pipeline": {}, "seconds": {}}

    def record(key: str, coll: str, metrics: dict, seconds: float, **extra) -> None:
        results["scores"].setdefault(key, {})[coll] = {**metrics, **extra}
        results["seconds"][key] = results["seconds"].get(key, 0.0) + seconds
        print(f"  {coll:<10} {key:<48} nDCG@10 {metrics['ndcg@10']:.4f}  R@100 {metrics['recall@100']:.4f}"
              f"  ({seconds:.1f} s)" + (f"  no BM25 terms: {extra['no_bm25_terms']}" if extra.get("no_bm25_terms")
                                         else ""), flush=True)

    for coll in collections:
        doc_ids, doc_texts, qids, qtexts, qrels = load_collection(data / "ir" / coll)
        if max_queries:
            qids, qtexts = qids[:max_queries], qtexts[:max_queries]
        size = {"queries": len(qids), "documents": len(doc_ids)}
        task = QUERY_TASKS.get(coll)
        # The teacher row as ir_ranking ranks it; its document embeddings are the pipeline row's dense vectors.
        t0 = time.time()
        teacher_queries = teacher.queries(qtexts, task)
        teacher_docs = teacher.documents(doc_texts)
        ranked = [[doc_ids[j] for j in r] for r in dense_rank(teacher_queries, teacher_docs, LIMIT)]
        record(TeacherSystem.name, coll, ir_metrics(ranked, qids, qrels), time.time() - t0, **size)
        t0 = time.time()
        ranked = [[doc_ids[j] for j in r] for r in ir_ranking(None, qtexts, doc_texts, task, LIMIT)]
        record(BM25_NAME, coll, ir_metrics(ranked, qids, qrels), time.time() - t0, **size)
        name = f"{coll}-minilm"
        bm25, setup = pipeline_ingest(store, name, doc_ids, doc_texts, teacher_docs)
        del teacher_queries, teacher_docs
        found = pipeline_search(store, name, teacher.model, bm25, qtexts, LIMIT)
        results["pipeline"][coll] = {**setup, "search_seconds": found["seconds"]}
        record(pipeline_name(), coll, ir_metrics(found["ranked"], qids, qrels), found["seconds"],
               no_bm25_terms=found["no_bm25_terms"], ms_per_query=1000 * found["seconds"] / max(len(qids), 1),
               **size)
        documents = [Document(i, t, {}) for i, t in zip(doc_ids, doc_texts)]
        for config in configs:
            name = f"{coll}-{config.slug}"
            synced = sync_store(store, name, embedder, documents, batch_size, config)
            # One label per setting for every collection (the first collection's); a store that recorded other
            # values (which the library's defaults should not do) keeps its own in its setup and is flagged.
            label = results["passages"].setdefault(config.spec, unique_label(synced["label"], config,
                                                                              results["passages"]))
            if synced["label"] != label.removesuffix(f" [{config.spec}]"):
                print(f"  WARNING: {name} recorded {synced['label']!r}, {collections[0]} {label!r}", flush=True)
            results["stores"].setdefault(label, {})[coll] = synced
            print(store_line(coll, synced), flush=True)
            for row, found in search_all(store, name, embedder, qtexts, task, LIMIT).items():
                key = row_key(row, label)
                results["rows"][key] = {"row": row, "passages": label, "spec": config.spec}
                record(key, coll, ir_metrics(found["ranked"], qids, qrels), found["seconds"],
                       no_bm25_terms=found["no_bm25_terms"], notice_messages=found["notice_messages"],
                       tied_top=found["tied_top"],
                       ms_per_query=1000 * found["seconds"] / max(len(qids), 1), **size)
    results["mean"] = {key: {m: float(np.mean([per[c][m] for c in collections])) for m in ("ndcg@10", "recall@100")}
                       for key, per in results["scores"].items()}
    return results


def run_long(store, embedder, teacher, data: Path, words: int, n_docs: int, configs: list[PassageConfig],
             batch_size: int) -> dict:
    from recemb_integrations.qdrant import Document

    docs, queries = long_document_task(data / "long" / LONG_BOOK, words, n_docs)
    results: dict = {"setup": {"book": LONG_BOOK, "words_per_document": words, "documents": len(docs),
                               "queries_per_band": {f"{a}-{b}": len(v) for (a, b), v in queries.items()}},
                     "passages": {}, "baselines": {}, "stores": {}, "seconds": {}}
    for row, system in ((TeacherSystem.name, teacher), (BM25_NAME, None)):
        t0 = time.time()
        results["baselines"][row] = long_accuracy(system, docs, queries)
        results["seconds"][row] = time.time() - t0
        print(f"  long       {row:<28} {fmt_bands(results['baselines'][row])}", flush=True)
    documents = [Document(str(i), text, {}) for i, text in enumerate(docs)]
    n_queries = sum(len(items) for items in queries.values())
    for config in configs:
        name = f"long-{config.slug}"
        synced = sync_store(store, name, embedder, documents, batch_size, config)
        label = results["passages"][config.spec] = unique_label(synced["label"], config, results["passages"])
        print(store_line("long", synced), flush=True)
        per_row: dict = {}
        notices: dict = {}
        seconds: dict = {}
        tied: dict = {}
        for band, items in queries.items():
            if not items:
                continue
            targets = [str(di) for di, _ in items]
            found = search_all(store, name, embedder, [q for _, q in items], None, 10)
            for row, f in found.items():
                top1 = [r[0] if r else None for r in f["ranked"]]
                per_row.setdefault(row, {})[f"{band[0]}-{band[1]}"] = float(np.mean([t == g for t, g in
                                                                                      zip(top1, targets)]))
                notices[row] = notices.get(row, 0) + f["no_bm25_terms"]
                seconds[row] = seconds.get(row, 0.0) + f["seconds"]
                tied[row] = tied.get(row, 0) + f["tied_top"]
        for row in per_row:
            print(f"  long       {label:<36} {row:<14} {fmt_bands(per_row[row])}  ({seconds[row]:.1f} s)"
                  + (f"  tied top hit: {tied[row]}" if tied[row] else ""), flush=True)
        results["stores"][label] = {**synced, "accuracy@1": per_row, "no_bm25_terms": notices,
                                    "search_seconds": seconds, "tied_top": tied,
                                    "ms_per_query": {row: 1000 * s / max(n_queries, 1) for row, s in seconds.items()}}
    return results


# --------------------------------------------------------------------------------------------- report


def fmt_bands(acc: dict[str, float]) -> str:
    return " ".join(f"{b} {v:.3f}" for b, v in acc.items())


def system_label(ir: dict, key: str, model: str) -> str:
    return f"{model} {key} (QdrantSync)" if key in ir["rows"] else key


def ir_table(ir: dict, collections: list[str], model: str) -> str:
    lines = ["| system | " + " | ".join(collections) + " | mean nDCG@10 | mean R@100 |",
             "|---|" + "---:|" * (len(collections) + 2)]
    for key, per in ir["scores"].items():
        lines.append(f"| {system_label(ir, key, model)} | "
                     + " | ".join(f"{per[c]['ndcg@10']:.3f}" for c in collections)
                     + f" | **{ir['mean'][key]['ndcg@10']:.3f}** | {ir['mean'][key]['recall@100']:.3f} |")
    return "\n".join(lines)


def recall_table(ir: dict, collections: list[str], model: str) -> str:
    lines = ["| system | " + " | ".join(collections) + " |", "|---|" + "---:|" * len(collections)]
    for key, per in ir["scores"].items():
        lines.append(f"| {system_label(ir, key, model)} | "
                     + " | ".join(f"{per[c]['recall@100']:.3f}" for c in collections) + " |")
    return "\n".join(lines)


def avg_lens(st: dict) -> str:
    bm25 = st["bm25"] or {}
    pal = bm25.get("passage_avg_len")
    return f"{bm25.get('avg_len', float('nan')):.1f} / " + ("—" if pal is None else f"{pal:.1f}")


def store_table(ir: dict, collections: list[str]) -> str:
    """Per collection and passage setting, then per setting over all collections: what was stored and what it cost
    (ms/query: the row's search seconds over its queries); per collection, the MiniLM + BM25 pipeline's collection
    too (its one search in its fusion's column; sync s: BM25 and writes, its dense embeddings are the teacher's)."""
    lines = ["| collection | passages | documents | points | embedded tokens | queries | BM25 avg_len (documents / "
             "passages) | queries without BM25 terms | sync s | ms/query dense | sparse | hybrid rrf | hybrid dbsf |",
             "|---|---|" + "---:|" * 11]
    for c in collections:
        for label, stores in ir["stores"].items():
            st = stores[c]
            sc = {row: ir["scores"][row_key(row, label)][c] for row in ROWS}
            lines.append(f"| {c} | {label} | {st['documents']} | {st['points']} | {st['embedded_tokens']} "
                         f"| {sc['dense']['queries']} | {avg_lens(st)} | {sc['hybrid dbsf']['no_bm25_terms']} "
                         f"| {st['sync_seconds']:.1f} | " + " | ".join(f"{sc[row]['ms_per_query']:.0f}" for row in ROWS)
                         + " |")
        st = ir.get("pipeline", {}).get(c)
        if st is not None:
            sc = ir["scores"][pipeline_name()][c]
            ms = [f"{sc['ms_per_query']:.0f}" if row == f"hybrid {default_fusion()}" else "—" for row in ROWS]
            lines.append(f"| {c} | {pipeline_name()}: one point per document | {st['documents']} | {st['points']} "
                         f"| — | {sc['queries']} | {avg_lens(st)} | {sc['no_bm25_terms']} | {st['write_seconds']:.1f} "
                         "| " + " | ".join(ms) + " |")
    if len(collections) > 1:
        for label, stores in ir["stores"].items():
            total = {k: sum(stores[c][k] for c in collections) for k in ("documents", "points", "embedded_tokens",
                                                                          "sync_seconds")}
            sc = {row: [ir["scores"][row_key(row, label)][c] for c in collections] for row in ROWS}
            n_q = sum(s["queries"] for s in sc["dense"])
            ms = {row: sum(s["ms_per_query"] * s["queries"] for s in sc[row]) / max(n_q, 1) for row in ROWS}
            lines.append(f"| all | {label} | {total['documents']} | {total['points']} | {total['embedded_tokens']} "
                         f"| {n_q} | — | {sum(s['no_bm25_terms'] for s in sc['hybrid dbsf'])} "
                         f"| {total['sync_seconds']:.1f} | " + " | ".join(f"{ms[row]:.0f}" for row in ROWS) + " |")
    if ir.get("pipeline"):
        lines.append(f"\n{pipeline_name()}: sync s is BM25 and writes only (its dense vectors are the teacher row's "
                     "document embeddings, whose seconds that row counts); ms/query includes embedding the query.")
    return "\n".join(lines)


def long_table(long: dict, model: str) -> str:
    bands = list(long["setup"]["queries_per_band"])
    lines = ["| system | store | " + " | ".join(bands) + " | mean |", "|---|---|" + "---:|" * (len(bands) + 1)]
    for row, acc in long["baselines"].items():
        lines.append(f"| {row} | — | " + " | ".join(f"{acc.get(b, float('nan')):.3f}" for b in bands)
                     + f" | {np.mean(list(acc.values())):.3f} |")
    for label, store in long["stores"].items():
        for row, acc in store["accuracy@1"].items():
            lines.append(f"| {model} {row} | {label} | " + " | ".join(f"{acc.get(b, float('nan')):.3f}" for b in bands)
                         + f" | {np.mean(list(acc.values())):.3f} |")
    return "\n".join(lines)


def long_store_table(long: dict) -> str:
    lines = ["| store | documents | points | embedded tokens | BM25 avg_len (documents / passages) | sync s "
             "| ms/query dense | sparse | hybrid rrf | hybrid dbsf | tied top hit rrf / dbsf |", "|---|" + "---:|" * 10]
    for label, st in long["stores"].items():
        lines.append(f"| {label} | {st['documents']} | {st['points']} | {st['embedded_tokens']} | {avg_lens(st)} "
                     f"| {st['sync_seconds']:.1f} | "
                     + " | ".join(f"{st['ms_per_query'].get(row, 0):.0f}" for row in ROWS)
                     + f" | {st['tied_top'].get('hybrid rrf', 0)} / {st['tied_top'].get('hybrid dbsf', 0)} |")
    return "\n".join(lines)


def targets(ir: dict | None, long: dict | None) -> dict:
    """Ratios against the targets, per passage setting; ``met`` and the shortfall for each. ``ir_vs_pipeline``: the
    default hybrid row of each setting against the MiniLM + BM25 pipeline (target ``PIPELINE_TARGET``)."""
    out: dict = {"ir": {}, "ir_vs_pipeline": {}, "long": {}}
    if ir:
        means = {key: m["ndcg@10"] for key, m in ir["mean"].items()}
        pipeline = means.get(pipeline_name())
        default = f"hybrid {default_fusion()}"
        for label in ir["stores"] if pipeline is not None and default in ROWS else ():
            mine = means[row_key(default, label)]
            ratio = mine / pipeline if pipeline else float("nan")
            out["ir_vs_pipeline"][label] = {
                "row": row_key(default, label), "pipeline": pipeline_name(), "ratio": ratio,
                "target": PIPELINE_TARGET, "met": ratio >= PIPELINE_TARGET,
                "missing_ndcg": max(0.0, PIPELINE_TARGET * pipeline - mine)}
        for label in ir["stores"]:
            for row in HYBRID_ROWS:
                mine = means[row_key(row, label)]
                for ref in (TeacherSystem.name, BM25_NAME, "sparse (BM25)", "dense"):
                    theirs = means[ref] if ref in means else means[row_key(ref, label)]
                    ratio = mine / theirs if theirs else float("nan")
                    need = TARGET_RATIO if ref in (TeacherSystem.name, BM25_NAME) else None
                    out["ir"].setdefault(label, {}).setdefault(row, {})[ref] = {
                        "ratio": ratio, "target": need, "met": None if need is None else ratio >= need,
                        "missing_ndcg": None if need is None else max(0.0, need * theirs - mine)}
    if long:
        bm25 = long["baselines"][BM25_NAME]
        for label, store in long["stores"].items():
            for row, acc in store["accuracy@1"].items():
                diff = {b: acc[b] - bm25[b] for b in acc}
                out["long"].setdefault(label, {})[row] = {"minus_bm25": diff, "met": all(d >= 0 for d in diff.values())}
    return out


def default_fusion() -> str | None:
    import recemb_integrations.qdrant as q

    return getattr(q, "DEFAULT_FUSION", None)


def targets_text(t: dict) -> str:
    lines = []
    default = f"hybrid {default_fusion()}"
    for label, rows in t["ir"].items():
        for row, refs in rows.items():
            parts = []
            for ref, r in refs.items():
                s = f"{r['ratio']:.3f}x {ref if r['target'] is not None else f'its {ref} row'}"
                if r["target"] is not None:
                    s += (f" (target {TARGET_RATIO}x: met)" if r["met"] else
                          f" (target {TARGET_RATIO}x: MISSED by {r['missing_ndcg']:.3f} nDCG@10, "
                          f"{TARGET_RATIO - r['ratio']:.3f}x)")
                parts.append(s)
            lines.append(f"- IR {row_key(row, label)}{' (the default fusion)' if row == default else ''}: mean "
                         "nDCG@10 = " + "; ".join(parts))
    for label, r in t.get("ir_vs_pipeline", {}).items():
        lines.append(f"- IR {r['row']} (the default) vs {r['pipeline']}: mean nDCG@10 = {r['ratio']:.3f}x "
                     + (f"(target >= {r['target']}x: met)" if r["met"] else
                        f"(target >= {r['target']}x: MISSED by {r['missing_ndcg']:.3f} nDCG@10, "
                        f"{r['target'] - r['ratio']:.3f}x)"))
    for label, rows in t["long"].items():
        for row, r in rows.items():
            if row not in HYBRID_ROWS and row != "sparse (BM25)":
                continue
            diff = ", ".join(f"{b} {d:+.3f}" for b, d in r["minus_bm25"].items())
            lines.append(f"- long, {label}, {row}: accuracy@1 minus bm25s per band: {diff} -> "
                         + ("met (>= bm25s in every band)" if r["met"] else
                            "MISSED in " + ", ".join(b for b, d in r["minus_bm25"].items() if d < 0)))
    return "\n".join(lines)


def retrieval_eval_reference(model_name: str, collections: list[str]) -> dict | None:
    """The model's mean nDCG@10 / Recall@100 as retrieval_eval.py last recorded them, when it covers the same
    collections: a check that the dense row of the store without passages matches encode + numpy ranking."""
    path = RESULTS / "retrieval.json"
    try:
        per = json.loads(path.read_text())["ir"][model_name]
        return {"file": str(path.relative_to(RESULTS.parent.parent)),
                **{m: float(np.mean([per[c][m] for c in collections])) for m in ("ndcg@10", "recall@100")}}
    except (OSError, KeyError, ValueError):
        return None


def quick_configs(configs: list[PassageConfig]) -> list[PassageConfig]:
    """--quick keeps the "none" and "default" settings (all of them if the list has neither)."""
    kept = [c for c in configs if c.spec in QUICK_PASSAGES]
    return kept or configs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="recemb model folder or name (default: the bundled recemb-mamba2-mini)")
    parser.add_argument("--collections", help="comma-separated (default: every folder under ir/)")
    parser.add_argument("--queries", type=int, default=0, help="at most this many queries per collection (0: all)")
    parser.add_argument("--store", choices=sorted(STORES), default="edge",
                        help="where the collections live: 'edge' (Qdrant Edge, the default) or 'local' "
                             "(qdrant-client local mode), in a temp folder")
    parser.add_argument("--ir-passages", default=IR_PASSAGES,
                        help="passage settings of the IR stores, comma-separated: 'none' (passage_tokens=0), "
                             "'default' (no passage keyword: the library's default) or TOKENS:OVERLAP[:ABOVE] "
                             f"(default {IR_PASSAGES}); every collection is synced once per setting")
    parser.add_argument("--long-words", type=int, default=1500, help="words per long document (0 skips the test)")
    parser.add_argument("--long-docs", type=int, default=200)
    parser.add_argument("--passages", default=LONG_PASSAGES,
                        help="passage settings of the long-document stores, as --ir-passages "
                             f"(default {LONG_PASSAGES})")
    parser.add_argument("--batch-size", type=int, default=16, help="QdrantSync batch_size")
    parser.add_argument("--no-ir", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: the {QUICK['collections']} smallest collections, {QUICK['queries']} "
                             f"queries each, {QUICK['long_docs']} long documents, and of the passage settings only "
                             f"{' and '.join(QUICK_PASSAGES)}")
    parser.add_argument("--out", help="JSON results (default: benchmarks/results/hybrid_quality.json; "
                                      "hybrid_quality_quick.json in the temp folder with --quick)")
    args = parser.parse_args(argv)
    try:
        ir_configs, long_configs = parse_passages(args.ir_passages), parse_passages(args.passages)
    except ValueError as e:
        parser.error(str(e))

    import torch

    torch.set_num_threads(min(torch.get_num_threads(), os.cpu_count() or 1))
    from recemb.core import DEFAULT_MODEL, Embedder
    from recemb_integrations.qdrant import DEFAULT_PASSAGE_OVERLAP, DEFAULT_PASSAGE_TOKENS
    from recemb_integrations.stores import open_store

    data = data_dir()
    available = sorted(p.name for p in (data / "ir").iterdir() if (p / "corpus.jsonl").is_file())
    collections = args.collections.split(",") if args.collections else available
    if args.quick:
        if not args.collections:
            collections = sorted(collections, key=lambda c: (data / "ir" / c / "corpus.jsonl").stat().st_size
                                 )[:QUICK["collections"]]
        args.queries = args.queries or QUICK["queries"]
        args.long_docs = min(args.long_docs, QUICK["long_docs"])
        ir_configs, long_configs = quick_configs(ir_configs), quick_configs(long_configs)
    out = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / "hybrid_quality_quick.json" if args.quick
                                           else RESULTS / "hybrid_quality.json")
    model = args.model or DEFAULT_MODEL
    model_name = Path(model).name if Path(model).exists() else model

    started = time.time()
    t0 = time.time()
    embedder = Embedder.from_pretrained(model)
    teacher = TeacherSystem()
    load_seconds = time.time() - t0
    print(f"model {model_name} on {embedder.device}; torch threads {torch.get_num_threads()}; store {args.store}; "
          f"collections {', '.join(collections)}" + (f"; at most {args.queries} queries each" if args.queries else "")
          + f"; IR passages {', '.join(c.spec for c in ir_configs)}; long passages "
          f"{', '.join(c.spec for c in long_configs)}", flush=True)

    results: dict = {"setup": {
        "model": model_name, "date": datetime.date.today().isoformat(), "quick": args.quick,
        "collections": [] if args.no_ir else collections, "max_queries_per_collection": args.queries or None,
        "limit": LIMIT, "batch_size": args.batch_size, "default_fusion": default_fusion(),
        "store": args.store, "store_detail": STORES[args.store],
        "library_default_passages": {"passage_tokens": DEFAULT_PASSAGE_TOKENS,
                                     "passage_overlap": DEFAULT_PASSAGE_OVERLAP},
        "search_rows": {row: {"mode": m, "fusion": f} for row, m_f in ROWS.items() for m, f in [m_f]},
        "ir_passages": [] if args.no_ir else [c.as_dict() for c in ir_configs],
        "long_passages": [c.as_dict() for c in long_configs] if args.long_words else [],
        "cpu_threads": torch.get_num_threads(), "device": str(embedder.device)},
        "seconds": {"load_models": load_seconds}}
    if args.store == "edge":
        from recemb_integrations.stores.edge import OPTIMIZE_AFTER_POINTS

        results["setup"]["edge_optimize_after_points"] = OPTIMIZE_AFTER_POINTS
    with tempfile.TemporaryDirectory(prefix="hybrid_quality-") as folder, \
            open_store(path=folder, kind=args.store) as store:
        ir = long = None
        if not args.no_ir:
            t0 = time.time()
            ir = run_ir(store, embedder, teacher, collections, data, args.queries or None, args.batch_size, ir_configs)
            results["ir"] = ir
            results["seconds"]["ir"] = time.time() - t0
        if args.long_words:
            t0 = time.time()
            long = run_long(store, embedder, teacher, data, args.long_words, args.long_docs, long_configs,
                            args.batch_size)
            results["long"] = long
            results["seconds"]["long"] = time.time() - t0
    for test, part in (("ir_passages", ir), ("long_passages", long)):
        for config in results["setup"][test]:  # each setting's label, as the tables show it
            config["label"] = (part or {}).get("passages", {}).get(config["spec"])
    results["targets"] = targets(ir, long)
    no_passages = [label for spec, label in (ir or {}).get("passages", {}).items() if spec == "none"]
    reference = (retrieval_eval_reference(model_name, collections) if ir and no_passages and not args.queries
                 else None)
    if reference is not None:
        results["reference_retrieval_eval"] = reference
    results["seconds"]["total"] = time.time() - started

    # Ranked lists are not kept in the JSON (only their scores).
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print()
    if ir:
        n_q = sum(ir["scores"][BM25_NAME][c]["queries"] for c in collections)
        print(f"IR: nDCG@10 per collection ({n_q} queries; search limit {LIMIT}; store {args.store}):\n")
        print(ir_table(ir, collections, model_name))
        print("\nRecall@100 per collection:\n")
        print(recall_table(ir, collections, model_name))
        print("\nStores and search cost:\n")
        print(store_table(ir, collections))
        print()
    if long:
        s = long["setup"]
        print(f"Long documents ({s['documents']} x {s['words_per_document']} words of {s['book']}; queries per band "
              f"{s['queries_per_band']}; store {args.store}), accuracy@1:\n")
        print(long_table(long, model_name))
        print()
        print(long_store_table(long))
        print()
    if reference is not None:
        dense = ir["mean"][row_key("dense", no_passages[0])]["ndcg@10"]
        print(f"Check: {model_name} dense through QdrantSync ({no_passages[0]}) {dense:.3f} mean nDCG@10 vs "
              f"{reference['ndcg@10']:.3f} recorded by retrieval_eval.py in {reference['file']} (encode + numpy "
              "top-k; should agree to rounding)\n")
    print("Targets:\n")
    print(targets_text(results["targets"]))
    print(f"\nTotal {results['seconds']['total']:.0f} s; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
