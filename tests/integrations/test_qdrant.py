"""QdrantSync on qdrant-client's local mode: incremental, crash-safe, model-checked sync and search."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import closing

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
from tests.utils import SAMPLE_TEXT, save_transformers_checkpoint, transformers_model  # noqa: E402

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


@pytest.fixture
def client():
    with closing(QdrantClient(":memory:")) as c:
        yield c


def stored(client, collection="docs"):
    """Document points by document id (passages skipped)."""
    points, _ = client.scroll(collection, scroll_filter=qm.Filter(must=[qm.FieldCondition(
        key="kind", match=qm.MatchValue(value="document"))]), limit=100_000, with_payload=True, with_vectors=True)
    return {p.payload["document_id"]: p for p in points}


def test_first_sync_then_no_change(client, embedder):
    sync = QdrantSync(client, "docs", embedder)
    report = sync.sync(DOCS)
    assert (report.added, report.updated, report.unchanged, report.deleted, report.failed) == (3, 0, 0, 0, [])
    assert embedder.embedded == 3 and sync.count() == 3
    points = stored(client)
    expected = embedder.inner.encode_documents([d.text for d in DOCS])
    for doc, vec in zip(DOCS, expected):
        p = points[doc.id]
        assert str(p.id) == point_id(doc.id)
        assert p.payload["content_hash"] == content_hash(doc.text) and p.payload["metadata"] == doc.metadata
        assert "text" not in p.payload
        np.testing.assert_allclose(p.vector, vec, rtol=1e-5, atol=1e-6)
    meta = client.get_collection("docs").config.metadata["recemb"]
    assert meta["dim"] == embedder.dim and meta["distance"] == "Cosine"

    embedder.embedded = 0
    again = sync.sync(DOCS)
    assert (again.added, again.updated, again.unchanged, again.deleted) == (0, 0, 3, 0)
    assert embedder.embedded == 0  # nothing re-embedded


def test_edit_remove_add(client, embedder):
    sync = QdrantSync(client, "docs", embedder, store_text=True)
    sync.sync(DOCS)
    embedder.embedded = 0
    new = [Document("a.txt", "an edited first document", DOCS[0].metadata), DOCS[1],
           Document("d.txt", "a brand new document", {"lang": "en", "n": 4})]
    report = sync.sync(new)
    assert (report.added, report.updated, report.unchanged, report.deleted) == (1, 1, 1, 1)
    assert embedder.embedded == 2
    points = stored(client)
    assert set(points) == {"a.txt", "b.txt", "d.txt"} and sync.count() == 3
    assert points["a.txt"].payload["text"] == "an edited first document"
    np.testing.assert_allclose(points["a.txt"].vector, embedder.inner.encode_documents("an edited first document"),
                               rtol=1e-5, atol=1e-6)


def test_metadata_only_change_is_not_re_embedded(client, embedder):
    sync = QdrantSync(client, "docs", embedder)
    sync.sync(DOCS)
    embedder.embedded = 0
    report = sync.sync([DOCS[0], DOCS[1], Document("c.txt", DOCS[2].text, {"lang": "fr", "n": 30})])
    assert report.metadata_updated == 1 and report.unchanged == 2 and embedder.embedded == 0
    assert stored(client)["c.txt"].payload["metadata"] == {"lang": "fr", "n": 30}


def test_metadata_that_json_changes_is_still_unchanged(client, embedder):
    sync = QdrantSync(client, "docs", embedder)
    doc = Document("t.txt", "text", {"tags": ("a", "b"), "n": 1})
    sync.sync([doc])
    report = sync.sync([doc])
    assert (report.unchanged, report.metadata_updated) == (1, 0)
    failed = dict(sync.sync([Document("u.txt", "x", {"bad": {1, 2}})], delete_missing=False).failed)
    assert "not JSON-serialisable" in failed["u.txt"]


def test_search_of_missing_collection_creates_nothing(client, embedder):
    with pytest.raises(CollectionMismatchError, match="does not exist"):
        QdrantSync(client, "nowhere", embedder).search("q")
    assert not client.collection_exists("nowhere")


def test_keep_missing(client, embedder):
    sync = QdrantSync(client, "docs", embedder)
    sync.sync(DOCS)
    report = sync.sync(DOCS[:1], delete_missing=False)
    assert report.deleted == 0 and sync.count() == 3


def test_other_model_or_dimension_is_refused_before_writing(client, embedder, tmp_path):
    QdrantSync(client, "docs", embedder).sync(DOCS)
    before = {k: (p.vector, p.payload) for k, p in stored(client).items()}
    other_weights = Embedder.from_pretrained(
        save_transformers_checkpoint(transformers_model("g1", seed=7), tmp_path / "other"), device="cpu")
    with pytest.raises(CollectionMismatchError, match="model .* vs .*Nothing was written"):
        QdrantSync(client, "docs", other_weights).sync([Document("z.txt", "x")])
    other_weights.name = QdrantSync(client, "docs", embedder).model_id  # same name, other weights: a retrained model
    with pytest.raises(CollectionMismatchError, match="has other weights than when the collection was built"):
        QdrantSync(client, "docs", other_weights).sync([Document("z.txt", "x")])
    other_dim = Embedder.from_pretrained(save_transformers_checkpoint(transformers_model("g3"), tmp_path / "g3"),
                                         device="cpu")
    with pytest.raises(CollectionMismatchError, match="dimension 32 \\(collection\\) vs 48"):
        QdrantSync(client, "docs", other_dim).sync([Document("z.txt", "x")])
    after = {k: (p.vector, p.payload) for k, p in stored(client).items()}
    assert after == before
    # The same weights under another name are the same model.
    same = Embedder.from_pretrained(embedder.inner.name, device="cpu")
    same.name = "renamed"
    assert QdrantSync(client, "docs", same).sync(DOCS).unchanged == 3


def test_foreign_collection_is_refused(client, embedder):
    client.create_collection("foreign", vectors_config=qm.VectorParams(size=embedder.dim, distance=qm.Distance.COSINE))
    with pytest.raises(CollectionMismatchError, match="not created by recemb"):
        QdrantSync(client, "foreign", embedder).sync(DOCS)


def test_bad_documents_fail_alone_and_lose_nothing(client, embedder):
    sync = QdrantSync(client, "docs", embedder)
    sync.sync(DOCS)
    report = sync.sync([DOCS[0], ("b.txt", None), ("", "no id"), DOCS[2], DOCS[2], ("e.txt", "", None), 42])
    failed = dict(report.failed)
    assert "b.txt" in failed and "expected str" in failed["b.txt"]
    assert any("non-empty strings" in e for e in failed.values())
    assert any("duplicate document id" in e for e in failed.values())
    assert any("expected Document" in e for e in failed.values())
    assert report.added == 1  # the empty document "e.txt" is valid
    assert set(stored(client)) == {"a.txt", "b.txt", "c.txt", "e.txt"}  # b.txt's stored version kept


def test_search_ranks_by_cosine_and_filters(client, embedder):
    sync = QdrantSync(client, "docs", embedder)
    sync.sync(DOCS)
    query = "fixed-size recurrent state"
    hits = sync.search(query, limit=3)
    q = embedder.inner.encode_queries([query])[0]
    d = embedder.inner.encode_documents([doc.text for doc in DOCS])
    expected = sorted(zip((d @ q).tolist(), [doc.id for doc in DOCS]), reverse=True)
    assert [h.document_id for h in hits] == [doc_id for _, doc_id in expected]
    np.testing.assert_allclose([h.score for h in hits], [s for s, _ in expected], rtol=1e-4, atol=1e-5)
    fr = sync.search(query, filter={"lang": "fr"})
    assert [h.document_id for h in fr] == ["c.txt"] and fr[0].metadata == DOCS[2].metadata
    sci = sync.search(query, instruction="SciFact", limit=1)[0]
    q_sci = embedder.inner.encode_queries([query], instruction="SciFact")[0]
    assert sci.score == pytest.approx(float(max(d @ q_sci)), rel=1e-4)


def test_passages(client, embedder):
    sync = QdrantSync(client, "docs", embedder, passage_tokens=16, passage_overlap=4, store_text=True)
    long_doc = Document("long.txt", SAMPLE_TEXT, {"kind": "long"})
    sync.sync([long_doc])
    n_tokens = len(embedder.inner.tokenize([SAMPLE_TEXT])[0]) - 1  # without EOS
    expected = len(range(0, n_tokens - 4, 12))
    count = client.count("docs", count_filter=qm.Filter(must=[qm.FieldCondition(
        key="kind", match=qm.MatchValue(value="passage"))]), exact=True).count
    assert count == expected and sync.count() == 1
    hits = sync.search("vertical chunking", granularity="passage", limit=3)
    assert all(h.document_id == "long.txt" and h.passage is not None and h.text for h in hits)
    sync.sync([Document("long.txt", SAMPLE_TEXT[:60], {"kind": "long"})])  # shorter text: stale passages go
    count = client.count("docs", exact=True).count
    n_short = len(embedder.inner.tokenize([SAMPLE_TEXT[:60]])[0]) - 1
    assert count == 1 + len(range(0, max(n_short - 4, 1), 12))
    sync.sync([])
    assert client.count("docs", exact=True).count == 0


def test_long_document_is_embedded_whole_with_flat_memory(client, tiny_folder):
    emb = Embedder.from_pretrained(tiny_folder, device="cpu", vertical_chunk_size=4096)
    text = SAMPLE_TEXT * 3000
    n = len(emb.tokenize([text])[0])
    assert n >= 200_000
    widest = []
    hooks = [layer.mixer.register_forward_hook(lambda m, i, o: widest.append(i[0].shape[1])) for layer in
             emb.model.layers]
    try:
        report = QdrantSync(client, "docs", emb).sync([Document("book.txt", text)])
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


def test_transient_errors_are_retried_others_are_not(client, embedder):
    flaky = FlakyClient(client, "upsert", failures=2)
    sync = QdrantSync(flaky, "docs", embedder)
    sync._retry.wait = lambda *a, **k: 0
    assert sync.sync(DOCS).added == 3 and flaky.calls == 5
    bad = FlakyClient(client, "upsert", failures=1, status=400)
    with pytest.raises(Exception, match="Service Unavailable"):
        QdrantSync(bad, "docs", embedder).sync([Document("new.txt", "x")])
    assert bad.calls == 1


KILL_SCRIPT = textwrap.dedent("""
    import sys
    from contextlib import closing
    from qdrant_client import QdrantClient
    from recemb.core import Embedder
    from recemb_integrations.qdrant import Document, QdrantSync
    model, store, progress = sys.argv[1:4]
    emb = Embedder.from_pretrained(model, device="cpu")
    docs = [Document(f"doc{i:03d}", f"document number {i} " * (5 + i % 7), {"i": i}) for i in range(60)]
    def mark(doc_id, action):
        with open(progress, "a") as f:
            f.write(doc_id + "\\n")
    with closing(QdrantClient(path=store)) as client:
        QdrantSync(client, "docs", emb, batch_size=2, passage_tokens=8).sync(docs, on_document=mark)
""")


def test_sync_killed_midway_converges_on_rerun(tmp_path, tiny_folder):
    script, store, progress = tmp_path / "run.py", tmp_path / "store", tmp_path / "progress"
    script.write_text(KILL_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script), str(tiny_folder), str(store), str(progress)], env=env)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if progress.exists() and len(progress.read_text().split()) >= 10:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sync finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written_before_kill = len(progress.read_text().split())
    assert 10 <= written_before_kill < 60

    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    docs = [Document(f"doc{i:03d}", f"document number {i} " * (5 + i % 7), {"i": i}) for i in range(60)]
    with closing(QdrantClient(path=str(store))) as client:
        sync = QdrantSync(client, "docs", emb, batch_size=2, passage_tokens=8)
        report = sync.sync(docs)
        assert report.added + report.updated + report.unchanged == 60 and not report.failed
        assert report.unchanged >= written_before_kill - 2
        points = stored(client)
        assert sorted(points) == [d.id for d in docs] and sync.count() == 60
        vectors = emb.encode_documents([d.text for d in docs])
        for d, v in zip(docs, vectors):
            assert points[d.id].payload["content_hash"] == content_hash(d.text)
            np.testing.assert_allclose(points[d.id].vector, v, rtol=1e-5, atol=1e-6)
        n_passages = client.count("docs", exact=True).count - 60
        expected = sum(len(range(0, max(len(ids) - 1, 1), 8)) for ids in emb.tokenize([d.text for d in docs]))
        assert n_passages == expected  # no duplicated or orphaned passages
        assert sync.sync(docs).unchanged == 60


def test_vectors_are_float_lists_of_model_dim(client, embedder):
    QdrantSync(client, "docs", embedder).sync(DOCS[:1])
    assert len(stored(client)["a.txt"].vector) == embedder.dim
    assert torch.tensor(stored(client)["a.txt"].vector).norm().item() == pytest.approx(1.0, rel=1e-5)


def test_passage_windows_from_a_stream_equal_the_whole_list_rule():
    """Windows cut as ids stream in equal the rule on the whole list: body windows of P every P - O tokens, the
    last starting before the final O, each followed by the EOS; an empty body gives [EOS]."""
    import random

    from recemb_integrations.qdrant import PassageWindows

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
