"""Training recipe: the E5-mistral contrastive fine-tune, and a distillation mode for small models.

Runs through sentence-transformers' trainer (no hand-written loop):

- **infonce**: InfoNCE over cosine similarity at temperature τ = 0.02 (scale 50), in-batch negatives plus the
  hard negatives of the ``negative*`` columns. With ``mini_batch_size`` set the loss is
  ``CachedMultipleNegativesRankingLoss`` (gradient caching), so an effective batch of 2048 fits in small memory.
- **distill**: the student's embedding regressed onto the teacher's (cosine distance, per text column) plus
  ``contrastive_weight`` × the same InfoNCE term. Teacher embeddings come precomputed in the ``label`` column,
  shape (b, columns, d), already mapped to the student's width (see ``tools/mini_model`` in the repository).

Instructions go on the query side only: ``query_instruction`` (or a per-row ``instruction`` column) becomes
``Instruct: {task}\\nQuery: `` in front of the anchor; positives and negatives never get one. Pooling is the EOS
last token (``RecembModule``). LoRA (r = 16, α = 16, every linear layer, via peft) for large backbones, full
fine-tuning for small ones; the LoRA update is merged before saving, so the result is a plain checkpoint.

    from recemb_integrations.training import TrainingConfig, train
    train("path/to/mamba2", "pairs.jsonl", "out/", TrainingConfig(loss="infonce", mini_batch_size=32))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Where each public name lives: config (hyperparameters), data (pairs -> dataset), losses, model (the
# trainable model, LoRA), trainer (the run and the saved folder). Names load on first use, so that
# ``recemb_integrations.training.config`` (the CLI's options) imports without the training stack
# (sentence-transformers, datasets, peft).
_EXPORTS = {
    "LORA_DEFAULT_ABOVE": "config", "LOSSES": "config", "TrainingConfig": "config",
    "build_dataset": "data", "instructed_anchor": "data", "load_pairs": "data",
    "DistillInfoNCELoss": "losses", "build_loss": "losses", "infonce_logits": "losses",
    "apply_lora": "model", "build_model": "model", "merge_lora": "model",
    "train": "trainer",
}
__all__ = ["DistillInfoNCELoss", "LORA_DEFAULT_ABOVE", "LOSSES", "TrainingConfig", "apply_lora",
           "build_dataset", "build_loss", "build_model", "infonce_logits", "instructed_anchor", "load_pairs",
           "merge_lora", "train"]

if TYPE_CHECKING:
    from recemb_integrations.training.config import LORA_DEFAULT_ABOVE, LOSSES, TrainingConfig
    from recemb_integrations.training.data import build_dataset, instructed_anchor, load_pairs
    from recemb_integrations.training.losses import DistillInfoNCELoss, build_loss, infonce_logits
    from recemb_integrations.training.model import apply_lora, build_model, merge_lora
    from recemb_integrations.training.trainer import train


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
