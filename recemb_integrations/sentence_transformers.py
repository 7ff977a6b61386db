"""sentence-transformers module for recemb, and the export to a sentence-transformers folder.

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("recemb/codestral-mamba2", trust_remote_code=True)
    model.encode_query(["how do state space models scale?"])   # "Instruct: ...\\nQuery: " added
    model.encode_document([long_text], vertical_chunk_size=512)  # never an instruction

sentence-transformers 6 asks for ``trust_remote_code=True`` for any module class outside its own package, an
installed one included. Nothing is downloaded or executed from the model folder: the class is this file's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from recemb_integrations._imports import require

_st_modules = require("sentence_transformers.base.modules", "sentence-transformers")

from recemb.core import Embedder, architecture  # noqa: E402
from recemb.core.files import check_model_destination  # noqa: E402
from recemb.core.loading import hub_offline  # noqa: E402
from recemb.core.options import HUB_OPTIONS, MODEL_OPTIONS  # noqa: E402
from recemb.core.precision import check_quantize  # noqa: E402
from recemb.core.prompts import TASK_INSTRUCTIONS, query_prompt  # noqa: E402
from recemb.core.texts import check_texts  # noqa: E402
from recemb.core.vertical import pad_right  # noqa: E402

__all__ = ["CONFIG_FILE", "MODULE_MODEL_KWARGS", "RecembModule", "default_prompts", "export_sentence_transformers",
           "model_card"]

# model_kwargs: from_pretrained's options except the hub ones, which sentence-transformers passes itself; plus
# transformers' spelling torch_dtype. (sentence-transformers' own ``backend`` kwarg is its inference
# framework; ours travels in model_kwargs.)
MODULE_MODEL_KWARGS = tuple(k for k in MODEL_OPTIONS if k not in HUB_OPTIONS) + ("torch_dtype",)

CONFIG_FILE = "recemb_config.json"  # never config.json: that name is the backbone's config in the same folder


class RecembModule(_st_modules.InputModule):
    """Input module: tokenises (EOS appended, no truncation by default) and embeds with vertical chunking.

    Writes ``features["sentence_embedding"]`` (unnormalised; a ``Normalize`` module follows in exported models).
    Token embeddings are not produced: vertical chunking keeps only each sequence's last (EOS) state.

    Args:
        embedder: the loaded recemb ``Embedder``.
        max_seq_length: truncate inputs to this many tokens, EOS included; None (default) never truncates.
        vertical_chunk_size: V, tokens per vertical chunk; None picks per batch (see ``Embedder``; from the budget
            with ``model_kwargs={"max_memory": "2GiB"}``). Also accepted per call:
            ``model.encode(texts, vertical_chunk_size=512)``.
        quantize: "int8" when the module loads its model int8-quantised (recorded by
            ``export_sentence_transformers(..., quantize="int8")``; ``model_kwargs={"quantize": ...}`` overrides).
    """

    config_file_name = CONFIG_FILE
    config_keys = ["max_seq_length", "vertical_chunk_size", "quantize"]
    forward_kwargs = {"vertical_chunk_size", "task"}

    def __init__(self, embedder: Embedder, max_seq_length: int | None = None, vertical_chunk_size: int | None = None,
                 quantize: str | None = None):
        super().__init__()
        self.embedder = embedder
        self.quantize = quantize
        self.encoder = embedder.model  # registered as a submodule, so SentenceTransformer(...).to(device) moves it
        self.max_seq_length = max_seq_length
        self.vertical_chunk_size = vertical_chunk_size

    @property
    def tokenizer(self):
        return self.embedder.tokenizer.tokenizer if self.embedder.tokenizer is not None else None

    def preprocess(self, inputs: list[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        texts = check_texts(inputs, "inputs", single=False)
        ids = self.embedder.tokenize(texts, prompt=prompt or None, max_length=self.max_seq_length)
        input_ids, lengths = pad_right(ids, self.encoder.config.pad_token_id or 0)
        attention_mask = (torch.arange(input_ids.shape[1])[None] < lengths[:, None]).long()
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, features: dict[str, torch.Tensor], vertical_chunk_size: int | None = None, **kwargs):
        lengths = features["attention_mask"].sum(dim=1)
        # training: one horizontal pass that autograd can go through (encode() sets eval)
        pooled = self.embedder.embed_padded(features["input_ids"], lengths,
                                            vertical_chunk_size or self.vertical_chunk_size,
                                            differentiable=self.training)
        features["sentence_embedding"] = pooled.float()
        return features

    def set_context_extension(self, mode: str) -> None:
        """MambaExtend / LongMamba switch for the calibrated artifacts in the model folder (this module's)."""
        self.embedder.set_context_extension(mode)

    def get_embedding_dimension(self) -> int:
        return self.embedder.dim

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        self.encoder.save(output_path)  # the architecture's own format (config.json + model.safetensors)
        if self.encoder.context_extension is not None:  # calibrated artifacts travel with the weights
            self.encoder.context_extension.save(output_path)
        if self.embedder.tokenizer is not None:
            self.embedder.tokenizer.save(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        **kwargs,
    ) -> "RecembModule":
        """``model_kwargs`` takes ``Embedder.from_pretrained``'s options but the hub ones
        (``MODULE_MODEL_KWARGS``):
        ``device``, ``dtype`` (or ``torch_dtype``), ``max_memory`` (a budget such as "2GiB" for encoding
        beyond the weights: V and the rows per forward are picked to fit), ``backend`` (SSD scan: "auto" | "torch"
        | "triton"), ``chunk_size``, ``context_extension`` ("auto" | "off" | "mambaextend" | "longmamba" | "both", see
        ``Embedder.set_context_extension``), ``threads`` (CPU threads; default "auto", chosen per chunk from the
        cores other processes leave free), ... sentence-transformers' own ``backend`` kwarg is its inference
        framework and is not ours."""
        # Offline, the cache is asked directly: asking the hub first logs "Could not reach the Hub" per
        # lookup.
        hub = dict(subfolder=subfolder, token=token, cache_folder=cache_folder, revision=revision,
                   local_files_only=local_files_only or hub_offline())
        folder = cls.load_dir_path(model_name_or_path, **hub)
        config = cls.load_config(model_name_or_path, **hub)
        mk = dict(model_kwargs or {})
        unknown = sorted(set(mk) - set(MODULE_MODEL_KWARGS))
        if unknown:
            raise TypeError(f"unknown model_kwargs for RecembModule: {unknown}; "
                            f"allowed: {sorted(MODULE_MODEL_KWARGS)}")
        if "torch_dtype" in mk:
            mk.setdefault("dtype", mk.pop("torch_dtype"))
        mk.setdefault("quantize", config.get("quantize"))  # the export's choice, unless model_kwargs says otherwise
        embedder = Embedder.from_pretrained(folder, **mk)
        embedder.name = str(model_name_or_path)
        settings = {k: config.get(k) for k in cls.config_keys}
        settings["quantize"] = check_quantize(mk["quantize"])
        return cls(embedder, **settings)

RecEmbModule = RecembModule  # the name before one capitalisation (0.x); kept so code written for it still runs


def default_prompts() -> dict[str, str]:
    """``query`` (the web-search instruction), ``document`` (empty) and one prompt per E5 task name."""
    prompts = {"query": query_prompt(None), "document": ""}
    prompts.update({task: query_prompt(task) for task in TASK_INSTRUCTIONS})
    return prompts


def export_sentence_transformers(
    source: str | os.PathLike,
    destination: str | os.PathLike,
    tokenizer: str | os.PathLike | None = None,
    dtype: str | torch.dtype | None = None,
    max_seq_length: int | None = None,
    vertical_chunk_size: int | None = None,
    model_name: str | None = None,
    quantize: str | None = None,
) -> Path:
    """Write ``source`` (any checkpoint format ``Embedder.from_pretrained`` reads, or a recemb folder) as a
    sentence-transformers folder: RecembModule + Normalize, prompts, transformers-named weights with their
    ``config.json``, tokenizer files and a model card. ``quantize="int8"`` is recorded in the module's config:
    the weights are written unquantised (``dtype``) and the export loads int8-quantised on the CPU."""
    st = require("sentence_transformers", "sentence-transformers")
    destination = check_model_destination(destination)
    embedder = Embedder.from_pretrained(source, device="cpu", dtype=dtype, tokenizer=tokenizer)
    if embedder.tokenizer is None:
        raise ValueError(f"{source} has no tokenizer files; pass tokenizer=... (a folder or hub id)")
    quantize = check_quantize(quantize)
    if quantize is not None and embedder.model.int8_projections is None:
        raise ValueError(f"quantize={quantize!r} is implemented for Mamba2; {source} is "
                         f"{embedder.config.model_type!r}")
    module = RecembModule(embedder, max_seq_length=max_seq_length, vertical_chunk_size=vertical_chunk_size,
                          quantize=quantize)
    model = st.SentenceTransformer(modules=[module, _st_modules.Normalize()], prompts=default_prompts(),
                                   similarity_fn_name="cosine", device="cpu")
    model.save(str(destination))
    name = model_name or destination.name
    (destination / "README.md").write_text(model_card(name, embedder))
    return destination


def model_card(name: str, embedder: Embedder) -> str:
    c = embedder.config
    arch = architecture(c.model_type)  # its name and what its config.json + model.safetensors are
    tasks = ", ".join(sorted(TASK_INSTRUCTIONS)[:6])
    return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, feature-extraction, {c.model_type}, recemb]
---

# {name}

A {arch.display_name} text embedder packaged by recemb: {c.num_hidden_layers} layers,
hidden size {c.hidden_size}, {embedder.dim}-dimensional embeddings taken at an appended EOS token and
L2-normalised. Memory stays constant in the input length: the input is processed in vertical chunks of V tokens
that go through all layers before the next, with every layer's recurrent state carried across chunks.

## Usage

```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("{name}", trust_remote_code=True)
queries = model.encode_query(["how do state space models scale?"])      # instruction added
documents = model.encode_document(["a long document ..."])              # never an instruction
scores = model.similarity(queries, documents)
model.encode_query(["a scientific claim"], prompt_name="SciFact")       # E5 task instructions by name
```

Or without sentence-transformers:

```python
from recemb.core import Embedder
emb = Embedder.from_pretrained("{name}")
emb.encode_queries(["..."], instruction="SciFact"); emb.encode_documents(["..."])
```

## Why `trust_remote_code=True`

sentence-transformers 6 asks for the flag for every module class that is not part of sentence-transformers, even
one from an installed package. **No code is downloaded from this repository**: the module class
`recemb_integrations.sentence_transformers.RecembModule` ships with the `recemb` package
(the `sentence-transformers` extra).

## Instructions

Queries get `Instruct: {{instruction}}\\nQuery: {{query}}`; the default (`prompt_name="query"`) is the web-search
instruction. Named prompts exist for the E5 task instructions ({tasks}, ...). Documents never get an instruction, so
one document index serves every task.

## The vertical-chunk dial

`model.encode(texts, vertical_chunk_size=512)` (or `model[0].vertical_chunk_size = 512`) sets V, the tokens per
vertical chunk. It is a memory dial, not a hyperparameter: every V gives the same embedding up to floating-point
noise. Default: 4096 for a single text, 2·chunk_size for batches. `model_kwargs={{"max_memory": "2GiB"}}` picks V
(and how many texts run at once) to fit a memory budget instead. `max_seq_length` is None: nothing is truncated.

## Files

`config.json` and `model.safetensors` are {arch.backbone}; `recemb_config.json` holds the module settings;
`modules.json` and `config_sentence_transformers.json` are sentence-transformers' own.
"""
