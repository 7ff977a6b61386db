"""Text -> token ids, with BOS as the tokenizer adds it and EOS always last (the E5-mistral recipe)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


class TextTokenizer:
    """Wraps a transformers fast tokenizer; ``encode`` returns ids ending in exactly one EOS."""

    def __init__(self, tokenizer, eos_token_id: int | None = None):
        self.tokenizer = tokenizer
        tokenizer.model_max_length = sys.maxsize  # no truncation and no length warning: long inputs are the point
        eos = eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token (nor sep_token); pass eos_token_id explicitly")
        self.eos_token_id = int(eos)
        # A post-processor that already ends every sequence with EOS (e.g. BERT's [SEP]) must not get a second one.
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        self.appends_eos = bool(probe) and probe[-1] == self.eos_token_id

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, eos_token_id: int | None = None) -> "TextTokenizer | None":
        """None when the folder holds no tokenizer files (tokenizer.json / tokenizer_config.json)."""
        folder = Path(folder)
        if (folder / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            return cls(AutoTokenizer.from_pretrained(str(folder)), eos_token_id)
        if (folder / "tokenizer.json").is_file():
            from transformers import PreTrainedTokenizerFast

            return cls(PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json")), eos_token_id)
        return None

    @classmethod
    def load(cls, name_or_path: str | os.PathLike, eos_token_id: int | None = None, **hub) -> "TextTokenizer":
        """From a folder with tokenizer files, or a hub id through transformers' AutoTokenizer."""
        path = Path(name_or_path).expanduser()
        if path.is_dir():
            tok = cls.from_folder(path, eos_token_id)
            if tok is None:
                raise FileNotFoundError(f"{path} has no tokenizer.json or tokenizer_config.json")
            return tok
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(name_or_path), **hub), eos_token_id)

    def encode(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        ids = self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        if not self.appends_eos:
            ids = [seq + [self.eos_token_id] for seq in ids]
        return ids

    def save(self, folder: str | os.PathLike) -> None:
        self.tokenizer.save_pretrained(str(folder))
