"""One owner for what the framework stores write: documents added through LangChain or LlamaIndex belong to the
framework owner, beside the folder roots. No folder sync (the command's or the API's, with or without an id
prefix, a rebuild included) deletes or overwrites them, and no framework delete touches a folder's documents. Each
on both embedded stores; the store is compared with what was written after every step."""

from __future__ import annotations

import pytest

pytest.importorskip("qdrant_client")

from recemb_integrations.framework_collection import AddError, FrameworkCollection  # noqa: E402
from recemb_integrations.qdrant import (  # noqa: E402
    Document,
    MassDeletionError,
    NotOwnedError,
    QdrantSync,
    content_hash,
)
from recemb_integrations.qdrant.points import API_ROOT, FRAMEWORK_ROOT, claimable_ids, owned_ids  # noqa: E402
from recemb_integrations.sources import folder_sources  # noqa: E402
from recemb_integrations.stores import filters, open_store  # noqa: E402
from tests.integrations.cli_cases import run, write  # noqa: E402

FILES = {"a.txt": "the harbour keeps its boats in winter", "b.txt": "tides follow the moon and the sun",
         "c.txt": "bread needs time to rise in a warm kitchen"}
ADDED = {"notes/owl": "owls hunt at night over the fields", "a.txt": "a framework's note that shares a file's name",
         "bread": "a loaf rises overnight"}


def held(store_path, kind, collection="c", opened=None) -> dict[str, tuple[str, str | None]]:
    """Document id -> (content hash, root) of every document point (``opened``: the store, where it is open)."""
    if opened is not None:
        points, _ = opened.scroll(collection, limit=10_000, with_payload=True)
    else:
        with open_store(path=store_path, kind=kind) as s:
            points, _ = s.scroll(collection, limit=10_000, with_payload=True)
    return {p.payload["document_id"]: (p.payload["content_hash"], p.payload.get("root")) for p in points
            if p.payload["kind"] == "document"}


def folder(tmp_path, files=FILES):
    root = tmp_path / "docs"
    for name, text in files.items():
        write(root / name, text)
    return root


def test_each_writer_owns_what_it_wrote_and_nobody_guesses():
    seen = {"a.md": "", "w/x.md": "w/", "f1": FRAMEWORK_ROOT, "framework/y": FRAMEWORK_ROOT, "api-1": API_ROOT,
            "old": None, "legacy-note": "", "frameworkz": None}
    files = {"a.md", "old"}
    # The unprefixed folder root: its files, stamped or not (an earlier recemb's); never a document that records no
    # file without its stamp (the API's or a framework's, written before they had owners of their own).
    assert owned_ids(seen, "", from_files=files) == {"a.md", "old"}
    assert owned_ids(seen, "w/", from_files=files) == {"w/x.md"}
    assert owned_ids(seen, "framework/") == set()  # a folder prefixed "framework" is a folder root like any other
    assert owned_ids(seen, FRAMEWORK_ROOT, from_files=files) == {"f1", "framework/y"}
    assert owned_ids(seen, API_ROOT, from_files=files) == {"api-1"}
    # what no writer deletes, and any takes over by writing it
    assert claimable_ids(seen, from_files=files) == {"legacy-note", "frameworkz"}


def test_the_api_the_folders_and_the_framework_never_reach_each_other(tmp_path, tiny_folder, tiny_embedder,
                                                                      store_kind):
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    from langchain_core.documents import Document as LCDocument

    from recemb_integrations.langchain import RecembVectorStore as LCStore
    from recemb_integrations.llama_index import RecembEmbedding
    from recemb_integrations.llama_index import RecembVectorStore as LIStore
    from tests.integrations.test_langchain_store import tiny_embeddings

    store_path, docs = tmp_path / "store", folder(tmp_path)
    with FrameworkCollection("c", lambda: tiny_embedder, path=store_path, store_kind=store_kind) as framework:
        framework.add([Document(i, t) for i, t in ADDED.items() if i != "a.txt"])
    with open_store(path=store_path, kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder)
        # The Python API's own owner: the framework's two documents are neither deleted nor counted
        assert sync.sync([Document("api-1", "a document of the API's own")]).deleted == 0
        # a folder's sync neither counts nor deletes the API's document
        report = sync.sync(folder_sources([str(docs)]).sources)
        assert report.added == 3 and report.deleted == 0
        found = folder_sources([str(docs)], id_prefix="docs")
        assert QdrantSync(store, "c", tiny_embedder).sync(found.sources, scope=found.scope).added == 3
        # The API's next sync manages its own documents alone: its one document would go (the guard), and with the
        # guard off exactly that one goes
        with pytest.raises(MassDeletionError, match="delete 1 of the 1 documents it manages.*allow_mass_delete=True"):
            sync.sync([Document("api-2", "another")])
        assert sync.sync([Document("api-1", "a document of the API's own"), Document("api-2", "another")]).added == 1
        # A framework's document of a folder's id fails, and the folder's version is kept; so does one of the API's.
        with pytest.raises(AddError, match="a.txt: this id is stored by the folder sync without an id prefix"):
            FrameworkCollection("c", lambda: tiny_embedder, client=store).add([Document("a.txt", ADDED["a.txt"])])
        with pytest.raises(AddError, match="api-1: this id is stored by the Python API"):
            FrameworkCollection("c", lambda: tiny_embedder, client=store).add([Document("api-1", "taken?")])
        # and the API's sync of a framework's id or a folder's id fails the same way
        report = sync.sync([Document("api-1", "a document of the API's own"), Document("api-2", "another"),
                            Document("bread", "the API's bread"), Document("b.txt", "the API's b")])
        assert sorted(d for d, _ in report.failed) == ["b.txt", "bread"] and report.deleted == 0
    # LangChain's delete and LlamaIndex's clear never reach the API's documents
    with LCStore(tiny_embeddings(tiny_folder), "c", path=store_path, store_kind=store_kind) as lc:
        with pytest.raises(NotOwnedError, match="the Python API"):
            lc.delete(["api-1"])
        lc.add_documents([LCDocument("a framework note", id="lc-1")])
    model = RecembEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
    with LIStore("c", path=store_path, store_kind=store_kind, embed_model=model) as li:
        li.clear()
    documents = held(store_path, store_kind)
    assert {i: r for i, (_, r) in documents.items()} == {
        "a.txt": "", "b.txt": "", "c.txt": "", "api-1": API_ROOT, "api-2": API_ROOT,
        "docs/a.txt": "docs/", "docs/b.txt": "docs/", "docs/c.txt": "docs/"}
    assert documents["a.txt"][0] == content_hash(FILES["a.txt"])
    assert documents["api-1"][0] == content_hash("a document of the API's own")


def test_the_command_never_deletes_framework_documents(tmp_path, tiny_folder, tiny_embedder, capsys, store_kind):
    store_path, docs = tmp_path / "store", folder(tmp_path)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *opts])[0] == 0
    with FrameworkCollection("c", lambda: tiny_embedder, path=store_path, store_kind=store_kind) as framework:
        report = framework.add([Document(i, t) for i, t in ADDED.items() if i != "a.txt"])
        assert report.added == 2
    for name in ("b.txt", "c.txt"):  # two of the folder's three: the guard counts the folder's documents only
        (docs / name).unlink()
    code, _, err = run(capsys, ["sync", str(docs), *opts])
    assert code == 2 and "would delete 2 of the 3 documents it manages" in err
    code, report, _ = run(capsys, ["sync", str(docs), "--allow-mass-delete", *opts])
    assert code == 0 and report["deleted"] == 2
    assert sorted(held(store_path, store_kind)) == ["a.txt", "bread", "notes/owl"]
    # A rebuild from the folder would drop them (they have no file among its paths): refused, nothing touched.
    before = held(store_path, store_kind)
    code, _, err = run(capsys, ["sync", str(docs), "--rebuild", "--allow-mass-delete", *opts])
    assert code == 2 and "2 documents of collection 'c' ('bread', ...) were written through a framework" in err
    assert held(store_path, store_kind) == before


def test_a_framework_delete_never_touches_a_folders_documents(tmp_path, tiny_folder, tiny_embedder, capsys,
                                                              store_kind):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    from recemb_integrations.llama_index import RecembEmbedding, RecembVectorStore

    store_path, docs = tmp_path / "store", folder(tmp_path)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *opts])[0] == 0
    model = RecembEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
    with RecembVectorStore("c", path=store_path, store_kind=store_kind, embed_model=model) as store:
        nodes = [TextNode(id_=i, text=t, metadata={"file_name": "a.txt"}) for i, t in ADDED.items() if i != "a.txt"]
        for node in nodes:
            node.embedding = model.get_text_embedding(node.text)
        store.add(nodes)
        folder_docs = {n: held(store_path, store_kind, opened=store.client)[n] for n in FILES}
        store.delete("a.txt")  # LlamaIndex's "the nodes of this source document": a folder's is none of them
        with pytest.raises(NotOwnedError, match="nothing was deleted"):
            store.delete_nodes(["bread", "b.txt"])  # half-valid: nothing deleted
        assert sorted(held(store_path, store_kind, opened=store.client)) == sorted([*FILES, "bread", "notes/owl"])
        # the filter matches a folder's document too (its file_name): only the framework's go
        store.delete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="file_name", value="a.txt",
                                                                           operator=FilterOperator.EQ)]))
        assert sorted(held(store_path, store_kind, opened=store.client)) == sorted(FILES)
        store.add(nodes)
        store.clear()
        assert held(store_path, store_kind, opened=store.client) == folder_docs  # the folder's, as they were


def test_documents_written_before_their_writer_was_recorded_are_taken_over_by_writing_only(
        tmp_path, tiny_folder, tiny_embedder, capsys, store_kind):
    """A collection an earlier recemb wrote through a framework store or the Python API holds those documents under
    the unprefixed root, with no file: nobody can tell which writer it was, so no delete takes them (a framework's
    delete refuses them by name, a folder's sync neither counts nor deletes them), and the writer that writes one
    again makes it its own."""
    store_path, docs = tmp_path / "store", folder(tmp_path, {"f.txt": "a folder's file"})
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *opts])[0] == 0
    with open_store(path=store_path, kind=store_kind) as store:  # what the framework stores and the API wrote
        QdrantSync(store, "c", tiny_embedder).sync([Document(i, t) for i, t in ADDED.items() if i != "a.txt"]
                                                   + [Document("gull", "gulls follow the boats")], delete_missing=False)
        store.set_payload("c", {"root": ""}, filter=filters.Filter(must=(filters.FieldCondition(
            key="document_id", match=filters.MatchAny(any=("bread", "notes/owl", "gull"))),)))
    assert {i: r for i, (_, r) in held(store_path, store_kind).items()} == {"f.txt": "", "bread": "",
                                                                           "notes/owl": "", "gull": ""}
    with FrameworkCollection("c", lambda: tiny_embedder, path=store_path, store_kind=store_kind) as framework:
        assert framework.document_ids(owned=True) == []
        with pytest.raises(NotOwnedError, match="written before recemb recorded who writes.*Add them again"):
            framework.delete(["gull"])
        report = framework.add([Document("bread", ADDED["bread"]), Document("notes/owl", "owls changed")])
        assert report.unchanged == 1 and report.updated == 1
        assert {i: r for i, (_, r) in held(store_path, store_kind, opened=framework.store).items()} == {
            "f.txt": "", "bread": FRAMEWORK_ROOT, "notes/owl": FRAMEWORK_ROOT, "gull": ""}
        with pytest.raises(NotOwnedError):
            framework.delete(["f.txt"])
        assert framework.delete(["bread", "notes/owl"]) == 2
    (docs / "g.txt").write_text("another file")
    code, report, _ = run(capsys, ["sync", str(docs), *opts])  # the folder's own, as before; "gull" is not its
    assert code == 0 and report["unchanged"] == 1 and report["added"] == 1 and report["deleted"] == 0
    with open_store(path=store_path, kind=store_kind) as store:  # the API writes it again: its own from now on
        report = QdrantSync(store, "c", tiny_embedder).sync([Document("gull", "gulls follow the boats")])
        assert report.unchanged == 1 and report.deleted == 0
    assert {i: r for i, (_, r) in held(store_path, store_kind).items()} == {"f.txt": "", "g.txt": "",
                                                                           "gull": API_ROOT}
