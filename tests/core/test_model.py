"""The whole encoder against transformers' Mamba2Model (torch path) on the same random weights."""

import pytest
import torch

from recemb.core import Embedder, encode_vertical
from recemb.core.architectures.mamba2 import Mamba2Config, Mamba2Encoder
from recemb.core.encoder import ChunkRun
from tests.utils import TINY_CONFIGS, assert_close, transformers_model


def ours_from(ref) -> Mamba2Encoder:
    model = Mamba2Encoder(Mamba2Config.from_transformers_dict(ref.config.to_dict()))
    model.load_state_dict(ref.state_dict(), strict=True)
    return model.eval()


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_hidden_states_equal_transformers(name):
    ref = transformers_model(name)
    ours = ours_from(ref)
    ids = torch.randint(3, 320, (2, 45))  # 45 is not a multiple of any chunk size used
    with torch.no_grad():
        expected = ref(ids).last_hidden_state
        got = ours(ids, backend="torch")
    assert_close("last_hidden_state", expected, got, 1e-5)


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_pooled_output_of_unequal_batch_equals_transformers(name):
    """Right-padded batch of unequal lengths, vertical chunks, pooled at each row's EOS."""
    ref = transformers_model(name)
    ours = ours_from(ref)
    lengths = [53, 1, 17, 40]
    torch.manual_seed(1)
    seqs = [torch.randint(3, 320, (n,)) for n in lengths]
    with torch.no_grad():
        expected = torch.stack([ref(s[None]).last_hidden_state[0, -1] for s in seqs])  # each alone, unpadded
    ids = torch.full((len(seqs), max(lengths)), 2)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    for V in (5, ref.config.chunk_size, 1000):
        got = encode_vertical(ours, ids, torch.tensor(lengths), V, backend="torch")
        assert_close(f"pooled V={V}", expected, got, 1e-4)


def test_transformers_padded_batch_agrees_too():
    ref = transformers_model("g3")
    ours = ours_from(ref)
    lengths = torch.tensor([30, 12, 21])
    ids = torch.randint(3, 320, (3, 30))
    mask = (torch.arange(30)[None] < lengths[:, None]).long()
    with torch.no_grad():
        h = ref(ids, attention_mask=mask).last_hidden_state
    expected = h[torch.arange(3), lengths - 1]
    got = encode_vertical(ours, ids, lengths, 7, backend="torch")
    assert_close("pooled", expected, got, 1e-4)


def test_bf16_weights_keep_fp32_residual_and_state():
    ref = transformers_model("g1").to(torch.bfloat16)
    ours = ours_from(ref).to(torch.bfloat16)
    ids = torch.randint(3, 320, (1, 20))
    with torch.no_grad():
        expected = ref(ids).last_hidden_state
        h, states = ours.forward_chunk(ids, run=ChunkRun(backend="torch"))
        got = ours.norm_f(h)
    assert h.dtype == torch.float32 and got.dtype == torch.float32
    assert all(s.ssm_state.dtype == torch.float32 for s in states)
    assert_close("bf16 last_hidden_state", expected.float(), got, 2e-2)


def test_embedder_matches_normalised_transformers_pooling(tmp_path):
    from tests.utils import save_transformers_checkpoint

    ref = transformers_model("g3", eos_token_id=1)
    folder = save_transformers_checkpoint(ref, tmp_path / "m")
    emb = Embedder.from_pretrained(folder, device="cpu", backend="torch")
    texts = ["a short one", "", "a much longer text " * 20]
    got = torch.from_numpy(emb.encode(texts, batch_size=2))
    with torch.no_grad():
        expected = []
        for ids in emb.tokenize(texts):
            assert ids[-1] == 1  # EOS appended
            expected.append(ref(torch.tensor([ids])).last_hidden_state[0, -1])
        expected = torch.nn.functional.normalize(torch.stack(expected), dim=-1)
    assert_close("embeddings", expected, got, 1e-4)


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_workspace_changes_nothing_chunk_after_chunk(name):
    """forward_chunk with a workspace (what encode_vertical passes on the CPU) equals it without, to the bit, and
    the states it returns live outside the workspace: the next chunk leaves them as they were."""
    from recemb.kernels.workspace import Workspace

    ours = ours_from(transformers_model(name))
    ids = torch.randint(3, 320, (3, 40))
    ws = Workspace()
    plain_states = ws_states = None
    kept_copies = []  # the previous chunk's states, copied before the workspace is reused
    with torch.inference_mode():
        for start in range(0, 40, 13):
            chunk = ids[:, start : start + 13]
            h_plain, plain_states = ours.forward_chunk(chunk, plain_states, ChunkRun(backend="torch"))
            h_ws, new_ws_states = ours.forward_chunk(chunk, ws_states, ChunkRun(backend="torch", workspace=ws))
            assert torch.equal(h_plain, h_ws)
            for a, b in zip(plain_states, new_ws_states):
                assert torch.equal(a.conv_state, b.conv_state) and torch.equal(a.ssm_state, b.ssm_state)
            if ws_states is not None:  # the previous chunk's states, after this chunk reused the workspace
                for kept, copy in zip(ws_states, kept_copies):
                    assert torch.equal(kept.conv_state, copy[0]) and torch.equal(kept.ssm_state, copy[1])
            ws_states = new_ws_states
            kept_copies = [(s.conv_state.clone(), s.ssm_state.clone()) for s in ws_states]
    assert ws.nbytes > 0
