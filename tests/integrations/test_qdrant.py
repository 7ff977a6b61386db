"""QdrantSync on every store (qdrant-client's local mode and Qdrant Edge): incremental, crash-safe, model-checked
sync and search."""

import math
import textwrap
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("qdrant_client")
from qdrant_client import QdrantClient  # noqa: E402
from qdrant_client import models as qm  # noqa: E402

from recemb.core import Embedder  # noqa: E402
from recemb_integrations.qdrant import (  # noqa: E402
    CollectionMismatchError,
    Document,
    QdrantSync,
    content_hash,
    point_id,
)
from recemb_integrations.stores import Store, open_store  # noqa: E402
from recemb_integrations.stores.client import ClientStore  # noqa: E402
from tests.utils import (  # noqa: E402
    FLOAT16_ROUNDOFF,
    SAMPLE_TEXT,
    assert_stored_dense,
    expected_document_vectors,
    save_transformers_checkpoint,
    sigkill_after_progress,
    transformers_model,
)

DOCS = [
    Document("a.txt", "state space models keep a fixed-size state", {"lang": "en", "n": 1}),
    Document("b.txt", "vertical chunking carries the state across chunks " * 5, {"lang": "en", "n": 2}),
    Document("c.txt", "le modèle garde un état de taille fixe", {"lang": "fr", "n": 3}),
]


class CountingEmbedder:
    """Wraps an Embedder and counts the texts it embeds (what a re-sync must avoid)."""

    def __init__(self, embedder):
        self.inner = embedder
        self.embedded = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_token_ids(self, ids, **kwargs):
        self.embedded += len(ids)
        return self.inner.embed_token_ids(ids, **kwargs)


@pytest.fixture
def embedder(tiny_embedder):
    return CountingEmbedder(tiny_embedder)


STORE_KINDS = ["local", "edge"]


def make_store(kind, folder) -> Store:
    if kind == "edge":
        pytest.importorskip("qdrant_edge")
        from recemb_integrations.stores.edge import EdgeStore

        return EdgeStore(folder)
    return ClientStore(QdrantClient(":memory:"))


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    with make_store(request.param, tmp_path / "store") as s:
        yield s


def qdrant_client_only(store):
    """recemb 0.1 collections (one unnamed vector) were only ever written through qdrant-client."""
    if store.kind == "edge":
        pytest.skip("recemb 0.1 collections exist only in qdrant-client stores")
    return store.client


def stored(store, collection="docs"):
    """Document points by document id (passages skipped)."""
    points, _ = store.scroll(collection, filter=qm.Filter(must=[qm.FieldCondition(
        key="kind", match=qm.MatchValue(value="document"))]), limit=100_000, with_payload=True, with_vectors=True)
    return {p.payload["document_id"]: p for p in points}


def f32(sparse) -> dict:
    """A BM25 vector's index -> value, values as the float32 that stores keep."""
    pairs = sparse.as_dict().items() if hasattr(sparse, "as_dict") else zip(sparse.indices, sparse.values)
    return {i: float(np.float32(v)) for i, v in pairs}


def test_first_sync_then_no_change(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    report = sync.sync(DOCS)
    assert (report.added, report.updated, report.unchanged, report.deleted, report.failed) == (3, 0, 0, 0, [])
    assert embedder.embedded == 3 and sync.count() == 3
    points = stored(store)
    expected = embedder.inner.encode_documents([d.text for d in DOCS])
    for doc, vec in zip(DOCS, expected):
        p = points[doc.id]
        assert str(p.id) == point_id(doc.id)
        assert p.payload["content_hash"] == content_hash(doc.text) and p.payload["metadata"] == doc.metadata
        assert "text" not in p.payload
        assert_stored_dense(p.vector["dense"], vec, rtol=1e-5, atol=1e-6)
    meta = collection_settings(store, "docs")
    assert meta["dim"] == embedder.dim and meta["distance"] == "Cosine"

    embedder.embedded = 0
    again = sync.sync(DOCS)
    assert (again.added, again.updated, again.unchanged, again.deleted) == (0, 0, 3, 0)
    assert embedder.embedded == 0  # nothing re-embedded


def test_edit_remove_add(store, embedder):
    sync = QdrantSync(store, "docs", embedder, store_text=True)
    sync.sync(DOCS)
    embedder.embedded = 0
    new = [Document("a.txt", "an edited first document", DOCS[0].metadata), DOCS[1],
           Document("d.txt", "a brand new document", {"lang": "en", "n": 4})]
    report = sync.sync(new)
    assert (report.added, report.updated, report.unchanged, report.deleted) == (1, 1, 1, 1)
    assert embedder.embedded == 2
    points = stored(store)
    assert set(points) == {"a.txt", "b.txt", "d.txt"} and sync.count() == 3
    assert points["a.txt"].payload["text"] == "an edited first document"
    assert_stored_dense(points["a.txt"].vector["dense"],
                               embedder.inner.encode_documents("an edited first document"),
                               rtol=1e-5, atol=1e-6)


def test_metadata_only_change_is_not_re_embedded(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    sync.sync(DOCS)
    embedder.embedded = 0
    report = sync.sync([DOCS[0], DOCS[1], Document("c.txt", DOCS[2].text, {"lang": "fr", "n": 30})])
    assert report.metadata_updated == 1 and report.unchanged == 2 and embedder.embedded == 0
    assert stored(store)["c.txt"].payload["metadata"] == {"lang": "fr", "n": 30}


def test_metadata_that_json_changes_is_still_unchanged(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    doc = Document("t.txt", "text", {"tags": ("a", "b"), "n": 1})
    sync.sync([doc])
    report = sync.sync([doc])
    assert (report.unchanged, report.metadata_updated) == (1, 0)
    failed = dict(sync.sync([Document("u.txt", "x", {"bad": {1, 2}})], delete_missing=False).failed)
    assert "not JSON-serialisable" in failed["u.txt"]


def test_search_of_missing_collection_creates_nothing(store, embedder):
    with pytest.raises(CollectionMismatchError, match="does not exist"):
        QdrantSync(store, "nowhere", embedder).search("q")
    assert not store.collection_exists("nowhere")


def test_keep_missing(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    sync.sync(DOCS)
    report = sync.sync(DOCS[:1], delete_missing=False)
    assert report.deleted == 0 and sync.count() == 3


def test_other_model_or_dimension_is_refused_before_writing(store, embedder, tmp_path):
    QdrantSync(store, "docs", embedder).sync(DOCS)
    before = {k: (p.vector, p.payload) for k, p in stored(store).items()}
    other_weights = Embedder.from_pretrained(
        save_transformers_checkpoint(transformers_model("g1", seed=7), tmp_path / "other"), device="cpu")
    with pytest.raises(CollectionMismatchError, match="model .* vs .*Nothing was written"):
        QdrantSync(store, "docs", other_weights).sync([Document("z.txt", "x")])
    other_weights.name = QdrantSync(store, "docs", embedder).model_id  # same name, other weights: a retrained model
    with pytest.raises(CollectionMismatchError, match="has other weights than when the collection was built"):
        QdrantSync(store, "docs", other_weights).sync([Document("z.txt", "x")])
    other_dim = Embedder.from_pretrained(save_transformers_checkpoint(transformers_model("g3"), tmp_path / "g3"),
                                         device="cpu")
    with pytest.raises(CollectionMismatchError, match="dimension 32 \\(collection\\) vs 48"):
        QdrantSync(store, "docs", other_dim).sync([Document("z.txt", "x")])
    after = {k: (p.vector, p.payload) for k, p in stored(store).items()}
    assert after == before
    # The same weights under another name are the same model.
    same = Embedder.from_pretrained(embedder.inner.name, device="cpu")
    same.name = "renamed"
    assert QdrantSync(store, "docs", same).sync(DOCS).unchanged == 3



@pytest.mark.parametrize(("options", "cosine"), [({"dtype": "bfloat16"}, 0.999), ({"quantize": "int8"}, 0.995)],
                         ids=["bf16", "int8"])
def test_the_same_checkpoint_in_low_precision_syncs_the_same_collection(store, embedder, options, cosine):
    """bf16 and int8 change the weights in memory, not the model: the collection built in fp32 takes their syncs
    (an int8 state dict holds packed weights, which the fingerprint must not read)."""
    fp32 = QdrantSync(store, "docs", embedder)
    fp32.sync(DOCS)
    low = Embedder.from_pretrained(embedder.inner.name, device="cpu", **options)
    sync = QdrantSync(store, "docs", low)
    assert sync.fingerprint == fp32.fingerprint
    edited = DOCS[:2] + [Document("c.txt", "a changed text, embedded in low precision", DOCS[2].metadata)]
    report = sync.sync(edited)
    assert (report.unchanged, report.updated) == (2, 1)
    new = np.asarray(stored(store)["c.txt"].vector["dense"], dtype=np.float64)
    want = embedder.inner.encode_documents([edited[2].text])[0].astype(np.float64)
    assert float(new @ want / np.linalg.norm(new) / np.linalg.norm(want)) >= cosine

def test_foreign_collection_is_refused(store, embedder):
    store.create_collection("foreign", embedder.dim, False, {})
    with pytest.raises(CollectionMismatchError, match="not created by recemb"):
        QdrantSync(store, "foreign", embedder).sync(DOCS)


def test_bad_documents_fail_alone_and_lose_nothing(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    sync.sync(DOCS)
    report = sync.sync([DOCS[0], ("b.txt", None), ("", "no id"), DOCS[2], DOCS[2], ("e.txt", "", None), 42])
    failed = dict(report.failed)
    assert "b.txt" in failed and "expected str" in failed["b.txt"]
    assert any("a document id cannot be empty" in e for e in failed.values())
    assert any("duplicate document id" in e for e in failed.values())
    assert any("expected Document" in e for e in failed.values())
    assert report.added == 1  # the empty document "e.txt" is valid
    assert set(stored(store)) == {"a.txt", "b.txt", "c.txt", "e.txt"}  # b.txt's stored version kept


def test_dense_search_ranks_by_cosine_and_filters(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    sync.sync(DOCS)
    query = "fixed-size recurrent state"
    hits = sync.search(query, limit=3, mode="dense")
    q = as_kept(store, embedder.inner.encode_queries([query])[0])
    d = as_kept(store, embedder.inner.encode_documents([doc.text for doc in DOCS]))
    expected = sorted(zip((d @ q).tolist(), [doc.id for doc in DOCS]), reverse=True)
    assert [h.document_id for h in hits] == [doc_id for _, doc_id in expected]
    np.testing.assert_allclose([h.score for h in hits], [s for s, _ in expected], rtol=1e-4, atol=1e-5)
    fr = sync.search(query, filter={"lang": "fr"}, mode="dense")
    assert [h.document_id for h in fr] == ["c.txt"] and fr[0].metadata == DOCS[2].metadata
    sci = sync.search(query, instruction="SciFact", limit=1, mode="dense")[0]
    q_sci = embedder.inner.encode_queries([query], instruction="SciFact")[0]
    assert sci.score == pytest.approx(float(max(d @ q_sci)), rel=1e-4)


def test_passages(store, embedder):
    sync = QdrantSync(store, "docs", embedder, passage_tokens=16, passage_overlap=4, store_text=True)
    long_doc = Document("long.txt", SAMPLE_TEXT, {"kind": "long"})
    sync.sync([long_doc])
    n_tokens = len(embedder.inner.tokenize([SAMPLE_TEXT])[0]) - 1  # without EOS
    expected = len(range(0, n_tokens - 4, 12))
    count = store.count("docs", qm.Filter(must=[qm.FieldCondition(key="kind", match=qm.MatchValue(value="passage"))]))
    assert count == expected and sync.count() == 1
    hits = sync.search("vertical chunking", granularity="passage", limit=3)
    assert all(h.document_id == "long.txt" and h.passage is not None and h.text for h in hits)
    sync.sync([Document("long.txt", SAMPLE_TEXT[:60], {"kind": "long"})])  # shorter text: stale passages go
    count = store.count("docs")
    n_short = len(embedder.inner.tokenize([SAMPLE_TEXT[:60]])[0]) - 1
    assert count == 1 + len(range(0, max(n_short - 4, 1), 12))
    sync.sync([], allow_mass_delete=True)  # the only document: half or more needs the flag
    assert store.count("docs") == 0


def test_long_document_is_embedded_whole_with_flat_memory(store, tiny_folder):
    emb = Embedder.from_pretrained(tiny_folder, device="cpu", vertical_chunk_size=4096)
    text = SAMPLE_TEXT * 3000
    n = len(emb.tokenize([text])[0])
    assert n >= 200_000
    widest = []
    hooks = [layer.mixer.register_forward_hook(lambda m, i, o: widest.append(i[0].shape[1])) for layer in
             emb.model.layers]
    try:
        report = QdrantSync(store, "docs", emb, passage_tokens=0).sync([Document("book.txt", text)])
    finally:
        for h in hooks:
            h.remove()
    assert report.added == 1 and report.embedded_tokens == n
    assert max(widest) == 4096 and len(widest) == len(emb.model.layers) * -(-n // 4096)


class FlakyClient:
    """Fails the first calls of one method with a transient server error, like a restarting Qdrant node."""

    def __init__(self, inner, method, failures, status=503):
        self.inner, self.method, self.failures, self.status = inner, method, failures, status
        self.calls = 0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name != self.method:
            return attr

        def flaky(*args, **kwargs):
            from qdrant_client.http.exceptions import UnexpectedResponse

            self.calls += 1
            if self.calls <= self.failures:
                raise UnexpectedResponse(self.status, "Service Unavailable", b"", None)
            return attr(*args, **kwargs)

        return flaky


def test_transient_errors_are_retried_others_are_not(store, embedder):
    flaky = FlakyClient(store, "upsert", failures=2)
    sync = QdrantSync(flaky, "docs", embedder)
    sync.calls.retrying.wait = lambda *a, **k: 0
    assert sync.sync(DOCS).added == 3 and flaky.calls == 3  # the batch's points in one request, tried 3 times
    bad = FlakyClient(store, "upsert", failures=1, status=400)
    with pytest.raises(Exception, match="Service Unavailable"):
        QdrantSync(bad, "docs", embedder).sync([Document("new.txt", "x")], delete_missing=False)
    assert bad.calls == 1


KILL_SCRIPT = textwrap.dedent("""
    import sys
    from contextlib import closing
    from recemb.core import Embedder
    from recemb_integrations.qdrant import Document, QdrantSync
    from recemb_integrations.stores import open_store
    model, folder, kind, progress = sys.argv[1:5]
    emb = Embedder.from_pretrained(model, device="cpu")
    docs = [Document(f"doc{i:03d}", f"document number {i} " * (5 + i % 7), {"i": i}) for i in range(60)]
    def mark(doc_id, action):
        with open(progress, "a") as f:
            f.write(doc_id + "\\n")
    with open_store(path=folder, kind=kind) as store:
        QdrantSync(store, "docs", emb, batch_size=2, passage_tokens=8).sync(docs, on_document=mark)
""")


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_sync_killed_midway_converges_on_rerun(tmp_path, tiny_folder, kind):
    if kind == "edge":
        pytest.importorskip("qdrant_edge")
    script, folder, progress = tmp_path / "run.py", tmp_path / "store", tmp_path / "progress"
    script.write_text(KILL_SCRIPT)
    written_before_kill = sigkill_after_progress([str(script), str(tiny_folder), str(folder), kind, str(progress)],
                                                 progress, at_least=10, timeout=120)
    assert 10 <= written_before_kill < 60

    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    docs = [Document(f"doc{i:03d}", f"document number {i} " * (5 + i % 7), {"i": i}) for i in range(60)]
    with open_store(path=folder, kind=kind) as store:
        assert store.kind == kind
        sync = QdrantSync(store, "docs", emb, batch_size=2, passage_tokens=8)
        report = sync.sync(docs)
        assert report.added + report.updated + report.unchanged == 60 and not report.failed
        assert report.unchanged >= written_before_kill - 2
        points = stored(store)
        assert sorted(points) == [d.id for d in docs] and sync.count() == 60
        vectors = expected_document_vectors(emb, [d.text for d in docs], passage_tokens=8)
        for d, v in zip(docs, vectors):
            assert points[d.id].payload["content_hash"] == content_hash(d.text)
            assert_stored_dense(points[d.id].vector["dense"], v, rtol=1e-5, atol=1e-6)
            bm25 = points[d.id].vector["bm25"]  # hybrid is on: the BM25 vector survives the kill as well
            assert f32(bm25) == f32(bm25_of(store).embed_document(d.text))
        n_passages = store.count("docs") - 60
        expected = sum(len(range(0, max(len(ids) - 1, 1), 8)) for ids in emb.tokenize([d.text for d in docs]))
        assert n_passages == expected  # no duplicated or orphaned passages
        assert sync.sync(docs).unchanged == 60


def test_vectors_are_float_lists_of_model_dim(store, embedder):
    QdrantSync(store, "docs", embedder).sync(DOCS[:1])
    assert len(stored(store)["a.txt"].vector["dense"]) == embedder.dim
    # unit length, to float32's rounding or, kept as float16, to float16's
    rounded = FLOAT16_ROUNDOFF if store.collection_info("docs").dense_datatype == "float16" else 1e-5
    assert torch.tensor(stored(store)["a.txt"].vector["dense"]).norm().item() == pytest.approx(1.0, rel=rounded)


def test_passage_windows_from_a_stream_equal_the_whole_list_rule():
    """Windows cut as ids stream in equal the rule on the whole list: body windows of P every P - O tokens, the
    last starting before the final O, each followed by the EOS; an empty body gives [EOS]."""
    import random

    from recemb_integrations.qdrant.points import PassageWindows

    def whole_list_rule(ids, size, overlap):
        body, eos = ids[:-1], ids[-1]
        starts = range(0, max(len(body) - overlap, 1), size - overlap)
        return [body[i : i + size] + [eos] for i in starts if body[i : i + size]] or [[eos]]

    rng = random.Random(0)
    for _ in range(2000):
        size = rng.randint(1, 12)
        overlap = rng.randint(0, size - 1)
        ids = [rng.randint(3, 99) for _ in range(rng.randint(0, 60))] + [1]
        windows, got, i = PassageWindows(size, overlap, eos_token_id=1), [], 0
        while i < len(ids):
            step = rng.randint(0, 7)
            got += windows.feed(ids[i : i + step])
            i += step
        got += windows.finish()
        assert got == whole_list_rule(ids, size, overlap), (ids, size, overlap)
        assert len(windows._buffer) <= size + 8  # bounded: a window plus a piece
    with pytest.raises(ValueError, match="EOS"):
        PassageWindows(4, 1, eos_token_id=1).finish()


# ---------------------------------------------------------------------------------------------- hybrid (dense + BM25)
from recemb_integrations.qdrant import MassDeletionError, RebuildError, SearchNotice, collection_settings  # noqa: E402
from recemb_integrations.qdrant.record import REBUILD_SUFFIX  # noqa: E402
from recemb_integrations.qdrant.search import RRF_K  # noqa: E402
from recemb_integrations.sparse import Bm25  # noqa: E402

CORPUS = [Document(f"d{i:02d}", text, {"i": i}) for i, text in enumerate([
    "whales migrate across the cold northern ocean every spring",
    "the harpoon struck the great white whale near the ship",
    "a recurrent state space model reads tokens one chunk at a time",
    "ships sailed from the harbour at dawn with full cargo",
    "the ocean current carries plankton that feeds whales",
    "chunked scans compute the recurrence with matrix multiplications",
    "fishermen mend their nets in the harbour before the storm",
    "the captain of the whaling ship kept a detailed log",
    "memory of a recurrent model does not grow with input length",
    "storms at sea force ships to return to the harbour",
    "plankton blooms colour the ocean green in spring",
    "the log recorded the storm, the whale and the broken mast",
])]


def bm25_of(store, collection="docs", passages=False):
    settings = collection_settings(store, collection)["sparse"]
    bm25 = Bm25.from_settings({k: v for k, v in settings.items() if k != "passage_avg_len"})
    return bm25.with_avg_len(settings["passage_avg_len"]) if passages else bm25


def as_kept(store, vectors: np.ndarray, collection: str = "docs") -> np.ndarray:
    """Vectors as the store scores them: a compact collection keeps float16 vectors and rounds the query to float16
    too before the dot product."""
    if store.collection_info(collection).dense_datatype == "float16":
        return vectors.astype(np.float16).astype(np.float32)
    return vectors


def brute_force_rankings(embedder, store, query, docs):
    """Dense (cosine) and BM25 rankings of the document ids, computed outside Qdrant: BM25 = sum over the query's
    terms of IDF ln((N - df + 0.5) / (df + 0.5) + 1) times the document's value, N = points with a BM25 vector."""
    q = as_kept(store, embedder.inner.encode_queries([query])[0])
    d = as_kept(store, embedder.inner.encode_documents([doc.text for doc in docs]))
    dense = dict(zip([doc.id for doc in docs], (d @ q).tolist()))
    vectors = {doc.id: bm25_of(store).embed_document(doc.text).as_dict() for doc in docs}
    n = sum(1 for v in vectors.values() if v)
    terms = bm25_of(store).embed_query(query).indices
    df = {t: sum(1 for v in vectors.values() if t in v) for t in terms}
    sparse = {}
    for doc_id, v in vectors.items():
        hits = [t for t in terms if t in v]
        if hits:  # a sparse search returns only points sharing a term with the query
            sparse[doc_id] = sum(math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1) * v[t] for t in hits)
    order = lambda scores: sorted(scores, key=lambda k: -scores[k])  # noqa: E731
    return order(dense), order(sparse), dense, sparse


def test_hybrid_search_is_rrf_of_the_dense_and_bm25_rankings(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    sync.sync(CORPUS)
    for query in ("whale ship storm", "recurrent model memory", "harbour plankton spring"):
        dense, sparse, dense_scores, sparse_scores = brute_force_rankings(embedder, store, query, CORPUS)
        assert dense[:3] != sparse[:3]  # the fusion has something to decide
        # Equal BM25 scores (same counts, same lengths) have no order of their own: take Qdrant's among them,
        # once its single-list scores are checked against the brute force.
        engine = sync.search(query, limit=len(CORPUS), mode="sparse")
        np.testing.assert_allclose([h.score for h in engine], [sparse_scores[k] for k in sparse], rtol=1e-5)
        sparse = [h.document_id for h in engine]
        fused = {}
        for ranking in (dense, sparse):
            for pos, doc_id in enumerate(ranking):  # qdrant's RRF: 1 / (k + 0-based position)
                fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (RRF_K + pos)
        # Ranks can tie in the fused list, so a hit list is checked as: each hit's score is its own fused score,
        # and those scores are the top five of all documents.
        def same_ranking(hits, scores, rtol=1e-6):
            np.testing.assert_allclose([h.score for h in hits], [scores[h.document_id] for h in hits], rtol=rtol)
            np.testing.assert_allclose([h.score for h in hits], sorted(scores.values(), reverse=True)[:5], rtol=rtol)
        same_ranking(sync.search(query, limit=5, fusion="rrf"), fused)
        same_ranking(sync.search(query, limit=5, mode="sparse"), sparse_scores, rtol=1e-5)
        same_ranking(sync.search(query, limit=5, mode="dense"), dense_scores, rtol=1e-4)
        # DBSF: each list's scores mapped by (s - (mean - 3 sd)) / (6 sd), then summed
        def normalised(scores):
            values = list(scores.values())
            mean = sum(values) / len(values)
            sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
            return {k: (v - (mean - 3 * sd)) / (6 * sd) for k, v in scores.items()}
        dbsf = normalised(dense_scores)
        for k, v in normalised(sparse_scores).items():
            dbsf[k] += v
        same_ranking(sync.search(query, limit=5), dbsf, rtol=1e-4)  # DBSF is the default


def test_filters_apply_to_both_sides_of_a_hybrid_search(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    sync.sync(CORPUS)
    hits = sync.search("whale ship storm", limit=20, filter={"i": [1, 3, 5, 11]})
    assert sorted(h.document_id for h in hits) == ["d01", "d03", "d05", "d11"]  # d05 only by its dense vector


def test_bm25_vectors_and_the_recorded_average_length(store, embedder):
    sync = QdrantSync(store, "docs", embedder, passage_tokens=8, passage_overlap=2, store_text=True)
    first = CORPUS[:6] + [Document("long", SAMPLE_TEXT)]
    sync.sync(first)
    settings = collection_settings(store, "docs")
    assert settings["layout"] == 2 and settings["vectors"] == {"dense": "dense", "sparse": "bm25"}
    plain = Bm25()
    assert settings["sparse"]["avg_len"] == pytest.approx(sum(plain.length(d.text) for d in first) / len(first))
    # Passages: 8 model tokens in BM25 tokens, at the ratio of the first sync's text.
    texts = [d.text for d in first]
    ratio = sum(plain.length(t) for t in texts) / sum(len(ids) - 1 for ids in embedder.inner.tokenize(texts))
    assert settings["sparse"]["passage_avg_len"] == pytest.approx(8 * ratio)
    n_model = len(embedder.inner.tokenize([d.text for d in first[-1:]])[0]) - 1
    points, _ = store.scroll("docs", limit=10_000, with_payload=True, with_vectors=True)
    by_kind = {"document": 0, "passage": 0}
    for p in points:
        kind = p.payload["kind"]
        by_kind[kind] += 1
        if kind == "document":
            text = next(d.text for d in first if d.id == p.payload["document_id"])
            expected = bm25_of(store).embed_document(text)
        else:
            expected = bm25_of(store, passages=True).embed_document(p.payload["text"])
        got = p.vector.get("bm25")  # left out where empty (a passage of stopwords only)
        assert (f32(got) if got is not None else {}) == f32(expected)
    assert by_kind["passage"] >= n_model // 6
    # A later sync of other documents keeps the collection's average: values stay comparable.
    sync.sync(first + [Document("short", "whale")])
    assert collection_settings(store, "docs")["sparse"] == settings["sparse"]
    point = store.retrieve("docs", [point_id("short")], with_vectors=True)[0]
    assert f32(point.vector["bm25"]) == f32(bm25_of(store).embed_document("whale"))


def test_empty_bm25_vectors_and_queries_fall_back_to_dense(store, embedder):
    sync = QdrantSync(store, "docs", embedder)
    sync.sync(CORPUS + [Document("stop", "the and of it"), Document("empty", "")])
    for doc_id in ("stop", "empty"):
        assert "bm25" not in store.retrieve("docs", [point_id(doc_id)], with_vectors=True)[0].vector
    with pytest.warns(SearchNotice, match="no BM25 terms"):
        hits = sync.search("the of and", limit=4)
    assert [h.document_id for h in hits] == [h.document_id for h in sync.search("the of and", limit=4, mode="dense")]
    with pytest.warns(SearchNotice, match="nothing to search by BM25"):
        assert sync.search("...", mode="sparse") == []


def test_grouped_search_returns_distinct_documents_with_their_best_passage(store, embedder):
    docs = [Document(f"book{i}", " ".join(d.text for d in CORPUS[i:] + CORPUS[:i])) for i in range(4)]
    docs.append(Document("note", "a short note about whales"))
    sync = QdrantSync(store, "docs", embedder, passage_tokens=12, passage_overlap=3, store_text=True)
    sync.sync(docs)
    for mode in ("hybrid", "dense", "sparse"):
        grouped = sync.search("whale ship storm", limit=3, mode=mode)
        points = sync.search("whale ship storm", limit=1000, mode=mode, granularity="any")
        best = {}
        for h in points:  # the first (best) point of each document
            best.setdefault(h.document_id, h)
        # Documents in the order of their best points (equal scores in either order: engines break ties freely).
        assert len({h.document_id for h in grouped}) == 3
        np.testing.assert_allclose([h.score for h in grouped],
                                   sorted((h.score for h in best.values()), reverse=True)[:3], rtol=1e-6)
        for hit in grouped:
            assert hit.score == pytest.approx(best[hit.document_id].score, rel=1e-6)
            passages = [h for h in points if h.document_id == hit.document_id and h.passage is not None]
            if passages:
                chosen = next(h for h in passages if h.passage == hit.best_passage)
                assert chosen.score == pytest.approx(passages[0].score, rel=1e-6) and hit.best_passage_text == \
                    chosen.text
            assert hit.passage is None and hit.text == next(d.text for d in docs if d.id == hit.document_id)
    everything = sync.search("whale", limit=10)
    assert sorted(h.document_id for h in everything) == sorted(d.id for d in docs)


def test_search_modes_are_checked(store, embedder):
    QdrantSync(store, "dense", embedder, sparse=False).sync(CORPUS[:3])
    dense_only = QdrantSync.open(store, "dense", embedder)
    assert dense_only.settings.sparse is False and len(dense_only.search("whale", limit=2)) == 2
    with pytest.raises(ValueError, match="no BM25 vectors"):
        dense_only.search("whale", mode="hybrid")
    with pytest.raises(CollectionMismatchError, match="built dense-only"):
        QdrantSync(store, "dense", embedder, sparse=True).sync(CORPUS[:3])
    # not named: the collection's, as every setting (one rule, record.decide_settings)
    assert QdrantSync(store, "dense", embedder).sync(CORPUS[:3]).unchanged == 3
    with pytest.raises(ValueError, match="mode must be one of"):
        dense_only.search("whale", mode="bm25")
    with pytest.raises(ValueError, match="fusion must be one of"):
        dense_only.search("whale", fusion="sum")


def make_legacy_collection(store, embedder, docs, name="docs"):
    """A collection as recemb 0.1.0 wrote it: one unnamed dense vector, metadata without a layout."""
    meta = QdrantSync(store, name, embedder).expected_metadata()
    client = qdrant_client_only(store)
    for key in ("layout", "vectors", "sparse"):
        meta.pop(key)
    client.create_collection(name, vectors_config=qm.VectorParams(size=embedder.dim, distance=qm.Distance.COSINE),
                             metadata={"recemb": meta})
    vectors = embedder.inner.encode_documents([d.text for d in docs])
    client.upsert(name, points=[qm.PointStruct(id=point_id(d.id), vector=v.tolist(), payload={
        "document_id": d.id, "kind": "document", "content_hash": content_hash(d.text), "metadata": d.metadata,
        "tokens": 0}) for d, v in zip(docs, vectors)])


def test_a_recemb_0_1_collection_searches_dense_only_and_rebuilds_to_hybrid(store, embedder):
    make_legacy_collection(store, embedder, CORPUS)
    legacy = QdrantSync.open(store, "docs", embedder)
    with pytest.warns(SearchNotice, match="recemb 0.1"):
        hits = legacy.search("whale ship storm", limit=3)
    q = embedder.inner.encode_queries(["whale ship storm"])[0]
    scores = embedder.inner.encode_documents([d.text for d in CORPUS]) @ q
    assert [h.document_id for h in hits] == [CORPUS[i].id for i in np.argsort(-scores)[:3]]
    with pytest.raises(CollectionMismatchError, match="--rebuild"):
        QdrantSync(store, "docs", embedder).sync(CORPUS)
    embedder.embedded = 0
    assert QdrantSync(store, "docs", embedder, sparse=False).sync(CORPUS).unchanged == len(CORPUS)  # still syncs
    assert embedder.embedded == 0
    report = QdrantSync(store, "docs", embedder).sync(CORPUS[:-1], rebuild=True)
    assert report.added == len(CORPUS) - 1 and report.deleted == 1
    assert collection_settings(store, "docs")["layout"] == 2
    assert not store.collection_exists("docs" + REBUILD_SUFFIX)
    assert sorted(stored(store)) == [d.id for d in CORPUS[:-1]]
    assert all("bm25" in p.vector for p in stored(store).values())
    assert [h.document_id for h in QdrantSync.open(store, "docs", embedder).search("whale", limit=3)]


def make_old_collection(store, embedder, docs):
    """A collection a rebuild replaces: recemb 0.1's (qdrant-client stores) or a dense-only one (Edge)."""
    if store.kind == "edge":
        QdrantSync(store, "docs", embedder, sparse=False).sync(docs)
    else:
        make_legacy_collection(store, embedder, docs)


class CrashAt:
    """A store whose ``method`` raises on its ``nth`` call (1-based) with ``first`` argument matching: a process
    that dies there (every earlier write was acknowledged, nothing later happens)."""

    def __init__(self, store, method, nth=1, collection=None):
        self.store, self.method, self.nth, self.collection, self.calls = store, method, nth, collection, 0

    def __getattr__(self, name):
        attr = getattr(self.store, name)
        if name != self.method:
            return attr

        def call(*args, **kwargs):
            target = args[0] if args else kwargs.get("collection_name")
            if self.collection is None or target == self.collection:
                self.calls += 1
                if self.calls == self.nth:
                    raise KeyboardInterrupt(f"crash in {name}")
            return attr(*args, **kwargs)
        return call


@pytest.mark.parametrize("method,nth,collection", [
    ("upsert", 3, "docs" + REBUILD_SUFFIX),  # while embedding into the staging collection
    ("update_metadata", 1, "docs" + REBUILD_SUFFIX),  # before the staging collection is marked complete
    ("create_collection", 1, "docs"),  # after the old collection was dropped
    ("upsert", 1, "docs"),  # while copying the staged points in
    ("update_metadata", 1, "docs"),  # before the copy is marked done
    ("delete_collection", 2, None),  # before the staging collection is dropped
])
def test_a_rebuild_stopped_anywhere_loses_nothing_and_the_next_sync_finishes_it(store, embedder, method, nth,
                                                                                   collection):
    make_old_collection(store, embedder, CORPUS)
    before = {k: p.payload for k, p in stored(store).items()}
    crashing = CrashAt(store, method, nth, collection)
    with pytest.raises(KeyboardInterrupt):
        QdrantSync(crashing, "docs", embedder, batch_size=2).sync(CORPUS, rebuild=True)
    # Every document is still somewhere: the old collection, or the staged one.
    if store.collection_exists("docs"):
        settings = collection_settings(store, "docs")
        if settings.get("sparse") is None:  # the old collection
            assert {k: p.payload for k, p in stored(store).items()} == before
        elif (settings.get("rebuild") or {}).get("state") == "copying":
            with pytest.raises(CollectionMismatchError, match="interrupted"):
                QdrantSync.open(store, "docs", embedder).search("whale")
    else:
        assert len(stored(store, "docs" + REBUILD_SUFFIX)) == len(CORPUS)
        with pytest.raises(CollectionMismatchError, match="rebuild was interrupted"):
            QdrantSync(store, "docs", embedder).search("whale")
    embedder.embedded = 0
    report = QdrantSync(store, "docs", embedder).sync(CORPUS, rebuild=True)
    assert report.added + report.unchanged == len(CORPUS) and not report.failed
    if method != "upsert" or collection != "docs" + REBUILD_SUFFIX:
        assert embedder.embedded == 0  # the staged work was kept
    assert not store.collection_exists("docs" + REBUILD_SUFFIX)
    points = stored(store)
    assert sorted(points) == [d.id for d in CORPUS] and collection_settings(store, "docs")["layout"] == 2
    vectors = embedder.inner.encode_documents([d.text for d in CORPUS])
    for d, v in zip(CORPUS, vectors):
        assert_stored_dense(points[d.id].vector["dense"], v, rtol=1e-5, atol=1e-6)
        assert f32(points[d.id].vector["bm25"]) == f32(bm25_of(store).embed_document(d.text))
    assert "rebuild" not in collection_settings(store, "docs")


def test_a_rebuild_with_failures_or_too_many_deletions_keeps_the_old_collection(store, embedder):
    make_old_collection(store, embedder, CORPUS)
    before = {k: p.payload for k, p in stored(store).items()}
    with pytest.raises(MassDeletionError):
        QdrantSync(store, "docs", embedder).sync(CORPUS[:2], rebuild=True)
    with pytest.raises(ValueError, match="delete_missing=False"):
        QdrantSync(store, "docs", embedder).sync(CORPUS[:2], rebuild=True, delete_missing=False)
    with pytest.raises(RebuildError, match="was not replaced"):
        QdrantSync(store, "docs", embedder).sync(CORPUS[:-1] + [Document("bad", 3)], rebuild=True)
    assert {k: p.payload for k, p in stored(store).items()} == before
    assert collection_settings(store, "docs").get("sparse") is None


class RecordingClient:
    """Records the kinds of the points each upsert writes, and the payload indexes created."""

    def __init__(self, inner):
        self.inner, self.upserts, self.indexes = inner, [], []

    def create_payload_index(self, collection, key, schema):
        self.indexes.append((collection, key, schema))
        return self.inner.create_payload_index(collection, key, schema)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def upsert(self, collection, points):
        self.upserts.append([p.payload["kind"] for p in points])
        return self.inner.upsert(collection, points)


def test_a_batch_writes_its_document_points_together_after_all_its_passages(store, embedder):
    recording = RecordingClient(store)
    docs = [Document(f"b{i}", " ".join(d.text for d in CORPUS[i : i + 3])) for i in range(5)]
    QdrantSync(recording, "docs", embedder, passage_tokens=8, batch_size=4).sync(docs)
    with_documents = [i for i, kinds in enumerate(recording.upserts) if "document" in kinds]
    assert [recording.upserts[i] for i in with_documents] == [["document"] * 4, ["document"]]
    first_batch_passages = [i for i, kinds in enumerate(recording.upserts) if i < with_documents[0]]
    assert first_batch_passages and all(recording.upserts[i] and set(recording.upserts[i]) == {"passage"}
                                        for i in first_batch_passages)
    assert sorted(stored(store)) == [d.id for d in docs]


def test_collections_get_payload_indexes_on_what_syncs_filter_by(store, embedder):
    recording = RecordingClient(store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # local mode's "indexes have no effect" warning stays silent
        QdrantSync(recording, "docs", embedder).sync(CORPUS[:2])
    assert recording.indexes == [("docs", "document_id", "keyword"), ("docs", "kind", "keyword"),
                                 ("docs", "passage", "integer"), ("docs", "passages", "integer"),
                                 ("docs", "root", "keyword")]


def test_a_foreign_collection_named_like_the_staging_one_is_never_dropped(store, embedder):
    make_legacy_collection(store, embedder, CORPUS)
    client = store.client
    client.create_collection("docs" + REBUILD_SUFFIX, vectors_config=qm.VectorParams(size=2,
                                                                                    distance=qm.Distance.COSINE))
    client.upsert("docs" + REBUILD_SUFFIX, points=[qm.PointStruct(id=1, vector=[1.0, 0.0], payload={"mine": 1})])
    assert QdrantSync(store, "docs", embedder, sparse=False).sync(CORPUS).unchanged == len(CORPUS)
    with pytest.raises(CollectionMismatchError, match="not created by recemb"):
        QdrantSync(store, "docs", embedder).sync(CORPUS, rebuild=True)
    assert client.retrieve("docs" + REBUILD_SUFFIX, [1])[0].payload == {"mine": 1}
    assert collection_settings(store, "docs").get("layout", 1) == 1 and len(stored(store)) == len(CORPUS)


def test_metadata_indexes_are_created_with_the_collection_and_later(store, embedder):
    recording = RecordingClient(store)
    with pytest.raises(ValueError, match="index_metadata"):
        QdrantSync(store, "docs", embedder, index_metadata={"lang": "text"})
    QdrantSync(recording, "docs", embedder, index_metadata={"lang": "keyword"}).sync(DOCS)
    QdrantSync(recording, "docs", embedder, index_metadata={"lang": "keyword", "n": "integer"}).sync(DOCS)
    assert ("docs", "metadata.lang", "keyword") in recording.indexes[:6]
    assert ("docs", "metadata.n", "integer") in recording.indexes
    hits = QdrantSync.open(store, "docs", embedder).search("state", filter={"lang": "fr", "n": 3})
    assert [h.document_id for h in hits] == ["c.txt"]


def test_a_batch_closes_at_its_character_budget(store, embedder, monkeypatch):
    import recemb_integrations.qdrant.writer as writer_module

    monkeypatch.setattr(writer_module, "BATCH_MAX_CHARS", 100)
    recording = RecordingClient(store)
    docs = [Document(f"d{i}", "word " * 12) for i in range(6)]  # 60 characters each
    assert QdrantSync(recording, "docs", embedder).sync(docs).added == 6  # batch_size 64 by default
    assert recording.upserts == [["document"] * 2] * 3
