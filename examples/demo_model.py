"""Builds a demo Mamba2 model folder (random weights, a BPE tokenizer trained on the given text).

Used by the examples until recemb ships its own trained default model; a random model shows speed and memory,
not retrieval quality.
"""

from __future__ import annotations

from pathlib import Path


def build_demo_model(folder: Path, text: str, hidden_size: int = 256, layers: int = 8, vocab_size: int = 8192) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from recemb.core import Mamba2Config, Mamba2Encoder, save_encoder

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(folder))

    config = Mamba2Config(hidden_size=hidden_size, num_hidden_layers=layers, num_heads=2 * hidden_size // 64,
                          head_dim=64, state_size=128, vocab_size=vocab_size, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    model = Mamba2Encoder(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.linspace(1, 16, p.numel())))
            elif name.endswith("dt_bias"):
                p.copy_(torch.log(torch.expm1(torch.full_like(p, 0.01))))
            elif p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02)
    save_encoder(model, folder)
    return folder
