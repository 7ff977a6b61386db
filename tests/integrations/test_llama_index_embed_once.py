"""An IngestionPipeline into a RecembVectorStore embeds each text once and, run again as a script would (a fresh
pipeline and docstore over unchanged files), nothing: ``EmbedInStore`` lets the store embed what its sync finds new
or changed, where LlamaIndex's own embedding transformation embeds every file it is given first. Counted at the
model (every text and passage that reaches it), on both embedded stores. A marked node leaves the caller's nodes
and the docstore as they were, comes back from LlamaIndex's IngestionCache still marked, and is refused with the
reason by a store that cannot embed it (one without an embed model, or another library's)."""

from __future__ import annotations

from collections import Counter
from contextlib import closing

import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("llama_index.core")
from llama_index.core import Document, SimpleDirectoryReader  # noqa: E402
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402
from llama_index.core.vector_stores import SimpleVectorStore  # noqa: E402

from recemb_integrations.llama_index import EmbedInStore, RecembEmbedding, RecembVectorStore  # noqa: E402
from recemb_integrations.qdrant import content_hash  # noqa: E402
from tests.integrations.cli_cases import write  # noqa: E402
from tests.utils import passage_windows  # noqa: E402

LONG = " ".join(f"Line {i} of the harbour log: the boats came in at dawn with herring and cod." for i in range(20))
PASSAGES = dict(passage_tokens=16, passage_overlap=4, passages_above=32)
TEXTS = {"a.txt": LONG, "b.txt": "the tide follows the moon", "c.txt": "bread needs time to rise"}


def counting_model(tiny_folder, monkeypatch) -> tuple[RecembEmbedding, list[tuple[int, ...]], list[str]]:
    """The model; every sequence of ids that reaches it (``embed_token_ids``: the one way in for texts of this size,
    whole or as passages); and every text handed to it whole through ``encode_documents``."""
    model = RecembEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
    sequences: list[tuple[int, ...]] = []
    texts: list[str] = []
    encode_documents, embed_token_ids = model.embedder.encode_documents, model.embedder.embed_token_ids
    monkeypatch.setattr(model.embedder, "encode_documents",
                        lambda docs, **kw: texts.extend(docs) or encode_documents(docs, **kw))
    monkeypatch.setattr(model.embedder, "embed_token_ids",
                        lambda ids, **kw: sequences.extend(map(tuple, ids)) or embed_token_ids(ids, **kw))
    return model, sequences, texts


def once_each(model) -> Counter:
    """What the first run must send the model, each once: the short files' ids whole, the long file's passages
    (cut by the rule, ``passage_windows``), never the long file whole."""
    ids = {name: model.embedder.tokenize([text])[0] for name, text in TEXTS.items()}
    windows = passage_windows(ids["a.txt"], PASSAGES["passage_tokens"], PASSAGES["passage_overlap"])
    return Counter([tuple(ids["b.txt"]), tuple(ids["c.txt"]), *map(tuple, windows)])


def snapshot(store) -> dict[str, tuple]:
    found, _ = store.client.scroll(store.collection_name, limit=10_000, with_payload=True, with_vectors=True)
    return {p.id: (p.payload["document_id"], p.payload["kind"], p.payload.get("content_hash")
                   or p.payload.get("document_hash"), tuple(round(x, 6) for x in p.vector["dense"])) for p in found}


def run_script(folder, store, transformation) -> int:
    """What a script does: a new pipeline and docstore each run."""
    pipeline = IngestionPipeline(transformations=[transformation], vector_store=store, docstore=SimpleDocumentStore(),
                                 docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
    return len(pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()))


def test_each_text_reaches_the_model_once_and_a_rerun_embeds_nothing(tmp_path, tiny_folder, store_kind, monkeypatch):
    folder = tmp_path / "docs"
    for name, text in TEXTS.items():
        write(folder / name, text)
    model, reached, whole = counting_model(tiny_folder, monkeypatch)
    with RecembVectorStore("c", path=tmp_path / "s", store_kind=store_kind, embed_model=model, **PASSAGES) as store:
        assert run_script(folder, store, EmbedInStore()) == 3
        held = snapshot(store)
        passages = [v for v in held.values() if v[1] == "passage"]
        assert len(passages) > 2 and {v[0] for v in passages} == {str(folder / "a.txt")}
        # the long file as its passages (its own vector their mean), each short file whole: once each, nothing else
        assert Counter(reached) == once_each(model) and len(reached) == len(passages) + 2 and whole == []
        reached.clear()
        assert run_script(folder, store, EmbedInStore()) == 3 and reached == []  # unchanged: no text reaches it
        assert snapshot(store) == held
        write(folder / "b.txt", "the tide follows the moon and the sun")  # an edit: that file alone
        (folder / "c.txt").unlink()
        pipeline = IngestionPipeline(transformations=[EmbedInStore()], vector_store=store,
                                     docstore=SimpleDocumentStore(),
                                     docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
        pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        assert reached == [tuple(model.embedder.tokenize(["the tide follows the moon and the sun"])[0])]  # that file
        write(folder / "c.txt", TEXTS["c.txt"])
        pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        (folder / "c.txt").unlink()  # one pipeline, one docstore: UPSERTS_AND_DELETE deletes what is gone
        pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        now = snapshot(store)
        assert {v[0] for v in now.values()} == {str(folder / "a.txt"), str(folder / "b.txt")}
        assert {v for k, v in now.items() if v[0].endswith("a.txt")} == {v for v in held.values()
                                                                        if v[0].endswith("a.txt")}
        assert now[next(k for k, v in now.items() if v[0].endswith("b.txt"))][2] == content_hash(
            "the tide follows the moon and the sun")


def test_llama_indexs_own_embedding_transformation_still_works_and_costs_what_it_costs(tmp_path, tiny_folder,
                                                                                      monkeypatch):
    folder = tmp_path / "docs"
    for name, text in TEXTS.items():
        write(folder / name, text)
    model, reached, whole = counting_model(tiny_folder, monkeypatch)
    with RecembVectorStore("c", path=tmp_path / "s", embed_model=model, **PASSAGES) as store:
        assert run_script(folder, store, model) == 3
        held = snapshot(store)
        passages = sum(v[1] == "passage" for v in held.values())
        # LlamaIndex embeds every file first (the long one too, whose vector the store does not use), then the store
        # its passages: what EmbedInStore saves
        files = Counter(map(tuple, model.embedder.tokenize(whole)))  # each file with its metadata prepended
        assert len(whole) == 3 and all(TEXTS[name] in text for name, text in zip(sorted(TEXTS), sorted(whole)))
        windows = once_each(model) - Counter(map(tuple, model.embedder.tokenize(TEXTS.values())))
        assert Counter(reached) == files + windows and sum(windows.values()) == passages
        reached.clear()
        assert run_script(folder, store, model) == 3 and Counter(reached) == files  # a rerun: every file again
        assert snapshot(store) == held


def test_marking_copies_the_nodes_and_keeps_a_real_embedding(tmp_path, tiny_folder, monkeypatch):
    given = [Document(id_="a", text="gulls"), TextNode(id_="b", text="tides", embedding=[0.6, 0.8])]
    marked = EmbedInStore()(given)
    assert [n.embedding for n in marked] == [[], [0.6, 0.8]] and marked[1] is given[1]  # a real embedding is kept
    assert given[0].embedding is None and isinstance(marked[0], Document) and marked[0].hash == given[0].hash
    folder = tmp_path / "docs"
    for name, text in TEXTS.items():
        write(folder / name, text)
    documents = SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()
    model, _, _ = counting_model(tiny_folder, monkeypatch)
    with RecembVectorStore("c", path=tmp_path / "s", embed_model=model, **PASSAGES) as store:
        docstore = SimpleDocumentStore()
        IngestionPipeline(transformations=[EmbedInStore()], vector_store=store, docstore=docstore,
                          docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE).run(documents=documents)
        # the caller's documents, and the docstore's, carry no mark: handed on elsewhere, they get embedded there
        assert all(d.embedding is None for d in documents)
        assert all(d.embedding is None for d in docstore.docs.values()) and len(docstore.docs) == 3


def test_nodes_from_the_ingestion_cache_are_still_the_stores_to_embed(tmp_path, tiny_folder, monkeypatch):
    folder = tmp_path / "docs"
    for name, text in TEXTS.items():
        write(folder / name, text)
    model, reached, _ = counting_model(tiny_folder, monkeypatch)
    with RecembVectorStore("c", path=tmp_path / "s", embed_model=model, **PASSAGES) as store:
        pipeline = IngestionPipeline(transformations=[EmbedInStore()], vector_store=store)  # no docstore: all again
        pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        held, first = snapshot(store), Counter(reached)
        reached.clear()
        again = pipeline.run(documents=SimpleDirectoryReader(str(folder), filename_as_id=True).load_data())
        # the same inputs: LlamaIndex's cache gives its copies back (plain Documents, the empty embedding kept)
        assert {type(n) for n in again} == {Document} and all(n.embedding == [] for n in again)
        assert reached == [] and snapshot(store) == held and first == once_each(model)


def test_marked_nodes_need_a_store_that_embeds(tmp_path, tiny_folder):
    nodes = EmbedInStore()([TextNode(id_="a", text="gulls"), TextNode(id_="b", text="tides", embedding=[0.6, 0.8])])
    with RecembVectorStore("c", path=tmp_path / "s") as store:  # no embed model: nothing to embed with
        with pytest.raises(ValueError, match="no embed_model.*nothing was written"):
            store.add(nodes)
        assert not store.client.collection_exists("c")


def test_another_vector_store_is_told_why_a_marked_node_has_no_vector():
    documents = [Document(id_="a", text="gulls"), Document(id_="b", text="tides")]
    why = "'a' was marked by EmbedInStore for a RecembVectorStore to embed.*make a RecembVectorStore the pipeline's"
    simple = SimpleVectorStore()
    with pytest.raises(ValueError, match=why):
        IngestionPipeline(transformations=[EmbedInStore()], vector_store=simple).run(documents=documents)
    assert simple.data.embedding_dict == {}  # refused at its first node, before anything was kept
    with pytest.raises(ValueError, match=why):  # a splitter's nodes alike
        simple.add(EmbedInStore()([TextNode(id_="a", text="gulls")]))
    qdrant = pytest.importorskip("llama_index.vector_stores.qdrant")
    from qdrant_client import QdrantClient

    with closing(QdrantClient(":memory:")) as client:
        with pytest.raises(ValueError, match=why):
            IngestionPipeline(transformations=[EmbedInStore()], vector_store=qdrant.QdrantVectorStore(
                "c", client=client)).run(documents=documents)
        assert not client.collection_exists("c")
