"""No writer reaches another's points (issue #61): an id can never spell another document's point key, a document
whose points were broken by anything but its own sync is noticed and repaired, and bad ids and metadata are refused
by name at every entrance (the Python API, LangChain, LlamaIndex), the good documents of the same call written. Each
on both embedded stores, the store compared point by point with a clean run's."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("langchain_core")

from langchain_core.documents import Document as LCDocument  # noqa: E402

from recemb_integrations.framework_collection import AddError  # noqa: E402
from recemb_integrations.langchain import RecembVectorStore  # noqa: E402
from recemb_integrations.qdrant import Document, NothingReadableError, QdrantSync, content_hash  # noqa: E402
from recemb_integrations.qdrant.points import id_problem, point_id  # noqa: E402
from recemb_integrations.stores import StoredPoint, open_store  # noqa: E402
from tests.integrations.cli_cases import one_line_error, run, write  # noqa: E402
from tests.integrations.test_langchain_store import tiny_embeddings  # noqa: E402

LONG = " ".join(f"Line {i} of the harbour log: the boats came in at dawn with herring and cod." for i in range(30))
PASSAGES = ["--passage-tokens", "16", "--passage-overlap", "4", "--passages-above", "32"]


def points(store_path, kind, collection="c") -> dict[str, tuple]:
    """Point id -> (document id, kind, passage, the hash it carries, root): what a collection holds, vectors aside."""
    with open_store(path=store_path, kind=kind) as s:
        found, _ = s.scroll(collection, limit=100_000, with_payload=True)
    return {p.id: (p.payload["document_id"], p.payload["kind"], p.payload.get("passage"),
                   p.payload.get("content_hash") or p.payload.get("document_hash"), p.payload.get("root"))
            for p in found}


def folder_with_a_long_file(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "fold.txt", LONG)
    write(docs / "short.txt", "a short note about gulls")
    return docs


# ---------------------------------------------------------------------- point keys
def test_no_id_spells_another_documents_point_key():
    assert id_problem("fold.txt\x00passage\x000") is not None and "NUL" in id_problem("fold.txt\x00passage\x000")
    # every id id_problem accepts has a document key without NUL and passage keys with exactly two, the id first:
    # so a document's key and a passage's key of two accepted ids never meet
    ids = ["fold.txt", "fold.txt passage 0", "a\npassage\n0", "é", "a/b", " x ", "\x1b[31m"]
    assert all(id_problem(i) is None for i in ids)
    keys = {point_id(i) for i in ids} | {point_id(i, n) for i in ids for n in range(3)}
    assert len(keys) == len(ids) * 4
    for bad, why in (("", "empty"), ("   ", "blank"), ("s\udc80", "lone surrogate"), (None, "string"), (3, "string")):
        assert why in id_problem(bad)


def test_an_id_made_to_spell_a_passage_key_is_refused_everywhere_and_the_passage_kept(tmp_path, tiny_folder,
                                                                                     tiny_embedder, capsys,
                                                                                     store_kind):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import TextNode

    from recemb_integrations.llama_index import RecembEmbedding
    from recemb_integrations.llama_index import RecembVectorStore as LIStore

    store_path, docs = tmp_path / "store", folder_with_a_long_file(tmp_path)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *PASSAGES, *opts])[0] == 0
    clean = points(store_path, store_kind)
    assert point_id("fold.txt", 0) in clean and clean[point_id("fold.txt", 0)][1] == "passage"
    forged = "fold.txt\x00passage\x000"
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=store_path, store_kind=store_kind) as lc:
        with pytest.raises(AddError, match="NUL character") as refused:
            lc.add_documents([LCDocument("overwrite passage 0", id=forged), LCDocument("a fine note", id="ok")])
        assert refused.value.written == 1  # the good one of the same call is written
        lc.delete(["ok"])
        with pytest.raises(AddError, match="NUL character"):
            lc.add_texts(["again"], ids=[forged])
    model = RecembEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
    with LIStore("c", path=store_path, store_kind=store_kind, embed_model=model) as li:
        with pytest.raises(AddError, match="NUL character"):
            li.add([TextNode(id_=forged, text="overwrite passage 0")])
    with open_store(path=store_path, kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder)
        with pytest.raises(NothingReadableError, match="NUL character"):  # nothing else given: nothing done
            sync.sync([Document(forged, "overwrite passage 0")])
        report = sync.sync([Document(forged, "overwrite passage 0")], delete_missing=False)
        assert report.added == 0 and "NUL character" in report.failed[0][1]
    assert points(store_path, store_kind) == clean
    code, report, _ = run(capsys, ["sync", str(docs), *opts])
    assert code == 0 and report["unchanged"] == 2 and report["updated"] == 0


@pytest.mark.parametrize("damage", ["overwritten", "deleted"])
def test_a_sync_notices_and_repairs_a_document_whose_points_are_incomplete(tmp_path, tiny_folder, capsys, store_kind,
                                                                          damage):
    """What an earlier recemb let a forged id do (overwrite a folder's passage), or a point deleted by hand: the
    next sync of the folder re-embeds that document, and the collection is exactly a clean run's again."""
    store_path, docs = tmp_path / "store", folder_with_a_long_file(tmp_path)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *PASSAGES, *opts])[0] == 0
    clean = points(store_path, store_kind)
    victim = point_id("fold.txt", 1)
    with open_store(path=store_path, kind=store_kind) as store:
        if damage == "overwritten":  # as a forged id's document point would have
            [old] = store.retrieve("c", [victim], with_vectors=True)
            store.upsert("c", [StoredPoint(victim, {"document_id": "fold.txt\x00passage\x001", "kind": "document",
                                                    "content_hash": content_hash("x"), "metadata": {},
                                                    "passages": 0, "root": "framework"}, old.vector)])
        else:
            from recemb_integrations.stores import filters

            store.delete("c", filters.Filter(must=(filters.HasIdCondition(has_id=(victim,)),)))
    assert points(store_path, store_kind) != clean
    code, report, err = run(capsys, ["sync", str(docs), *opts])
    assert code == 0 and report["updated"] == 1 and report["unchanged"] == 1, err
    assert [w[0] for w in report["warnings"]] == ["fold.txt"] and "passages were missing" in report["warnings"][0][1]
    assert points(store_path, store_kind) == clean
    code, report, _ = run(capsys, ["sync", str(docs), *opts])  # and nothing more to do
    assert code == 0 and report["unchanged"] == 2 and report["updated"] == 0 and report["warnings"] == []


def test_an_api_document_is_repaired_by_its_own_writer(tmp_path, tiny_embedder, store_kind):
    from recemb_integrations.stores import filters

    def snapshot(store):
        found, _ = store.scroll("c", limit=1000, with_payload=True)
        return {p.id: (p.payload["document_id"], p.payload.get("passage"), p.payload.get("content_hash")
                       or p.payload.get("document_hash"), p.payload.get("root")) for p in found}

    docs = [Document("log", LONG), Document("note", "gulls")]
    with open_store(path=tmp_path / "store", kind=store_kind) as store:
        QdrantSync(store, "c", tiny_embedder, passage_tokens=16, passage_overlap=4, passages_above=32).sync(docs)
        clean = snapshot(store)
        assert point_id("log", 0) in clean
        store.delete("c", filters.Filter(must=(filters.HasIdCondition(has_id=(point_id("log", 0),)),)))
        report = QdrantSync(store, "c", tiny_embedder).sync(docs)
        assert report.updated == 1 and report.unchanged == 1 and [w[0] for w in report.warnings] == ["log"]
        assert snapshot(store) == clean


# ---------------------------------------------------------------------- bad ids and metadata, by name
BAD_METADATA = [({"score": math.nan}, "metadata['score'] is nan"),
                ({"w": [1.0, math.inf]}, "metadata['w'][1] is inf"),
                ({"n": 2 ** 64}, "metadata['n'] is 18446744073709551616, beyond the 64-bit integers"),
                ({"t": "caf\udce9"}, "metadata['t'] holds a lone surrogate"),
                ({"k\udcff": 1}, "holds a lone surrogate")]


@pytest.mark.parametrize("metadata,why", BAD_METADATA)
def test_metadata_a_store_cannot_hold_exactly_is_refused_naming_the_document_and_key(tmp_path, tiny_embedder,
                                                                                    metadata, why):
    with open_store(path=tmp_path / "store", kind="edge") as store:
        report = QdrantSync(store, "c", tiny_embedder).sync([Document("bad", "text", metadata),
                                                             Document("good", "text", {"n": 2 ** 63 - 1})])
        assert report.added == 1 and report.failed == [("bad", report.failed[0][1])] and why in report.failed[0][1]
        [good] = QdrantSync(store, "c", tiny_embedder).get_documents(["good"])
        assert good.metadata == {"n": 2 ** 63 - 1}  # the largest integer comes back exact
    with RecembVectorStore(tiny_embeddings(), "lc", path=tmp_path / "lc") as lc:
        with pytest.raises(AddError, match=r"bad: .*" + why.split("[")[0]) as refused:
            lc.add_documents([LCDocument("text", metadata=metadata, id="bad"), LCDocument("fine", id="good")])
        assert refused.value.written == 1 and [d for d, _ in refused.value.failed] == ["bad"]
        assert [d.id for d in lc.get_by_ids(["bad", "good"])] == ["good"]


def test_bad_ids_are_refused_by_name_at_every_entrance(tmp_path, tiny_folder, tiny_embedder):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import TextNode

    from recemb_integrations.llama_index import RecembEmbedding
    from recemb_integrations.llama_index import RecembVectorStore as LIStore

    cases = [("", "cannot be empty"), ("   ", "cannot be blank"), ("s\udc80", "lone surrogate")]
    with open_store(path=tmp_path / "store", kind="edge") as store:
        sync = QdrantSync(store, "c", tiny_embedder)
        report = sync.sync([Document(i, "text") for i, _ in cases] + [Document("fine", "text")])
        assert report.added == 1 and len(report.failed) == len(cases)
        for (label, message), (_, why) in zip(report.failed, cases):
            assert label.startswith("#") and why in message  # the item by its place: its id cannot be shown
        assert sync.document_ids() == ["fine"]
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=tmp_path / "lc") as lc:
        for bad, why in cases:
            with pytest.raises(AddError, match=why):
                lc.add_documents([LCDocument("text", id=bad)])
            with pytest.raises(AddError, match=why):
                lc.add_texts(["text"], ids=[bad])
        assert lc.add_documents([LCDocument("no id given")]) == [lc.add_texts(["no id given"])[0]]  # made, stable
        with pytest.raises(TypeError, match="needs the query's vector"):
            lc.similarity_search_by_vector(None)
    model = RecembEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "backend": "torch"})
    with LIStore("c", path=tmp_path / "li", embed_model=model) as li:
        for bad, why in cases[1:]:  # (LlamaIndex makes an id for an empty one itself)
            with pytest.raises(AddError, match=why):
                li.add([TextNode(id_=bad, text="text")])
        li.add([TextNode(id_="fine", text="text")])
        from llama_index.core.vector_stores.types import VectorStoreQuery

        with pytest.raises(ValueError, match="needs a query's text or its vector"):
            li.query(VectorStoreQuery(query_str="", similarity_top_k=2))


def test_an_api_id_that_looks_like_an_absolute_path_does_not_block_a_folder(tmp_path, tiny_folder, tiny_embedder,
                                                                           capsys, store_kind):
    store_path, docs = tmp_path / "store", folder_with_a_long_file(tmp_path)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    with open_store(path=store_path, kind=store_kind) as store:
        QdrantSync(store, "c", tiny_embedder).sync([Document("/srv/notes/today.md", "an API note")])
    code, report, err = run(capsys, ["sync", str(docs), *opts])
    assert code == 0 and report["added"] == 2 and report["deleted"] == 0 and "absolute" not in err, err


# ---------------------------------------------------------------------- the command's refusals: one readable line
REPRS = ("SyncReport(", "Error(", "(\"", "', SyncReport", "<recemb", "object at 0x", "allow_mass_delete=",
         "delete_missing=", "scope=)")


def test_every_refusal_of_the_command_is_one_readable_line_in_its_flags(tmp_path, tiny_folder, tiny_embedder,
                                                                       capsys, store_kind):
    store_path, docs = tmp_path / "store", folder_with_a_long_file(tmp_path)
    write(docs / "third.txt", "tides follow the moon")
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(store_path), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(docs), *opts])[0] == 0
    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=store_path, store_kind=store_kind) as lc:
        lc.add_documents([LCDocument("a framework's note", id="note")])
    other = [*opts[:-4], "--collection", "d", "--store", store_kind]  # a folder's collection alone
    assert run(capsys, ["sync", str(docs), *other])[0] == 0
    (docs / "bad.txt").write_bytes(b"\xff\xfe not utf-8")
    cases = [  # (argv, what the line must say)
        (["sync", str(docs), "--rebuild", *opts], "were written through a framework's vector store"),
        (["sync", str(docs), "--rebuild", *other], "was not replaced, so their current versions are kept"),
        (["sync", str(tmp_path / "docs2"), *opts], "no such file or folder"),
        (["sync", str(docs), "--no-passages", *opts], "drop --no-passages"),
        (["search", "tides", "--collection", "nope", *opts[:4], "--store", store_kind], "does not exist"),
    ]
    for argv, says in cases:
        code, _, err = run(capsys, argv, json_out=False)
        line = one_line_error(err)
        assert code == 2 and says in line and line.startswith(f"recemb {argv[0]}: error: "), (argv, line)
        assert not any(r in line for r in REPRS), (argv, line)
    (docs / "bad.txt").unlink()
    for name in ("short.txt", "third.txt"):  # two of three: the guard, in the command's flags
        (docs / name).unlink()
    code, _, err = run(capsys, ["sync", str(docs), *opts], json_out=False)
    line = one_line_error(err)
    assert code == 2 and "would delete 2 of the 3 documents it manages" in line and "--allow-mass-delete" in line
    assert "--keep-missing" in line and "--id-prefix" in line and not any(r in line for r in REPRS), line


def test_a_framework_store_repairs_its_own_incomplete_document_when_it_adds_it_again(tmp_path, tiny_folder,
                                                                                     store_kind):
    from recemb_integrations.stores import filters

    with RecembVectorStore(tiny_embeddings(tiny_folder), "c", path=tmp_path / "store", store_kind=store_kind,
                           passage_tokens=16, passage_overlap=4, passages_above=32) as lc:
        docs = [LCDocument(LONG, id="log"), LCDocument("gulls", id="note")]
        lc.add_documents(docs)
        store = lc.collection.store
        found, _ = store.scroll("c", limit=1000, with_payload=True)
        clean = {p.id: p.payload for p in found}
        store.delete("c", filters.Filter(must=(filters.HasIdCondition(has_id=(point_id("log", 2),)),)))
        lc.add_documents(docs)  # unchanged texts: only the broken one is embedded again
        found, _ = store.scroll("c", limit=1000, with_payload=True)
        assert {p.id: p.payload for p in found} == clean
