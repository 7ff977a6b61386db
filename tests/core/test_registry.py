"""The registry of architectures (``recemb.core.architectures``): every descriptor claims its own tiny saved
models and no other's, the loader reads them back through it, an unknown model_type is refused by name, and
``describe`` gives ``recemb info``'s shape fields."""

from __future__ import annotations

import json

import pytest
import torch

from recemb.core import (
    ARCHITECTURES,
    Architecture,
    ConfigError,
    architecture,
    detect_architecture,
    load_encoder,
    save_encoder,
)
from recemb.core.architectures import FORMATS_HELP
from recemb.core.architectures import detect as detect_folder
from recemb.core.architectures.mamba2 import Mamba2Config, Mamba2Encoder
from recemb.core.architectures.rwkv7 import RWKV7Config, RWKV7Encoder
from recemb.core.architectures.xlstm import XLSTMConfig, XLSTMEncoder
from recemb.core.encoder import ChunkRun
from tests.utils import save_codestral_checkpoint, save_mamba_ssm_checkpoint, transformers_model

VOCAB = 64
TINY = {
    "mamba2": lambda: Mamba2Encoder(Mamba2Config(hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16,
                                                 n_groups=2, state_size=8, chunk_size=8, vocab_size=VOCAB)),
    "xlstm": lambda: XLSTMEncoder(XLSTMConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_heads=2,
                                              chunk_size=8)),
    "rwkv7": lambda: RWKV7Encoder(RWKV7Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, head_dim=8,
                                              decay_low_rank_dim=8, a_low_rank_dim=8, v_low_rank_dim=4,
                                              gate_low_rank_dim=8, intermediate_size=64)),
}
# What ``recemb info`` showed of these before the registry: each of heads, head_dim, state_size, n_groups that the
# config has, in that order.
INFO_FIELDS = (("heads", "num_heads"), ("head_dim", "head_dim"), ("state_size", "state_size"),
               ("n_groups", "n_groups"))
EXPECTED_DESCRIBE = {
    "mamba2": {"heads": 4, "head_dim": 16, "state_size": 8, "n_groups": 2},
    "xlstm": {"heads": 2},
    "rwkv7": {"heads": 4, "head_dim": 8},
}


def tiny_encoder(name: str):
    torch.manual_seed(0)
    model = TINY[name]().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def claims(folder) -> dict[str, str]:
    """Every descriptor that claims ``folder``, with the format it names."""
    return {name: fmt for name, arch in ARCHITECTURES.items() if (fmt := arch.detect(folder)) is not None}


def hidden(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        h, _ = model.forward_chunk(ids, None, ChunkRun(backend="torch"))
        return model.final_norm(h)


def test_the_registry_is_the_three_architectures_in_order():
    assert list(ARCHITECTURES) == ["mamba2", "xlstm", "rwkv7"] == sorted(TINY, key=list(ARCHITECTURES).index)
    for name, arch in ARCHITECTURES.items():
        assert isinstance(arch, Architecture) and arch.name == name and architecture(name) is arch
        assert arch.display_name and arch.backbone and arch.formats in FORMATS_HELP
    assert [a.display_name for a in ARCHITECTURES.values()] == ["Mamba2", "xLSTM", "RWKV-7"]
    with pytest.raises(Exception):  # frozen: one descriptor per architecture, the same for every caller
        ARCHITECTURES["mamba2"].name = "other"


@pytest.mark.parametrize("name", list(TINY))
def test_each_descriptor_claims_its_own_saved_model_and_no_other(name, tmp_path):
    model = tiny_encoder(name)
    folder = tmp_path / name
    save_encoder(model, folder)
    arch = ARCHITECTURES[name]
    assert claims(folder) == {name: arch.save_format}
    assert detect_architecture(folder) == (name, arch.save_format)
    assert detect_folder(folder) == (arch, arch.save_format)
    loaded = load_encoder(folder, "cpu")
    assert type(loaded) is type(model) and loaded.config.model_type == name
    ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(1))
    assert torch.equal(hidden(loaded, ids), hidden(model, ids))
    save_encoder(model, tmp_path / "bin", safe_serialization=False)  # pytorch_model.bin: the same format
    assert (tmp_path / "bin" / "pytorch_model.bin").is_file()
    assert claims(tmp_path / "bin") == {name: arch.save_format}
    assert torch.equal(hidden(load_encoder(tmp_path / "bin", "cpu"), ids), hidden(model, ids))


def test_the_formats_each_architecture_reads_are_claimed_by_it_alone(tmp_path):
    from tests.rwkv7_utils import random_pth_state, save_pth

    folders = {
        ("mamba2", "mamba_ssm"): save_mamba_ssm_checkpoint(transformers_model("g1", vocab_size=320),
                                                           tmp_path / "mamba_ssm"),
        ("mamba2", "codestral"): save_codestral_checkpoint(
            transformers_model("g1", hidden_size=64, num_heads=2, head_dim=64, state_size=128), tmp_path / "codestral"),
        ("rwkv7", "rwkv_pth"): save_pth(random_pth_state(), tmp_path / "pth").parent,
    }
    xlstm_package = tmp_path / "xlstm_package"  # the xlstm package's config.yaml (detection reads only that)
    xlstm_package.mkdir()
    (xlstm_package / "config.yaml").write_text("embedding_dim: 32\nnum_blocks: 2\nnum_heads: 2\nvocab_size: 64\n")
    folders[("xlstm", "xlstm")] = xlstm_package
    for (name, fmt), folder in folders.items():
        assert claims(folder) == {name: fmt}, folder.name


def test_a_folder_nobody_claims_gets_todays_errors(tmp_path):
    assert claims(tmp_path) == {}
    with pytest.raises(FileNotFoundError, match="no config.json or params.json.*recemb reads Mamba2, xLSTM and RWKV-7"):
        detect_architecture(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert claims(tmp_path) == {}
    with pytest.raises(ConfigError, match=r"model_type 'bert' is not an architecture recemb runs \(mamba2, xlstm, "
                                          r"rwkv7; or a mamba_ssm config with ssm_cfg\)"):
        load_encoder(tmp_path, "cpu")
    (tmp_path / "config.json").write_text("{not json")
    assert claims(tmp_path) == {}
    with pytest.raises(ConfigError, match="not valid JSON"):
        detect_architecture(tmp_path)


def test_an_unknown_model_type_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"model_type 'bert' is not an architecture recemb runs \(known: mamba2, "
                                          r"xlstm, rwkv7\)"):
        architecture("bert")
    with pytest.raises(ConfigError, match="model_type None"):
        architecture(None)


@pytest.mark.parametrize("name", list(TINY))
def test_describe_gives_recemb_infos_shape_fields(name):
    config = TINY[name]().config
    described = ARCHITECTURES[name].describe(config)
    assert described == EXPECTED_DESCRIBE[name]
    # the same keys, values and order as recemb info's attribute probe
    probed = {key: getattr(config, attr) for key, attr in INFO_FIELDS if hasattr(config, attr)}
    assert list(described.items()) == list(probed.items())
