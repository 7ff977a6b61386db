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
    assert data["layout"] == "compact" and data["dense_datatype"] == "float16"
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
    assert code == 0 and f"points: {points:,}" in text and "compact (dense vectors stored as float16)" in text
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
