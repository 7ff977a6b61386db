"""Helpers of the tests that drive the real `recemb` command against the embedded stores (the fixtures `opts`,
`store_kind` and `no_model` are in conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from qdrant_client import models as qm

from recemb_integrations.cli import main
from recemb_integrations.qdrant import content_hash
from recemb_integrations.stores import open_store


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def one_line_error(err: str, errno_allowed: bool = True) -> str:
    """The one line a refused command printed on stderr (no traceback; with ``errno_allowed`` False, no raw
    "[Errno N]" either)."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err and (errno_allowed or "Errno" not in err), err
    return lines[0]


def make_corpus(folder: Path, n: int, words: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"doc{i:03d}.txt").write_text(f"document number {i} about topic {i % 5} " * (words + i % 3))
    return folder


def run(capsys, argv, json_out=True):
    """(exit code, parsed JSON report or None, stderr)."""
    code = main(argv + (["--json"] if json_out else []))
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    return code, (json.loads(lines[-1]) if lines and json_out else None), out.err


def _kind(kind: str) -> qm.Filter:
    return qm.Filter(must=[qm.FieldCondition(key="kind", match=qm.MatchValue(value=kind))])


def stored_ids(store: Path, collection: str = "c") -> list[str]:
    with open_store(path=store) as s:
        points, _ = s.scroll(collection, filter=_kind("document"), limit=100_000, with_payload=True)
        return sorted(p.payload["document_id"] for p in points)


def point_count(store: Path, collection: str = "c") -> int:
    with open_store(path=store) as s:
        return s.count(collection)


def stored_payloads(store: Path, collection: str = "c") -> dict[str, dict]:
    """Document id -> the payload of its own point."""
    with open_store(path=store) as s:
        points, _ = s.scroll(collection, filter=_kind("document"), limit=100_000, with_payload=True)
        return {p.payload["document_id"]: p.payload for p in points}


def assert_store_is(store: Path, expected: dict[str, str], collection: str = "c") -> None:
    """The collection holds exactly these documents (id -> the text it was embedded from), each once, and no
    passage of a document it does not hold."""
    with open_store(path=store) as s:
        documents, _ = s.scroll(collection, filter=_kind("document"), limit=100_000, with_payload=True)
        passages, _ = s.scroll(collection, filter=_kind("passage"), limit=100_000, with_payload=True)
    ids = [p.payload["document_id"] for p in documents]
    assert sorted(ids) == sorted(expected), f"stored {sorted(ids)}, expected {sorted(expected)}"
    hashes = {p.payload["document_id"]: p.payload["content_hash"] for p in documents}
    wrong = [doc_id for doc_id, text in expected.items() if hashes[doc_id] != content_hash(text)]
    assert not wrong, f"stored versions differ from the source: {wrong}"
    orphans = {p.payload["document_id"] for p in passages} - set(expected)
    assert not orphans, f"passages of documents not stored: {sorted(orphans)}"


def texts_under(folder: Path, prefix: str = "", suffixes=(".txt", ".md")) -> dict[str, str]:
    """What a sync of ``folder`` (with ``--id-prefix``) should store: id -> text, for its document files."""
    return {prefix + f.relative_to(folder).as_posix(): f.read_text(encoding="utf-8")
            for f in sorted(folder.rglob("*")) if f.is_file() and f.suffix in suffixes}


def spy_on_tokenizer(monkeypatch, emb) -> list[int]:
    """The length of the longest text in every call of ``emb``'s tokenizer, from now on."""
    widest: list[int] = []
    inner = emb.tokenizer.tokenizer
    calls = type(inner).__call__

    def spy(self, texts, *a, **k):
        widest.append(max((len(t) for t in ([texts] if isinstance(texts, str) else texts)), default=0))
        return calls(self, texts, *a, **k)

    monkeypatch.setattr(type(inner), "__call__", spy)
    return widest


def as_an_earlier_recemb_wrote_it(store, collection: str = "c") -> None:
    """Make a collection's points look as a recemb that did not record who wrote them left them: no root."""
    from recemb_integrations.stores import filters

    store.set_payload(collection, {"root": None}, filter=filters.Filter(must=(
        filters.FieldCondition(key="kind", match=filters.MatchAny(any=("document", "passage"))),)))


def earlier_file_metadata(path: Path) -> dict:
    """The metadata a folder sync recorded of a file before it recorded its path."""
    return {"file_name": path.name, "suffix": path.suffix, "bytes": path.stat().st_size}
