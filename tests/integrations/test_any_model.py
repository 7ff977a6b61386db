"""The main job with a model a user already trusts (issue #62): a tiny random sentence-transformers model built here
(tests/integrations/other_models.py) through ``QdrantSync``, the command line and both framework stores. Its
passages fit its window and slice the user's text exactly, the collection records the model and how its passages
were cut and refuses another, a rerun embeds nothing and an edit re-embeds that document's passages only."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("qdrant_edge")

from recemb_integrations.qdrant import CollectionMismatchError, Document, QdrantSync  # noqa: E402
from recemb_integrations.qdrant.cutting import CharacterCutter, TokenCutter  # noqa: E402
from recemb_integrations.qdrant.external import ExternalEmbedder, as_embedder, external_embedder  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import run  # noqa: E402
from tests.integrations.other_models import WORDS, Counting, build_sentence_transformer  # noqa: E402

WINDOW = 48
HARD = "Café e\u0301té \U0001F600 ok\r\n\tTabs\tand\r\nCRLF lines, naïve résumé. "


@pytest.fixture(scope="module")
def st_folder(tmp_path_factory):
    return build_sentence_transformer(tmp_path_factory.mktemp("other") / "tiny-st", window=WINDOW)


@pytest.fixture(scope="module")
def other_folder(tmp_path_factory):
    return build_sentence_transformer(tmp_path_factory.mktemp("other2") / "tiny-st-2", window=WINDOW, seed=1)


@pytest.fixture
def model(st_folder):
    from sentence_transformers import SentenceTransformer

    return Counting(SentenceTransformer(str(st_folder), device="cpu"))


def text_of(seed: int, words: int) -> str:
    import random

    rng = random.Random(seed)
    parts = []
    for i in range(words):
        parts.append(rng.choice(WORDS))
        if i % 23 == 0:
            parts.append(HARD)
        parts.append(rng.choice([" ", " ", ", ", ".\n", "\r\n", "\t"]))
    return "".join(parts)


def corpus() -> list[Document]:
    short = Document("doc-0", "harbour boats at dawn, é ok.\r\n", {"i": 0})  # one window: its own passage
    return [short] + [Document(f"doc-{i}", text_of(i, 150 + 60 * i), {"i": i}) for i in range(1, 4)]


def points_of(store, collection="c"):
    points, _ = store.scroll(collection, limit=100_000, with_payload=True, with_vectors=True)
    return points


def test_passages_fit_the_window_and_slice_the_text_exactly(tmp_path, model):
    docs = corpus()
    with open_store(path=tmp_path / "store") as store:
        sync = QdrantSync(store, "c", model, store_text=True)
        assert isinstance(sync.embedder, ExternalEmbedder) and isinstance(sync.embedder.cutter, TokenCutter)
        report = sync.sync(docs)
        assert report.added == 4 and not report.failed
        points = points_of(store)
        record = store.collection_info("c").metadata["recemb"]
    texts = {d.id: d.text for d in docs}
    passages = [p for p in points if p.payload["kind"] == "passage"]
    own = {p.payload["document_id"]: p for p in points if p.payload["kind"] == "document"}
    assert own["doc-0"].payload["passages"] == 0  # fits one window: its own passage
    for doc_id in ("doc-1", "doc-2", "doc-3"):
        mine = sorted((p.payload for p in passages if p.payload["document_id"] == doc_id), key=lambda p: p["passage"])
        assert len(mine) == own[doc_id].payload["passages"] > 2
        assert mine[0]["start"] == 0 and mine[-1]["end"] == len(texts[doc_id])
        for p in mine:
            assert p["text"] == texts[doc_id][p["start"]:p["end"]]
            assert len(model.tokenizer(p["text"])["input_ids"]) <= WINDOW
        for a, b in zip(mine, mine[1:]):
            assert a["start"] < b["start"] <= a["end"] < b["end"]
    # what reached the model: each passage's text once, and the short document whole
    assert sorted(model.texts) == sorted([texts["doc-0"]] + [p.payload["text"] for p in passages])
    # the document's vector: the normalised mean of its passages'
    for doc_id in ("doc-1", "doc-2"):
        vectors = np.array([p.vector["dense"] for p in passages if p.payload["document_id"] == doc_id], np.float64)
        mean = vectors.sum(axis=0)
        mean /= np.linalg.norm(mean)
        assert np.allclose(own[doc_id].vector["dense"], mean, atol=2e-3)
    assert record["passages_cut"]["by"] == "tokenizer" and record["passages_cut"]["window"] == WINDOW
    assert record["max_length"] == WINDOW and record["passage_tokens"] == WINDOW - 2


def test_a_rerun_embeds_nothing_and_an_edit_re_embeds_that_document_only(tmp_path, model):
    docs = corpus()
    with open_store(path=tmp_path / "store") as store:
        QdrantSync(store, "c", model).sync(docs)
        model.texts.clear()
        report = QdrantSync(store, "c", model).sync(docs)
        assert report.unchanged == 4 and model.texts == []
        edited = docs[2].text.replace("harbour", "lighthouse", 1)
        assert edited != docs[2].text
        docs[2] = Document(docs[2].id, edited, docs[2].metadata)
        report = QdrantSync(store, "c", model).sync(docs)
        assert report.updated == 1 and report.unchanged == 3
        cut = TokenCutter(model.tokenizer, WINDOW).spans(edited)
        assert sorted(model.texts) == sorted(edited[a:b] for a, b in cut)
        points = points_of(store)
    mine = [p for p in points if p.payload["document_id"] == "doc-2" and p.payload["kind"] == "passage"]
    assert len(mine) == len(cut)
    own = next(p for p in points if p.payload["document_id"] == "doc-2" and p.payload["kind"] == "document")
    assert {p.payload["document_hash"] for p in mine} == {own.payload["content_hash"]}


def test_a_collection_of_one_model_refuses_another(tmp_path, model, other_folder):
    from sentence_transformers import SentenceTransformer

    with open_store(path=tmp_path / "store") as store:
        QdrantSync(store, "c", model).sync(corpus())
        other = SentenceTransformer(str(other_folder), device="cpu")
        with pytest.raises(CollectionMismatchError, match="tiny-st-2"):
            QdrantSync(store, "c", other).sync(corpus())
        with pytest.raises(CollectionMismatchError):
            QdrantSync.open(store, "c", other).search("harbour")
        # the same model with another window is refused for a sync: its passages would be cut otherwise
        narrower = external_embedder(model, passage_characters=200)
        with pytest.raises(Exception, match="passage|window|max_length"):
            QdrantSync(store, "c", narrower).sync(corpus())
        hits = QdrantSync.open(store, "c", model).search("harbour boats", limit=3)
    assert hits and all(h.document_id.startswith("doc-") for h in hits)


def test_a_character_budget_where_the_model_has_no_tokenizer(tmp_path):
    seen = []

    def embed(texts):
        seen.extend(texts)
        return [[float(len(t) % 7 + 1), float(t.count("a") + 1), 1.0] for t in texts]

    embedder = external_embedder(object(), name="plain", embed_documents=embed, embed_query=lambda q: embed([q])[0],
                                 passage_characters=120)
    assert embedder.cutter == CharacterCutter(120) and "120 characters" in embedder.cut_note()
    docs = corpus()
    with open_store(path=tmp_path / "store") as store:
        QdrantSync(store, "c", embedder, store_text=True).sync(docs)
        points = points_of(store)
        record = store.collection_info("c").metadata["recemb"]
    passages = [p.payload for p in points if p.payload["kind"] == "passage"]
    assert passages and max(p["end"] - p["start"] for p in passages) <= 120
    texts = {d.id: d.text for d in docs}
    assert all(p["text"] == texts[p["document_id"]][p["start"]:p["end"]] for p in passages)
    assert record["passages_cut"] == {"by": "characters", "characters": 120, "overlap": 15, "document_vector": "none",
                                      "document_prefix": "", "query_prefix": ""}


def test_prefixes_go_on_queries_and_documents_as_the_model_asks(tmp_path, model):
    embedder = external_embedder(model, query_prefix="query: ", document_prefix="passage: ")
    assert embedder.cutter.window == WINDOW - len(model.tokenizer("passage: ", add_special_tokens=False)["input_ids"])
    with open_store(path=tmp_path / "store") as store:
        sync = QdrantSync(store, "c", embedder)
        sync.sync(corpus())
        assert model.texts and all(t.startswith("passage: ") for t in model.texts)
        assert all(len(model.tokenizer(t)["input_ids"]) <= WINDOW for t in model.texts)
        model.texts.clear()
        sync.search("harbour", limit=2, mode="dense")
    assert model.texts == ["query: harbour"]


def test_as_embedder_leaves_recemb_models_and_wraps_sentence_transformers(model, tiny_embedder):
    assert as_embedder(tiny_embedder) is tiny_embedder
    wrapped = as_embedder(model)
    assert isinstance(wrapped, ExternalEmbedder) and wrapped.dim == 32 and "tiny-st" in wrapped.name


def test_the_command_line_with_a_sentence_transformers_folder(tmp_path, st_folder, capsys):
    folder = tmp_path / "docs"
    folder.mkdir()
    for doc in corpus():
        (folder / f"{doc.id}.txt").write_text(doc.text, encoding="utf-8", newline="")
    opts = ["--qdrant-path", str(tmp_path / "store"), "--collection", "c"]
    code, report, err = run(capsys, ["sync", str(folder), "--model", str(st_folder), *opts])
    assert code == 0 and report["added"] == 4, err
    code, report, err = run(capsys, ["sync", str(folder), "--model", str(st_folder), *opts])
    assert code == 0 and report["unchanged"] == 4 and report["embedded_tokens"] == 0, err
    code, hits, err = run(capsys, ["search", "harbour boats", "--granularity", "passage", *opts])  # its own model
    assert code == 0 and hits and all(h["document_id"].endswith(".txt") for h in hits), err
    for hit in hits:  # the passage's own characters, read back from its file (CRLF kept)
        with open(folder / hit["document_id"], encoding="utf-8", newline="") as f:
            original = f.read()
        if hit["passage"] is None:  # doc-0, a window long: its own passage
            assert hit["document_id"] == "doc-0.txt"
            continue
        assert 0 <= hit["start"] < hit["end"] <= len(original)
        assert hit["excerpt"] and hit["position"] == f"line {original.count(chr(10), 0, hit['start']) + 1}"
    code, info, err = run(capsys, ["info", "--collection", "c", "--stats", "--qdrant-path", str(tmp_path / "store")])
    assert code == 0, err
    assert info["model"] == str(st_folder.resolve()) and info["settings"]["passage_tokens"] == WINDOW - 2
    cut = info["settings"]["passages_cut"]
    assert cut["by"] == "tokenizer" and cut["window"] == WINDOW
    from recemb_integrations.cli import main

    assert main(["info", "--collection", "c", "--stats", "--qdrant-path", str(tmp_path / "store")]) == 0
    assert f"passages_cut: by tokenizer, tokenizer {st_folder}" in capsys.readouterr().out
    # migrated (no model loaded), the copy searches with the model it records, as the original
    code, _, err = run(capsys, ["migrate", "--collection", "c", "--qdrant-path", str(tmp_path / "store"),
                                "--to-path", str(tmp_path / "copy")])
    assert code == 0, err
    code, moved, err = run(capsys, ["search", "harbour boats", "--granularity", "passage", "--collection", "c",
                                    "--qdrant-path", str(tmp_path / "copy")])
    assert code == 0 and [(h["document_id"], h["passage"]) for h in moved] == [(h["document_id"], h["passage"])
                                                                             for h in hits], err


# ---------------------------------------------------------------------- the framework stores
def langchain_embeddings(model, holds_model: bool):
    """A LangChain ``Embeddings`` over ``model``: holding it as ``_client`` as ``HuggingFaceEmbeddings`` does, or
    a plain one a user writes (no tokenizer to be found)."""
    from langchain_core.embeddings import Embeddings

    class Plain(Embeddings):
        model_name = "tiny-st"

        def embed_documents(self, texts):
            return model.encode(list(texts), convert_to_numpy=True).tolist()

        def embed_query(self, text):
            return model.encode([text], convert_to_numpy=True)[0].tolist()

    class Holding(Plain):
        def __init__(self):
            self._client = model

    return Holding() if holds_model else Plain()


@pytest.mark.parametrize("holds_model", [True, False], ids=["holds-its-model", "plain"])
def test_langchain_store_with_another_model_cites_passages_that_fit(tmp_path, model, holds_model):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document as LCDocument

    from recemb_integrations.langchain import RecembVectorStore

    docs = corpus()
    texts = {d.id: d.text for d in docs}
    options = {} if holds_model else {"passage_characters": 160}
    with RecembVectorStore(langchain_embeddings(model, holds_model), "c", path=tmp_path / "store",
                           **options) as store:
        store.add_documents([LCDocument(d.text, metadata=dict(d.metadata), id=d.id) for d in docs])
        cutter = store.collection.sync.embedder.cutter
        assert isinstance(cutter, TokenCutter if holds_model else CharacterCutter)
        hits = store.similarity_search("harbour boats lantern", k=4)
        model.texts.clear()
        store.add_documents([LCDocument(d.text, metadata=dict(d.metadata), id=d.id) for d in docs])
        assert model.texts == []  # a rerun embeds nothing
    assert hits and len({h.id for h in hits}) == len(hits)  # one passage a document, k=4
    assert any("start" in h.metadata for h in hits)
    for hit in hits:
        m = hit.metadata
        if "start" not in m:  # a document a window long: its own passage, its whole text
            assert hit.id == "doc-0" and hit.page_content == texts["doc-0"]
            continue
        assert hit.page_content == texts[hit.id][m["start"]:m["end"]]
        if holds_model:
            assert len(model.tokenizer(hit.page_content)["input_ids"]) <= WINDOW
        else:
            assert m["end"] - m["start"] <= 160


def test_llama_index_store_with_another_model_cuts_by_its_tokenizer(tmp_path, model):
    pytest.importorskip("llama_index.core")
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import VectorStoreQuery

    from recemb_integrations.llama_index import RecembVectorStore

    class Holding(BaseEmbedding):
        """What LlamaIndex's HuggingFaceEmbedding is to recemb: a BaseEmbedding holding its model as ``_model``."""

        def __init__(self, inner):
            super().__init__(model_name="tiny-st")
            self._model = inner

        def _get_query_embedding(self, query):
            return self._model.encode([query], convert_to_numpy=True)[0].tolist()

        async def _aget_query_embedding(self, query):
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text):
            return self._model.encode([text], convert_to_numpy=True)[0].tolist()

        def _get_text_embeddings(self, texts):
            return self._model.encode(list(texts), convert_to_numpy=True).tolist()

    docs = corpus()
    texts = {d.id: d.text for d in docs}
    store = RecembVectorStore("c", path=tmp_path / "store", embed_model=Holding(model))
    try:
        store.add([TextNode(id_=d.id, text=d.text, metadata=dict(d.metadata)) for d in docs])
        assert isinstance(store.collection.sync.embedder.cutter, TokenCutter)
        found = store.query(VectorStoreQuery(query_str="harbour boats lantern", similarity_top_k=3))
    finally:
        store.close()
    passages = [n for n in found.nodes if "start" in n.metadata]
    assert passages
    for node in passages:
        m = node.metadata
        assert node.text == texts[node.ref_doc_id or node.node_id.split("#")[0]][m["start"]:m["end"]]
        assert len(model.tokenizer(node.text)["input_ids"]) <= WINDOW


def test_each_frameworks_hugging_face_embeddings_cut_by_their_models_tokenizer(tmp_path, st_folder):
    """LangChain's ``HuggingFaceEmbeddings`` and LlamaIndex's ``HuggingFaceEmbedding``, as a user builds them over a
    sentence-transformers folder: the store finds the model they hold and cuts by its tokenizer to its window."""
    hf_langchain = pytest.importorskip("langchain_huggingface")
    hf_llama = pytest.importorskip("llama_index.embeddings.huggingface")
    from recemb_integrations.langchain import RecembVectorStore as LangChainStore
    from recemb_integrations.llama_index import RecembVectorStore as LlamaIndexStore

    lc = LangChainStore(hf_langchain.HuggingFaceEmbeddings(model_name=str(st_folder)), "c", path=tmp_path / "a")
    li = LlamaIndexStore("c", path=tmp_path / "b", embed_model=hf_llama.HuggingFaceEmbedding(model_name=str(st_folder)))
    try:
        for store in (lc, li):
            embedder = store.collection.sync.embedder
            assert isinstance(embedder.cutter, TokenCutter) and embedder.cutter.window == WINDOW, embedder.cut_note()
            assert embedder.cut_note().endswith(f"at most {WINDOW - 2} tokens of text each (its window: {WINDOW} "
                                                f"tokens), {embedder.cutter.overlap} shared")
    finally:
        lc.close()
        li.close()


def test_a_collection_made_whole_before_passages_stays_whole_and_a_changed_prefix_is_refused(tmp_path, model):
    whole = external_embedder(model).whole()  # what an earlier recemb wrote for another model: whole documents
    with open_store(path=tmp_path / "store") as store:
        QdrantSync(store, "old", whole).sync(corpus())
        report = QdrantSync(store, "old", model).sync(corpus()[:3] + [Document("doc-9", text_of(9, 300), {})],
                                                      allow_mass_delete=True)
        assert report.added == 1 and not report.failed
        assert all(p.payload["kind"] == "document" for p in points_of(store, "old"))  # still one point each
        QdrantSync(store, "new", model).sync(corpus())
        with pytest.raises(CollectionMismatchError, match="document_prefix"):
            QdrantSync(store, "new", external_embedder(model, document_prefix="passage: ")).sync(corpus())


def test_passage_tokens_cut_another_models_passages_shorter_or_not_at_all(tmp_path, model):
    docs = corpus()
    with open_store(path=tmp_path / "store") as store:
        sync = QdrantSync(store, "short", model, passage_tokens=16, store_text=True)
        sync.sync(docs)
        passages = [p.payload for p in points_of(store, "short") if p.payload["kind"] == "passage"]
        assert passages and max(len(model.tokenizer(p["text"], add_special_tokens=False)["input_ids"])
                                for p in passages) <= 16
        assert store.collection_info("short").metadata["recemb"]["passages_cut"]["tokens"] == 16
        with pytest.raises(CollectionMismatchError, match="tokens"):  # the collection's size, not another
            QdrantSync(store, "short", model, passage_tokens=20).sync(docs)
        QdrantSync(store, "whole", model, passage_tokens=0).sync(docs)
        assert {p.payload["kind"] for p in points_of(store, "whole")} == {"document"}
        with pytest.raises(ValueError, match="from 8 to 46 tokens"):
            QdrantSync(store, "bad", model, passage_tokens=47)
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        external_embedder(model, passage_characters=100).resized(16)


def test_a_long_document_is_found_by_its_passages_not_its_own_vector(tmp_path, model):
    """The default ``document_vector="none"``: a document search ranks a long document by its best passage (its own
    point, the mean of its passages, is never what finds it); ``"mean"`` searches the own point beside them."""
    docs = corpus()
    query = "harbour boats lantern tide"
    with open_store(path=tmp_path / "store") as store:
        for name, vector in (("none", "none"), ("mean", "mean")):
            sync = QdrantSync(store, name, external_embedder(model, document_vector=vector))
            sync.sync(docs)
            documents = sync.search(query, limit=4, granularity="document", mode="dense")
            passages = sync.search(query, limit=50, granularity="passage", mode="dense")
            best = {}
            for hit in passages:
                best.setdefault(hit.document_id, hit.score)
            if vector == "none":
                assert store.collection_info(name).metadata["recemb"]["passages_cut"]["document_vector"] == "none"
                assert [(h.document_id, round(h.score, 5)) for h in documents] == sorted(
                    ((d, round(s, 5)) for d, s in best.items()), key=lambda x: -x[1])[:4]
            else:  # the own point competes: some document scores by it, above its best passage
                own = sync.search(query, limit=50, granularity="any", mode="dense")
                assert any(h.passage is None and h.document_id != "doc-0" for h in own)


def test_one_bm25_length_for_what_a_search_ranks(tmp_path, model):
    """Short documents and a long one's passages are ranked together (``document_vector="none"``): one BM25
    average length for both, the mean over those units, so a passage does not outscore a short document by its
    length; with ``"mean"`` the documents' and the passages' averages stay apart."""
    from recemb_integrations.sparse import Bm25

    docs = [Document(f"short-{i}", " ".join(WORDS[i:i + 6]), {}) for i in range(20)]
    docs.append(Document("long", text_of(5, 400), {}))
    with open_store(path=tmp_path / "store") as store:
        QdrantSync(store, "none", model).sync(docs)
        QdrantSync(store, "mean", external_embedder(model, document_vector="mean")).sync(docs)
        none = store.collection_info("none").metadata["recemb"]["sparse"]
        mean = store.collection_info("mean").metadata["recemb"]["sparse"]
    bm25 = Bm25()
    short = [bm25.length(d.text) for d in docs[:20]]
    assert none["avg_len"] == none["passage_avg_len"]
    assert min(short) <= none["avg_len"] < mean["passage_avg_len"]  # pulled towards the many short documents
    assert mean["avg_len"] != mean["passage_avg_len"]
