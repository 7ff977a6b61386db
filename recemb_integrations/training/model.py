"""The trainable model: a SentenceTransformer around ``RecembModule``, LoRA applied (peft) or every weight
trainable, and the LoRA update merged back into plain weights."""

from __future__ import annotations

import os

import torch
from torch import nn

from recemb_integrations._imports import require

__all__ = ["apply_lora", "build_model", "merge_lora"]

_st = require("sentence_transformers", "sentence-transformers")

from sentence_transformers.base.modules import Normalize  # noqa: E402

from recemb.core import Embedder  # noqa: E402
from recemb_integrations.sentence_transformers import RecembModule, default_prompts  # noqa: E402
from recemb_integrations.training.config import LORA_DEFAULT_ABOVE, TrainingConfig  # noqa: E402

# --------------------------------------------------------------------------------------------- LoRA


def apply_lora(encoder: nn.Module, r: int = 16, alpha: int = 16, dropout: float = 0.0) -> nn.Module:
    """LoRA on every linear layer of the encoder (in_proj and out_proj of each mixer); only the adapters train."""
    peft = require("peft", "train")
    targets = sorted({name.rsplit(".", 1)[-1] for name, m in encoder.named_modules() if isinstance(m, nn.Linear)})
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none")
    # Into the layers, not the encoder: peft refuses out_proj for any model whose config says model_type "mamba2"
    # (mamba_ssm's fused CUDA path bypasses it); recemb's mixer calls out_proj as a plain nn.Linear.
    peft.inject_adapter_in_model(config, encoder.layers)
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


# --------------------------------------------------------------------------------------------- model


def build_model(model: str | os.PathLike | Embedder, config: TrainingConfig, tokenizer=None):
    """A trainable SentenceTransformer (RecembModule + Normalize) on the torch backend, LoRA applied if chosen."""
    embedder = model if isinstance(model, Embedder) else Embedder.from_pretrained(
        model, device="cpu" if not torch.cuda.is_available() else None, dtype=config.dtype, tokenizer=tokenizer)
    if embedder.tokenizer is None:
        raise ValueError(f"{model} has no tokenizer files; pass tokenizer=...")
    module = RecembModule(embedder, max_seq_length=config.max_length)
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
