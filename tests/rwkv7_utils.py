"""RWKV-7 test helpers: tiny random checkpoints in BlinkDL's ``.pth`` naming and in flash-linear-attention's
Hugging Face format, written independently of ``recemb.core.architectures.rwkv7``'s own key mapping, and the
``rwkv`` package's RWKV-7 as the reference model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

TINY_RWKV7 = dict(vocab_size=96, hidden_size=32, num_layers=3, head_size=8, decay_rank=8, a_rank=8, v_rank=4,
                  gate_rank=12, intermediate_size=64)


def random_pth_state(vocab_size: int = 96, hidden_size: int = 32, num_layers: int = 3, head_size: int = 8,
                     decay_rank: int = 8, a_rank: int = 8, v_rank: int = 4, gate_rank: int = 12,
                     intermediate_size: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random RWKV-7 in BlinkDL's naming and shapes (what RWKV-LM saves and the rwkv package loads), fp32.

    Weights are non-trivial: decays spread over their whole range, token-shift mixes in [0, 1], norms
    perturbed, value-residual gates and in-context rates away from 0 and 1. Layer 0 carries the unused
    v0/v1/v2 as BlinkDL's checkpoints do."""
    g = torch.Generator().manual_seed(seed)
    C, H, N = hidden_size, hidden_size // head_size, head_size

    def randn(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def rand(*shape):
        return torch.rand(*shape, generator=g)

    s: dict[str, torch.Tensor] = {"emb.weight": randn(vocab_size, C)}
    for i in range(num_layers):
        p = f"blocks.{i}."
        norms = ["ln1", "ln2"] + (["ln0"] if i == 0 else [])
        for ln in norms:
            s[p + ln + ".weight"] = randn(C, scale=0.2, shift=1.0)
            s[p + ln + ".bias"] = randn(C, scale=0.1)
        a = p + "att."
        for x in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            s[a + x] = rand(1, 1, C)
        s[a + "w0"] = randn(1, 1, C, scale=1.5)
        s[a + "w1"] = randn(C, decay_rank, scale=0.3)
        s[a + "w2"] = randn(decay_rank, C, scale=0.3)
        s[a + "a0"] = randn(1, 1, C, scale=0.5)
        s[a + "a1"] = randn(C, a_rank, scale=0.3)
        s[a + "a2"] = randn(a_rank, C, scale=0.3)
        s[a + "v0"] = randn(1, 1, C, scale=0.5, shift=0.5)
        s[a + "v1"] = randn(C, v_rank, scale=0.3)
        s[a + "v2"] = randn(v_rank, C, scale=0.3)
        s[a + "g1"] = randn(C, gate_rank, scale=0.3)
        s[a + "g2"] = randn(gate_rank, C, scale=0.3)
        s[a + "k_k"] = randn(1, 1, C, scale=0.1, shift=0.8)
        s[a + "k_a"] = randn(1, 1, C, scale=0.2, shift=1.0)
        s[a + "r_k"] = randn(H, N, scale=0.3)
        for proj in ("receptance", "key", "value", "output"):
            s[a + proj + ".weight"] = randn(C, C, scale=C ** -0.5)
        s[a + "ln_x.weight"] = randn(C, scale=0.2, shift=1.0)
        s[a + "ln_x.bias"] = randn(C, scale=0.1)
        f = p + "ffn."
        s[f + "x_k"] = rand(1, 1, C)
        s[f + "key.weight"] = randn(intermediate_size, C, scale=C ** -0.5)
        s[f + "value.weight"] = randn(C, intermediate_size, scale=intermediate_size ** -0.5)
    s["ln_out.weight"] = randn(C, scale=0.2, shift=1.0)
    s["ln_out.bias"] = randn(C, scale=0.1)
    s["head.weight"] = randn(vocab_size, C, scale=C ** -0.5)
    return s


def save_pth(state: dict[str, torch.Tensor], folder: Path, name: str = "rwkv7-tiny.pth") -> Path:
    """The .pth file alone in ``folder`` (how BlinkDL publishes RWKV-7); returns the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    torch.save(state, path)
    return path


def pth_to_fla(state: dict[str, torch.Tensor], folder: Path) -> Path:
    """The same weights in flash-linear-attention's RWKV7ForCausalLM format (config.json + model.safetensors),
    converted as fla's utils/convert_from_rwkv7.py does."""
    from safetensors.torch import save_file

    C = state["emb.weight"].shape[1]
    H, N = state["blocks.0.att.r_k"].shape
    L = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
    ffn = state["blocks.0.ffn.key.weight"].shape[0]
    config = {
        "model_type": "rwkv7", "vocab_size": state["emb.weight"].shape[0], "hidden_size": C,
        "num_hidden_layers": L, "head_dim": N, "decay_low_rank_dim": state["blocks.0.att.w1"].shape[1],
        "gate_low_rank_dim": state["blocks.0.att.g1"].shape[1],
        "a_low_rank_dim": state["blocks.0.att.a1"].shape[1],
        "v_low_rank_dim": state["blocks.1.att.v1"].shape[1], "hidden_ratio": ffn / C,
        "intermediate_size": ffn,
        "value_dim": [C] * L, "norm_eps": 1e-5, "hidden_act": "sqrelu", "attn": None, "attn_mode": "chunk",
        "tie_word_embeddings": False, "fuse_norm": False,
        # The rwkv package's GroupNorm eps (64e-5) is fla's head_dim * norm_eps only for head size 64.
        "group_norm_eps": 64e-5,
    }
    names = {"emb.weight": "model.embeddings.weight", "ln_out.weight": "model.norm.weight",
             "ln_out.bias": "model.norm.bias", "head.weight": "lm_head.weight"}
    proj = {"receptance": "r_proj", "key": "k_proj", "value": "v_proj", "output": "o_proj", "ln_x": "g_norm"}
    block = {"att": "attn", "ffn": "ffn", "ln0": "pre_norm", "ln1": "attn_norm", "ln2": "ffn_norm"}
    out = {}
    for key, t in state.items():
        if key in ("blocks.0.att.v0", "blocks.0.att.v1", "blocks.0.att.v2"):
            continue
        if key in names:
            out[names[key]] = t
            continue
        parts = key.split(".")
        parts[0], parts[2] = "model.layers", block[parts[2]]
        if parts[2] == "attn" and len(parts[3]) == 2 and parts[3][0] in "wvag" and parts[3][1] in "012":
            kind, num = parts[3]
            parts[3] = f"{kind}_lora.lora." + {"0": "2.bias", "1": "0.weight", "2": "2.weight"}[num]
            t = t.t() if num != "0" else t
        elif parts[2] == "attn" and parts[3] in proj:
            parts[3] = proj[parts[3]]
        if t.shape == (1, 1, C) and not parts[3].startswith("x_"):  # fla keeps attn.x_* as (1, 1, C)
            t = t.reshape(C)
        if parts[2] == "ffn" and parts[3] == "x_k":
            t = t.reshape(C)
        out[".".join(parts)] = t.contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def rwkv_package_model(pth: Path):
    """The rwkv package's RWKV-7 (``RWKV_x070``, strategy "cpu fp32") on the .pth file ``pth``.

    rwkv.model picks RWKV-7 at import time from RWKV_V7_ON; without CUDA its sequence path is a token loop."""
    os.environ["RWKV_V7_ON"] = "1"
    os.environ["RWKV_CUDA_ON"] = "0"
    os.environ.setdefault("RWKV_JIT_ON", "1")
    from rwkv.model import RWKV

    assert RWKV.__name__ == "RWKV_x070", "rwkv.model was imported before RWKV_V7_ON was set"
    return RWKV(model=str(pth)[: -len(".pth")], strategy="cpu fp32")


def fla_model_torch_only(folder: Path, monkeypatch):
    """flash-linear-attention's ``RWKV7Model`` from ``folder``, runnable on the CPU: its Triton kernels
    replaced (through ``monkeypatch``) by fla's own torch references: ``token_shift_ref``-style shifts,
    ``torch_addcmul_rwkv7``, ``k_update_ref``, ``gate_output_correction_ref`` and the naive
    ``dplr_recurrence`` for the time mix; LayerNorm, GroupNorm and the L2 norm are torch's with
    ``fuse_norm=False``. The GroupNorm eps is set to the rwkv package's 64e-5 (fla's would be
    head_dim * norm_eps)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import fla.layers.rwkv7 as fla_layer
    import fla.models.rwkv7.modeling_rwkv7 as fla_modeling
    from fla.models import RWKV7Config, RWKV7Model
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence
    from fla.ops.rwkv7.fused_addcmul import torch_addcmul_rwkv7
    from fla.ops.rwkv7.fused_k_update import k_update_ref
    from fla.ops.rwkv7.gate_output_correction import gate_output_correction_ref

    def token_shift(x, cu_seqlens=None, cache=None, output_cache=False, **_):
        assert cu_seqlens is None
        prev = torch.zeros_like(x[:, :1]) if cache is None else cache[:, None].to(x)
        delta = torch.cat([prev, x[:, :-1]], dim=1) - x
        return (delta, x[:, -1]) if output_cache else delta

    def recurrence(r, w, k, v, a, b, scale=1.0, initial_state=None, output_final_state=False, **_):
        t = lambda z: z.transpose(1, 2)  # noqa: E731  (b, l, h, d) -> (b, h, l, d)
        q = t(r) * scale * r.shape[-1] ** 0.5  # dplr_recurrence scales its query by d_k^-0.5
        o, state = dplr_recurrence(q, t(k), t(v), t(a), t(b), t(w), initial_state, output_final_state)
        return t(o), state

    def mul_recurrence(r, w, k, v, kk, a, scale=1.0, initial_state=None, output_final_state=False, **kw):
        return recurrence(r, w, k, v, -kk, kk * a, scale, initial_state, output_final_state)

    monkeypatch.setattr(fla_layer, "token_shift", token_shift)
    monkeypatch.setattr(fla_modeling, "token_shift", token_shift)
    monkeypatch.setattr(fla_layer, "fused_addcmul_rwkv7", torch_addcmul_rwkv7)
    monkeypatch.setattr(fla_layer, "fused_k_rwkv7", k_update_ref)
    monkeypatch.setattr(fla_layer, "gate_output_correction", gate_output_correction_ref)
    monkeypatch.setattr(fla_layer, "chunk_rwkv7", recurrence)
    monkeypatch.setattr(fla_layer, "fused_mul_recurrent_rwkv7", mul_recurrence)
    config = RWKV7Config.from_pretrained(str(folder))
    config.fuse_norm = False
    model = RWKV7Model.from_pretrained(str(folder), config=config).eval()
    for layer in model.layers:
        layer.attn.g_norm.eps = 64e-5
    return model
