"""Losses: InfoNCE through sentence-transformers' (cached) multiple-negatives ranking loss, and the
distillation loss (cosine distance to teacher embeddings + InfoNCE)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from recemb_integrations._imports import require

__all__ = ["DistillInfoNCELoss", "build_loss", "infonce_logits"]

require("sentence_transformers", "sentence-transformers")

from sentence_transformers.sentence_transformer import losses as st_losses  # noqa: E402

from recemb_integrations.training.config import TrainingConfig  # noqa: E402


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


def build_loss(st_model, config: TrainingConfig):
    scale = 1.0 / config.temperature
    if config.loss == "distill":
        return DistillInfoNCELoss(st_model, config.temperature, config.contrastive_weight)
    if config.mini_batch_size:
        return st_losses.CachedMultipleNegativesRankingLoss(st_model, scale=scale,
                                                            mini_batch_size=config.mini_batch_size)
    return st_losses.MultipleNegativesRankingLoss(st_model, scale=scale)
