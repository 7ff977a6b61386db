"""xLSTM against transformers' ``xLSTMModel`` (the independent reference), through every path recemb runs it:
horizontal, vertical chunks of any V, padded batches, save/load in both directions, the xlstm package's format."""

from __future__ import annotations

import json

import pytest
import torch

from recemb.core import ConfigError
from recemb.core.architectures import xlstm
from recemb.core.encoder import ChunkRun
from recemb.core.vertical import encode_vertical, pad_right
from tests.utils import assert_close, rel_err

# Tiny shapes transformers' xLSTM accepts: its cache sizes heads by qk_dim rounded up to 64, its layers by
# int(hidden_size * qk_dim_factor), so these must agree (hidden 64 with qk factor 0.5 fails there).
XLSTM_CONFIGS = {
    # name: transformers xLSTMConfig kwargs
    "h2": dict(hidden_size=128, num_hidden_layers=2, num_heads=2, chunk_size=8),
    "h4-bias-cap": dict(hidden_size=128, num_hidden_layers=3, num_heads=4, chunk_size=16, use_bias=True,
                        gate_soft_cap=5.0, ffn_proj_factor=1.3, norm_eps=1e-5, eps=1e-4),
}


def xlstm_transformers_model(name: str = "h2", seed: int = 0, causal_lm: bool = False, **overrides):
    """A transformers xLSTMModel (or xLSTMForCausalLM) with random, non-trivial weights: norms and biases perturbed,
    input gates that vary by token, forget gates from strong forgetting to almost keeping."""
    from transformers import xLSTMConfig, xLSTMForCausalLM, xLSTMModel

    kwargs = dict(XLSTM_CONFIGS[name], vocab_size=320, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    kwargs.update(overrides)
    torch.manual_seed(seed)
    model = (xLSTMForCausalLM if causal_lm else xLSTMModel)(xLSTMConfig(**kwargs)).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname and pname.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif "igate_preact" in pname:
                p.copy_(torch.randn_like(p) * (1.0 if pname.endswith("bias") else 0.3))
            elif "fgate_preact" in pname:
                p.copy_(torch.randn_like(p) * (1.5 if pname.endswith("bias") else 0.3) + (2.0 if pname.endswith(
                    "bias") else 0.0))
            elif pname.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.add_(0.05 * torch.randn_like(p))
    return model


def transformers_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """transformers' last_hidden_state: the residual stream after out_norm (xLSTMModel applies it)."""
    with torch.no_grad():
        return model(ids).last_hidden_state


@pytest.fixture(scope="module", params=sorted(XLSTM_CONFIGS))
def pair(request, tmp_path_factory):
    """(transformers model, our encoder loaded from its save_pretrained folder, the folder)."""
    ref = xlstm_transformers_model(request.param)
    folder = tmp_path_factory.mktemp(f"xlstm-{request.param}")
    ref.save_pretrained(str(folder))
    assert xlstm.detect(folder) == "transformers"
    return ref, xlstm.load(folder, "transformers", torch.device("cpu"), None), folder


@pytest.fixture(scope="module")
def batch():
    """Right-padded rows of unequal, odd lengths (several chunks of 8 and 16, partial ones, a single token)."""
    torch.manual_seed(1)
    lengths = torch.tensor([45, 17, 1, 33])
    ids = torch.randint(3, 320, (4, 45))
    for row, n in enumerate(lengths.tolist()):
        ids[row, n:] = 2
    return ids, lengths


def test_matches_transformers(pair, batch):
    ref, ours, _ = pair
    ids, lengths = batch
    assert ours.dtype == torch.float32 and ours.config.model_type == "xlstm"
    expected = transformers_hidden(ref, ids)  # (b, T, d); rows are causal, so padding after a row's end is harmless
    with torch.no_grad():
        h, states = ours.forward_chunk(ids)
        got = ours.final_norm(h)
    assert_close("every position", expected, got, 1e-4)
    last = torch.arange(len(lengths)), lengths - 1
    assert_close("last tokens", expected[last], got[last], 1e-4)
    assert len(states) == ours.config.num_hidden_layers
    c = ours.config
    assert states[0].C.shape == (4, c.num_heads, c.qk_head_dim, c.v_head_dim)
    assert states[0].n.shape == (4, c.num_heads, c.qk_head_dim) and states[0].m.shape == (4, c.num_heads)


def test_state_matches_transformers_cache(pair, batch):
    """The carried (C, n, m) are transformers' cache tensors (m there is (b, h, 1))."""
    ref, ours, _ = pair
    ids = batch[0][:, :21]
    with torch.no_grad():
        cache = ref(ids, use_cache=True).cache
        _, states = ours.forward_chunk(ids)
    for layer, s in enumerate(states):
        C, n, m = cache.rnn_state[layer]
        assert_close(f"layer {layer} C", C, s.C, 1e-4, scale="max")
        assert_close(f"layer {layer} n", n, s.n, 1e-4, scale="max")
        assert_close(f"layer {layer} m", m[..., 0], s.m, 1e-5, scale="max")


def test_single_token_and_short_inputs(pair):
    ref, ours, _ = pair
    for T in (1, 2, 9):
        ids = torch.randint(3, 320, (2, T))
        assert_close(f"T={T}", transformers_hidden(ref, ids), ours(ids), 1e-4)


# These random models amplify fp32 rounding to about 1.5e-5 (fp32 against fp64: ours 1.4e-5, transformers' 1.9e-5),
# so exactness is checked in fp64 and fp32 gets a bound above that noise.
FP32_NOISE = 5e-5


@pytest.fixture(scope="module")
def ours64(pair):
    return xlstm.load(pair[2], "transformers", torch.device("cpu"), torch.float64)


def test_vertical_equals_horizontal_for_every_V(pair, ours64, batch):
    ids, lengths = batch
    q = pair[1].config.chunk_size
    for model, tol in ((ours64, 1e-10), (pair[1], FP32_NOISE)):
        horizontal = model(ids)[torch.arange(len(lengths)), lengths - 1]
        for V in (1, 7, q, 45, 1000):
            got = encode_vertical(model, ids, lengths, V, backend="torch")
            assert_close(f"{model.dtype} V={V}", horizontal, got, tol)


def test_pooled_rows_equal_each_row_alone(pair, ours64, batch):
    ids, lengths = batch
    for model, tol in ((ours64, 1e-10), (pair[1], FP32_NOISE)):
        together = encode_vertical(model, ids, lengths, 9, backend="torch")
        for row, n in enumerate(lengths.tolist()):
            alone = encode_vertical(model, ids[row : row + 1, :n], lengths[row : row + 1], 9, backend="torch")
            assert_close(f"{model.dtype} row {row}", together[row : row + 1], alone, tol)


def test_chunk_size_changes_only_rounding(ours64, batch):
    ids, lengths = batch
    base = encode_vertical(ours64, ids, lengths, 20, backend="torch")
    for q in (1, 3, 64):
        assert_close(f"chunk_size={q}", base,
                     encode_vertical(ours64, ids, lengths, 20, backend="torch", chunk_size=q), 1e-10)


def test_save_loads_in_transformers_and_back(pair, batch, tmp_path):
    from transformers import xLSTMModel

    ref, ours, _ = pair
    ids = batch[0]
    ours.save(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "xlstm" and config["dtype"] == "float32"
    reloaded_tf = xLSTMModel.from_pretrained(str(tmp_path)).eval()
    assert set(reloaded_tf.state_dict()) == set(ours.state_dict())
    assert_close("transformers from our save", transformers_hidden(ref, ids), transformers_hidden(reloaded_tf, ids),
                 1e-6)
    assert xlstm.detect(tmp_path) == "transformers"
    again = xlstm.load(tmp_path, "transformers", torch.device("cpu"), None)
    assert_close("ours from our save", ours(ids), again(ids), 0.0)


def test_causal_lm_checkpoint_loads_without_its_head(tmp_path):
    ref = xlstm_transformers_model("h2", seed=3, causal_lm=True)
    ref.save_pretrained(str(tmp_path))
    ours = xlstm.load(tmp_path, xlstm.detect(tmp_path), torch.device("cpu"), None)
    ids = torch.randint(3, 320, (2, 19))
    assert_close("backbone", transformers_hidden(ref.backbone, ids), ours(ids), 1e-4)


def test_load_encoder_picks_xlstm(pair):
    from recemb.core.loading import load_encoder

    ref, ours, folder = pair
    model = load_encoder(folder, "cpu")
    assert isinstance(model, xlstm.XLSTMEncoder) and not any(p.requires_grad for p in model.parameters())
    ids = torch.randint(3, 320, (1, 12))
    assert_close("load_encoder", ours(ids), model(ids), 0.0)


def test_dtypes(pair, ours64, batch):
    """fp64 runs the whole model in fp64 (state too); bf16 keeps the cell and its state in fp32 and is no further
    from fp32 than transformers' own bf16 model (these random models are far from robust to bf16)."""
    import copy

    ref, ours, folder = pair
    ids, lengths = batch
    base = ours(ids)
    h, states = ours64.forward_chunk(ids)
    assert h.dtype == torch.float64 and states[0].C.dtype == torch.float64
    assert_close("fp64", ours64.final_norm(h), base, FP32_NOISE)
    bf16 = xlstm.load(folder, "transformers", torch.device("cpu"), torch.bfloat16)
    h, states = bf16.forward_chunk(ids)
    assert h.dtype == torch.bfloat16 and states[0].C.dtype == torch.float32
    ref_bf16 = transformers_hidden(copy.deepcopy(ref).to(torch.bfloat16), ids).float()
    assert rel_err(base, bf16.final_norm(h).float()) <= 1.5 * rel_err(base, ref_bf16) + 1e-2


def test_xlstm_package_format(pair, batch, tmp_path):
    """The xlstm package's layout (config.yaml, embedding.weight, backbone.*, lm_head), as its from_pretrained
    reads it (xlstm 2.0.6, xlstm_large/from_pretrained.py), here in two shards."""
    import yaml
    from safetensors.torch import save_file

    ref, ours, _ = pair
    c = ref.config
    config = {k: getattr(c, k) for k in ("num_heads", "vocab_size", "use_bias", "norm_eps", "qk_dim_factor",
                                         "v_dim_factor", "chunk_size", "eps", "ffn_proj_factor",
                                         "ffn_round_up_to_multiple_of", "gate_soft_cap", "output_logit_soft_cap")}
    config.update(embedding_dim=c.hidden_size, num_blocks=c.num_blocks, norm_reduction_force_float32=True,
                  add_out_norm=True, weight_mode="single", mode="inference",
                  chunkwise_kernel="chunkwise--triton_xl_chunk", sequence_kernel="native_sequence__triton",
                  step_kernel="triton")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    state = {("embedding.weight" if k == "embeddings.weight" else "backbone." + k): v.clone()
             for k, v in ref.state_dict().items()}
    state["lm_head.weight"] = torch.randn(c.vocab_size, c.hidden_size)
    keys = sorted(state)
    save_file({k: state[k] for k in keys[: len(keys) // 2]}, str(tmp_path / "model_0.safetensors"))
    save_file({k: state[k] for k in keys[len(keys) // 2:]}, str(tmp_path / "model_1.safetensors"))
    assert xlstm.detect(tmp_path) == "xlstm"
    if c.use_bias:  # xLSTMLarge's out_norm has a bias then, transformers' (and ours) none
        with pytest.raises(ConfigError, match="use_bias"):
            xlstm.load(tmp_path, "xlstm", torch.device("cpu"), None)
        return
    model = xlstm.load(tmp_path, "xlstm", torch.device("cpu"), None)
    ids = batch[0]
    assert_close("xlstm format", ours(ids), model(ids), 0.0)
    model.save(tmp_path / "exported")  # Triton kernel names are replaced by transformers' native ones
    from transformers import xLSTMModel

    exported = xLSTMModel.from_pretrained(str(tmp_path / "exported")).eval()
    assert_close("exported to transformers", transformers_hidden(ref, ids), transformers_hidden(exported, ids), 1e-6)


def test_against_the_xlstm_package(pair, batch):
    """Where the xlstm package (and mlstm_kernels) is installed: its xLSTMLarge on the same weights."""
    pytest.importorskip("mlstm_kernels")
    large = pytest.importorskip("xlstm.xlstm_large.model")
    ref, ours, _ = pair
    c = ref.config
    if c.use_bias:
        pytest.skip("xLSTMLarge's out_norm has a bias with use_bias; transformers' has none")
    cfg = large.xLSTMLargeConfig(
        embedding_dim=c.hidden_size, num_heads=c.num_heads, num_blocks=c.num_blocks, vocab_size=c.vocab_size,
        use_bias=c.use_bias, norm_eps=c.norm_eps, qk_dim_factor=c.qk_dim_factor, v_dim_factor=c.v_dim_factor,
        chunkwise_kernel="chunkwise--native_autograd", sequence_kernel="native_sequence__native",
        step_kernel="native", mode="inference", chunk_size=c.chunk_size, return_last_states=True,
        autocast_kernel_dtype="float32", eps=c.eps, ffn_proj_factor=c.ffn_proj_factor,
        ffn_round_up_to_multiple_of=c.ffn_round_up_to_multiple_of, gate_soft_cap=c.gate_soft_cap)
    model = large.xLSTMLarge(cfg).eval()
    state = {("embedding.weight" if k == "embeddings.weight" else "backbone." + k): v
             for k, v in ref.state_dict().items()}
    state["lm_head.weight"] = model.lm_head.weight
    model.load_state_dict(state)
    ids = batch[0]
    with torch.no_grad():
        expected, _ = model.backbone(model.embedding(ids))
    assert_close("xLSTMLarge", expected, ours(ids), 1e-4)


def test_errors_name_the_problem(pair, tmp_path):
    from recemb.core.loading import CheckpointError

    ref, ours, folder = pair
    with pytest.raises(RuntimeError, match="mlstm_kernels package's kernel, on CUDA"):
        ours.forward_chunk(torch.ones(1, 3, dtype=torch.long), None, ChunkRun(backend="triton"))
    with pytest.raises(ValueError, match="backend must be"):
        ours.forward_chunk(torch.ones(1, 3, dtype=torch.long), None, ChunkRun(backend="cuda"))
    assert ours.delta_controls(torch.tensor([5]), "auto") is None

    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        xlstm.load(tmp_path, "transformers", torch.device("cpu"), None)

    from safetensors.torch import save_file

    state = {k: v.clone() for k, v in ref.state_dict().items()}
    state["blocks.0.mlstm_layer.q.weight"] = state["blocks.0.mlstm_layer.q.weight"][:-2]
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"blocks\.0\.mlstm_layer\.q\.weight.*qk_dim"):
        xlstm.load(tmp_path, "transformers", torch.device("cpu"), None)
    del state["blocks.0.mlstm_layer.q.weight"]
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="missing"):
        xlstm.load(tmp_path, "transformers", torch.device("cpu"), None)

    config = json.loads((folder / "config.json").read_text())
    with pytest.raises(ConfigError, match="weight_mode"):
        xlstm.XLSTMConfig.from_transformers_dict({**config, "weight_mode": "fused"})
    with pytest.raises(ConfigError, match="embedding_dim"):
        xlstm.XLSTMConfig.from_transformers_dict({**config, "embedding_dim": config["hidden_size"] * 2})


def test_detect_ignores_other_checkpoints(tmp_path):
    assert xlstm.detect(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba2"}))
    assert xlstm.detect(tmp_path) is None
    (tmp_path / "config.json").write_text("{not json")
    assert xlstm.detect(tmp_path) is None


def test_keep_rows_and_states_carry_across_calls(pair, batch):
    """Two forward_chunk calls joined by the states (one row leaving the batch in between) equal one call."""
    _, ours, _ = pair
    ids = batch[0][:3, :30]
    full = ours(ids)
    h1, s1 = ours.forward_chunk(ids[:, :11])
    h2, s2 = ours.forward_chunk(ids[:2, 11:], [s.keep_rows(2) for s in s1])
    assert_close("joined", full[:2, 11:], ours.final_norm(h2), FP32_NOISE)
    assert s2[0].C.shape[0] == 2


def test_pad_right_batch_through_the_engine(pair):
    _, ours, _ = pair
    seqs = [[5, 6, 7, 8, 9], [10, 11, 12], [13]]
    ids, lengths = pad_right(seqs, ours.config.pad_token_id)
    got = encode_vertical(ours, ids, lengths, 2, backend="auto")
    for row, seq in enumerate(seqs):
        assert_close(f"row {row}", ours(torch.tensor([seq]))[:, -1], got[row : row + 1], FP32_NOISE)


def test_config_round_trip():
    c = xlstm.XLSTMConfig(hidden_size=128, num_hidden_layers=2, num_heads=2, vocab_size=320, chunk_size=8,
                          extra={"custom": 1})
    d = c.to_transformers_dict()
    assert d["embedding_dim"] == d["hidden_size"] == 128 and d["num_blocks"] == d["num_hidden_layers"] == 2
    back = xlstm.XLSTMConfig.from_transformers_dict(d)
    assert (back.hidden_size, back.num_hidden_layers, back.chunk_size, back.extra["custom"]) == (128, 2, 8, 1)
    # xLSTM-7B's config names only embedding_dim and num_blocks
    seven = xlstm.XLSTMConfig.from_transformers_dict({"model_type": "xlstm", "embedding_dim": 256, "num_blocks": 3,
                                                      "num_heads": 4, "vocab_size": 10})
    assert (seven.hidden_size, seven.num_hidden_layers, seven.qk_head_dim, seven.v_head_dim) == (256, 3, 32, 64)


@pytest.mark.parametrize("l", [48, 37, 1])
def test_mlstm_kernels_path_maps_recembs_layout_and_pads_odd_lengths(monkeypatch, l):
    """xLSTM on CUDA runs the mlstm_kernels package's Triton kernel. With that package's own chunkwise torch kernel
    (the same signature, runnable on the CPU) standing in for it, ``mlstm_xl_chunk`` equals the chunkwise torch
    form: heads-first layout, gates, state (the stabiliser's extra axis) and the padding of a length that is not a
    multiple of the kernel's chunk (padded tokens leave the state as it is)."""
    native = pytest.importorskip("mlstm_kernels.torch.chunkwise.native")
    from recemb.kernels.mlstm import mlstm, mlstm_chunkwise, xl_chunk

    monkeypatch.setattr(xl_chunk, "_xl_chunk_kernel", lambda: native.mlstm_chunkwise__native_autograd)
    gen = torch.Generator().manual_seed(5)
    b, h, dk, dv = 2, 3, 8, 16
    q, k = torch.randn(b, l, h, dk, generator=gen), torch.randn(b, l, h, dk, generator=gen)
    v = torch.randn(b, l, h, dv, generator=gen)
    i, f = torch.randn(b, l, h, generator=gen), torch.randn(b, l, h, generator=gen) + 2
    state = (torch.randn(b, h, dk, dv, generator=gen) * 0.1, torch.randn(b, h, dk, generator=gen) * 0.1,
             torch.randn(b, h, generator=gen) * 0.1)
    y_torch, s_torch = mlstm_chunkwise(q, k, v, i, f, chunk_size=16, initial_state=state)
    y_kernel, s_kernel = xl_chunk.mlstm_xl_chunk(q, k, v, i, f, initial_state=state)
    assert_close("h", y_torch, y_kernel, 1e-5)
    for name, a, z in zip(("C", "n", "m"), s_torch, s_kernel):
        assert a.shape == z.shape
        assert_close(name, a, z, 1e-5)
    assert torch.equal(mlstm(q, k, v, i, f, 16, state)[0], y_torch)  # "auto" on the CPU: the torch form
