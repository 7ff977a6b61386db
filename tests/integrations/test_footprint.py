"""What a collection takes (issue #47): bytes on disk and resident by part of the store, and ``recemb info
--collection`` showing them."""

from __future__ import annotations

import json
import mmap
import subprocess
import sys

import pytest

from recemb_integrations.cli import main
from recemb_integrations.stores.footprint import disk_by_part, process_memory, resident_by_part, store_part
from tests.integrations.cli_cases import run

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc reports resident memory")


def test_store_part_names_a_shard_file_by_its_part():
    segment = "segments/0c134237-b6d8-4cda-9dc5-5dd4d6ca18e5"
    assert store_part(f"{segment}/vector_storage-dense/matrix.dat") == "vector_storage-dense"
    assert store_part(f"{segment}/vector_storage-dense/quantized/data.bin") == "vector_storage-dense (int8)"
    assert store_part(f"{segment}/payload_index/abc-kind-map/page_0.dat") == "payload_index"
    assert store_part("wal/open-3") == "wal"
    assert store_part("edge_config.json") == "edge_config"


def test_disk_by_part_counts_allocated_bytes(tmp_path):
    segment = tmp_path / "segments" / "0c134237-b6d8-4cda-9dc5-5dd4d6ca18e5" / "vector_storage-dense"
    segment.mkdir(parents=True)
    (segment / "matrix.dat").write_bytes(b"x" * 100_000)
    (tmp_path / "wal").mkdir()
    (tmp_path / "wal" / "open-1").write_bytes(b"y" * 10_000)
    with open(tmp_path / "wal" / "sparse", "wb") as f:  # a file with a hole takes only what was written
        f.seek(50 << 20)
        f.write(b"z")
    sizes = disk_by_part(tmp_path)
    assert set(sizes) == {"vector_storage-dense", "wal"}
    assert 100_000 <= sizes["vector_storage-dense"] < 100_000 + 64 * 1024
    assert 10_000 <= sizes["wal"] < 1 << 20


@linux_only
def test_resident_by_part_sees_the_pages_this_process_touched(tmp_path):
    part = tmp_path / "segments" / "0c134237-b6d8-4cda-9dc5-5dd4d6ca18e5" / "payload_storage"
    part.mkdir(parents=True)
    path = part / "page_0.dat"
    path.write_bytes(b"\0" * (8 << 20))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert resident_by_part(tmp_path).get("payload_storage", 0) <= 4 << 20  # nothing read yet (fault-around)
        total = sum(m[i] for i in range(0, 6 << 20, 4096))  # read 6 MiB of pages
        assert total == 0
        assert resident_by_part(tmp_path)["payload_storage"] >= 6 << 20
    assert resident_by_part(tmp_path) == {}  # unmapped
    memory = process_memory()
    assert memory is not None and memory.anonymous > 0 and memory.file_backed > 0


def test_recemb_info_shows_what_a_collection_takes(tmp_path, tiny_folder, capsys):
    from tests.integrations.test_store_layout import make_corpus

    corpus = make_corpus(tmp_path / "docs", 6)
    store = ["--qdrant-path", str(tmp_path / "store"), "--collection", "c"]
    assert run(capsys, ["sync", str(corpus), "--model", str(tiny_folder), "--passage-tokens", "8", *store])[0] == 0
    code, data, err = run(capsys, ["info", *store])
    assert code == 0, err
    from recemb_integrations.stores import open_store

    with open_store(path=tmp_path / "store") as s:
        points = s.count("c")
    assert points > 6 and data["points"] == points and data["kind"] == "edge"
    assert data["layout"] == "lean" and data["dense_datatype"] == "float16"
    disk = data["disk_bytes"]
    assert disk["vector_storage-dense"] > 0 and disk["payload_storage"] > 0 and disk["wal"] > 0
    if sys.platform.startswith("linux"):
        assert data["resident_bytes"]["wal"] > 0  # the write-ahead log is read when a shard opens
        # A fresh process (as a user runs it): the heap it takes to open the collection is measured. (In this one,
        # memory freed by earlier tests may be reused for it.)
        proc = subprocess.run([sys.executable, "-m", "recemb_integrations.cli", "info", *store, "--json"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        fresh = json.loads(proc.stdout.strip().splitlines()[-1])
        assert fresh["points"] == points and fresh["held_in_memory_bytes"] > 0
    code = main(["info", *store])
    text = capsys.readouterr().out
    assert code == 0 and f"points: {points:,}" in text and "lean (dense vectors stored as float16)" in text
    assert "held in memory" in text and "on disk" in text and "dense vectors" in text


def test_recemb_info_refuses_what_names_no_single_thing(tmp_path, tiny_folder, capsys):
    def refused(argv: list[str]) -> str:
        code, _, err = run(capsys, argv, json_out=False)
        assert code == 2
        return err

    assert "name a model to describe, or a collection" in refused(["info"])
    assert "not both" in refused(["info", str(tiny_folder), "--collection", "c"])
    empty = str(tmp_path / "store")
    (tmp_path / "store").mkdir()
    assert "no embedded Qdrant store" in refused(["info", "--collection", "c", "--qdrant-path", empty])
    assert "--collection is empty" in refused(["info", "--collection", "", "--qdrant-path", empty])


def test_recemb_info_stats_counts_points_by_kind_and_owner_and_shows_the_recorded_settings(tmp_path, tiny_folder,
                                                                                          capsys, store_kind):
    from recemb_integrations.framework_collection import FrameworkCollection
    from recemb_integrations.qdrant import Document
    from recemb_integrations.stores import open_store
    from tests.integrations.test_store_layout import make_corpus

    corpus = make_corpus(tmp_path / "docs", 6, words=40)
    store = ["--qdrant-path", str(tmp_path / "store"), "--collection", "c", "--store", store_kind]
    assert run(capsys, ["sync", str(corpus), "--model", str(tiny_folder), "--passage-tokens", "16",
                        "--passages-above", "32", *store])[0] == 0
    assert run(capsys, ["sync", str(corpus), "--id-prefix", "wiki", "--model", str(tiny_folder), *store])[0] == 0
    from recemb.core import Embedder

    embedder = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch")
    with FrameworkCollection("c", lambda: embedder, path=tmp_path / "store", store_kind=store_kind) as framework:
        framework.add([Document("note", "a note added through a framework")])
    code, data, err = run(capsys, ["info", *store, "--stats"])
    assert code == 0, err
    with open_store(path=tmp_path / "store", kind=store_kind) as s:
        points, found = s.count("c"), s.scroll("c", limit=10_000, with_payload=True)[0]
    kinds = [p.payload["kind"] for p in found]
    assert data["points"] == points and data["points_by_kind"] == {"document": kinds.count("document"),
                                                                   "passage": kinds.count("passage")}
    assert data["points_by_kind"]["passage"] > 0
    assert data["documents_by_owner"] == {"": 6, "framework": 1, "wiki/": 6}
    assert data["settings"]["passage_tokens"] == 16 and data["settings"]["passages_above"] == 32
    assert data["settings"]["model"] and data["settings"]["bm25"]["avg_len"] > 0
    code = main(["info", *store, "--stats"])
    text = capsys.readouterr().out
    assert code == 0 and "6 documents of the folder sync with id prefix 'wiki'" in text
    assert "1 documents of a framework's vector store" in text and "passage_tokens: 16" in text
    code, _, err = run(capsys, ["info", str(tiny_folder), "--stats"], json_out=False)
    assert code == 2 and "--stats describes a collection" in err
