"""The training pairs of ``recemb-mamba2-mini``: the shared corpora (../shared/data: IR documents, STS-B
train, books) and the host machine's Python docstrings and manual pages."""

from __future__ import annotations

import ast
import gzip
import json
import os
import random
import re
import sysconfig
from pathlib import Path

from recemb.core.prompts import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS

REPO_ROOT = Path(__file__).resolve().parents[2]

# Instructions sampled for anchors: retrieval-style tasks plus STS, all from the E5 set.
ANCHOR_INSTRUCTIONS = [DEFAULT_INSTRUCTION] + [TASK_INSTRUCTIONS[t] for t in (
    "SciFact", "NFCorpus", "NQ", "FiQA2018", "TRECCOVID", "SCIDOCS", "QuoraRetrieval", "STS", "ArguAna",
    "HotpotQA", "FEVER", "DBPedia")]
INSTRUCTED_FRACTION = 0.7
MAX_POSITIVE_WORDS = 96  # keeps the teacher (256 tokens) seeing the whole positive
# Held out of training: benchmarks/retrieval_eval.py builds its long-document test from it.
HELD_OUT_BOOKS = ("war_and_peace.txt",)


def default_data_dir() -> Path:
    """``../shared/data`` next to the repository (override with RECEMB_DATA)."""
    env = os.environ.get("RECEMB_DATA")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "data"


# --------------------------------------------------------------------------------------------- pairs


def _words(text: str, limit: int) -> str:
    return " ".join(text.split()[:limit])


def _ir_pairs(data: Path) -> list[tuple[str, str, str]]:
    out = []
    for corpus in sorted((data / "ir").glob("*/corpus.jsonl")):
        with open(corpus, encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                title, text = doc.get("title", "").strip(), doc.get("text", "").strip()
                if len(title.split()) >= 3 and len(text.split()) >= 15:
                    out.append((title, _words(text, MAX_POSITIVE_WORDS), "ir"))
    return out


def _sts_pairs(data: Path) -> list[tuple[str, str, str]]:
    out = []
    with open(data / "sts" / "stsbenchmark" / "train.tsv", encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            s1, s2, score = line.rstrip("\n").split("\t")
            if float(score) >= 3.0:
                out.append((s1, s2, "sts"))
    return out


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def _book_pairs(data: Path, rng: random.Random, per_book: int) -> list[tuple[str, str, str]]:
    out = []
    for book in sorted((data / "long").glob("*.txt")):
        if book.name in HELD_OUT_BOOKS:
            continue
        paragraphs = [" ".join(p.split()) for p in book.read_text(encoding="utf-8").split("\n\n")]
        paragraphs = [p for p in paragraphs if len(p.split()) >= 8]
        passages, cur = [], []
        for p in paragraphs:  # passages of 60-160 words from whole paragraphs
            cur.append(p)
            if sum(len(x.split()) for x in cur) >= 60:
                passages.append(_words(" ".join(cur), MAX_POSITIVE_WORDS))
                cur = []
        rng.shuffle(passages)
        for passage in passages[:per_book]:
            sentences = [s for s in _SENTENCE.split(passage) if len(s.split()) >= 6]
            if len(sentences) < 2:
                continue
            pick = rng.randrange(len(sentences))
            rest = " ".join(s for i, s in enumerate(sentences) if i != pick)
            out.append((sentences[pick], rest, "book"))
    return out


# folders whose Python files are not documentation: tests, vendored copies, the IDE, a removed converter
_SKIPPED_FOLDERS = ("test", "tests", "testing", "idlelib", "lib2to3", "_vendor", "vendored", "_vendored")


def _docstring_pairs(root: Path | None = None, source: str = "docstring") -> list[tuple[str, str, str]]:
    """A docstring's summary line → its body, from every Python file under ``root`` (default: the standard
    library, without site-packages); parsed with ``ast``, nothing imported."""
    out = []
    stdlib = root is None
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else Path(root)
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(part in _SKIPPED_FOLDERS for part in parts) or (stdlib and "site-packages" in parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            summary, _, body = doc.strip().partition("\n")
            if len(summary.split()) >= 4 and len(body.split()) >= 15:
                name = getattr(node, "name", path.stem)
                out.append((summary.strip(), _words(f"{name}: {body}", MAX_POSITIVE_WORDS), source))
    return out


_ROFF_ESCAPE = re.compile(r"\\f[BIRPC1-4]|\\f\(..|\\f\[[^\]]*\]|\\\*\(..|\\\*.|\\\(..|\\[&|^/,%e]|\\s[-+]?\d")


def _roff_text(lines: list[str]) -> str:
    text = []
    for line in lines:
        if line.startswith((".", "'")):
            macro = line.split(None, 1)
            if macro and macro[0] in (".B", ".I", ".BR", ".IR", ".RB", ".BI", ".IB", ".RI") and len(macro) > 1:
                line = macro[1].replace('"', "")
            else:
                continue
        text.append(_ROFF_ESCAPE.sub("", line).replace("\\-", "-").replace("\\", ""))
    return " ".join(" ".join(text).split())


def _manpage_pairs(man_dir: Path = Path("/usr/share/man/man1")) -> list[tuple[str, str, str]]:
    out = []
    for page in sorted(man_dir.glob("*.gz")) if man_dir.is_dir() else []:
        try:
            lines = gzip.decompress(page.read_bytes()).decode("utf-8", "replace").splitlines()
        except (OSError, EOFError):
            continue
        sections: dict[str, list[str]] = {}
        current = None
        for line in lines:
            if line.startswith((".SH", ".Sh")):
                current = line[3:].strip().strip('"').upper()
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
        name = _roff_text(sections.get("NAME", []))
        description = _roff_text(sections.get("DESCRIPTION", []))
        if " - " in name and len(description.split()) >= 15:
            out.append((name.split(" - ", 1)[1].strip(), _words(description, MAX_POSITIVE_WORDS), "manpage"))
    return out


# Long documents: windows of consecutive chunks of a book, each chunk short enough for the teacher's 256 tokens.
LONG_CHUNK_WORDS = 180
LONG_CHUNKS_PER_DOC = 8  # 1,440 words, about the long-document test's 1,500
LONG_STRIDE = 4  # chunks between window starts: windows overlap by half
LONG_VALIDATION_SHARE = 0.15  # the last 15 % of every book: validation windows, never trained on
_SENTENCE_END = re.compile(r"[.!?][\"'”’]?$")


def _sentences(words: list[str], min_words: int = 7, max_words: int = 40) -> list[str]:
    """Sentences of ``min_words``..``max_words`` words: from a word after a full stop to the next full stop (the
    long-document test's rule)."""
    out, start = [], 0
    for i, w in enumerate(words):
        if _SENTENCE_END.search(w):
            if min_words <= i + 1 - start <= max_words and start > 0:
                out.append(" ".join(words[start:i + 1]))
            start = i + 1
    return out


def long_documents(data_dir: Path | None = None, chunk_words: int = LONG_CHUNK_WORDS,
                   chunks_per_doc: int = LONG_CHUNKS_PER_DOC, stride: int = LONG_STRIDE) -> dict[str, list[dict]]:
    """{"train": [...], "validation": [...]} windows of the books except the held-out ones, each
    {book, chunks (texts of chunk_words words), sentences (of the whole window)}. Validation windows come from the
    last LONG_VALIDATION_SHARE of each book, do not overlap each other and share no chunk with a training window."""
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    split: dict[str, list[dict]] = {"train": [], "validation": []}
    for book in sorted((data / "long").glob("*.txt")):
        if book.name in HELD_OUT_BOOKS:
            continue
        words = book.read_text(encoding="utf-8").split()
        chunks = [words[i:i + chunk_words] for i in range(0, len(words) - chunk_words + 1, chunk_words)]
        cut = int(len(chunks) * (1 - LONG_VALIDATION_SHARE))
        for name, lo, hi, step in (("train", 0, cut, stride), ("validation", cut, len(chunks), chunks_per_doc)):
            for s in range(lo, hi - chunks_per_doc + 1, step):
                window = chunks[s:s + chunks_per_doc]
                split[name].append({"book": book.stem, "chunks": [" ".join(c) for c in window],
                                    "sentences": _sentences([w for c in window for w in c])})
    return split


# Pairs kept per source (None: all). The IR documents are the only in-domain text for the shared collections, so
# all of them; the installed packages' docstrings are many times the others and are sampled down.
SOURCE_LIMITS = {"ir": None, "sts": 6500, "book": 6500, "docstring": 6500, "package_docstring": 6500,
                 "manpage": 6500}


def evaluation_texts(data: Path) -> list[str]:
    """What no training text may contain: every IR query of six words or more (shorter ones could match a title by
    chance) and every STS-B test sentence that is not also a train sentence."""
    queries = []
    for path in sorted(data.glob("ir/*/queries.jsonl")):
        with open(path, encoding="utf-8") as f:
            queries += [q for q in (json.loads(line)["text"].strip() for line in f) if len(q.split()) >= 6]
    sts = data / "sts" / "stsbenchmark"
    sentences = {}
    for split in ("train", "test"):
        with open(sts / f"{split}.tsv", encoding="utf-8") as f:
            next(f)
            sentences[split] = {s for line in f for s in line.rstrip("\n").split("\t")[:2]}
    return sorted(set(queries) | (sentences["test"] - sentences["train"]))


def contains_any(texts: tuple[str, ...], banned: list[str]) -> bool:
    """Whether one of ``texts`` contains one of ``banned`` (lower-cased both sides, ``banned`` given lower-cased)."""
    return any(b in t for t in (t.lower() for t in texts) for b in banned)


def build_pairs(data_dir: Path | None = None, seed: int = 0, books_per_title: int = 2500,
                limits: dict[str, int | None] | None = None) -> list[dict]:
    """Training rows {anchor, positive, instruction, source}, shuffled with ``seed``; at most ``limits[source]``
    pairs of each source (default ``SOURCE_LIMITS``). Host text (docstrings, manual pages) that contains an
    evaluation query or STS-B test sentence is dropped (``evaluation_texts``)."""
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    if not (data / "ir").is_dir():
        raise FileNotFoundError(f"{data} has no ir/ folder; set RECEMB_DATA to the shared data folder")
    rng = random.Random(seed)
    limits = SOURCE_LIMITS if limits is None else limits
    banned = [t.lower() for t in evaluation_texts(data)]
    host = {"docstring", "package_docstring", "manpage"}
    sources = [_ir_pairs(data), _sts_pairs(data), _book_pairs(data, rng, books_per_title), _docstring_pairs(),
               _docstring_pairs(Path(sysconfig.get_paths()["purelib"]), "package_docstring"), _manpage_pairs()]
    rows, seen = [], set()
    for pairs in sources:
        rng.shuffle(pairs)
        kept = 0
        for anchor, positive, source in pairs:
            key = (anchor.lower(), positive[:200].lower())
            limit = limits.get(source)
            if key in seen or (limit is not None and kept >= limit):
                continue
            if source in host and contains_any((anchor, positive), banned):
                continue
            seen.add(key)
            kept += 1
            instructed = rng.random() < INSTRUCTED_FRACTION
            rows.append({"anchor": anchor, "positive": positive, "source": source,
                         "instruction": rng.choice(ANCHOR_INSTRUCTIONS) if instructed else ""})
    rng.shuffle(rows)
    return rows
