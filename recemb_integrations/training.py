"""Training recipe: the E5-mistral contrastive fine-tune, and a distillation mode for small models.

Runs through sentence-transformers' trainer (no hand-written loop):

- **infonce**: InfoNCE over cosine similarity at temperature τ = 0.02 (scale 50), in-batch negatives plus the
  hard negatives of the ``negative*`` columns. With ``mini_batch_size`` set the loss is
  ``CachedMultipleNegativesRankingLoss`` (gradient caching), so an effective batch of 2048 fits in small memory.
- **distill**: the student's embedding regressed onto the teacher's (cosine distance, per text column) plus
  ``contrastive_weight`` × the same InfoNCE term. Teacher embeddings come precomputed in the ``label`` column,
  shape (b, columns, d), already mapped to the student's width (see ``recemb_integrations.mini_model``).

Instructions go on the query side only: ``query_instruction`` (or a per-row ``instruction`` column) becomes
``Instruct: {task}\\nQuery: `` in front of the anchor; positives and negatives never get one. Pooling is the EOS
last token (``RecEmbModule``). LoRA (r = 16, α = 16, every linear layer, via peft) for large backbones, full
fine-tuning for small ones; the LoRA update is merged before saving, so the result is a plain checkpoint.

    from recemb_integrations.training import TrainingConfig, train
    train("path/to/mamba2", "pairs.jsonl", "out/", TrainingConfig(loss="infonce", mini_batch_size=32))
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recemb_integrations._imports import require

_st = require("sentence_transformers", "sentence-transformers")
_datasets = require("datasets", "train")

from recemb.core import Embedder  # noqa: E402
from recemb.core.prompts import query_prompt  # noqa: E402
from sentence_transformers.base import BatchSamplers  # noqa: E402
from sentence_transformers.base.modules import Normalize  # noqa: E402
from sentence_transformers.sentence_transformer import losses as st_losses  # noqa: E402

from recemb_integrations.training_config import LORA_DEFAULT_ABOVE, LOSSES, TrainingConfig  # noqa: E402,F401
from recemb_integrations.sentence_transformers import (  # noqa: E402
    RecEmbModule,
    default_prompts,
    model_card,
)

logger = logging.getLogger(__name__)

def infonce_logits(anchors: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """(b, d) anchors and (m, d) candidates (positives first, then negatives) -> (b, m) cosine / τ."""
    a = nn.functional.normalize(anchors, dim=-1)
    c = nn.functional.normalize(candidates, dim=-1)
    return a @ c.T / temperature


class DistillInfoNCELoss(nn.Module):
    """Cosine distance of every text column to its teacher embedding + ``contrastive_weight`` × InfoNCE.

    Inputs: (anchor, positive, negative_1, ...) text columns; labels (b, columns, d) teacher embeddings.
    InfoNCE: anchor i against every positive and negative of the batch, its own positive the target.
    """

    def __init__(self, model, temperature: float = 0.02, contrastive_weight: float = 1.0):
        super().__init__()
        self.model = model
        self.temperature = temperature
        self.contrastive_weight = contrastive_weight

    def forward(self, sentence_features: Iterable[dict[str, torch.Tensor]], labels: torch.Tensor) -> torch.Tensor:
        from sentence_transformers.base.losses.merged_forward import embed_columns

        embeddings = embed_columns(self.model, sentence_features)  # one (b, d) per column
        if labels is None or labels.dim() != 3 or labels.shape[1] != len(embeddings):
            raise ValueError(f"labels must be teacher embeddings (b, {len(embeddings)}, d), got "
                             f"{None if labels is None else tuple(labels.shape)}")
        teacher = labels.detach().to(embeddings[0].dtype)
        distill = torch.stack([
            1 - nn.functional.cosine_similarity(e, teacher[:, i], dim=-1).mean() for i, e in enumerate(embeddings)
        ]).mean()
        if self.contrastive_weight == 0 or len(embeddings) < 2:
            return distill
        logits = infonce_logits(embeddings[0], torch.cat(embeddings[1:]), self.temperature)
        target = torch.arange(logits.shape[0], device=logits.device)
        return distill + self.contrastive_weight * nn.functional.cross_entropy(logits, target)

    @property
    def citation(self) -> str:
        return "InfoNCE (Oord et al., 2018) with embedding distillation (Kim et al., EmbedDistill, 2023)"


# --------------------------------------------------------------------------------------------- LoRA


def apply_lora(encoder: nn.Module, r: int = 16, alpha: int = 16, dropout: float = 0.0) -> nn.Module:
    """LoRA on every linear layer of the encoder (in_proj and out_proj of each mixer); only the adapters train."""
    peft = require("peft", "train")
    targets = sorted({name.rsplit(".", 1)[-1] for name, m in encoder.named_modules() if isinstance(m, nn.Linear)})
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")
    peft.inject_adapter_in_model(config, encoder)
    for name, p in encoder.named_parameters():
        p.requires_grad = "lora_" in name
    return encoder


def merge_lora(encoder: nn.Module) -> nn.Module:
    """Fold every LoRA update into its base weight and put the plain layer back (state_dict keys unchanged)."""
    from peft.tuners.lora import LoraLayer

    for name, module in list(encoder.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge()
            parent_name, _, child = name.rpartition(".")
            parent = encoder.get_submodule(parent_name) if parent_name else encoder
            setattr(parent, child, module.get_base_layer())
    return encoder


# --------------------------------------------------------------------------------------------- data


def load_pairs(path: str | os.PathLike) -> list[dict[str, Any]]:
    """JSON lines with ``anchor`` and ``positive`` (strings), optional ``negative`` (a string or a list of
    strings: hard negatives), ``instruction`` (task name or text, query side) and ``label`` (teacher embeddings)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON: {e}") from e
            for key in ("anchor", "positive"):
                if not isinstance(row.get(key), str):
                    raise ValueError(f"{path}:{lineno}: '{key}' must be a string")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no training pairs")
    return rows


def instructed_anchor(row: dict[str, Any], query_instruction: str | None = None) -> str:
    """The anchor as the model is trained on it: the row's ``instruction`` (else ``query_instruction``) as the query
    prefix; an instruction of "" opts the row out (symmetric pairs)."""
    instruction = row.get("instruction", query_instruction)
    return ("" if instruction == "" else query_prompt(instruction)) + row["anchor"]


def build_dataset(rows: list[dict[str, Any]], query_instruction: str | None = None):
    """A ``datasets.Dataset`` with columns anchor (instruction applied), positive, negative_1.., [label].

    Every row must have the same number of hard negatives (the loss needs rectangular columns).
    """
    n_neg = {len(_negatives(r)) for r in rows}
    if len(n_neg) != 1:
        raise ValueError(f"rows disagree on the number of hard negatives: {sorted(n_neg)}")
    n_neg = n_neg.pop()
    columns: dict[str, list] = {"anchor": [], "positive": []}
    for j in range(n_neg):
        columns[f"negative_{j + 1}"] = []
    with_labels = "label" in rows[0]
    if with_labels:
        columns["label"] = []
    for r in rows:
        columns["anchor"].append(instructed_anchor(r, query_instruction))
        columns["positive"].append(r["positive"])
        for j, neg in enumerate(_negatives(r)):
            columns[f"negative_{j + 1}"].append(neg)
        if with_labels:
            columns["label"].append(r["label"])
    return _datasets.Dataset.from_dict(columns)


def _negatives(row: dict[str, Any]) -> list[str]:
    neg = row.get("negative", [])
    return [neg] if isinstance(neg, str) else list(neg)


# --------------------------------------------------------------------------------------------- training


def build_model(model: str | os.PathLike | Embedder, config: TrainingConfig, tokenizer=None):
    """A trainable SentenceTransformer (RecEmbModule + Normalize) on the torch backend, LoRA applied if chosen."""
    embedder = model if isinstance(model, Embedder) else Embedder.from_pretrained(
        model, device="cpu" if not torch.cuda.is_available() else None, dtype=config.dtype, tokenizer=tokenizer)
    if embedder.tokenizer is None:
        raise ValueError(f"{model} has no tokenizer files; pass tokenizer=...")
    module = RecEmbModule(embedder, max_seq_length=config.max_length)
    use_lora = config.lora
    n_params = sum(p.numel() for p in embedder.model.parameters())
    if use_lora is None:
        use_lora = n_params > LORA_DEFAULT_ABOVE
    if use_lora:
        apply_lora(embedder.model, config.lora_r, config.lora_alpha, config.lora_dropout)
    else:
        embedder.model.requires_grad_(True)  # loading freezes the weights for inference
    st_model = _st.SentenceTransformer(modules=[module, Normalize()], prompts=default_prompts(),
                                       similarity_fn_name="cosine", device=str(embedder.device))
    return st_model, bool(use_lora)


def build_loss(st_model, config: TrainingConfig):
    scale = 1.0 / config.temperature
    if config.loss == "distill":
        return DistillInfoNCELoss(st_model, config.temperature, config.contrastive_weight)
    if config.mini_batch_size:
        return st_losses.CachedMultipleNegativesRankingLoss(st_model, scale=scale,
                                                            mini_batch_size=config.mini_batch_size)
    return st_losses.MultipleNegativesRankingLoss(st_model, scale=scale)


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
    # Tiny gradients become denormal floats in backward, and CPUs slow down on them many times over (measured 12x
    # on a 6-layer student); flushing them to zero changes nothing at this scale.
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

    module: RecEmbModule = st_model[0]
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
