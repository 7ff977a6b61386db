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
from recemb_integrations.qdrant.points import FRAMEWORK_ROOT, owned_ids  # noqa: E402
from recemb_integrations.sources import folder_sources  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
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


def test_the_framework_owner_is_apart_from_every_folder_root():
    seen = {"a.md": "", "w/x.md": "w/", "f1": FRAMEWORK_ROOT, "framework/y": FRAMEWORK_ROOT, "old": None,
            "legacy-note": "", "frameworkz": None}
    assert owned_ids(seen, "") == {"a.md", "old", "legacy-note", "frameworkz"}
    assert owned_ids(seen, "w/") == {"w/x.md"}
    assert owned_ids(seen, "framework/") == set()  # a folder prefixed "framework" is a folder root like any other
    # The framework's own, and what it wrote before it had an owner (unprefixed or unstamped, not from a file).
    assert owned_ids(seen, FRAMEWORK_ROOT, from_files={"a.md", "old"}) == {"f1", "framework/y", "legacy-note",
                                                                           "frameworkz"}


def test_an_api_sync_never_deletes_or_overwrites_framework_documents(tmp_path, tiny_embedder, store_kind):
    store_path, docs = tmp_path / "store", folder(tmp_path)
    with FrameworkCollection("c", lambda: tiny_embedder, path=store_path, store_kind=store_kind) as framework:
        framework.add([Document(i, t) for i, t in ADDED.items() if i != "a.txt"])
    with open_store(path=store_path, kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder)
        # The unprefixed root through the API: the framework's two documents are neither deleted nor counted
        assert sync.sync([Document("x", "a document of the API's own")]).deleted == 0
        with pytest.raises(MassDeletionError, match="delete 1 of the 1 documents it manages"):
            sync.sync(folder_sources([str(docs)]).sources)
        # even with the guard off, a folder's sync deletes only its own root's
        report = sync.sync(folder_sources([str(docs)]).sources, allow_mass_delete=True)
        assert report.added == 3 and report.deleted == 1
        found = folder_sources([str(docs)], id_prefix="docs")
        assert QdrantSync(store, "c", tiny_embedder).sync(found.sources, scope=found.scope).added == 3
        # A framework's document of a folder's id fails, and the folder's version is kept.
        with pytest.raises(AddError, match="a.txt: this id is stored by the sync without an id prefix"):
            FrameworkCollection("c", lambda: tiny_embedder, client=store).add([Document("a.txt", ADDED["a.txt"])])
    documents = held(store_path, store_kind)
    assert {i: r for i, (_, r) in documents.items()} == {
        "notes/owl": FRAMEWORK_ROOT, "bread": FRAMEWORK_ROOT, "a.txt": "", "b.txt": "", "c.txt": "",
        "docs/a.txt": "docs/", "docs/b.txt": "docs/", "docs/c.txt": "docs/"}
    assert documents["a.txt"][0] == content_hash(FILES["a.txt"])


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

    from recemb_integrations.llama_index import RecEmbEmbedding, RecembVectorStore

    store_path, docs = tmp_path / "store", folder(tmp_path)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *opts])[0] == 0
    model = RecEmbEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
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


def test_framework_documents_written_before_they_had_an_owner_are_taken_over(tmp_path, tiny_folder, tiny_embedder,
                                                                            capsys, store_kind):
    """A collection a framework store wrote before owners were recorded holds its documents under the unprefixed
    root: the framework store still updates and deletes them (and stamps them its own); a folder's documents (they
    record their file) it never takes."""
    store_path, docs = tmp_path / "store", folder(tmp_path, {"f.txt": "a folder's file"})
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *opts])[0] == 0
    with open_store(path=store_path, kind=store_kind) as store:  # what the framework stores wrote until now
        QdrantSync(store, "c", tiny_embedder).sync([Document(i, t) for i, t in ADDED.items() if i != "a.txt"]
                                                   + [Document("gull", "gulls follow the boats")], delete_missing=False)
    assert {i: r for i, (_, r) in held(store_path, store_kind).items()} == {"f.txt": "", "bread": "",
                                                                           "notes/owl": "", "gull": ""}
    with FrameworkCollection("c", lambda: tiny_embedder, path=store_path, store_kind=store_kind) as framework:
        assert framework.document_ids(owned=True) == ["bread", "gull", "notes/owl"]
        assert framework.delete(["gull"]) == 1  # deleted as it was, with its passages
        assert "gull" not in held(store_path, store_kind, opened=framework.store)
        report = framework.add([Document("bread", ADDED["bread"]), Document("notes/owl", "owls changed")])
        assert report.unchanged == 1 and report.updated == 1
        assert {i: r for i, (_, r) in held(store_path, store_kind, opened=framework.store).items()} == {
            "f.txt": "", "bread": FRAMEWORK_ROOT, "notes/owl": FRAMEWORK_ROOT}
        with pytest.raises(NotOwnedError):
            framework.delete(["f.txt"])
        assert framework.delete(["bread", "notes/owl"]) == 2
    assert sorted(held(store_path, store_kind)) == ["f.txt"]
    code, report, _ = run(capsys, ["sync", str(docs), *opts])  # the folder's own, as before
    assert code == 0 and report["unchanged"] == 1
