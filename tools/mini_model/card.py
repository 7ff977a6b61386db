"""The model card (README.md) of ``recemb-mamba2-mini``, filled in from its ``training.json`` and
``config.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from tools.mini_model import NAME


def _timing(s: dict) -> str:
    if s.get("teacher_targets_cached"):
        teacher = s["teacher_compute_seconds"] / 60
        return (f"{s['total_seconds'] / 60:.0f} min, with the teacher's targets reused from the work folder's cache "
                f"(computing them took {teacher:.0f} min, so about {s['total_seconds'] / 60 + teacher:.0f} min from "
                f"scratch)")
    return (f"{s['total_seconds'] / 60:.0f} min in all ({s['teacher_seconds'] / 60:.0f} min of it the teacher's "
            f"embeddings)")


def _history(summary: dict) -> str:
    losses = summary.get("static_fit_heldout_loss") or []
    return "held-out loss " + " → ".join(f"{x:.3f}" for x in losses) if losses else "no history recorded"


def write_card(folder: str | os.PathLike, evaluation: str | None = None) -> Path:
    """The model card (README.md) from ``training.json``; ``evaluation`` is a markdown table to include."""
    folder = Path(folder)
    s = json.loads((folder / "training.json").read_text())
    c = json.loads((folder / "config.json").read_text())
    sources = ", ".join(f"{k} {v:,}" for k, v in sorted(s["pairs_by_source"].items()))
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        n_params = sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())
    card = f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, feature-extraction, mamba2, recemb, distillation]
---

# {NAME}

recemb's bundled default model: a **small Mamba2 text embedder distilled from all-MiniLM-L6-v2**, trained on this
project's 2-core CPU machines from offline material only. It exists so that `recemb sync` / `recemb search`, the
examples and the tests work on a fresh machine with no model download.

**What it is not**: a paper-scale embedder. It is {c["num_hidden_layers"]} layers of width {c["hidden_size"]}
({n_params / 1e6:.1f} M parameters, {size_mb:.0f} MB in fp16), trained for under an hour; expect
quality below its teacher on most inputs (numbers below). Paper-scale checkpoints (Codestral Mamba2 7B,
mamba2-1.3b fine-tuned with `recemb train`) load the same way: `Embedder.from_pretrained(path)`.

## Architecture

Mamba2: {c["num_hidden_layers"]} layers, hidden size {c["hidden_size"]}, {c["num_heads"]} heads of
{c["head_dim"]}, state size {c["state_size"]}, {c["n_groups"]} group, conv width {c["conv_kernel"]}; the teacher's
WordPiece tokenizer (vocabulary {c["vocab_size"]:,}, lower-cased), whose `[SEP]` (id {c["eos_token_id"]}) is the
EOS at which the embedding is taken. {c["hidden_size"]}-dimensional, L2-normalised embeddings; no length limit
(vertical chunking keeps memory constant).

## Training (reproduce with one command)

```bash
bash scripts/install.sh train && python -m tools.mini_model --out recemb/models/{NAME} --seed {s["seed"]}
```

- Teacher: {s["teacher"]}, max 256 tokens. Its 384-d embeddings are projected onto their top
  {c["hidden_size"]} principal directions (uncentred, so cosines are kept) and re-normalised: these are the targets.
- Student initialisation: transformers' Mamba2 initialisation (seed {s["seed"]}), then static token vectors are
  fitted to the teacher (`learn_static_vectors`: start from the teacher's embedding of each token alone, projected
  like the targets, times its smooth-inverse-frequency weight, a = 1e-3; then Adam on 1 - cos(sum of the text's
  token vectors, teacher target) over the training texts, {len(s.get("static_fit_heldout_loss", [])) - 1} epochs,
  keeping the epoch with the lowest loss on 5 % held-out texts: {_history(s)}), and `pooling_init` makes layer 0
  compute exactly that sum (a token's vector norm becomes its step size dt) with the other layers set to the
  identity (out_proj = 0). Training starts from a model2vec-style embedder and learns what a sum cannot (word
  order, context, ignoring instructions).
- Data ({s["rows"]:,} (query, passage) pairs, documents only, never an evaluation query or judgment):
  {sources}. "ir" = title → body of the documents under `shared/data/ir`; "sts" = STS-B *train* pairs scored ≥ 3;
  "book" = a sentence → the rest of its passage, from the books under `shared/data/long` except War and Peace
  (held out for the long-document test); "docstring" = a summary line → the rest of a Python standard-library
  docstring; "manpage" = a manual page's NAME line → its DESCRIPTION. 70 % of the queries carry a random E5
  retrieval instruction (`Instruct: ...\\nQuery: `); the target is the teacher's embedding of the bare query.
- Loss: cosine distance of query and passage embeddings to their teacher targets + {s["config"]["contrastive_weight"]}
  × InfoNCE (τ = {s["config"]["temperature"]}, in-batch negatives), through sentence-transformers' trainer
  (`recemb_integrations.training`, loss "distill"). AdamW, learning rate {s["config"]["learning_rate"]}, linear
  decay after {s["config"]["warmup_steps"]} warm-up steps, weight decay {s["config"]["weight_decay"]}, batch
  {s["config"]["batch_size"]} pairs, {s["config"]["epochs"]} epoch = {s["steps"]} steps, max length
  {s["config"]["max_length"]} tokens, full fine-tuning, seed {s["seed"]}.
- Time on 2 CPU cores: {_timing(s)}. Final logged loss {s["final_logged_loss"]:.4f} (mean over training \
{s["train_loss"]:.4f}).
  The loss curve is in `training.json`.
"""
    if evaluation:
        card += f"""
## Evaluation

`python3 benchmarks/retrieval_eval.py` (queries through `encode_queries`, documents through `encode_documents`):

{evaluation}
"""
    card += """
## Usage

```python
from recemb.core import Embedder
emb = Embedder.from_pretrained("recemb-mamba2-mini")      # bundled: no download
emb.encode_queries(["how do tides work?"]); emb.encode_documents(["a long document ..."])
```

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(str(recemb.core.loading.bundled_model_path("recemb-mamba2-mini")), trust_remote_code=True)
```

Licence: the teacher (all-MiniLM-L6-v2) is Apache-2.0; the training text is the shared evaluation corpora's
documents, STS-B train, public-domain books, the Python standard library's docstrings (PSF licence) and manual
pages installed on the machine.
"""
    (folder / "README.md").write_text(card)
    return folder / "README.md"
