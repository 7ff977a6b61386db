"""RecembVectorStore: LangChain's standard vector store and retriever suites on both embedded stores, the indexing
API's incremental and full cleanup, passages with their original text and place, the collection shared with `recemb
sync` / `recemb search`, and deletes that never act on a missing argument. The store is compared with what was given
after every write."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("langchain_tests")
from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from langchain_core.indexing import InMemoryRecordManager, index  # noqa: E402
from langchain_tests.integration_tests import RetrieversIntegrationTests, VectorStoreIntegrationTests  # noqa: E402

from recemb_integrations.framework_collection import AddError  # noqa: E402
from recemb_integrations.langchain import RecembEmbeddings, RecembRetriever, RecembVectorStore  # noqa: E402
from recemb_integrations.qdrant import CollectionMismatchError, NotOwnedError, QdrantSync, content_hash  # noqa: E402
from recemb_integrations.qdrant import Document as RecembDocument  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import run, write  # noqa: E402
from tests.integrations.conftest import tiny_model_dir  # noqa: E402
from tests.integrations.rag_examples import check_example  # noqa: E402
from tests.utils import assert_stored_dense, expected_document_vectors  # noqa: E402

LONG = " ".join(f"Line {i} of the harbour log: the boats came in at dawn with herring and cod." for i in range(40))


def tiny_embeddings(folder=None) -> RecembEmbeddings:
    return RecembEmbeddings(model_name=str(folder or tiny_model_dir()), model_kwargs={"device": "cpu",
                                                                                      "backend": "torch"})


def points_of(store: RecembVectorStore) -> list:
    """Every point of the store's collection, with payloads."""
    found, _ = store.collection.store.scroll(store.collection.collection_name, limit=10_000, with_payload=True)
    return found


def documents_held(store: RecembVectorStore) -> dict[str, str]:
    """Document id -> stored text, from the document points."""
    return {p.payload["document_id"]: p.payload.get("text") for p in points_of(store)
            if p.payload["kind"] == "document"}


# ---------------------------------------------------------------------- LangChain's standard suites
class TestStandardSuiteFakeEmbeddings(VectorStoreIntegrationTests):
    """The suite as LangChain runs it (its deterministic fake embeddings: one dense vector a document, recemb's
    BM25 beside it), on Qdrant Edge and on qdrant-client's local mode."""

    @pytest.fixture()
    def vectorstore(self, tmp_path, store_kind):
        store = RecembVectorStore(self.get_embeddings(), "suite", path=tmp_path / "store", store_kind=store_kind)
        try:
            yield store
        finally:
            store.close()


class TestStandardSuiteRecembModel(VectorStoreIntegrationTests):
    """The same suite with recemb's own model (the tiny random one): the main job's embedding path."""

    @pytest.fixture()
    def vectorstore(self, tmp_path):
        store = RecembVectorStore(tiny_embeddings(), "suite", path=tmp_path / "store", passage_tokens=8,
                                  passages_above=16)
        try:
            yield store
        finally:
            store.close()


class RetrieverSuite(RetrieversIntegrationTests):
    """A retriever over five stored documents; the store lives in a temporary folder for the class."""

    store_kind = "edge"

    @classmethod
    def setup_class(cls):
        cls.folder = Path(tempfile.mkdtemp(prefix="recemb-retriever-"))
        cls.store = RecembVectorStore(DeterministicFakeEmbedding(size=6), "retriever", path=cls.folder / "store",
                                      store_kind=cls.store_kind)
        cls.store.add_texts([f"note {i} about the harbour and its boats" for i in range(5)],
                            ids=[f"n{i}" for i in range(5)])

    @classmethod
    def teardown_class(cls):
        cls.store.close()
        shutil.rmtree(cls.folder, ignore_errors=True)

    @property
    def retriever_constructor(self):
        return RecembRetriever

    @property
    def retriever_constructor_params(self):
        return {"vectorstore": self.store}

    @property
    def retriever_query_example(self) -> str:
        return "boats in the harbour"


class TestRetrieverSuiteEdge(RetrieverSuite):
    store_kind = "edge"


class TestRetrieverSuiteLocal(RetrieverSuite):
    store_kind = "local"


# ---------------------------------------------------------------------- the main job's treatment
def test_recemb_model_stores_whole_documents_and_passages_with_their_original_text(tmp_path, tiny_folder,
                                                                                  tiny_embedder, store_kind):
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=tmp_path / "s", store_kind=store_kind,
                           passage_tokens=16, passages_above=32) as store:
        ids = store.add_documents([Document(page_content=LONG, metadata={"source": "log.txt"}, id="log"),
                                   Document(page_content="short note on cod", metadata={"source": "n.txt"})])
        assert ids[0] == "log" and ids[1].startswith("sha256-")
        points = points_of(store)
        own = {p.payload["document_id"]: p for p in points if p.payload["kind"] == "document"}
        passages = [p for p in points if p.payload["kind"] == "passage"]
        assert sorted(own) == sorted(ids) and len(passages) > 3
        assert all(p.payload["document_id"] == "log" and LONG[p.payload["start"]:p.payload["end"]] ==
                   p.payload["text"] for p in passages)
        # The document's own point is the main job's: embedded as its passages, its vector is their mean.
        stored, = store.collection.store.retrieve("c", [own["log"].id], with_vectors=True)
        assert_stored_dense(stored.vector["dense"],
                            expected_document_vectors(tiny_embedder, [LONG], 16, passages_above=32)[0],
                            rtol=1e-5, atol=1e-6)
        # By default, hits for an LLM's context: the long document's best passage, its own characters and place
        # (recemb's keys beside the user's), each document once; the short one whole, with the user's metadata.
        hits = store.similarity_search_with_score("herring and cod at dawn", k=3)
        assert sorted(d.id for d, _ in hits) == sorted(ids) and all(isinstance(score, float) for _, score in hits)
        passage = next(d for d, _ in hits if d.id == "log")
        meta = passage.metadata
        assert meta["kind"] == "passage" and passage.page_content == LONG[meta["start"]:meta["end"]]
        assert meta["source"] == "log.txt" and meta["line"] == 1 and meta["document_id"] == "log"
        assert len(passage.page_content) < len(LONG) / 4
        assert next(d for d, _ in hits if d.id != "log").metadata == {"source": "n.txt"}
        # Several passages of one document where asked for: those that overlap merged, so no character comes twice.
        several = store.similarity_search("herring and cod at dawn", k=4, per_document=None, filter={"source":
                                                                                                     "log.txt"})
        spans = sorted((d.metadata["start"], d.metadata["end"]) for d in several)
        assert len(several) >= 2 and all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
        assert all(d.page_content == LONG[d.metadata["start"]:d.metadata["end"]] for d in several)
        # Document hits: each document once, its whole text, its best passage's place as evidence.
        documents = store.similarity_search("herring and cod at dawn", k=5, granularity="document")
        assert sorted(d.id for d in documents) == sorted(ids)
        log = next(d for d in documents if d.id == "log")
        assert log.page_content == LONG and log.metadata["kind"] == "document"
        assert LONG[log.metadata["start"]:log.metadata["end"]]
        note = next(d for d in documents if d.id != "log")
        assert note.metadata == {"source": "n.txt"}  # a whole document no passage led to: the user's metadata alone
        # An edit replaces the document and all its passages; adding it again changes nothing.
        store.add_documents([Document(page_content=LONG[:200], metadata={"source": "log.txt"}, id="log")])
        assert documents_held(store)["log"] == LONG[:200]
        assert all(LONG[:200][p.payload["start"]:p.payload["end"]] == p.payload["text"] for p in points_of(store)
                   if p.payload["kind"] == "passage")
        before = sorted(p.id for p in points_of(store))
        store.add_documents([Document(page_content=LONG[:200], metadata={"source": "log.txt"}, id="log")])
        assert sorted(p.id for p in points_of(store)) == before


def test_search_options_filter_mode_and_retriever_kwargs(tmp_path, store_kind):
    texts = {"owl": "owls hunt at night over the fields", "tide": "the tide follows the moon",
             "bread": "bread needs time to rise"}
    with RecembVectorStore(DeterministicFakeEmbedding(size=8), "c", path=tmp_path / "s",
                           store_kind=store_kind) as store:
        store.add_texts(list(texts.values()), [{"topic": k} for k in texts], ids=list(texts))
        assert [d.id for d in store.similarity_search("owls", k=1, mode="sparse")] == ["owl"]
        assert [d.id for d in store.similarity_search("the moon", k=3, filter={"topic": "tide"})] == ["tide"]
        assert {d.id for d in store.similarity_search("x", k=3, filter={"topic": ["owl", "bread"]})} == {"owl",
                                                                                                       "bread"}
        retriever = store.as_retriever(search_kwargs={"k": 1, "mode": "sparse"})
        assert [d.id for d in retriever.invoke("bread rises")] == ["bread"]
        assert len(retriever.invoke("bread rises", k=3, mode="dense")) == 3
        with pytest.raises(TypeError, match="unknown search option"):
            store.similarity_search("x", k=1, score_threshold=0.5)
        with pytest.raises(ValueError, match="search_type"):
            store.as_retriever(search_type="mmr")
        with pytest.raises(ValueError, match="mode"):
            store.similarity_search("x", mode="fuzzy")
        # by vector: the dense side alone
        vector = DeterministicFakeEmbedding(size=8).embed_query("the tide follows the moon")
        assert store.similarity_search_by_vector(vector, k=1)[0].id == "tide"
        with pytest.raises(ValueError, match="by vector is dense"):
            store.similarity_search_by_vector(vector, k=1, mode="hybrid")
        with pytest.raises(TypeError, match="unknown search option"):
            store.similarity_search_by_vector(vector, k=1, fetch_k=9)
        # a store's own granularity holds where none is given; one given for a search holds for it alone
        assert store.similarity_search("owls", k=1, granularity="document")[0].id == "owl"


def test_search_methods_name_their_options():
    """What an editor shows: the options are named keyword parameters, not hidden in **kwargs."""
    import inspect

    for method in (RecembVectorStore.similarity_search, RecembVectorStore.similarity_search_with_score):
        params = inspect.signature(method).parameters
        assert [n for n in ("filter", "mode", "granularity", "per_document")
                if params[n].kind is inspect.Parameter.KEYWORD_ONLY] == ["filter", "mode", "granularity",
                                                                         "per_document"]
    params = inspect.signature(RecembVectorStore.similarity_search_by_vector).parameters
    assert {"filter", "granularity", "per_document"} <= set(params) and "mode" not in params


def test_deletes_never_act_on_a_missing_or_mistyped_argument(tmp_path, store_kind):
    with RecembVectorStore(DeterministicFakeEmbedding(size=6), "c", path=tmp_path / "s",
                           store_kind=store_kind) as store:
        store.add_texts(["a", "b", "c"], ids=["1", "2", "3"])
        with pytest.raises(ValueError, match="never takes"):
            store.delete(None)
        with pytest.raises(ValueError, match="never takes"):
            store.delete()
        with pytest.raises(TypeError, match="one id"):
            store.delete("1")
        with pytest.raises(TypeError, match="non-empty strings"):
            store.delete(["1", None])
        with pytest.raises(TypeError, match="non-empty strings"):
            store.delete([""])
        assert store.delete([]) is True
        assert sorted(documents_held(store)) == ["1", "2", "3"]
        store.delete(["2", "404"])
        assert sorted(documents_held(store)) == ["1", "3"]


def test_bad_documents_fail_loudly_and_the_good_ones_are_written(tmp_path):
    with RecembVectorStore(DeterministicFakeEmbedding(size=6), "c", path=tmp_path / "s") as store:
        with pytest.raises(ValueError, match="1 of the documents were not added .*not JSON-serialisable.*other 1"):
            store.add_texts(["good", "bad"], [{"k": 1}, {"k": object()}], ids=["g", "b"])
        assert documents_held(store) == {"g": "good"}
        with pytest.raises(ValueError, match="2 texts but 1 metadatas"):
            store.add_texts(["x", "y"], [{}])
        with pytest.raises(TypeError, match="Embeddings"):
            RecembVectorStore("not a model", "c", path=tmp_path / "t")
        with pytest.raises(ValueError, match="one of path"):
            RecembVectorStore(DeterministicFakeEmbedding(size=6), "c")
        with pytest.raises(TypeError, match="unknown option"):
            RecembVectorStore(DeterministicFakeEmbedding(size=6), "c", path=tmp_path / "t", passage_token=8)


# ---------------------------------------------------------------------- LangChain's indexing API
def test_index_incremental_and_full_cleanup(tmp_path, tiny_folder, store_kind):
    """``langchain_core.indexing.index``: a second run writes nothing, an edit replaces exactly that document (its
    old passages gone), a removal deletes it."""
    def docs(texts):
        return [Document(page_content=t, metadata={"source": s}) for s, t in texts.items()]

    texts = {"a.txt": LONG, "b.txt": "a short note on the tides", "c.txt": LONG.replace("herring", "mackerel")}
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=tmp_path / "s", store_kind=store_kind,
                           passage_tokens=16, passages_above=32) as store:
        records = InMemoryRecordManager("recemb/c")
        records.create_schema()
        result = index(docs(texts), records, store, cleanup="incremental", source_id_key="source",
                       key_encoder="sha256")
        assert result["num_added"] == 3 and result["num_deleted"] == 0
        points_before = sorted(p.id for p in points_of(store))
        result = index(docs(texts), records, store, cleanup="incremental", source_id_key="source",
                       key_encoder="sha256")
        assert result["num_added"] == 0 and result["num_skipped"] == 3 and result["num_deleted"] == 0
        assert sorted(p.id for p in points_of(store)) == points_before
        texts["a.txt"] = LONG.replace("cod", "eel")  # an edit
        result = index(docs(texts), records, store, cleanup="incremental", source_id_key="source",
                       key_encoder="sha256")
        assert result["num_added"] == 1 and result["num_deleted"] == 1
        held = documents_held(store)
        assert sorted(held.values()) == sorted(texts.values())  # one document per file, the new version
        assert all(held[p.payload["document_id"]][p.payload["start"]:p.payload["end"]] == p.payload["text"]
                   for p in points_of(store) if p.payload["kind"] == "passage")
        assert not any("cod" in (p.payload.get("text") or "") for p in points_of(store)
                       if held.get(p.payload["document_id"]) == texts["a.txt"])
        del texts["c.txt"]  # a removal: full cleanup deletes what the run did not see
        result = index(docs(texts), records, store, cleanup="full", source_id_key="source", key_encoder="sha256")
        assert result["num_deleted"] == 1 and sorted(documents_held(store).values()) == sorted(texts.values())
        assert {p.payload["document_id"] for p in points_of(store)} == set(documents_held(store))


# ---------------------------------------------------------------------- one collection, any door
def test_a_collection_written_by_recemb_sync_answers_as_a_retriever(tmp_path, tiny_folder, capsys, store_kind):
    folder = tmp_path / "docs"
    write(folder / "log.txt", LONG)
    write(folder / "note.txt", "the tide follows the moon")
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c",
            "--store", store_kind]
    assert run(capsys, ["sync", str(folder), "--passage-tokens", "16", "--passages-above", "32", *opts])[0] == 0
    # No setting repeated: the store reads the collection's own (passages, BM25, no stored texts).
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=tmp_path / "store") as store:
        hits = store.as_retriever(search_kwargs={"k": 2}).invoke("herring and cod")  # the defaults: for an LLM
        assert sorted(h.id for h in hits) == ["log.txt", "note.txt"]  # each document once
        hit = next(h for h in hits if h.id == "log.txt")  # the collection keeps no texts: read from its file
        assert hit.metadata["kind"] == "passage" and hit.metadata["line"] == 1
        assert hit.page_content == LONG[hit.metadata["start"]:hit.metadata["end"]]
        hits = store.as_retriever(search_kwargs={"k": 2, "per_document": 2, "filter": {"file_name": "log.txt"}}
                                  ).invoke("herring and cod")
        assert hits and all(h.id == "log.txt" and h.metadata["kind"] == "passage" for h in hits)
        for hit in hits:
            assert hit.page_content == LONG[hit.metadata["start"]:hit.metadata["end"]] and hit.metadata["line"] == 1
        assert store.collection.sync.settings.passage_tokens == 16
        # The file changes: its passage's text is not made up, the note says why.
        write(folder / "log.txt", LONG.upper())
        changed = [d for d in store.similarity_search("herring and cod", k=2, granularity="passage")
                   if d.id == "log.txt"]
        assert changed and all(d.page_content == "" and "changed" in d.metadata["note"] for d in changed)
    with RecembVectorStore(DeterministicFakeEmbedding(size=32), "c", path=tmp_path / "store") as other:
        with pytest.raises(CollectionMismatchError):  # another model: the pin refuses it
            other.similarity_search("x", k=1)


def test_recemb_search_reads_a_collection_written_through_langchain(tmp_path, tiny_folder, capsys, store_kind):
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=tmp_path / "store", store_kind=store_kind,
                           passage_tokens=16, passages_above=32) as store:
        store.add_documents([Document(page_content=LONG, metadata={"source": "log"}, id="log"),
                             Document(page_content="the tide follows the moon", id="tide")])
    code, hits, err = run(capsys, ["search", "the tide follows the moon", "--model", str(tiny_folder),
                                   "--qdrant-path", str(tmp_path / "store"), "--collection", "c", "--limit", "2"])
    assert code == 0, err
    assert {h["document_id"] for h in hits} == {"log", "tide"}
    code, report, err = run(capsys, ["search", "herring", "--granularity", "passage", "--model", str(tiny_folder),
                                     "--qdrant-path", str(tmp_path / "store"), "--collection", "c", "--mode",
                                     "sparse"])
    assert code == 0 and report and report[0]["document_id"] == "log"
    # ... and the main job's API finds the same documents with the collection's recorded settings; they are the
    # framework's: an API sync of its own root does not take them over.
    with open_store(path=tmp_path / "store") as s:
        from recemb.core import Embedder

        sync = QdrantSync.open(s, "c", Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch"))
        assert sync.settings.passage_tokens == 16 and sync.count() == 2
        tide = [RecembDocument("tide", "the tide follows the moon")]
        assert sync.sync(tide, delete_missing=False, framework=True).unchanged == 1
        report = sync.sync([RecembDocument("tide", "changed")], delete_missing=False)
        assert [f[0] for f in report.failed] == ["tide"] and "framework's vector store" in report.failed[0][1]
        assert sync.get_documents(["tide"])[0].text == "the tide follows the moon"


def test_from_texts_and_async(tmp_path):
    import asyncio

    store = RecembVectorStore.from_texts(["owls hunt at night", "bread rises"], DeterministicFakeEmbedding(size=6),
                                         ids=["owl", "bread"], collection_name="c", path=tmp_path / "s")
    try:
        async def go():
            await store.aadd_texts(["the tide follows the moon"], ids=["tide"])
            found = await store.asimilarity_search("the tide follows the moon", k=1)
            got = await store.aget_by_ids(["tide", "missing", "owl"])
            await store.adelete(["owl"])
            return found, got
        found, got = asyncio.run(go())
        assert [d.id for d in found] == ["tide"] and [d.id for d in got] == ["tide", "owl"]
        assert sorted(documents_held(store)) == ["bread", "tide"]
    finally:
        store.close()


def test_the_rag_example_sends_the_llm_cited_passages_not_whole_files(tmp_path, tiny_folder):
    check_example("langchain_retriever.py", str(tiny_folder), tmp_path)


def test_a_folder_sync_never_deletes_framework_documents_and_a_framework_delete_never_a_folders(tmp_path, tiny_folder,
                                                                                               capsys, store_kind):
    """Documents added through LangChain belong to the framework owner: a folder's sync into the same collection,
    with or without --id-prefix, deletes none of them (nor counts them for its mass-delete guard), and a LangChain
    delete of a folder's document is refused before anything is deleted."""
    folder = tmp_path / "docs"
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        write(folder / name, f"{name} is about the sea and its boats")
    added = [Document(page_content="added through LangChain", id="extra"), Document(page_content="and", id="more")]
    for prefix in ([], ["--id-prefix", "docs"]):
        names = [f"docs/{n}" if prefix else n for n in ("a.txt", "b.txt", "c.txt", "d.txt")]
        store_path = tmp_path / f"store{len(prefix)}"
        opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c",
                "--store", store_kind, *prefix]
        assert run(capsys, ["sync", str(folder), *opts])[0] == 0
        with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=store_path, store_kind=store_kind) as store:
            store.add_documents(added)
        code, report, _ = run(capsys, ["sync", str(folder), *opts])
        assert code == 0 and report["deleted"] == 0
        (folder / "d.txt").unlink()  # one of the folder's four goes: a quarter, not half with the framework's two
        code, report, _ = run(capsys, ["sync", str(folder), *opts])
        assert code == 0 and report["deleted"] == 1
        write(folder / "d.txt", "d.txt is about the sea and its boats")
        assert run(capsys, ["sync", str(folder), *opts])[0] == 0
        with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=store_path, store_kind=store_kind) as store:
            assert sorted(documents_held(store)) == sorted(names + ["extra", "more"])
            with pytest.raises(NotOwnedError, match="1 of the documents named .*nothing was deleted"):
                store.delete(["extra", names[0]])  # half-valid: nothing deleted
            assert sorted(documents_held(store)) == sorted(names + ["extra", "more"])
            with pytest.raises(AddError, match="not by a framework's vector store"):  # nor overwritten
                store.add_documents([Document(page_content="overwritten?", id=names[1])])
            kept, = store.collection.get([names[1]])
            assert kept.content_hash == content_hash("b.txt is about the sea and its boats")  # the folder's own
            store.delete(["extra"])
            assert sorted(documents_held(store)) == sorted(names + ["more"])


def test_concurrent_async_adds_write_each_document_once(tmp_path, tiny_folder):
    import asyncio

    shared = [Document(page_content=LONG[i * 100:], id=f"shared{i}") for i in range(3)]
    own = [[Document(page_content=f"note {n} on the tides", id=f"own{n}")] for n in range(4)]
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=tmp_path / "s", passage_tokens=16,
                           passages_above=32) as store:
        async def go():
            await asyncio.gather(*(store.aadd_documents(shared + extra) for extra in own))
        asyncio.run(go())
        held = documents_held(store)
        assert sorted(held) == sorted([d.id for d in shared] + [f"own{n}" for n in range(4)])
        keys = [(p.payload["document_id"], p.payload.get("passage")) for p in points_of(store)]
        assert len(keys) == len(set(keys))
        assert all(held[d][s:e] == t for d, s, e, t in ((p.payload["document_id"], p.payload["start"],
                                                          p.payload["end"], p.payload["text"])
                                                         for p in points_of(store) if p.payload["kind"] == "passage"))
