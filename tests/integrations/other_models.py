"""Tiny random sentence-transformers models (a BERT of two layers, a WordPiece vocabulary of real words and pieces,
mean pooling, normalised), built in a temporary folder: "a model a user already trusts" for the tests of issue #62,
with nothing downloaded. ``counting`` wraps one so a test can tell which texts reached it."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("harbour boats herring cod dawn tide moon lantern rope sail net gull quay winter storm keel mast anchor "
         "beacon breakwater current drift estuary ferry fog galley hull inlet jetty ketch lighthouse mooring oar "
         "pier reef shoal skiff spray stern swell tugboat wharf state space models carry fixed size recurrent "
         "memory grow input scan chunks matrix the of a in to and is was for on with as by at from").split()


def wordpiece_tokenizer(pieces: list[str], window: int | None = None):
    """A BERT-like fast tokenizer ([CLS] text [SEP], lower-cased, accents stripped) over ``pieces`` (words and
    "##" continuations): most words the vocabulary lacks split in pieces."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    core = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    core.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                                  ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]",
                                   **({"model_max_length": window} if window else {}))


def build_sentence_transformer(folder: Path, window: int = 48, seed: int = 0, dim: int = 32) -> Path:
    """A sentence-transformers folder (``modules.json``) of a random BERT whose window is ``window`` tokens."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokenizer = wordpiece_tokenizer([*WORDS, *letters, *("##" + c for c in letters), *".,;:!?'\"-()",
                                     *("##" + "".join(rng.choice(letters) for _ in range(2)) for _ in range(60))],
                                    window)
    vocab = tokenizer.get_vocab()
    torch.manual_seed(seed)
    bert = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=dim, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=2 * dim, max_position_embeddings=max(window, 64)))
    raw = folder.parent / (folder.name + "-bert")
    bert.save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    transformer = models.Transformer(str(raw), max_seq_length=window)
    model = SentenceTransformer(modules=[transformer, models.Pooling(dim, "mean"), models.Normalize()], device="cpu")
    model.save(str(folder))
    return folder


class Counting:
    """A sentence-transformers model whose ``encode`` records every text it was given (``texts``)."""

    def __init__(self, model):
        self.model, self.texts = model, []
        self.tokenizer, self.max_seq_length = model.tokenizer, model.max_seq_length

    def encode(self, sentences, **kwargs):
        self.texts += [sentences] if isinstance(sentences, str) else list(sentences)
        return self.model.encode(sentences, **kwargs)

    def get_embedding_dimension(self):
        return self.model.get_embedding_dimension()

    def __getitem__(self, i):
        return self.model[i]
