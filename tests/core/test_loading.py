"""Every supported checkpoint format loads to the same model; broken folders fail with clear errors."""

import json
import logging
import shutil

import pytest
import torch

from recemb.core import CheckpointError, ConfigError, Embedder, load_encoder, save_encoder
from recemb.core.architectures.mamba2 import Mamba2Config
from tests.utils import (
    assert_close,
    build_tokenizer,
    save_codestral_checkpoint,
    save_mamba_ssm_checkpoint,
    save_transformers_checkpoint,
    transformers_model,
)

IDS = torch.randint(3, 300, (2, 23), generator=torch.Generator().manual_seed(0))


def reference_output(ref):
    with torch.no_grad():
        return ref(IDS).last_hidden_state


@pytest.mark.parametrize(
    "save_kwargs",
    [dict(), dict(max_shard_size="20KB"), dict(safe_serialization=False)],
    ids=["safetensors", "sharded", "pytorch_model.bin"],
)
def test_transformers_format(tmp_path, save_kwargs):
    ref = transformers_model("g3")
    folder = save_transformers_checkpoint(ref, tmp_path / "m", tokenizer=False, **save_kwargs)
    if save_kwargs.get("max_shard_size"):
        assert (folder / "model.safetensors.index.json").exists()
    model = load_encoder(folder, torch.device("cpu"))
    assert_close("hidden", reference_output(ref), model(IDS, backend="torch"), 1e-6)


def test_mamba_ssm_format(tmp_path):
    ref = transformers_model("g3", vocab_size=320)  # 320 = padded vocab (multiple of 16)
    folder = save_mamba_ssm_checkpoint(ref, tmp_path / "m", pad_vocab_size_multiple=16)
    model = load_encoder(folder, torch.device("cpu"))
    assert model.config.vocab_size == 320 and model.config.n_groups == 3
    assert_close("hidden", reference_output(ref), model(IDS, backend="torch"), 1e-6)


def test_mistral_inference_format(tmp_path):
    ref = transformers_model("g1", hidden_size=64, num_heads=2, head_dim=64, state_size=128, n_groups=2)
    folder = save_codestral_checkpoint(ref, tmp_path / "m")
    model = load_encoder(folder, torch.device("cpu"))
    assert_close("hidden", reference_output(ref), model(IDS, backend="torch"), 1e-6)


def test_codestral_style_config_with_bare_infinity(tmp_path):
    ref = transformers_model("g1")
    folder = save_transformers_checkpoint(ref, tmp_path / "m", tokenizer=False)
    config = json.loads((folder / "config.json").read_text())
    config["time_step_limit"] = [0.0, float("inf")]
    config["norm_before_gate"] = True  # present in Codestral's config, ignored like transformers ignores it
    (folder / "config.json").write_text(json.dumps(config))  # writes a bare Infinity
    assert "Infinity" in (folder / "config.json").read_text()
    model = load_encoder(folder, torch.device("cpu"))
    assert model.config.time_step_limit == (0.0, float("inf"))


def test_save_then_load_round_trip_per_dtype(tmp_path):
    ref = transformers_model("g2-bias-limit")
    folder = save_transformers_checkpoint(ref, tmp_path / "src", tokenizer=False)
    for dtype in (torch.float32, torch.bfloat16):
        model = load_encoder(folder, torch.device("cpu"), dtype=dtype)
        save_encoder(model, tmp_path / str(dtype))
        again = load_encoder(tmp_path / str(dtype), torch.device("cpu"), dtype=dtype)
        assert model.layers[0].mixer.in_proj.weight.dtype == dtype  # bf16 on the CPU is mixed: projections bf16
        for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
            assert a.dtype == b.dtype and torch.equal(a, b), k
    # and the saved folder is a transformers checkpoint
    from transformers import Mamba2Model

    hf = Mamba2Model.from_pretrained(str(tmp_path / str(torch.float32))).eval()
    assert_close("transformers reload", reference_output(ref), reference_output(hf), 1e-6)


def test_default_dtype_is_fp32_on_cpu(tmp_path):
    ref = transformers_model("g1").to(torch.bfloat16)
    folder = save_transformers_checkpoint(ref, tmp_path / "m", tokenizer=False)
    assert load_encoder(folder, torch.device("cpu")).embeddings.weight.dtype == torch.float32


def test_hub_id_resolves_through_offline_cache(tmp_path, monkeypatch, caplog):
    ref = transformers_model("g1")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--recemb-test--tiny-mamba2"
    snapshot = save_transformers_checkpoint(ref, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.WARNING):
        emb = Embedder.from_pretrained("recemb-test/tiny-mamba2", device="cpu", cache_dir=tmp_path / "hub",
                                       tokenizer="recemb-test/tiny-mamba2")  # the tokenizer by id, too
    # Offline is not an error: nothing says "Could not reach the Hub" (the cache is asked directly).
    assert not [r for r in caplog.records if "reach the Hub" in r.getMessage()], caplog.text
    local = Embedder.from_pretrained(snapshot, device="cpu")
    assert emb.tokenizer is not None
    assert_close("hub == local", torch.from_numpy(local.encode(["x y z"])), torch.from_numpy(emb.encode(["x y z"])),
                 1e-7)
    with pytest.raises(FileNotFoundError, match="not found in the Hugging Face cache"):
        Embedder.from_pretrained("recemb-test/absent", device="cpu", cache_dir=tmp_path / "hub")


def test_missing_weights_names_the_expected_files(tmp_path):
    folder = save_transformers_checkpoint(transformers_model("g1"), tmp_path / "m", tokenizer=False)
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors.*pytorch_model.bin"):
        load_encoder(folder, torch.device("cpu"))


def test_missing_shard_is_named(tmp_path):
    folder = save_transformers_checkpoint(transformers_model("g1"), tmp_path / "m", tokenizer=False,
                                          max_shard_size="20KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    victim = sorted(set(index["weight_map"].values()))[0]
    (folder / victim).unlink()
    with pytest.raises(FileNotFoundError, match=victim):
        load_encoder(folder, torch.device("cpu"))


def test_empty_or_foreign_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json or params.json.*recemb reads"):
        load_encoder(tmp_path, torch.device("cpu"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ConfigError, match="model_type 'bert' is not an architecture recemb runs"):
        load_encoder(tmp_path, torch.device("cpu"))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_encoder(tmp_path, torch.device("cpu"))


def test_wrong_shape_names_tensor_and_both_shapes(tmp_path):
    folder = save_transformers_checkpoint(transformers_model("g3"), tmp_path / "m", tokenizer=False)
    config = json.loads((folder / "config.json").read_text())
    config["n_groups"] = 1  # weights were made with 3 groups
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"'layers\.0\.mixer\.in_proj\.weight' has shape \(294, 48\), "
                                              r"but the config implies \(230, 48\).*check n_groups"):
        load_encoder(folder, torch.device("cpu"))


def test_unexpected_and_missing_tensors(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = save_transformers_checkpoint(transformers_model("g1"), tmp_path / "m", tokenizer=False)
    state = load_file(str(folder / "model.safetensors"))
    state["layers.0.mlp.fc1.weight"] = torch.zeros(2, 2)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="unexpected tensor.*mlp.fc1"):
        load_encoder(folder, torch.device("cpu"))
    del state["layers.0.mlp.fc1.weight"], state["norm_f.weight"]
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="missing.*norm_f.weight"):
        load_encoder(folder, torch.device("cpu"))


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(attn_layer_idx=[1]), "hybrid"),
        (dict(d_intermediate=128), "MLP blocks"),
        (dict(ssm_cfg={"layer": "Mamba1"}), "not a Mamba2 model"),
    ],
    ids=["hybrid", "mlp", "mamba1"],
)
def test_unsupported_mamba_ssm_configs(change, message):
    base = {"d_model": 64, "n_layer": 2, "vocab_size": 100, "ssm_cfg": {"layer": "Mamba2"}}
    with pytest.raises(ConfigError, match=message):
        Mamba2Config.from_mamba_ssm_dict({**base, **change})


def test_inconsistent_transformers_config():
    with pytest.raises(ConfigError, match="num_heads \\* head_dim"):
        Mamba2Config(hidden_size=64, num_heads=3, head_dim=16)


def test_tokenizer_loaded_from_another_folder(tmp_path):
    folder = save_transformers_checkpoint(transformers_model("g1"), tmp_path / "m", tokenizer=False)
    build_tokenizer(tmp_path / "tok")
    emb = Embedder.from_pretrained(folder, device="cpu")
    with pytest.raises(RuntimeError, match="without a tokenizer"):
        emb.encode(["hello"])
    assert emb.embed_token_ids([[5, 6, 1]]).shape == (1, emb.dim)
    emb = Embedder.from_pretrained(folder, device="cpu", tokenizer=tmp_path / "tok")
    assert emb.encode(["hello"]).shape == (1, emb.dim)
    shutil.rmtree(tmp_path / "tok")
