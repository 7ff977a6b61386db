"""The model card (README.md) of ``recemb-mamba2-mini``, filled in from its ``training.json`` and
``config.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from tools.mini_model import NAME


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def _static_line(s: dict) -> str:
    steps = s["static"]["validation_by_epoch"]
    def one(h: dict) -> str:
        bands = "/".join(f"{x:.2f}" for x in h.get("long_acc_by_quarter", []))
        return f"epoch {h['epoch']}: long {bands}, STS-B dev {h.get('sts_dev', float('nan')):.1f}"
    best = max(steps, key=lambda h: h.get("score", 0))
    return f"{one(steps[0])} → best {one(best)}"


def _reused(s: dict) -> str:
    reused = s.get("reused_stages") or {}
    if not reused:
        return ""
    parts = [f"{k} ({_minutes(v)} when computed)" if v is not None else k for k, v in reused.items()]
    return ", with " + ", ".join(parts) + " reused from the work folder"


def _shape(s: dict, c: dict) -> dict:
    """The student's layout: builds before the layout was recorded summed in layer 0."""
    return s.get("shape") or {"hidden_size": c["hidden_size"], "layers": c["num_hidden_layers"], "pool_layer": 0}


def _branches(shape: dict) -> str:
    """Which layers are the branches, in words."""
    pool = shape["pool_layer"] % shape["layers"]
    below, above = list(range(pool)), list(range(pool + 1, shape["layers"]))
    parts = ([f"layer{'s' * (len(below) > 1)} {', '.join(map(str, below))} below the sum (each token rewritten from "
              "what came before it, before it is summed)"] if below else []) + \
            ([f"layer{'s' * (len(above) > 1)} {', '.join(map(str, above))} above it (reading the running sum)"]
             if above else [])
    return " and ".join(parts) or "none"


def _stage2(s: dict, c: dict) -> str:
    shape = _shape(s, c)
    pool = shape["pool_layer"] % shape["layers"]
    return f"""- Stage 2, the student: transformers' Mamba2 initialisation (seed {s["seed"]}), then `pooling_init`
  makes layer {pool} compute exactly that sum (a token's vector norm becomes its step size dt) and sets the other
  layers to the identity (out_proj = 0: residual branches that start at zero): {_branches(shape)}. A branch below
  the sum gets heads whose decays |A| span 1e-3..4 (a few tokens' context to a long memory), one above it
  1e-4..1e-2, so that once trained it reads the whole input rather than its last tokens."""


def _teacher_cache(s: dict) -> str:
    counts = s.get("teacher_texts")
    if not counts or not counts["cached"]:
        return ""
    return (f"; this build embedded {counts['embedded']:,} texts and took {counts['cached']:,} from an earlier "
            "build's cache, so its teacher stage is shorter than a build from scratch")


def _stage3(s: dict, ly: dict) -> str:
    if not ly["steps"]:
        v = s["layers"]["validation"]
        return (f"- Stage 3, the layers: not trained in this build (`--layer-steps 0`): the branches stay the "
                f"identity and the model is the static student (what training them does is measured in "
                f"docs/quality.md in the repository). Validation: long "
                f"{'/'.join(f'{x:.2f}' for x in v['long_acc_by_quarter'])}, STS-B dev {v['sts_dev']:.1f}.")
    shipped = s["layers"]["shipped_step"]
    bands = "/".join(f"{x:.2f}" for x in s["layers"]["validation"]["long_acc_by_quarter"])
    note = (" The best validation was the start (step 0), so the start is what ships." if shipped == 0 else
            f" The weights shipped are those of step {shipped}, the best validation.")
    below = ("the embeddings, the summing layer and the final norm frozen (the static sum stays as fitted)"
             if not ly["base_lr_scale"] else
             f"{ly['base_lr_scale']} × that for the embeddings, the summing layer and the final norm")
    return f"""- Stage 3, the layers: AdamW, {ly["steps"]} steps, learning rate {ly["learning_rate"]}
  for the branches and {below},
  {ly["warmup_steps"]} warm-up steps then cosine decay; after every {ly["long_every"]}
  steps of {ly["short_batch"]} (query, passage) pairs one step of {ly["long_batch"]}
  windows of one book (up to {ly["long_max_tokens"]} tokens), each found from one of its sentences. Loss:
  cosine distance to the teacher target + {ly["contrastive_weight"]} × InfoNCE
  (τ = {ly["temperature"]}).{_gates(ly)} Checkpointed every {ly["checkpoint_seconds"]:.0f} s.
  Validation of the weights shipped: long {bands},
  STS-B dev {s["layers"]["validation"]["sts_dev"]:.1f}. The loss curve is in `training.json`.""" + note


def _gates(ly: dict) -> str:
    lr = ly.get("gate_learning_rate", 0.0)
    if not lr:
        return ""
    return (f" Each branch trains as out_proj = gate ⊙ V with a per-channel gate that starts at 0 "
            f"(learning rate {lr}) and V random; the gates are folded into out_proj in the export.")


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
    st, ly = s["static"]["config"], s["layers"]["config"]
    shape = _shape(s, c)
    projection = ("rotated onto their principal directions (uncentred; the student has the teacher's width, so "
                  "nothing is lost)" if c["hidden_size"] >= 384 else
                  f"projected onto their top {c['hidden_size']} principal directions (uncentred, so cosines are kept)")
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
({n_params / 1e6:.1f} M parameters, {size_mb:.0f} MB in fp16), trained on two CPU cores; expect
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
bash scripts/install.sh train && python -m tools.mini_model --out recemb/models/{NAME} --seed {s["seed"]} \\
    --layer-steps {ly["steps"]} --width {shape["hidden_size"]} --layers {shape["layers"]} \\
    --pool-layer {shape["pool_layer"]} --work WORK
# after a stop (the layers are checkpointed every few minutes): the same command with --resume WORK
```

- Teacher: {s["teacher"]}, max 256 tokens. Its 384-d embeddings are {projection} and re-normalised: these
  are the targets.
  A long window's target is the mean of its teacher-embedded chunks (the teacher reads 256 tokens).
- Data ({s["pairs"]:,} (query, passage) pairs, documents only, never an evaluation query or judgment):
  {sources}. "ir" = title → body of the documents under `shared/data/ir`; "sts" = STS-B *train* pairs scored ≥ 3;
  "book" = a sentence → the rest of its passage, from the books under `shared/data/long` except War and Peace
  (held out for the long-document test); "docstring" = a summary line → the rest of a Python standard-library
  docstring; "package_docstring" = the same from the Python packages installed on the build machine (a sample);
  "manpage" = a manual page's NAME line → its DESCRIPTION. A docstring or manual page that contains an evaluation
  query or STS-B test sentence is left out. 70 % of the queries carry a random E5
  retrieval instruction (`Instruct: ...\\nQuery: `); the target is the teacher's embedding of the bare query.
  Long windows: {s["long_windows"]["train"]:,} windows of 8 × 180 words from the same books (the last 15 % of each
  book is kept apart for validation: {s["long_windows"]["validation"]} windows), with their sentences of 7–40 words.
- Stage 1, static token vectors: start from the teacher's embedding of each token alone, projected like the
  targets, times its smooth-inverse-frequency weight (a = 1e-3); then sparse Adam (lr {st["learning_rate"]},
  {st["epochs"]} epochs) on the cosine distance of each text's sum of token vectors to its
  teacher target + {st["contrastive_weight"]} × InfoNCE (τ = {st["temperature"]}) over
  batches of {st["batch_size"]} pairs and batches of {st["long_batch"]} windows of one book,
  each found from one of its sentences. Validation (held-out windows by quarter of the window, STS-B dev):
  {_static_line(s)}.
{_stage2(s, c)}
{_stage3(s, ly)}
- Time on 2 CPU cores: {_minutes(s["total_seconds"])} in all{" (resumed once at least)" if s["resumed"] else ""}\
{_reused(s)}; by
  stage: {", ".join(f"{k} {_minutes(v)}" for k, v in s["stage_seconds"].items())} (the teacher's embeddings are
  cached per text in the work folder, so a resumed or repeated run does not redo them{_teacher_cache(s)}).
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
documents, STS-B train, public-domain books, the Python standard library's docstrings (PSF licence), docstrings of
the Python packages installed on the build machine (under their own licences) and its manual pages.
"""
    (folder / "README.md").write_text(card)
    return folder / "README.md"
