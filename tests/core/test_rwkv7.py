"""RWKV-7 (``recemb.core.architectures.rwkv7``) against the ``rwkv`` package and flash-linear-attention's model,
both checkpoint formats, vertical chunking, save/load, and the loader's errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from recemb.core.architectures import rwkv7
from recemb.core.encoder import ChunkRun
from recemb.core.vertical import VerticalStream, encode_vertical, pad_right
from tests.rwkv7_utils import (
    TINY_RWKV7,
    fla_model_torch_only,
    pth_to_fla,
    random_pth_state,
    rwkv_package_model,
    save_pth,
)
from tests.utils import assert_close

VOCAB = TINY_RWKV7["vocab_size"]


@pytest.fixture(scope="module")
def pth_state():
    return random_pth_state(**TINY_RWKV7)


@pytest.fixture(scope="module")
def pth_folder(tmp_path_factory, pth_state):
    return save_pth(pth_state, tmp_path_factory.mktemp("rwkv7") / "pth").parent


@pytest.fixture(scope="module")
def fla_folder(tmp_path_factory, pth_state):
    return pth_to_fla(pth_state, tmp_path_factory.mktemp("rwkv7") / "fla")


@pytest.fixture(scope="module")
def model(pth_folder):
    return rwkv7.load(pth_folder, "rwkv_pth", torch.device("cpu"))


def random_ids(b: int, l: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, l), generator=torch.Generator().manual_seed(seed))


def horizontal(model, ids: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    with torch.inference_mode():
        h, _ = model.forward_chunk(ids, None, ChunkRun(backend="torch", chunk_size=chunk_size))
        return model.final_norm(h)


# ------------------------------------------------------------------------------------------- formats, config
def test_detect_and_config_read_off_the_pth(pth_folder, fla_folder, model, tmp_path):
    assert rwkv7.detect(pth_folder) == "rwkv_pth"
    assert rwkv7.detect(fla_folder) == "fla"
    assert rwkv7.detect(tmp_path) is None  # empty
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba2"}))
    assert rwkv7.detect(tmp_path) is None
    c = model.config
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_heads, c.head_dim) == (VOCAB, 32, 3, 4, 8)
    assert (c.decay_low_rank_dim, c.a_low_rank_dim, c.v_low_rank_dim, c.gate_low_rank_dim) == (8, 8, 4, 12)
    assert c.intermediate_size == 64 and c.group_norm_eps == 64e-5 and c.model_type == "rwkv7"
    from_fla = rwkv7.RWKV7Config.from_fla_dict(json.loads((fla_folder / "config.json").read_text()))
    assert from_fla == rwkv7.RWKV7Config(**{**c.__dict__, "pad_token_id": None, "torch_dtype": None})
    assert model.dtype == torch.float32 and not any(p.requires_grad for p in model.parameters())


# ------------------------------------------------------------------------------------------- the references
def test_equals_the_rwkv_package(pth_folder, pth_state, model):
    """The rwkv package's RWKV_x070 (cpu fp32, its token loop) on the same .pth: logits at every position
    through the checkpoint's head, and every layer's state after the sequence (same layout: token shifts,
    wkv (h, n, n))."""
    ref = rwkv_package_model(next(pth_folder.glob("*.pth")))
    ids = random_ids(1, 50, seed=1)
    logits_ref, state_ref = ref.forward(ids[0].tolist(), None, full_output=True)  # (l, vocab)
    with torch.inference_mode():
        h, states = model.forward_chunk(ids, None, ChunkRun(backend="torch", chunk_size=16))
        logits = model.final_norm(h)[0] @ pth_state["head.weight"].T
    assert_close("logits", logits_ref, logits, 1e-4)
    for i, s in enumerate(states):
        assert_close(f"layer {i} time-mix shift", state_ref[3 * i], s.attn_shift[0], 1e-4)
        assert_close(f"layer {i} wkv state", state_ref[3 * i + 1], s.wkv[0], 1e-4)
        assert_close(f"layer {i} channel-mix shift", state_ref[3 * i + 2], s.ffn_shift[0], 1e-4)
    # The package's one-token path, fed our state after 49 tokens, gives the last logits too.
    with torch.inference_mode():
        _, states49 = model.forward_chunk(ids[:, :49], None, ChunkRun(backend="torch"))
    carried = [t[0].clone() for s in states49 for t in (s.attn_shift, s.wkv, s.ffn_shift)]
    last_ref, _ = ref.forward(int(ids[0, 49]), carried)
    assert_close("logits after a carried state", last_ref, logits[-1], 1e-4)


def test_fla_format_loads_the_same_model(fla_folder, model):
    fla_model = rwkv7.load(fla_folder, "fla", torch.device("cpu"))
    ids = random_ids(2, 30, seed=2)
    assert torch.equal(horizontal(fla_model, ids), horizontal(model, ids))
    ref_state, got_state = model.state_dict(), fla_model.state_dict()
    assert ref_state.keys() == got_state.keys()
    assert all(torch.equal(ref_state[k], got_state[k]) for k in ref_state)


def test_equals_fla_rwkv7_model(fla_folder, model, monkeypatch):
    """flash-linear-attention's RWKV7Model on the converted checkpoint. Its Triton kernels do not run on the
    CPU (even interpreted: the autotuner needs a GPU driver), so they are swapped for fla's own torch
    references (``fla_model_torch_only``); the model code around them (token shift, LoRAs, value residual,
    norms) is fla's. 70 tokens run its chunk path, 20 its recurrent path."""
    ref = fla_model_torch_only(fla_folder, monkeypatch)
    for l in (70, 20):
        ids = random_ids(2, l, seed=l)
        with torch.inference_mode():
            expected = ref(ids, use_cache=False).last_hidden_state
        assert_close(f"fla RWKV7Model, {l} tokens", expected, horizontal(model, ids), 1e-4)


# ---------------------------------------------------------------------------------------- vertical chunking
@pytest.mark.parametrize("V", [1, 7, 16, 64])
def test_any_vertical_chunk_size_gives_the_horizontal_result(model, V):
    """V in {1, 7, the chunk length 16, >= T}; rows of unequal lengths (pooled at their own last token)."""
    ids = random_ids(3, 45, seed=3)
    lengths = torch.tensor([45, 31, 9])
    full = horizontal(model, ids, chunk_size=16)
    expected = full[torch.arange(3), lengths - 1]
    got = encode_vertical(model, ids, lengths, V, backend="torch", chunk_size=16)
    assert_close(f"V={V}", expected, got, 1e-5)


def test_a_batch_of_odd_lengths_equals_each_row_alone(model):
    seqs = [random_ids(1, n, seed=n)[0].tolist() for n in (23, 5, 1, 17)]
    ids, lengths = pad_right(seqs, 0)
    batch = encode_vertical(model, ids, lengths, 6, backend="torch")
    for row, seq in enumerate(seqs):
        alone = encode_vertical(model, torch.tensor([seq]), torch.tensor([len(seq)]), 6, backend="torch")
        assert_close(f"row {row}", alone[0], batch[row], 1e-5)


def test_vertical_stream_equals_encode_vertical(model):
    ids = random_ids(1, 33, seed=5)
    expected = encode_vertical(model, ids, torch.tensor([33]), 8, backend="torch")[0]
    stream = VerticalStream(model, vertical_chunk_size=8, backend="torch")
    for piece in (ids[0, :3], ids[0, 3:20], ids[0, 20:]):
        stream.feed(piece)
    assert_close("stream", expected, stream.finish(), 1e-6)


def test_chunk_size_changes_only_rounding(model):
    ids = random_ids(2, 40, seed=6)
    ref = horizontal(model, ids, chunk_size=1)
    for q in (4, 16, 64):
        assert_close(f"chunk_size={q}", ref, horizontal(model, ids, chunk_size=q), 1e-5)


# ------------------------------------------------------------------------------------------- save, errors
def test_save_load_round_trip(model, tmp_path):
    model.save(tmp_path / "saved")
    assert rwkv7.detect(tmp_path / "saved") == "fla"
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["model_type"] == "rwkv7" and config["group_norm_eps"] == 64e-5
    assert config == {**model.config.to_dict(), "torch_dtype": "float32"}
    loaded = rwkv7.load(tmp_path / "saved", "fla", torch.device("cpu"))
    assert loaded.config == model.config
    ids = random_ids(2, 25, seed=7)
    assert torch.equal(horizontal(loaded, ids), horizontal(model, ids))


def test_load_encoder_picks_rwkv7(pth_folder, fla_folder):
    from recemb.core.loading import load_encoder

    for folder in (pth_folder, fla_folder):
        assert isinstance(load_encoder(folder, "cpu"), rwkv7.RWKV7Encoder)


def test_dtype_argument(pth_folder, model):
    m64 = rwkv7.load(pth_folder, "rwkv_pth", torch.device("cpu"), torch.float64)
    ids = random_ids(1, 20, seed=8)
    assert_close("fp64 model", horizontal(m64, ids), horizontal(model, ids), 1e-5)
    mbf = rwkv7.load(pth_folder, "rwkv_pth", torch.device("cpu"), torch.bfloat16)
    assert mbf.dtype == torch.bfloat16
    assert_close("bf16 model", horizontal(model, ids), horizontal(mbf, ids).float(), 0.1)


def test_backends(model):
    ids = random_ids(1, 10)
    with torch.inference_mode():
        auto = model.forward_chunk(ids, None, ChunkRun(backend="auto"))[0]
        assert torch.equal(auto, model.forward_chunk(ids, None, ChunkRun(backend="torch"))[0])
        assert torch.equal(auto, model.forward_chunk(ids)[0])
        with pytest.raises(RuntimeError, match="flash-linear-attention's kernel, on CUDA"):
            model.forward_chunk(ids, None, ChunkRun(backend="triton"))  # fla's kernel: CUDA only
        with pytest.raises(ValueError, match="backend must be one of"):
            model.forward_chunk(ids, None, ChunkRun(backend="cuda"))
    assert model.delta_controls(torch.tensor([10])) is None and model.context_extension is None


def test_state_keep_rows(model):
    with torch.inference_mode():
        _, states = model.forward_chunk(random_ids(3, 5))
    kept = states[1].keep_rows(2)
    assert kept.attn_shift.shape == kept.ffn_shift.shape == (2, 32) and kept.wkv.shape == (2, 4, 8, 8)
    assert kept.wkv.dtype == torch.float32 and torch.equal(kept.wkv, states[1].wkv[:2])
    with torch.inference_mode():  # explicit zero states are the start of a sequence
        ids = random_ids(2, 6, seed=9)
        assert torch.equal(model.forward_chunk(ids, model.zero_states(2))[0], model.forward_chunk(ids)[0])


def test_clear_errors(pth_state, tmp_path):
    from recemb.core.loading import CheckpointError

    missing = dict(pth_state)
    del missing["blocks.1.att.k_k"]
    save_pth(missing, tmp_path / "missing")
    with pytest.raises(CheckpointError, match=r"missing.*layers\.1\.attn\.k_k"):
        rwkv7.load(tmp_path / "missing", "rwkv_pth", torch.device("cpu"))

    wrong = dict(pth_state)
    wrong["blocks.2.ffn.key.weight"] = torch.zeros(48, 32)
    save_pth(wrong, tmp_path / "wrong")
    with pytest.raises(CheckpointError, match=r"layers\.2\.ffn\.key\.weight.*\(48, 32\).*\(64, 32\)"):
        rwkv7.load(tmp_path / "wrong", "rwkv_pth", torch.device("cpu"))

    save_pth(pth_state, tmp_path / "two", "a.pth")
    shutil.copy(tmp_path / "two" / "a.pth", tmp_path / "two" / "b.pth")
    with pytest.raises(FileNotFoundError, match=r"exactly one \*\.pth.*a\.pth.*b\.pth"):
        rwkv7.load(tmp_path / "two", "rwkv_pth", torch.device("cpu"))

    (tmp_path / "noweights").mkdir()
    config = {"model_type": "rwkv7", "hidden_size": 32}
    (tmp_path / "noweights" / "config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        rwkv7.load(tmp_path / "noweights", "fla", torch.device("cpu"))

    with pytest.raises(ValueError, match="hybrid"):
        rwkv7.RWKV7Config.from_fla_dict({"model_type": "rwkv7", "attn": {"layers": [1]}})


def test_embedder_runs_rwkv7(tmp_path):
    """End to end: an fla-format RWKV-7 folder with a tokenizer loads through ``Embedder.from_pretrained``,
    and any V gives the same embeddings."""
    from recemb.core import Embedder
    from tests.utils import build_tokenizer

    folder = pth_to_fla(random_pth_state(**{**TINY_RWKV7, "vocab_size": 320}), tmp_path / "model")
    build_tokenizer(folder)  # ids < 300
    embedder = Embedder.from_pretrained(folder, device="cpu", backend="torch")
    assert isinstance(embedder.model, rwkv7.RWKV7Encoder)
    texts = ["a longer text about recurrent state " * 6, "short"]
    assert_close("V=5 vs V=1000", embedder.encode(texts, vertical_chunk_size=1000),
                 embedder.encode(texts, vertical_chunk_size=5), 1e-5)


def _fla_naive_chunk_rwkv7(r, w, k, v, a, b, scale=1.0, initial_state=None, output_final_state=False):
    """fla's own definition of ``chunk_rwkv7`` on the CPU: its naive ``dplr_recurrence`` (heads first, scaled by
    d_k ** -0.5, which is undone here) under the chunk kernel's documented layout ([B, T, H, K], state [B, H, K, V])."""
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence

    heads_first = lambda t: t.transpose(1, 2).float()  # noqa: E731
    q = heads_first(r) * scale * r.shape[-1] ** 0.5
    o, state = dplr_recurrence(q, heads_first(k), heads_first(v), heads_first(a), heads_first(b), heads_first(w),
                               initial_state=None if initial_state is None else initial_state.float())
    return o.transpose(1, 2), state


def test_fla_path_maps_recembs_layout_onto_flas_definition(monkeypatch):
    """RWKV-7 on CUDA runs fla's chunk kernel: with fla's own definition of that kernel standing in for it (its
    naive recurrence; the kernel itself is checked against the torch form in the GPU run), ``rwkv7(...,
    backend="triton")`` equals the chunked torch form: arguments, state layout and scale are mapped right."""
    pytest.importorskip("fla")
    import fla.ops.rwkv7 as fla_rwkv7

    from recemb.kernels.rwkv7 import fla as fla_path
    from recemb.kernels.rwkv7 import rwkv7, rwkv7_chunked

    gen = torch.Generator().manual_seed(3)
    bsz, l, h, n = 2, 23, 3, 8
    r, k = torch.randn(bsz, l, h, n, generator=gen), torch.randn(bsz, l, h, n, generator=gen) * 0.5
    v = torch.randn(bsz, l, h, n, generator=gen)
    w = -torch.rand(bsz, l, h, n, generator=gen) * 2 - 0.01
    kk = torch.nn.functional.normalize(torch.randn(bsz, l, h, n, generator=gen), dim=-1)
    a, b = -kk, kk * torch.rand(bsz, l, h, n, generator=gen)
    state = torch.randn(bsz, h, n, n, generator=gen) * 0.1
    monkeypatch.setattr(fla_rwkv7, "chunk_rwkv7", _fla_naive_chunk_rwkv7)
    monkeypatch.setattr(fla_path, "fla_available", lambda: True)
    o_torch, s_torch = rwkv7_chunked(r, w, k, v, a, b, initial_state=state)
    o_fla, s_fla = fla_path.rwkv7_fla(r, w, k, v, a, b, initial_state=state)
    assert_close("o", o_torch, o_fla, 1e-5)
    assert_close("final state", s_torch, s_fla, 1e-5)
    # On the CPU "auto" never takes fla's path, and "triton" says why it cannot.
    assert torch.equal(rwkv7(r, w, k, v, a, b, state)[0], o_torch)
    with pytest.raises(RuntimeError, match="CUDA"):
        rwkv7(r, w, k, v, a, b, state, backend="triton")
