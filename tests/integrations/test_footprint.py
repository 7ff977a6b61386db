"""What a collection takes (issue #47): bytes on disk and resident by part of the store, and ``recemb info
--collection`` showing them."""

from __future__ import annotations

import mmap
import os
import re
import subprocess
import sys

import pytest

from recemb_integrations.cli import main
from recemb_integrations.stores.footprint import (
    PAGE,
    disk_by_part,
    file_sizes_by_part,
    process_memory,
    resident_by_part,
    store_part,
)
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
    # The file size is the length in whole pages, holes included: what mappings of the files can hold.
    pages = lambda n: -(-n // PAGE) * PAGE  # noqa: E731
    assert file_sizes_by_part(tmp_path) == {"vector_storage-dense": pages(100_000),
                                            "wal": pages(10_000) + pages((50 << 20) + 1)}


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


@linux_only
def test_resident_by_part_counts_a_page_once_and_only_the_files_own_pages(tmp_path):
    part = tmp_path / "segments" / "0c134237-b6d8-4cda-9dc5-5dd4d6ca18e5" / "vector_storage-bm25"
    part.mkdir(parents=True)
    (part / "page_0.dat").write_bytes(b"\1" * (4 << 20))
    (part / "copied.dat").write_bytes(b"\1" * (4 << 20))
    with open(part / "page_0.dat", "r+b") as f, \
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as reading, \
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE) as writing:
        # The engine maps a page file twice, read-only and writable: its pages in both are one page of memory.
        assert sum(reading[i] + writing[i] for i in range(0, 4 << 20, PAGE)) == 2 * (4 << 20) // PAGE
        assert resident_by_part(tmp_path) == {"vector_storage-bm25": 4 << 20}
        with open(part / "copied.dat", "rb") as g, mmap.mmap(g.fileno(), 0, access=mmap.ACCESS_COPY) as private:
            for i in range(0, 4 << 20, PAGE):  # written in a private mapping: anonymous copies, not the file's
                private[i] = 2
            resident = resident_by_part(tmp_path)
            assert resident == {"vector_storage-bm25": 4 << 20}
            assert resident["vector_storage-bm25"] <= file_sizes_by_part(tmp_path)["vector_storage-bm25"]


_SIZE = re.compile(r"([\d,]+(?:\.\d+)?) (KiB|MiB|GiB)")
_UNIT = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _sizes(row: str) -> list[tuple[float, float]]:
    """A table row's sizes as (bytes, half the last printed digit in bytes): what the printed figure stands for."""
    found = []
    for number, unit in _SIZE.findall(row):
        decimals = len(number.split(".")[1]) if "." in number else 0
        found.append((float(number.replace(",", "")) * _UNIT[unit], 0.5 * 10 ** -decimals * _UNIT[unit]))
    return found


def _table(text: str) -> tuple[list[list[tuple[float, float]]], list[tuple[float, float]]]:
    """The part rows of ``recemb info``'s table and its total row."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("part "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("total "))
    return [_sizes(line) for line in lines[start + 1:end]], _sizes(lines[end])


def _per_point(text: str) -> list[str]:
    return [line for line in text.splitlines() if "B a point" in line]


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
        shard = s._folder("c") / "shard"
    assert points > 6 and data["points"] == points and data["kind"] == "edge"
    assert data["layout"] == "lean" and data["dense_datatype"] == "float16"
    disk, files, resident = data["disk_bytes"], data["file_bytes"], data["resident_bytes"]
    assert disk["vector_storage-dense"] > 0 and disk["payload_storage"] > 0 and disk["wal"] > 0
    # Counted here as du and ls count them: blocks taken, and lengths in whole pages.
    blocks = lengths = 0
    for dirpath, _, names in os.walk(shard):
        for name in names:
            st = os.stat(os.path.join(dirpath, name))
            blocks, lengths = blocks + st.st_blocks * 512, lengths + -(-st.st_size // PAGE) * PAGE
    assert data["disk_total_bytes"] == sum(disk.values()) == blocks
    assert data["file_total_bytes"] == sum(files.values()) == lengths
    assert data["resident_total_bytes"] == sum(resident.values())
    assert all(resident[part] <= files[part] for part in resident)  # never more than its files can hold
    if sys.platform.startswith("linux"):
        assert resident["wal"] > 0  # the write-ahead log is read when a shard opens
        # The engine makes its files larger than their data: some parts hold more pages in memory than they take
        # on disk (pages of zeros), which is why the file size is shown beside both.
        assert files["payload_index"] > disk["payload_index"]

    def fresh() -> str:  # a fresh process, as a user runs it (in this one, memory freed by earlier tests is reused)
        proc = subprocess.run([sys.executable, "-m", "recemb_integrations.cli", "info", *store],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    first, second = fresh(), fresh()
    # Every figure a point is of something an unchanged collection keeps: the same in two runs of the command.
    assert _per_point(first) == _per_point(second)
    assert any(line.strip().startswith("on disk:") for line in _per_point(first))
    assert any("the int8 copy (its files' size)" in line for line in _per_point(first))
    held = [line for line in first.splitlines() if line.strip().startswith("held in memory:")]
    assert len(held) == 1 and "B a point" not in held[0]  # measured, so it varies: no figure a point
    if sys.platform.startswith("linux"):
        assert _sizes(held[0])[0][0] > 0  # the heap opening the collection took
    for text in (first, second):
        assert not re.search(r"\d\.\d{3}", text)  # no float printed to more than two decimals
        rows, total = _table(text)
        assert len(rows) >= 2 and all(len(row) == 3 for row in rows) and len(total) == 3
        for column in range(3):  # the parts add up to the total, within the rounding of what is printed
            shown = sum(row[column][0] for row in rows)
            rounding = sum(row[column][1] for row in rows) + total[column][1]
            assert abs(shown - total[column][0]) <= rounding, (column, text)
        for (_, _), (files_shown, files_half), (resident_shown, resident_half) in rows:
            assert resident_shown <= files_shown + files_half + resident_half  # resident at most its file size
        assert "on disk: the blocks the files take (du)" in text and "page cache" in text  # the legend
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
    # Floats to two decimals at most where a user reads them, exact in --json.
    assert not re.search(r"\d\.\d{3}", text)
    shown = re.search(r"avg_len ([\d.,]+), ", text).group(1)
    assert float(shown.replace(",", "")) == round(data["settings"]["bm25"]["avg_len"], 2)
    assert "1 documents of a framework's vector store" in text and "passage_tokens: 16" in text
    code, _, err = run(capsys, ["info", str(tiny_folder), "--stats"], json_out=False)
    assert code == 2 and "--stats describes a collection" in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim, read through /proc")
def test_release_freed_heap_hands_freed_memory_back():
    """What a shard's loading freed but glibc kept (the pattern of Qdrant Edge's term tables: many small blocks
    freed while a later one stays) leaves the process when ``release_freed_heap`` runs after the shard opens."""
    code = """
import ctypes
from recemb_integrations.stores.footprint import release_freed_heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def anon():
    return int(next(l for l in open("/proc/self/status") if l.startswith("RssAnon")).split()[1])
blocks = [libc.malloc(4000) for _ in range(50_000)]  # 200 MB in blocks below the mmap threshold
for b in blocks:
    ctypes.memset(b, 1, 4000)
keep = libc.malloc(4000)  # the heap's top stays in use: only a trim returns what lies below it
for b in blocks:
    libc.free(b)
before = anon()
assert release_freed_heap() is True
print(before - anon())
"""
    freed_kb = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                   .stdout.strip())
    assert freed_kb > 100_000  # most of the 200 MB freed
