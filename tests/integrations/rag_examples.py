"""What the RAG examples (examples/langchain_retriever.py, examples/llama_index_query_engine.py) must print, checked
against the files they read: every cited span slices its file on the line it names, each file at most once a
question, and the context a few passages long, well under the whole files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LONG_BOOKS = ROOT.parent / "shared" / "data" / "long"
CITATION = re.compile(r"^   \[([^\]]+), line (\d+), characters ([\d,]+)-([\d,]+)\] (.*)$", re.M)
CONTEXT = re.compile(r"^   context: ([\d,]+) characters from (\d+) passages \(the whole files: ([\d,]+) characters",
                     re.M)
HEADER = 400  # characters a passage's citation line and metadata may add to the context, at most


def run_example(script: str, model: str, folder: Path, store: Path, *extra: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), HF_HUB_OFFLINE="1")
    command = [sys.executable, str(ROOT / "examples" / script), "--model", model, "--folder", str(folder),
               "--store", str(store), *extra]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def check_output(stdout: str, folder: Path, k: int, questions: int) -> list[tuple[str, int, int]]:
    """Asserts what the module docstring says of an example's output; returns each citation's (file, start, end)."""
    texts = {f.relative_to(folder).as_posix(): f.read_text(encoding="utf-8") for f in folder.rglob("*")
             if f.suffix in (".md", ".txt")}
    blocks = stdout.split("Q: ")[1:]
    assert len(blocks) == questions
    cited = []
    for block in blocks:
        (context, passages, whole), = CONTEXT.findall(block)
        context, passages, whole = (int(x.replace(",", "")) for x in (context, passages, whole))
        citations = CITATION.findall(block)
        assert len(citations) == passages and 1 <= passages <= k and whole == sum(map(len, texts.values()))
        names = []
        spans = 0
        for document, line, start, end, preview in citations:
            name = Path(document).relative_to(folder).as_posix() if Path(document).is_absolute() else document
            start, end = int(start.replace(",", "")), int(end.replace(",", ""))
            text = texts[name]
            assert 0 <= start < end <= len(text) and text[:start].count("\n") + 1 == int(line)
            assert " ".join(text[start:end].split())[:60].rstrip() == preview.rstrip()  # the passage shown
            names.append(name)
            spans += end - start
            cited.append((name, start, end))
        assert len(set(names)) == len(names)  # each document once
        assert spans <= context <= spans + HEADER * passages < whole
    return cited


def long_folder(folder: Path, books: int = 3, chars: int = 20_000) -> Path | None:
    """A folder of ``books`` files of ``chars`` characters cut from the shared long books (None without them)."""
    found = sorted(LONG_BOOKS.glob("*.txt"))[:books]
    if len(found) < books:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    for book in found:
        text = book.read_text(encoding="utf-8")
        (folder / f"{book.stem}.txt").write_text(text[50_000:50_000 + chars], encoding="utf-8")
    return folder


def check_example(script: str, model: str, tmp_path: Path) -> None:
    """The example on the sample documents (twice: the second run finds every document stored and prints the
    same), then on long documents cut from the shared books where they are at hand (else a skip)."""
    import pytest

    folder = ROOT / "examples" / "documents"
    out = run_example(script, model, folder, tmp_path / "store")
    check_output(out, folder, k=3, questions=2)
    assert run_example(script, model, folder, tmp_path / "store") == out
    books = long_folder(tmp_path / "books")
    if books is None:
        pytest.skip("no shared long books to cut long documents from")
    question = " ".join((books / "dracula.txt").read_text(encoding="utf-8")[9_000:9_400].split()[3:30])
    out = run_example(script, model, books, tmp_path / "books-store", "--k", "4", "--question", question)
    cited = check_output(out, books, k=4, questions=1)
    assert all(end - start < 2_000 for _, start, end in cited)  # passages of 20,000-character files
