"""Training hyperparameters, in a module of their own so the CLI can show the defaults without importing
the training stack (sentence-transformers, datasets, peft)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LOSSES = ("infonce", "distill")
# Full fine-tuning above this many parameters is out of reach of most single machines; LoRA is the default there.
LORA_DEFAULT_ABOVE = 300_000_000


@dataclass
class TrainingConfig:
    """Hyperparameters; the defaults are the E5-mistral recipe (Wang et al., 2024, §4.1)."""

    loss: str = "infonce"
    temperature: float = 0.02  # InfoNCE τ; the logit scale is 1/τ = 50
    epochs: float = 1.0
    max_steps: int = -1  # > 0 overrides epochs
    batch_size: int = 64  # texts per anchor column per step (in-batch negatives come from it)
    mini_batch_size: int | None = None  # gradient caching: forward/backward this many at a time (infonce)
    learning_rate: float = 1e-4
    warmup_steps: int = 100  # then linear decay to 0
    weight_decay: float = 0.1
    max_length: int | None = 512  # tokens per training text, EOS included
    query_instruction: str | None = None  # anchors without their own: a task name or text; None = web search
    lora: bool | None = None  # None: LoRA above LORA_DEFAULT_ABOVE parameters, full fine-tuning below
    lora_r: int = 16
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    contrastive_weight: float = 1.0  # distill: weight of the InfoNCE term next to the distillation term
    seed: int = 42
    logging_steps: int = 50
    dtype: str = "float32"
    extra_args: dict[str, Any] = field(default_factory=dict)  # passed to SentenceTransformerTrainingArguments

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be >= 2: in-batch negatives need other rows")
