"""Shared test helpers: error ratios, a tiny tokenizer, tiny random Mamba2 checkpoints in every format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

SAMPLE_TEXT = (
    "State space models carry a fixed-size recurrent state, so their memory does not grow with the input. "
    "Mamba2 computes the scan in chunks with matrix multiplications. Vertical chunking feeds the input to all "
    "layers one chunk at a time and carries every layer's state to the next chunk. "
)


def _as_tensor(values) -> torch.Tensor:
    return values if isinstance(values, torch.Tensor) else torch.as_tensor(np.asarray(values))


def rel_err(ref: torch.Tensor, got: torch.Tensor, scale: str = "row") -> float:
    """Relative error of ``got`` against ``ref``, in fp64.

    scale="row": the largest per-row ||got - ref|| / ||ref|| (rows = last dim); robust for any scale (model
        outputs, embeddings).
    scale="max": max |got - ref| / max |ref| over the whole tensor (0 when both are all zero); the kernel
        tests' metric, where one small element of a tensor may carry a large error relative to itself.
    """
    if scale == "max":
        ref, got = ref.double(), got.double()
        top = ref.abs().max().item() if ref.numel() else 0.0
        diff = (got - ref).abs().max().item() if ref.numel() else 0.0
        return diff / top if top > 0 else diff
    if scale != "row":
        raise ValueError(f'scale must be "row" or "max", got {scale!r}')
    ref = ref.double().reshape(-1, ref.shape[-1]) if ref.dim() else ref.double().reshape(1, 1)
    got = got.double().reshape(ref.shape)
    den = ref.norm(dim=-1).clamp_min(1e-30)
    return float(((got - ref).norm(dim=-1) / den).max()) if ref.numel() else 0.0


def assert_close(name: str, ref, got, tol: float, scale: str = "row") -> None:
    """Same shape, finite, and ``rel_err(ref, got, scale) <= tol``; the one closeness check of the tests.

    ref, got: tensors, or anything numpy reads (arrays from ``encode``, lists of floats from the adapters)."""
    ref, got = _as_tensor(ref), _as_tensor(got)
    assert ref.shape == got.shape, f"{name}: shape {tuple(got.shape)} != reference {tuple(ref.shape)}"
    bad = ~torch.isfinite(got)
    # Kernel tests fill fresh buffers with NaN (tests/kernels/conftest.py): a non-finite output is most often
    # an element the kernel never wrote.
    assert not bad.any(), f"{name}: {int(bad.sum())} non-finite values (an output element was never written?)"
    err = rel_err(ref, got, scale)
    assert err <= tol, f"{name}: relative error {err:.3e} > {tol:.1e}"


def build_tokenizer(folder: Path, eos: str = "</s>") -> None:
    """A small byte-level BPE with <s>=0 </s>=1 <pad>=2, saved as tokenizer.json + tokenizer_config.json.

    BOS is added by the tokenizer (like Mistral's), EOS is not (recemb must append it).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([SAMPLE_TEXT] * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token=eos, pad_token="<pad>")
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))


TINY_CONFIGS = {
    # name: transformers Mamba2Config kwargs
    "g1": dict(hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16, n_groups=1, state_size=8,
               chunk_size=8),
    "g3": dict(hidden_size=48, num_hidden_layers=3, num_heads=6, head_dim=16, n_groups=3, state_size=16,
               chunk_size=16),
    "g2-bias-limit": dict(hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16, n_groups=2, state_size=32,
                          chunk_size=32, use_bias=True, time_step_limit=(0.01, 0.5), residual_in_fp32=False),
}


def transformers_model(name: str = "g1", vocab_size: int = 320, seed: int = 0, **overrides):
    """A transformers Mamba2Model with random, non-trivial weights (norms, D and dt_bias perturbed too)."""
    from transformers import Mamba2Config, Mamba2Model

    kwargs = dict(TINY_CONFIGS[name], expand=2, conv_kernel=4, vocab_size=vocab_size,
                  bos_token_id=0, eos_token_id=1, pad_token_id=2)
    kwargs.update(overrides)
    torch.manual_seed(seed)
    model = Mamba2Model(Mamba2Config(**kwargs)).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight") or pname.endswith("norm_f.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif pname.endswith(".D"):
                p.copy_(torch.randn_like(p))
            elif pname.endswith("dt_bias"):
                p.add_(0.5 * torch.randn_like(p))
            elif pname.endswith("A_log"):
                p.copy_(torch.log(torch.rand_like(p) * 4 + 0.5))
            else:
                p.add_(0.02 * torch.randn_like(p))
    return model


def save_transformers_checkpoint(model, folder: Path, tokenizer: bool = True, **save_kwargs) -> Path:
    model.save_pretrained(str(folder), **save_kwargs)
    if tokenizer:
        build_tokenizer(folder)
    return folder


def save_mamba_ssm_checkpoint(model, folder: Path, pad_vocab_size_multiple: int = 16) -> Path:
    """The same weights in mamba_ssm's layout: ``backbone.embedding.weight``, tied ``lm_head``, config with ssm_cfg.

    ``model.config.vocab_size`` must already be a multiple of ``pad_vocab_size_multiple``; the config records a
    smaller, unpadded vocab to exercise the padding rule.
    """
    c = model.config
    assert c.vocab_size % pad_vocab_size_multiple == 0
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "d_model": c.hidden_size, "d_intermediate": 0, "n_layer": c.num_hidden_layers,
        "vocab_size": c.vocab_size - pad_vocab_size_multiple + 3,
        "ssm_cfg": {"layer": "Mamba2", "d_state": c.state_size, "ngroups": c.n_groups, "headdim": c.head_dim,
                    "chunk_size": c.chunk_size, "bias": c.use_bias},
        "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": c.residual_in_fp32,
        "fused_add_norm": True, "pad_vocab_size_multiple": pad_vocab_size_multiple, "tie_embeddings": True,
    }
    (folder / "config.json").write_text(json.dumps(config))
    state = {}
    for k, v in model.state_dict().items():
        key = "backbone." + k.replace("embeddings.", "embedding.", 1)
        state[key] = v.clone()
    state["lm_head.weight"] = state["backbone.embedding.weight"]
    torch.save(state, folder / "pytorch_model.bin")
    return folder


def save_codestral_checkpoint(model, folder: Path) -> Path:
    """mistral_inference layout: params.json + consolidated.safetensors with ``model.backbone.*`` keys."""
    from safetensors.torch import save_file

    c = model.config
    assert c.num_heads * c.head_dim == 2 * c.hidden_size and c.head_dim == 64 and c.state_size == 128
    folder.mkdir(parents=True, exist_ok=True)
    params = {"dim": c.hidden_size, "n_layers": c.num_hidden_layers, "vocab_size": c.vocab_size,
              "n_groups": c.n_groups, "rms_norm": True, "residual_in_fp32": True, "fused_add_norm": True,
              "pad_vocab_size_multiple": 1, "tie_embeddings": False, "model_type": "mamba"}
    (folder / "params.json").write_text(json.dumps(params))
    state = {"model.backbone." + k.replace("embeddings.", "embedding.", 1): v.clone().contiguous()
             for k, v in model.state_dict().items()}
    state["model.lm_head.weight"] = torch.randn(c.vocab_size, c.hidden_size)
    save_file(state, str(folder / "consolidated.safetensors"))
    return folder


def sigkill_after_progress(argv: list[str], progress: Path, at_least: int, timeout: float = 180.0) -> int:
    """Run ``argv`` (a Python script that appends a line to ``progress`` per document written), SIGKILL it once at
    least ``at_least`` lines are there, and return how many were written: a process killed mid-way, as by a crash.
    Fails if the process ended by itself first."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=os.getcwd())
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if progress.exists() and len(progress.read_text().split()) >= at_least:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the process finished (or failed) before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return len(progress.read_text().split())


# fp16's unit roundoff: the largest relative change rounding a value to float16 makes (normal range)
FLOAT16_ROUNDOFF = 2.0 ** -11


def assert_stored_dense(stored, expected, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """A dense vector as a store gave it back, against the one the model made: equal at float32 (within ``rtol`` /
    ``atol``), or, where the store keeps float16 originals (a compact collection), each value the model's rounded to
    float16: only float16 values are taken for that, within fp16's unit roundoff of the model's."""
    stored, expected = np.asarray(stored, np.float64), np.asarray(expected, np.float64)
    assert stored.shape == expected.shape
    if np.allclose(stored, expected, rtol=rtol, atol=atol):
        return
    assert np.array_equal(stored.astype(np.float16).astype(np.float64), stored), (
        "the stored vector differs from the model's and is not a float16 rounding of it")
    np.testing.assert_allclose(stored, expected, rtol=FLOAT16_ROUNDOFF, atol=atol + 2.0 ** -25)


def passage_windows(ids: list[int], size: int, overlap: int) -> list[list[int]]:
    """A document's passages as the main job cuts them (windows of ``size`` body tokens every ``size - overlap``,
    each with the EOS), written out from the rule, independently of ``PassageWindows``."""
    body, eos = ids[:-1], ids[-1]
    return [body[s:s + size] + [eos] for s in range(0, max(len(body) - overlap, 1), size - overlap)]


def expected_document_vectors(emb, texts, passage_tokens: int | None = None, passage_overlap: int = 0,
                              passages_above: int | None = None, way: str = "passages",
                              max_length: int | None = None) -> np.ndarray:
    """The documents' own vectors a sync stores, computed independently: a document with passages (more than
    ``passages_above`` body tokens; None: ``passage_tokens``, the library's threshold for named passages) embedded
    as passages only (``way`` "passages", the default) is the normalised mean of its windows embedded alone; any
    other document, or way, is its whole embedding."""
    ids = emb.tokenize(list(texts), max_length=max_length)
    whole = emb.embed_token_ids(ids, normalize=True).numpy()
    above = passage_tokens if passages_above is None else passages_above
    out = []
    for row, seq in zip(whole, ids):
        if way != "passages" or passage_tokens is None or len(seq) - 1 <= above:
            out.append(row)
            continue
        mean = emb.embed_token_ids(passage_windows(seq, passage_tokens, passage_overlap),
                                   normalize=True).numpy().astype(np.float64).sum(axis=0)
        out.append(mean / np.linalg.norm(mean))
    return np.stack(out)


def stored_points(store, collection: str) -> dict:
    """Every point of a collection in an open store: id -> (payload, dense vector as float64, BM25 vector as index ->
    value)."""
    points, _ = store.scroll(collection, limit=1_000_000, with_payload=True, with_vectors=True)
    out = {}
    for p in points:
        sparse = p.vector.get("bm25")
        pairs = sparse.as_dict().items() if hasattr(sparse, "as_dict") else (
            zip(sparse.indices, sparse.values) if sparse is not None else ())
        out[str(p.id)] = (p.payload, np.asarray(p.vector["dense"], dtype=np.float64),
                          {int(i): float(np.float32(v)) for i, v in pairs})
    return out
