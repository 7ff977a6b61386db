"""Training hyperparameters, in a module of their own so the CLI can show the defaults without importing
the training stack (sentence-transformers, datasets, peft).

Each field is also a ``recemb train`` option, derived from the field (``add_cli_options``, ``from_cli``): the
option is the field name with dashes, its type the field's (``X | None`` -> X), its default the field's.
Field metadata adjusts that: ``help``, ``choices`` (a sequence, or a mapping from the spelling on the command
line to the field's value), ``flag`` (another option name) and ``cli=False`` (no option: Python API only).
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = ["LORA_DEFAULT_ABOVE", "LOSSES", "TrainingConfig", "add_cli_options", "cli_fields", "from_cli"]

LOSSES = ("infonce", "distill")
# Full fine-tuning above this many parameters is out of reach of most single machines; LoRA is the default there.
LORA_DEFAULT_ABOVE = 300_000_000


@dataclass
class TrainingConfig:
    """Hyperparameters; the defaults are the E5-mistral recipe (Wang et al., 2024, §4.1)."""

    loss: str = field(default="infonce", metadata={"choices": LOSSES})
    temperature: float = 0.02  # InfoNCE τ; the logit scale is 1/τ = 50
    epochs: float = 1.0
    max_steps: int = field(default=-1, metadata={"help": "overrides --epochs when > 0"})
    # texts per anchor column per step (in-batch negatives come from it)
    batch_size: int = field(default=64, metadata={"help": "pairs per step (in-batch negatives)"})
    mini_batch_size: int | None = field(
        default=None, metadata={"help": "gradient caching: texts per forward/backward (infonce)"})
    learning_rate: float = 1e-4
    warmup_steps: int = 100  # then linear decay to 0
    weight_decay: float = 0.1
    max_length: int | None = field(default=512, metadata={"help": "tokens per training text, EOS included"})
    # anchors without their own: a task name or text; None = web search
    query_instruction: str | None = field(default=None, metadata={
        "flag": "instruction",
        "help": "query instruction or E5 task name for anchors without their own "
                "(default: web search; '' for none)"})
    # None: LoRA above LORA_DEFAULT_ABOVE parameters, full fine-tuning below
    lora: bool | None = field(default=None, metadata={
        "choices": {"auto": None, "on": True, "off": False},
        "help": f"auto: LoRA above {LORA_DEFAULT_ABOVE // 10**6}M parameters, full fine-tuning below"})
    lora_r: int = 16
    lora_alpha: int = 16
    # cli=False: set through the Python API only, no ``recemb train`` option
    lora_dropout: float = field(default=0.0, metadata={"cli": False})
    contrastive_weight: float = field(default=1.0, metadata={
        "help": "--loss distill: weight of the InfoNCE term next to the distillation term"})
    seed: int = 42
    logging_steps: int = field(default=50, metadata={"cli": False})
    dtype: str = field(default="float32", metadata={"help": "training weight dtype"})
    # passed to SentenceTransformerTrainingArguments
    extra_args: dict[str, Any] = field(default_factory=dict, metadata={"cli": False})

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be >= 2: in-batch negatives need other rows")


# --------------------------------------------------------------------------------------------- command line


def cli_fields() -> list[tuple[Any, str]]:
    """(field, option name without dashes) for each field that is a ``recemb train`` option, in order."""
    return [(f, f.metadata.get("flag", f.name.replace("_", "-"))) for f in fields(TrainingConfig)
            if f.metadata.get("cli", True)]


def add_cli_options(parser: argparse.ArgumentParser) -> None:
    """Add one option per ``TrainingConfig`` field (see the module docstring) to an argparse parser."""
    hints = typing.get_type_hints(TrainingConfig)
    for f, flag in cli_fields():
        kwargs: dict[str, Any] = {"default": f.default}
        hint = hints[f.name]
        kind = next((a for a in typing.get_args(hint) if a is not type(None)), hint)  # X | None -> X
        choices = f.metadata.get("choices")
        if isinstance(choices, dict):  # command-line spellings of the values
            kwargs["default"] = next(k for k, v in choices.items() if v == f.default)
            kwargs["choices"] = list(choices)
        elif choices is not None:
            kwargs["choices"] = list(choices)
        elif typing.get_origin(kind) is Literal:
            kwargs["choices"] = list(typing.get_args(kind))
        elif kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind in (int, float):
            kwargs["type"] = kind
        elif kind is not str:
            raise TypeError(f"TrainingConfig.{f.name}: no command-line option for {hint}; "
                            "set metadata cli=False")
        if "help" in f.metadata:
            kwargs["help"] = f.metadata["help"]
        parser.add_argument(f"--{flag}", **kwargs)


def from_cli(args: argparse.Namespace) -> TrainingConfig:
    """The ``TrainingConfig`` of a namespace parsed with ``add_cli_options`` (fields without an option keep
    their defaults)."""
    values = {}
    for f, flag in cli_fields():
        value = getattr(args, flag.replace("-", "_"))
        choices = f.metadata.get("choices")
        values[f.name] = choices[value] if isinstance(choices, dict) else value
    return TrainingConfig(**values)
