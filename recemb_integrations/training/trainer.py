"""The training run: sentence-transformers' trainer over the dataset, then the merged model saved with its
``training.json`` summary and model card."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from recemb_integrations._imports import require

__all__ = ["train"]

_st = require("sentence_transformers", "sentence-transformers")
_datasets = require("datasets", "train")

from sentence_transformers.base import BatchSamplers  # noqa: E402

from recemb.core import Embedder  # noqa: E402
from recemb_integrations.sentence_transformers import RecembModule, model_card  # noqa: E402
from recemb_integrations.training.config import TrainingConfig  # noqa: E402
from recemb_integrations.training.data import build_dataset, load_pairs  # noqa: E402
from recemb_integrations.training.losses import build_loss  # noqa: E402
from recemb_integrations.training.model import build_model, merge_lora  # noqa: E402


def train(
    model: str | os.PathLike | Embedder,
    data,
    output_dir: str | os.PathLike,
    config: TrainingConfig | None = None,
    tokenizer=None,
    model_name: str | None = None,
    callbacks: list | None = None,
) -> dict[str, Any]:
    """Fine-tune ``model`` on ``data`` (a JSONL path, a list of row dicts, or a ``datasets.Dataset`` with the
    columns of ``build_dataset``) and save a sentence-transformers folder (plain merged weights) to ``output_dir``.

    Return: a summary with the loss history, steps, seconds and whether LoRA was used (also written to
    ``output_dir/training.json``).
    """
    import time

    config = config or TrainingConfig()
    output_dir = Path(output_dir)
    if isinstance(data, (str, os.PathLike)):
        data = load_pairs(data)
    dataset = data if isinstance(data, _datasets.Dataset) else build_dataset(list(data), config.query_instruction)
    if config.loss == "distill" and "label" not in dataset.column_names:
        raise ValueError("loss='distill' needs teacher embeddings in a 'label' column")
    if config.loss == "infonce" and "label" in dataset.column_names:
        dataset = dataset.remove_columns("label")
    if len(dataset) < config.batch_size:
        raise ValueError(f"{len(dataset)} training rows is fewer than one batch of {config.batch_size}")

    torch.manual_seed(config.seed)
    # Tiny gradients become denormal floats in backward, and CPUs slow down on them many times over
    # (docs/benchmarks.md, "Measured facts the code relies on"); flushing them to zero changes nothing at this scale.
    flush_before = torch.set_flush_denormal(True)
    st_model, used_lora = build_model(model, config, tokenizer)
    loss = build_loss(st_model, config)

    steps_per_epoch = len(dataset) // config.batch_size
    total_steps = config.max_steps if config.max_steps > 0 else max(1, math.ceil(steps_per_epoch * config.epochs))
    args = _st.SentenceTransformerTrainingArguments(
        output_dir=str(output_dir / "checkpoints"),
        num_train_epochs=config.epochs,
        max_steps=total_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        warmup_steps=min(config.warmup_steps, max(0, total_steps - 1)),
        lr_scheduler_type="linear",
        weight_decay=config.weight_decay,
        seed=config.seed,
        data_seed=config.seed,
        logging_steps=config.logging_steps,
        save_strategy="no",
        report_to="none",
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        dataloader_drop_last=True,
        use_cpu=not torch.cuda.is_available(),
        **config.extra_args,
    )
    trainer = _st.SentenceTransformerTrainer(model=st_model, args=args, train_dataset=dataset, loss=loss,
                                             callbacks=callbacks)
    start = time.time()
    result = trainer.train()
    seconds = time.time() - start
    torch.set_flush_denormal(flush_before)

    module: RecembModule = st_model[0]
    if used_lora:
        merge_lora(module.encoder)
    module.encoder.requires_grad_(False)
    st_model.eval()
    output_dir.mkdir(parents=True, exist_ok=True)
    st_model.save(str(output_dir))
    name = model_name or output_dir.name
    history = [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]
    summary = {
        "config": asdict(config),
        "rows": len(dataset),
        "steps": trainer.state.global_step,
        "seconds": round(seconds, 1),
        "train_loss": result.training_loss,
        "final_logged_loss": history[-1]["loss"] if history else None,
        "history": history,
        "lora": used_lora,
    }
    (output_dir / "training.json").write_text(json.dumps(summary, indent=2))
    if not (output_dir / "README.md").exists() or model_name is not None:
        (output_dir / "README.md").write_text(model_card(name, module.embedder))
    return summary
