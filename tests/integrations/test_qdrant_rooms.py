"""The main job's rooms on their own: the collection record (model-free), the plan (pure), the writer's writes as
data (the executor contract Ray uses), and a sync that reads the record once and scans the collection once."""

import pytest

pytest.importorskip("qdrant_client")

from recemb_integrations.qdrant import (  # noqa: E402
    DEFAULT_PASSAGE_OVERLAP,
    DEFAULT_PASSAGE_TOKENS,
    DEFAULT_PASSAGES_ABOVE,
    CollectionMismatchError,
    CollectionRecord,
    Document,
    LocalExecutor,
    MassDeletionError,
    QdrantSync,
    RequestedSettings,
    SettingsConflict,
    SyncSettings,
    content_hash,
)
from recemb_integrations.qdrant.documents import read_entries  # noqa: E402
from recemb_integrations.qdrant.errors import InvalidSetting  # noqa: E402
from recemb_integrations.qdrant.plan import (  # noqa: E402
    StoredDocuments,
    incomplete_passages,
    plan_sync,
)
from recemb_integrations.qdrant.points import API_ROOT, FRAMEWORK_ROOT, point_id  # noqa: E402
from recemb_integrations.qdrant.record import NO_PASSAGES, ModelFacts, decide_settings  # noqa: E402
from recemb_integrations.qdrant.writes import (  # noqa: E402
    DeleteDocuments,
    DeletePoints,
    DeleteStalePassages,
    SetMetadata,
    StampRoot,
    Upsert,
    apply,
)
from recemb_integrations.stores import open_store  # noqa: E402

DOCS = [Document(f"d{i}.txt", f"document number {i} about state space models " * (i + 1), {"n": i})
        for i in range(6)]


def record(**data) -> CollectionRecord:
    base = {"model": "m", "model_fingerprint": "f", "dim": 8, "distance": "Cosine", "layout": 2,
            "passage_tokens": None, "passage_overlap": None, "max_tokens": None, "sparse": {"language": "english"}}
    return CollectionRecord.parse({"recemb": {**base, **data}}, "c")


# ---------------------------------------------------------------------- the record
def test_a_collection_without_a_record_is_not_recembs():
    with pytest.raises(CollectionMismatchError, match="not created by recemb"):
        CollectionRecord.parse({"other": {}}, "c")


def test_settings_come_from_the_record_where_none_are_requested():
    kept = record(passage_tokens=64, passage_overlap=8, max_tokens=1000)
    # a record of a recemb that did not record the threshold: every document got passages; nor how long documents
    # were embedded: whole and as passages
    assert decide_settings(kept, RequestedSettings()) == SyncSettings(64, 8, 1000, True, "english", 0,
                                                                      long_documents="whole+passages")
    assert decide_settings(None, RequestedSettings()).long_documents == "passages"  # a new collection's default
    assert decide_settings(kept, RequestedSettings(long_documents="one-pass"), rebuild=True).long_documents == \
        "one-pass"
    assert decide_settings(record(passage_tokens=64, passage_overlap=8, passages_above=100),
                           RequestedSettings()).passages_above == 100
    # a new collection: the named passages with no overlap and their own length as threshold, else the defaults
    assert decide_settings(None, RequestedSettings(passage_tokens=32)) == SyncSettings(32, 0, None, True,
                                                                                     passages_above=32)
    assert decide_settings(None, RequestedSettings()) == SyncSettings(
        DEFAULT_PASSAGE_TOKENS, DEFAULT_PASSAGE_OVERLAP, None, True, passages_above=DEFAULT_PASSAGES_ABOVE)
    assert decide_settings(None, RequestedSettings(passage_tokens=0)).passage_tokens is None
    assert decide_settings(None, RequestedSettings(passages_above=500)).passages_above == 500
    # "no passages" named against a collection without them is no conflict; against one with them it is
    assert decide_settings(record(), RequestedSettings(passage_tokens=0)).passage_tokens is None
    with pytest.raises(SettingsConflict):
        decide_settings(kept, RequestedSettings(passage_tokens=0))
    with pytest.raises(SettingsConflict):
        decide_settings(kept, RequestedSettings(passages_above=10))
    assert decide_settings(record(sparse={"language": "german"}), RequestedSettings()).sparse_language == "german"


def test_a_requested_setting_that_contradicts_the_record_is_a_conflict():
    with pytest.raises(SettingsConflict) as caught:
        decide_settings(record(passage_tokens=64, passage_overlap=0), RequestedSettings(passage_tokens=32))
    assert (caught.value.key, caught.value.recorded, caught.value.requested) == ("passage_tokens", 64, 32)
    with pytest.raises(SettingsConflict, match="BM25") as caught:
        decide_settings(record(), RequestedSettings(sparse=False))
    assert caught.value.key == "sparse"
    legacy = record(layout=1, sparse=None)
    with pytest.raises(CollectionMismatchError, match="recemb 0.1"):
        decide_settings(legacy, RequestedSettings())
    assert decide_settings(legacy, RequestedSettings(sparse=False)).sparse is False
    # A rebuild takes what is requested, the record's passages where nothing is (and how it embedded long
    # documents: this record predates the choice, so both passes).
    rebuilt = decide_settings(record(passage_tokens=64, passage_overlap=8), RequestedSettings(sparse=False),
                              rebuild=True)
    assert rebuilt == SyncSettings(64, 8, None, False, long_documents="whole+passages")
    with pytest.raises(SettingsConflict) as caught:
        decide_settings(record(passage_tokens=64, long_documents="one-pass"),
                        RequestedSettings(long_documents="passages"))
    assert (caught.value.key, caught.value.recorded, caught.value.requested) == ("long_documents", "one-pass",
                                                                                "passages")
    with pytest.raises(InvalidSetting, match="long_documents"):
        decide_settings(None, RequestedSettings(long_documents="halfway"))
    with pytest.raises(InvalidSetting, match="passage_overlap") as caught:
        decide_settings(None, RequestedSettings(passage_tokens=8, passage_overlap=8))
    assert (caught.value.key, caught.value.value, caught.value.passage_tokens) == ("passage_overlap", 8, 8)
    # hybrid named against a dense-only collection, and another BM25 language: the same one rule
    with pytest.raises(SettingsConflict) as caught:
        decide_settings(record(sparse=None), RequestedSettings(sparse=True))
    assert (caught.value.key, caught.value.recorded, caught.value.requested) == ("sparse", False, True)
    assert decide_settings(record(sparse=None), RequestedSettings()).sparse is False
    with pytest.raises(SettingsConflict) as caught:
        decide_settings(record(), RequestedSettings(sparse_language="german"))
    assert caught.value.key == "sparse_language"


def test_no_passages_has_one_meaning():
    """passage_tokens None in settings; in a request NO_PASSAGES (0), and an overlap or threshold beside it is
    refused by name rather than carried as a passage setting of a collection without passages."""
    off = decide_settings(None, RequestedSettings(passage_tokens=NO_PASSAGES))
    assert (off.passage_tokens, off.passage_overlap, off.passages_above, off.passages) == (None, 0, 0, False)
    for key in ("passage_overlap", "passages_above"):
        with pytest.raises(InvalidSetting) as caught:
            decide_settings(None, RequestedSettings(passage_tokens=NO_PASSAGES, **{key: 4}))
        assert (caught.value.key, caught.value.passage_tokens) == (key, None)
    with pytest.raises(InvalidSetting):
        SyncSettings(None, passage_overlap=4)
    # settings given whole are held to: a collection with others refuses them
    full = decide_settings(None, RequestedSettings())
    assert decide_settings(None, full.as_requested()) == full
    with pytest.raises(SettingsConflict):
        decide_settings(record(passage_tokens=64, passage_overlap=8), full.as_requested())


def test_the_record_names_what_differs_from_a_model():
    kept = record()
    assert kept.model_problems(ModelFacts("m", "f", 8)) == []
    assert "dimension" in kept.model_problems(ModelFacts("m", "f", 16))[0]
    assert "other weights" in kept.model_problems(ModelFacts("m", "g", 8))[0]
    with pytest.raises(CollectionMismatchError, match="max_length"):
        record(max_length=512).check_model(ModelFacts("m", "f", 8, max_length=256), for_sync=True)
    record(max_length=512).check_model(ModelFacts("m", "f", 8, max_length=256), for_sync=False)  # a search: fine
    assert kept.refusal() is None
    assert "migrate" in record(migration={"state": "copying"}).refusal()
    assert "rebuild" in record(rebuild={"state": "copying"}).refusal()


# ---------------------------------------------------------------------- the plan
def entries_of(docs):
    entries, failed = read_entries(docs)
    assert failed == []
    return entries


def from_files(docs):
    """The documents as a folder sync gives them: their metadata records the file."""
    return [Document(d.id, d.text, {**d.metadata, "path": f"/docs/{d.id}"}) for d in docs]


def test_the_plan_sorts_documents_by_what_the_collection_holds():
    docs = entries_of(from_files(DOCS[:4]))
    stored = StoredDocuments(
        documents={"d0.txt": (content_hash(DOCS[0].text), {"n": 0, "path": "/docs/d0.txt"}),   # unchanged
                   "d1.txt": (content_hash(DOCS[1].text), {"n": -1, "path": "/docs/d1.txt"}),  # metadata changed
                   "d2.txt": ("old hash", {"n": 2, "path": "/docs/d2.txt"}),                   # text changed
                   "gone.txt": ("x", {"path": "/docs/gone.txt"})},                             # not given
        seen={"d0.txt": "", "d1.txt": None, "d2.txt": "", "gone.txt": "", "other/x.txt": "other/"})
    plan = plan_sync("c", docs, [], [], stored, "", True, (), False)
    assert [(e.id, action) for e, action in plan.to_embed] == [("d2.txt", "updated"), ("d3.txt", "added")]
    assert plan.metadata_updated == 1 and plan.unchanged == 1
    # every other change as data: the metadata rewritten and the root stamped (written before points recorded
    # their root) before the embedding, what is gone deleted after it; another root's "other/x.txt" is not this sync's
    assert plan.before == (SetMetadata("d1.txt", {"n": 1, "path": "/docs/d1.txt"}), StampRoot(("d1.txt",), ""))
    assert plan.after == (DeleteDocuments(("gone.txt",), ""),) and plan.deleted == 1


def test_the_plan_refuses_to_delete_most_of_a_collection():
    stored = StoredDocuments({f"old{i}": ("h", {"path": f"/docs/old{i}"}) for i in range(10)},
                             {f"old{i}": "" for i in range(10)})
    with pytest.raises(MassDeletionError, match="would delete 10 of the 10") as refused:
        plan_sync("c", entries_of(from_files(DOCS[:1])), [], [], stored, "", True, (), False)
    assert refused.value.deleting == tuple(sorted(stored.documents)) and refused.value.managed == 10
    assert "allow_mass_delete=True" in str(refused.value) and "--" not in str(refused.value)  # the API's words
    deletes = plan_sync("c", entries_of(from_files(DOCS[:1])), [], [], stored, "", True, (), True).after
    assert sorted(d for write in deletes for d in write.document_ids) == sorted(stored.documents)


def test_the_plan_lets_each_writer_manage_its_own_and_take_over_only_by_writing():
    """The Python API's sync manages its own documents; a "" document without a file (the API's or a framework's,
    written before they had owners) is deleted by nobody and taken over by whoever writes its id."""
    stored = StoredDocuments(
        documents={"api-old": ("h1", {}), "legacy": (content_hash(DOCS[0].text), {"n": 0}),
                   "f.txt": ("h2", {"path": "/docs/f.txt"}), "lc": ("h3", {})},
        seen={"api-old": API_ROOT, "legacy": "", "f.txt": "", "lc": FRAMEWORK_ROOT})
    legacy = Document("legacy", DOCS[0].text, {"n": 0})
    plan = plan_sync("c", entries_of([legacy]), [], [], stored, API_ROOT, True, (), True)
    assert plan.after == (DeleteDocuments(("api-old",), API_ROOT),)  # its own alone: not the folder's, not "lc"
    assert plan.before == (StampRoot(("legacy",), API_ROOT),) and plan.unchanged == 1 and plan.failed == []
    # the folder's sync neither deletes nor counts it (nor the API's, nor the framework's)
    plan = plan_sync("c", entries_of(from_files([Document("f.txt", "x")])), [], [], stored, "", True, (), False)
    assert plan.after == () and [e.id for e, _ in plan.to_embed] == ["f.txt"]
    # another writer's id is refused by name, for each writer
    for root, given, owner in ((API_ROOT, "lc", "a framework's vector store"), (FRAMEWORK_ROOT, "api-old",
                                                                              "the Python API")):
        plan = plan_sync("c", entries_of([Document(given, "text")]), [], [], stored, root, False, (), False)
        assert plan.to_embed == [] and plan.failed[0][0] == given and owner in plan.failed[0][1]


def test_a_document_whose_passages_are_not_all_there_is_re_embedded():
    # what the scan counts: passages of the document's own version only (another version's do not count)
    recorded = {"a": ("ha", 3), "b": ("hb", 2), "c": ("hc", 0), "old": ("ho", None)}
    found = {("a", "ha"): 2, ("a", "stale"): 5, ("b", "hb"): 2, ("old", None): 1}
    assert incomplete_passages(recorded, found) == {"a": (2, 3)}
    docs = entries_of(DOCS[:2])
    stored = StoredDocuments({d.id: (content_hash(d.text), d.metadata) for d in DOCS[:2]},
                             {d.id: API_ROOT for d in DOCS[:2]}, incomplete={"d1.txt": (1, 4)})
    plan = plan_sync("c", docs, [], [], stored, API_ROOT, True, (), False)
    assert [(e.id, action) for e, action in plan.to_embed] == [("d1.txt", "updated")] and plan.unchanged == 1
    assert plan.warnings == [("d1.txt", "3 of its 4 passages were missing from the collection (overwritten or "
                                        "deleted by something other than its sync); re-embedded")]


# ---------------------------------------------------------------------- the writes, as data
class Collecting:
    """An executor that makes the writes here but only keeps them, as a Ray actor does, then sends them."""

    def __init__(self):
        self.writes = []

    def run(self, job, tasks, embedder, emit, on_outcome, show_progress_bar=False):
        outcomes = []
        LocalExecutor().run(job, tasks, embedder, self.writes.append, outcomes.append)
        for write in self.writes:
            emit(write)
        for outcome in outcomes:
            on_outcome(outcome)


def snapshot(store, collection="docs"):
    points, _ = store.scroll(collection, limit=10_000, with_payload=True, with_vectors=True)
    return {p.id: (p.payload, p.vector) for p in points}


@pytest.mark.parametrize("kind", ["local", "edge"])
def test_a_deletion_that_names_nothing_deletes_nothing(tmp_path, tiny_embedder, kind):
    """An empty deletion would become a filter without conditions, which matches every point: it is a no-op."""
    if kind == "edge":
        pytest.importorskip("qdrant_edge")
    with open_store(path=tmp_path / "s", kind=kind) as store:
        QdrantSync(store, "docs", tiny_embedder, passage_tokens=6, passage_overlap=2).sync(DOCS)
        before = store.count("docs")
        for write in (DeleteStalePassages(()), DeleteDocuments((), None), DeleteDocuments((), "root"),
                      DeletePoints(())):
            apply(store, "docs", write)
            assert store.count("docs") == before, write
        apply(store, "docs", DeletePoints((point_id("d0.txt"),)))  # a named one still goes
        assert store.count("docs") == before - 1


@pytest.mark.parametrize("kind", ["local", "edge"])
def test_writes_made_elsewhere_and_sent_later_give_the_same_collection(tmp_path, tiny_embedder, kind):
    if kind == "edge":
        pytest.importorskip("qdrant_edge")
    settings = dict(passage_tokens=6, passage_overlap=2, store_text=True)
    with open_store(path=tmp_path / "a", kind=kind) as here, open_store(path=tmp_path / "b", kind=kind) as there:
        direct = QdrantSync(here, "docs", tiny_embedder, **settings).sync(DOCS)
        executor = Collecting()
        relayed = QdrantSync(there, "docs", tiny_embedder, **settings).sync(DOCS, executor=executor)
        assert relayed.added == direct.added == 6 and relayed.embedded_tokens == direct.embedded_tokens
        # Each document's own point (the one with its hash) is written after all of its passages.
        last_passage, own = {}, {}
        for i, write in enumerate(w for w in executor.writes if isinstance(w, Upsert)):
            for point in write.points:
                doc_id = point.payload["document_id"]
                if point.payload["kind"] == "passage":
                    last_passage[doc_id] = i
                else:
                    own[doc_id] = i
        assert sorted(own) == sorted(last_passage) == sorted(d.id for d in DOCS)
        assert all(own[d] > last_passage[d] for d in own)
        assert snapshot(here) == snapshot(there)
        edited = [Document(d.id, d.text[: len(d.text) // 2], d.metadata) for d in DOCS]
        executor = Collecting()
        QdrantSync(there, "docs", tiny_embedder, **settings).sync(edited, executor=executor)
        QdrantSync(here, "docs", tiny_embedder, **settings).sync(edited)
        assert DeleteStalePassages in {type(w) for w in executor.writes}  # the shortened documents' surplus passages
        assert snapshot(here) == snapshot(there)


# ---------------------------------------------------------------------- one read, one scan
class Counting:
    """A store that counts record reads and scans of document payloads."""

    def __init__(self, inner):
        self.inner, self.infos, self.scans = inner, 0, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def collection_info(self, *args, **kwargs):
        self.infos += 1
        return self.inner.collection_info(*args, **kwargs)

    def scroll(self, collection, *args, **kwargs):
        points, offset = self.inner.scroll(collection, *args, **kwargs)
        selected = kwargs.get("with_payload")
        if isinstance(selected, (list, tuple)) and "content_hash" in selected and kwargs.get("offset") is None:
            self.scans += 1
        return points, offset


def test_a_sync_given_the_record_and_the_scan_reads_neither_again(tmp_path, tiny_embedder):
    from recemb_integrations.qdrant import read_record

    with open_store(path=tmp_path / "s", kind="local") as inner:
        QdrantSync(inner, "docs", tiny_embedder).sync(DOCS[:3])
        store = Counting(inner)
        found = read_record(store, "docs")
        assert store.infos == 1
        sync = QdrantSync(store, "docs", tiny_embedder, found.settings, record=found)
        stored = sync.scan()
        report = sync.sync(DOCS, stored=stored)
        assert (report.added, report.unchanged) == (3, 3)
        assert (store.infos, store.scans) == (1, 1)
        # Without them, the sync reads the record and scans once each.
        store.infos = store.scans = 0
        QdrantSync(store, "docs", tiny_embedder).sync(DOCS)
        assert (store.infos, store.scans) == (1, 1)


def test_a_rebuild_reads_each_document_once_and_the_live_record_once(tmp_path, tiny_embedder):
    """The staging collection is synced from the rebuild's own first pass: every source is hashed once and read
    once to be embedded; the live collection's record is read once, and the staging collection's record is the
    one its sync made, not read back."""
    from recemb_integrations.qdrant import DocumentSource

    texts = {d.id: d.text for d in DOCS}
    hashed, read = [], []

    def source(doc_id):
        def fingerprint():
            hashed.append(doc_id)
            return content_hash(texts[doc_id]), False

        def load():
            read.append(doc_id)
            return texts[doc_id]

        return DocumentSource(doc_id, load, {}, fingerprint, len(texts[doc_id]))

    with open_store(path=tmp_path / "s", kind="local") as inner:
        QdrantSync(inner, "docs", tiny_embedder, passage_tokens=0).sync(DOCS)
        store = Counting(inner)
        report = QdrantSync(store, "docs", tiny_embedder, passage_tokens=8).sync([source(d) for d in texts],
                                                                                 rebuild=True)
        assert report.added == len(DOCS) and report.deleted == 0
        assert sorted(hashed) == sorted(texts)  # the first pass, once
        rebuild_reads = sorted(read)
        assert store.infos == 1  # the live record
        assert QdrantSync.open(inner, "docs", tiny_embedder).settings.passage_tokens == 8
        # ... and read as often as a first sync into a new collection reads them (BM25 lengths, then the embedding)
        hashed.clear(), read.clear()
        QdrantSync(inner, "fresh", tiny_embedder, passage_tokens=8).sync([source(d) for d in texts])
        assert sorted(hashed) == sorted(texts) and sorted(read) == rebuild_reads
