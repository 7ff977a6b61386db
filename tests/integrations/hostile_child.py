"""The child process of tests/integrations/test_hostile_crashes.py: the real LangChain ``add_documents`` or the real
`recemb` command, in a process of its own that the test kills (SIGKILL) or runs beside another writer, reporting
every write it makes to a progress file so the test knows where a kill landed.

    python hostile_child.py PROGRESS PAUSE langchain MODEL STORE DOCUMENTS.json [--hold]
    python hostile_child.py PROGRESS PAUSE cli ARGV...              (an argument @file:PATH is PATH's text)
    python hostile_child.py PROGRESS PAUSE lc-search MODEL STORE QUERY      (prints the hits as JSON)
    python hostile_child.py PROGRESS PAUSE api-search MODEL STORE QUERY     (QdrantSync.search, read_only="copy")

Each line of PROGRESS is one event, in the order it happened: ``b N D`` before a store upsert of N points (D of
them documents' own points), ``e N D`` once the store acknowledged it, ``ob`` / ``oe`` around the store's
``optimize`` at the end of a write, ``sb`` / ``se`` around each indexing of what was written (a seal, also inside
an optimize), ``added`` once the add returned, ``error MESSAGE`` where the store refused it (one line), ``done`` at
a normal end (``exit N`` for the command's other exit codes). ``PAUSE`` seconds are slept after each acknowledged
upsert (0: none), so a second writer can try while this one holds the store; ``--hold`` keeps the process (and the
store) open after the add, until it is killed. Nothing is changed in what the code writes: the store's methods are
wrapped to report. With ``HOSTILE_SMALL_STREAMS=1`` in the environment a document streams from 32K characters, in
windows of 8K (``small_streams``: the test's own process does the same), so a long file's streamed path is reached
by files the test can afford to embed many times.

The test's documents are made here too (``documents``, ``long_files``), so the test and its child use the same
ones.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

WORDS = ("harbour boats herring cod dawn tide moon lantern rope sail net gull quay winter storm keel mast anchor "
         "beacon breakwater current drift estuary ferry fog galley hull inlet jetty ketch lighthouse mooring "
         "oar pier reef shoal skiff spray stern swell tugboat wharf").split()


def documents(n: int = 40, seed: int = 0, version: int = 0) -> list[tuple[str, str, dict]]:
    """``n`` documents (id, text, metadata): every fourth short (no passages at passages_above 32), the others of
    40 to 160 words, so most have passages of 16 tokens; ``version`` 1 changes every other document's text (an
    edit of half of them) and leaves the rest as version 0 wrote them."""
    out = []
    for i in range(n):
        rng = random.Random(seed * 1000 + i)  # each document its own, whatever the version
        words = 6 if i % 4 == 0 else 40 + (i * 37) % 120
        text = f"note {i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) + "."
        if version and i % 2:
            edit = random.Random(seed * 1000 + i + 500)
            text = f"note {i}, revised: " + " ".join(edit.choice(WORDS) for _ in range(words + 11)) + "."
        out.append((f"note-{i:02d}", text, {"i": i, "version": version if i % 2 else 0}))
    return out


def long_files(folder, streamed_chars: int) -> dict[str, str]:
    """A folder of long files: ``streamed.txt`` of ``streamed_chars`` characters (above the embedder's
    ``STREAM_MIN_CHARS``: tokenized in windows and embedded as a stream) and three files of about 20,000 (embedded
    whole, in one batch), in lines of twelve words; name -> text."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sample = ("state space models carry a fixed size recurrent state so their memory does not grow with the input "
              "mamba computes the scan in chunks with matrix multiplications vertical chunking feeds").split()
    texts = {}
    for name, chars, seed in (("part0.txt", 20_000, 1), ("part1.txt", 21_000, 2), ("part2.txt", 19_000, 3),
                              ("streamed.txt", streamed_chars, 4)):
        rng, lines, size = random.Random(seed), [], 0
        while size < chars:
            line = " ".join(rng.choice(sample + WORDS[:8]) for _ in range(12)) + ".\n"
            lines.append(line)
            size += len(line)
        texts[name] = "".join(lines)
        (folder / name).write_text(texts[name], encoding="utf-8")
    return texts


SMALL_STREAM_MIN_CHARS, SMALL_WINDOW_CHARS = 1 << 15, 1 << 13


def small_streams(setattr=setattr) -> None:
    """Documents stream from ``SMALL_STREAM_MIN_CHARS`` characters, tokenized in windows of ``SMALL_WINDOW_CHARS``
    (``setattr``: pytest's ``monkeypatch.setattr`` in the test's process)."""
    import recemb.core.embedder as embedder
    from recemb.core.tokenizer import TextTokenizer

    setattr(embedder, "STREAM_MIN_CHARS", SMALL_STREAM_MIN_CHARS)
    defaults = list(TextTokenizer.encode_stream.__defaults__)
    defaults[0] = SMALL_WINDOW_CHARS
    setattr(TextTokenizer.encode_stream, "__defaults__", tuple(defaults))


def _log(progress: str, line: str) -> None:
    with open(progress, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


def _report_writes(progress: str, pause: float) -> None:
    """Wrap the Qdrant Edge store's writes and seals so each one is reported (before and after)."""
    from recemb_integrations.stores import edge

    upsert, seal, optimize = edge.EdgeStore.upsert, edge.EdgeStore._seal, edge.EdgeStore.optimize

    def reported_upsert(self, collection, points):
        points = list(points)
        own = sum(1 for p in points if (p.payload or {}).get("kind") == "document")
        _log(progress, f"b {len(points)} {own}")
        result = upsert(self, collection, points)
        _log(progress, f"e {len(points)} {own}")
        if pause:
            time.sleep(pause)
        return result

    def reported_seal(self, collection):
        _log(progress, "sb")
        seal(self, collection)
        _log(progress, "se")

    def reported_optimize(self, collection, *args, **kwargs):
        _log(progress, "ob")
        result = optimize(self, collection, *args, **kwargs)
        _log(progress, "oe")
        return result

    edge.EdgeStore.upsert, edge.EdgeStore._seal = reported_upsert, reported_seal
    edge.EdgeStore.optimize = reported_optimize


def run_langchain(progress: str, model: str, store: str, spec: str, hold: bool) -> int:
    from langchain_core.documents import Document

    from recemb_integrations.langchain import RecembEmbeddings, RecembVectorStore
    from recemb_integrations.stores import StoreError

    given = json.loads(open(spec, encoding="utf-8").read())
    docs = [Document(text, metadata=metadata, id=doc_id) for doc_id, text, metadata in given["documents"]]
    embeddings = RecembEmbeddings(model_name=model, model_kwargs={"device": "cpu", "backend": "torch"})
    vectors = RecembVectorStore(embeddings, given.get("collection", "c"), path=store, **given.get("options", {}))
    try:
        vectors.add_documents(docs)
    except StoreError as e:  # in use by another process, read-only, ...: the one line the user would read
        _log(progress, "error " + " ".join(str(e).split()))
        print(str(e), file=sys.stderr)
        return 2
    _log(progress, "added")
    if hold:
        time.sleep(600)
    vectors.close()
    _log(progress, "done")
    return 0


def run_cli(progress: str, argv: list[str]) -> int:
    from recemb_integrations.cli import main

    argv = [open(a[len("@file:"):], encoding="utf-8").read() if a.startswith("@file:") else a for a in argv]
    code = main(argv)
    _log(progress, "done" if code == 0 else f"exit {code}")
    return code


def run_search(door: str, model: str, store: str, query: str) -> int:
    """One search through ``door`` ("lc": the LangChain store; "api": ``QdrantSync.search`` on a store opened with
    ``read_only="copy"``), its hits printed as one JSON line (``error``: the one line of a refusal)."""
    from recemb_integrations.stores import StoreError

    if query.startswith("@file:"):
        query = open(query[len("@file:"):], encoding="utf-8").read()
    out: dict = {}
    try:
        if door == "lc":
            from recemb_integrations.langchain import RecembEmbeddings, RecembVectorStore

            embeddings = RecembEmbeddings(model_name=model, model_kwargs={"device": "cpu", "backend": "torch"})
            with RecembVectorStore(embeddings, "c", path=store) as vectors:
                hits = vectors.as_retriever(search_kwargs={"k": 5}).invoke(query)
            out["hits"] = [[h.id, h.page_content, h.metadata.get("start"), h.metadata.get("end")] for h in hits]
        else:
            from recemb.core import Embedder
            from recemb_integrations.qdrant import QdrantSync
            from recemb_integrations.stores import open_store

            embedder = Embedder.from_pretrained(model, device="cpu", backend="torch")
            with open_store(path=store, read_only="copy") as opened:
                out["note"] = opened.note
                hits = QdrantSync.open(opened, "c", embedder).search(query, limit=5)
            out["hits"] = [[h.document_id, h.score] for h in hits]
    except StoreError as e:
        out["error"] = str(e)
    print(json.dumps(out))
    return 0


def main(args: list[str]) -> int:
    progress, pause, mode, rest = args[0], float(args[1]), args[2], args[3:]
    if os.environ.get("HOSTILE_SMALL_STREAMS") == "1":
        small_streams()
    _report_writes(progress, pause)
    if mode == "langchain":
        hold = "--hold" in rest
        rest = [a for a in rest if a != "--hold"]
        return run_langchain(progress, *rest, hold=hold)
    if mode == "cli":
        return run_cli(progress, rest)
    if mode in ("lc-search", "api-search"):
        return run_search(mode[:-len("-search")], *rest)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    sys.exit(main(sys.argv[1:]))
