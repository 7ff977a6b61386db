"""The Store interface on each implementation, and what the Qdrant Edge adapter works around."""

import json
import os
import warnings

import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import QdrantClient  # noqa: E402
from qdrant_client import models as qm  # noqa: E402

from recemb_integrations.sparse import SparseVector  # noqa: E402
from recemb_integrations.stores import (  # noqa: E402
    LAYOUT_RAM,
    SearchRequest,
    StoredPoint,
    StoreError,
    detect_store_kind,
    open_store,
)
from recemb_integrations.stores.client import ClientStore  # noqa: E402

DIM = 4


def make(kind, folder):
    if kind == "edge":
        pytest.importorskip("qdrant_edge")
        from recemb_integrations.stores.edge import EdgeStore

        return EdgeStore(folder)
    return ClientStore(QdrantClient(":memory:"))


@pytest.fixture(params=["local", "edge"])
def store(request, tmp_path):
    with make(request.param, tmp_path / "store") as s:
        yield s


def point(i, **payload):
    dense = [1.0, i / 10, (i % 3) / 3, 0.5]
    sparse = SparseVector((i % 5, 7), (1.0 + i / 100, 0.5 + i / 1000)) if i % 4 else None  # some without terms
    vector = {"dense": dense, **({"bm25": sparse} if sparse else {})}
    return StoredPoint(f"00000000-0000-0000-0000-{i:012d}", {"document_id": f"d{i // 2}", "i": i, **payload}, vector)


def where(key, value):
    return qm.Filter(must=[qm.FieldCondition(key=key, match=qm.MatchValue(value=value))])


def test_payloads_round_trip_with_booleans_and_filters_match_them(store):
    store.create_collection("c", DIM, True, {"recemb": {"x": 1}})
    meta = {"flag": True, "off": False, "n": 1, "zero": 0, "tags": [True, "a", 2.5, None], "nested": {"ok": True},
            "text": "café"}
    store.upsert("c", [point(i, metadata=dict(meta, flag=i % 2 == 0, n=i % 2)) for i in range(10)])
    got = {p.payload["i"]: p.payload for p in store.scroll("c", limit=100)[0]}
    assert got[0]["metadata"] == dict(meta, flag=True, n=0) and got[1]["metadata"] == dict(meta, flag=False, n=1)
    # A boolean matches booleans only, an integer integers only (Edge alone would match True against 1).
    assert sorted(p.payload["i"] for p in store.scroll("c", 100, filter=where("metadata.flag", True))[0]) == \
        [0, 2, 4, 6, 8]
    assert store.count("c", where("metadata.n", 1)) == 5 and store.count("c", where("metadata.flag", False)) == 5
    assert store.count("c", where("metadata.tags", True)) == 10 and store.count("c", where("metadata.off", 1)) == 0
    store.set_payload("c", {"metadata": {"flag": False}}, ids=[point(0).id])
    assert store.retrieve("c", [point(0).id])[0].payload["metadata"] == {"flag": False}
    store.set_payload("c", {"seen": True}, filter=where("document_id", "d1"))
    assert sorted(p.payload["i"] for p in store.scroll("c", 100, filter=where("seen", True))[0]) == [2, 3]


def test_filters_translate_for_every_condition_recemb_uses(store):
    store.create_collection("c", DIM, True, {})
    store.upsert("c", [point(i, passage=i, kind="passage" if i % 2 else "document") for i in range(12)])
    any_of = qm.Filter(must=[qm.FieldCondition(key="document_id", match=qm.MatchAny(any=["d1", "d4"]))])
    assert store.count("c", any_of) == 4
    stale = qm.Filter(should=[qm.Filter(must=[
        qm.FieldCondition(key="document_id", match=qm.MatchValue(value=f"d{d}")),
        qm.FieldCondition(key="passage", range=qm.Range(gte=2 * d + 1))]) for d in (1, 2)])
    assert store.count("c", stale) == 2
    store.delete("c", stale)
    assert store.count("c") == 10
    assert store.count("c", qm.Filter(must_not=[where("kind", "passage").must[0]])) == 6
    assert store.count("c", qm.Filter(must=[qm.HasIdCondition(has_id=[point(0).id, point(4).id])])) == 2


def _as_client(node):
    """The same filter built by hand in qdrant-client's models (an independent reference for ``filters.to_client``)."""
    kind = type(node).__name__
    if kind == "Filter":
        return qm.Filter(**{part: [_as_client(c) for c in getattr(node, part)]
                            for part in ("must", "should", "must_not") if getattr(node, part) is not None})
    if kind == "FieldCondition":
        if node.range is not None:
            return qm.FieldCondition(key=node.key, range=qm.Range(**{k: v for k, v in vars(node.range).items()
                                                                     if v is not None}))
        if type(node.match).__name__ == "MatchAny":
            return qm.FieldCondition(key=node.key, match=qm.MatchAny(any=list(node.match.any)))
        return qm.FieldCondition(key=node.key, match=qm.MatchValue(value=node.match.value))
    if kind == "IsEmptyCondition":
        return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=node.is_empty.key))
    if kind == "HasIdCondition":
        return qm.HasIdCondition(has_id=list(node.has_id))
    return node  # already qdrant-client's


def test_recembs_own_filter_values_select_what_qdrant_clients_models_select(store):
    """The filters the main job builds are plain values (no qdrant-client import on Qdrant Edge): every condition it
    uses, alone, nested and mixed with a user's qdrant-client filter, selects the same points on each store as the
    same filter written in qdrant-client's models; ``to_client`` gives exactly those models."""
    from recemb_integrations.stores import filters as F
    from recemb_integrations.stores.filters import to_client

    store.create_collection("c", DIM, True, {})
    store.upsert("c", [point(i, passage=i, kind="passage" if i % 2 else "document", **({"root": "r"} if i % 3 else {}))
                       for i in range(12)])

    def value(key, v):
        return F.FieldCondition(key=key, match=F.MatchValue(value=v))

    cases = [
        F.Filter(must=(value("kind", "passage"),)),
        F.Filter(must=(F.FieldCondition(key="document_id", match=F.MatchAny(any=("d1", "d4"))),)),
        F.Filter(should=tuple(F.Filter(must=(value("document_id", f"d{d}"), value("kind", "passage"),
                                             F.FieldCondition(key="passage", range=F.Range(gte=2 * d + 1))))
                              for d in (1, 2, 3))),
        F.Filter(must=(value("kind", "document"),),
                 must_not=(F.IsEmptyCondition(is_empty=F.PayloadField(key="root")),)),
        F.Filter(must=(value("document_id", "d2"), F.Filter(should=(
            value("root", "r"), F.IsEmptyCondition(is_empty=F.PayloadField(key="root")))))),
        F.Filter(must=(F.Filter(should=(value("root", "x"),
                                        F.IsEmptyCondition(is_empty=F.PayloadField(key="root")))),)),
        F.Filter(must=(F.HasIdCondition(has_id=(point(0).id, point(5).id, point(7).id)),)),
        F.Filter(must_not=(F.HasIdCondition(has_id=(point(1).id,)),), must=(value("kind", "passage"),)),
        F.Filter(must=(value("kind", "passage"), qm.Filter(must=[qm.FieldCondition(key="i", range=qm.Range(lt=6))]))),
    ]
    for case in cases:
        expected = _as_client(case)
        assert to_client(case) == expected
        ours = sorted(p.payload["i"] for p in store.scroll("c", 100, filter=case)[0])
        theirs = sorted(p.payload["i"] for p in store.scroll("c", 100, filter=expected)[0])
        assert ours == theirs and 0 < len(ours) < 12, case
        assert store.count("c", case) == len(ours)
    with pytest.raises((TypeError, ValueError), match="filter"):
        store.count("c", {"must": []})  # a dict is not a filter, whatever its keys


def test_scroll_pages_cover_every_point_once(store):
    store.create_collection("c", DIM, False, {})
    store.upsert("c", [StoredPoint(p.id, p.payload, {"dense": p.vector["dense"]}) for p in map(point, range(25))])
    seen, offset = [], None
    while True:
        page, offset = store.scroll("c", limit=7, offset=offset, with_payload=["i"])
        seen += [p.payload for p in page]
        if offset is None:
            break
    assert sorted(p["i"] for p in seen) == list(range(25)) and all(set(p) == {"i"} for p in seen)


def test_searches_and_groups_agree_between_stores(tmp_path):
    results = {}
    for kind in ("local", "edge"):
        with make(kind, tmp_path / kind) as store:
            # the engines' answers to the last bit: the ram layout, whose vectors are float32 in both (a compact
            # collection's float16 originals: test_store_layout.py)
            store.create_collection("c", DIM, True, {}, layout=LAYOUT_RAM)
            store.upsert("c", [point(i) for i in range(40)])
            dense = SearchRequest(limit=5, dense=[1.0, 0.3, 0.2, 0.5])
            sparse = SearchRequest(limit=5, sparse=SparseVector((2, 7), (1.0, 1.0)))
            hybrid = SearchRequest(limit=5, dense=dense.dense, sparse=sparse.sparse, fusion="rrf")
            results[kind] = [
                [(p.id, round(p.score, 5)) for p in store.query("c", r)] for r in (dense, sparse, hybrid)
            ] + [[[(p.id, round(p.score, 5)) for p in g] for g in store.query_groups("c", dense, "document_id", 2)]]
    for engine_local, engine_edge in zip(results["local"], results["edge"]):
        # the same scores in the same order; ids may differ only among equal scores
        assert [s for *_, s in _flat(engine_local)] == [s for *_, s in _flat(engine_edge)]
    assert len(results["edge"][3]) == 5 and all(len(g) <= 2 for g in results["edge"][3])


def _flat(items):
    for item in items:
        if isinstance(item, list):
            yield from item
        else:
            yield item


def test_collections_and_metadata(store):
    assert not store.collection_exists("c") and store.list_collections() == []
    store.create_collection("c", DIM, False, {"recemb": {"a": 1}})
    info = store.collection_info("c")
    assert (info.dense_size, info.sparse, info.metadata) == (DIM, False, {"recemb": {"a": 1}})
    store.update_metadata("c", {"recemb": {"a": 2}})
    assert store.collection_info("c").metadata == {"recemb": {"a": 2}}
    long_name = "é" * 200  # longer than a file name may be, in bytes
    store.create_collection(long_name, DIM, True, {})
    assert store.list_collections() == sorted(["c", long_name]) and store.collection_info(long_name).sparse
    store.delete_collection("c")
    assert not store.collection_exists("c") and store.list_collections() == [long_name]
    with pytest.raises(KeyError):
        store.collection_info("c")


# ---------------------------------------------------------------------- Qdrant Edge specifics
@pytest.fixture
def edge_folder(tmp_path):
    pytest.importorskip("qdrant_edge")
    return tmp_path / "edge"


def test_edge_store_is_one_process_at_a_time_and_reopens_its_collections(edge_folder):
    from recemb_integrations.stores.edge import EdgeStore

    with EdgeStore(edge_folder) as store:
        store.create_collection("c", DIM, True, {"recemb": {"k": "v"}})
        store.upsert("c", [point(i) for i in range(5)])
        with pytest.raises(StoreError, match="in use by another process"):
            EdgeStore(edge_folder)
    assert detect_store_kind(edge_folder) == "edge"
    with open_store(path=edge_folder) as store:
        assert store.kind == "edge" and store.count("c") == 5
        assert store.collection_info("c").metadata == {"recemb": {"k": "v"}}


def test_edge_store_cleans_what_a_killed_process_left(edge_folder):
    from recemb_integrations.stores.edge import EdgeStore

    with EdgeStore(edge_folder) as store:
        store.create_collection("c", DIM, True, {})
        store.upsert("c", [point(i) for i in range(5)])
        folder = store._folder("c")
    builder = folder / "shard" / "temp_segments" / "segment_builder_x"  # an optimize killed midway
    builder.mkdir(parents=True)
    (builder / "junk").write_bytes(b"x" * 100)
    trash = edge_folder / "collections" / ".trash-0"  # a drop killed before its files were removed
    trash.mkdir()
    half_made = edge_folder / "collections" / "d"  # a create killed before its record was written
    half_made.mkdir()
    with EdgeStore(edge_folder) as store:
        assert store.count("c") == 5 and not trash.exists() and not builder.parent.exists()
        assert not store.collection_exists("d")
        store.create_collection("d", DIM, False, {})  # over the half-made folder
        assert store.list_collections() == ["c", "d"]


def test_edge_metadata_is_replaced_atomically(edge_folder, monkeypatch):
    from recemb_integrations.stores import edge, edge_files
    from recemb_integrations.stores.edge import EdgeStore

    with EdgeStore(edge_folder) as store:
        store.create_collection("c", DIM, False, {"v": 1})
        record = store._folder("c") / edge.COLLECTION_FILE

        def crash(*args):
            raise KeyboardInterrupt("killed while replacing the record")

        monkeypatch.setattr(edge_files.os, "replace", crash)
        with pytest.raises(KeyboardInterrupt):
            store.update_metadata("c", {"v": 2})
        monkeypatch.undo()
        assert json.loads(record.read_text())["metadata"] == {"v": 1}  # the old record, whole
        assert store.collection_info("c").metadata == {"v": 1}


def test_edge_refuses_a_folder_of_other_files_and_a_local_mode_store(tmp_path):
    pytest.importorskip("qdrant_edge")
    from recemb_integrations.stores.edge import EdgeStore

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="other files"):
        EdgeStore(other)
    assert os.listdir(other) == ["notes.txt"]
    QdrantClient(path=str(tmp_path / "local")).close()
    with pytest.raises(StoreError, match="local-mode store"):
        open_store(path=tmp_path / "local", kind="edge")
    with open_store(path=tmp_path / "local") as store:
        assert store.kind == "local"


def test_edge_optimize_builds_the_index_after_enough_writes(edge_folder):
    from recemb_integrations.stores import LAYOUT_COMPACT, LAYOUT_LEAN
    from recemb_integrations.stores.edge import EdgeStore

    with EdgeStore(edge_folder, optimize_after_points=8) as store:
        for layout in (LAYOUT_COMPACT, LAYOUT_LEAN):
            store.create_collection(layout, DIM, True, {}, layout=layout)
            store.upsert(layout, [point(i) for i in range(5)])
            # too few points written to build the graph; a lean collection indexes what it was given in any case
            assert store.optimize(layout, show_progress_bar=False) is (layout == LAYOUT_LEAN)
            store.upsert(layout, [point(i) for i in range(5, 10)])
            assert store.optimize(layout, show_progress_bar=False) is True
            assert store.optimize(layout, show_progress_bar=False) is False  # counted again from zero
            assert store.count(layout) == 10


def test_local_mode_warns_in_the_report_above_its_size(tiny_embedder, monkeypatch):
    from recemb_integrations.qdrant import Document, QdrantSync
    from recemb_integrations.stores import client as client_module

    store = ClientStore(QdrantClient(":memory:"))
    monkeypatch.setattr(store, "threshold_points", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = QdrantSync(store, "c", tiny_embedder).sync([Document(f"d{i}", f"text {i}") for i in range(4)])
    assert any("recemb migrate" in what for _, what in report.warnings)
    assert client_module.LOCAL_MODE_LARGE == 20_000
    store.close()


def test_edge_uses_acorn_only_for_filters_on_fields_without_an_index(edge_folder, monkeypatch):
    import qdrant_edge

    from recemb_integrations.stores.edge import EdgeStore

    used = []
    real = qdrant_edge.AcornSearchParams

    def spy(*args, **kwargs):
        used.append(kwargs.get("enable"))
        return real(*args, **kwargs)

    with EdgeStore(edge_folder) as store:
        store.create_collection("c", DIM, True, {})
        store.create_payload_index("c", "kind", "keyword")
        store.upsert("c", [point(i, kind="document", metadata={"tag": i % 3}) for i in range(30)])
        monkeypatch.setattr(qdrant_edge, "AcornSearchParams", spy)
        indexed = store.query("c", SearchRequest(limit=5, dense=[1.0, 0.3, 0.2, 0.5], filter=where("kind", "document")))
        assert used == [] and len(indexed) == 5
        other = store.query("c", SearchRequest(limit=5, dense=[1.0, 0.3, 0.2, 0.5], filter=qm.Filter(
            must=[where("kind", "document").must[0], where("metadata.tag", 1).must[0]])))
        assert used == [True] and len(other) == 5 and all(p.payload["metadata"]["tag"] == 1 for p in other)
    with EdgeStore(edge_folder) as store:  # the indexes are recorded with the collection
        assert store._indexed("c") == {"kind"}
