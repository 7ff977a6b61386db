"""The Embedder's public behaviour: shapes, prompts on queries only, EOS, truncation, bad input."""

import numpy as np
import pytest
import torch

from recemb.core import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS, Embedder, query_prompt
from tests.utils import assert_close

TEXTS = ["the first text", "", "a second, rather longer text " * 10, "third"]


def test_shapes_and_types(tiny_embedder):
    emb = tiny_embedder
    out = emb.encode(TEXTS)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (4, emb.dim)
    single = emb.encode("the first text")
    assert single.shape == (emb.dim,)
    np.testing.assert_allclose(single, out[0], rtol=1e-5, atol=1e-6)
    assert emb.encode([]).shape == (0, emb.dim)
    assert emb.encode(("a", "b")).shape == (2, emb.dim)


def test_normalisation(tiny_embedder):
    out = tiny_embedder.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    raw = tiny_embedder.encode(TEXTS, normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), out, rtol=1e-5, atol=1e-6)


def test_results_do_not_depend_on_batch_size_or_order(tiny_embedder):
    base = torch.from_numpy(tiny_embedder.encode(TEXTS, batch_size=4))
    for bs in (1, 3):
        assert_close(f"batch_size={bs}", base, torch.from_numpy(tiny_embedder.encode(TEXTS, batch_size=bs)), 1e-5)
    rev = torch.from_numpy(tiny_embedder.encode(TEXTS[::-1]))
    assert_close("reversed", base, rev.flip(0), 1e-5)


def test_vertical_chunk_size_per_call_and_default(tiny_embedder):
    base = torch.from_numpy(tiny_embedder.encode(TEXTS))
    for V in (1, 5, 64):
        assert_close(f"V={V}", base, torch.from_numpy(tiny_embedder.encode(TEXTS, vertical_chunk_size=V)), 1e-5)
    with pytest.raises(ValueError, match="vertical_chunk_size must be a positive int"):
        tiny_embedder.encode(TEXTS, vertical_chunk_size=0)


def test_scan_chunk_size_changes_only_rounding(tiny_embedder):
    base = torch.from_numpy(tiny_embedder.encode(TEXTS))
    other = Embedder(tiny_embedder.model, tiny_embedder.tokenizer, chunk_size=3)
    try:
        assert_close("chunk_size=3", base, torch.from_numpy(other.encode(TEXTS)), 1e-5)
    finally:
        tiny_embedder.model.set_scan_chunk_size(None)


def test_eos_is_appended_once_and_bos_kept(tiny_embedder):
    tok = tiny_embedder.tokenizer
    ids = tiny_embedder.tokenize(["hello world", ""])
    assert all(seq[0] == 0 and seq[-1] == tok.eos_token_id for seq in ids)  # <s> from the tokenizer, </s> ours
    assert ids[1] == [0, tok.eos_token_id]
    assert sum(t == tok.eos_token_id for t in ids[0]) == 1


def test_tokenizer_that_appends_eos_itself_gets_no_second_one(tmp_path):
    from tests.utils import save_transformers_checkpoint, transformers_model

    folder = save_transformers_checkpoint(transformers_model("g1"), tmp_path / "m")
    emb = Embedder.from_pretrained(folder, device="cpu", eos_token_id=0)  # <s> = 0 ends nothing: appended
    assert emb.tokenize(["abc"])[0][-1] == 0 and emb.tokenize(["abc"])[0][0] == 0


def test_queries_get_the_instruction_documents_never(tiny_embedder):
    emb = tiny_embedder
    q = "what is a state space model"
    expected = emb.encode([q], prompt=f"Instruct: {DEFAULT_INSTRUCTION}\nQuery: ")
    np.testing.assert_allclose(emb.encode_queries([q]), expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(emb.encode_queries([q]), emb.encode([q]), atol=1e-4)
    scifact = emb.encode([q], prompt=f"Instruct: {TASK_INSTRUCTIONS['SciFact']}\nQuery: ")
    np.testing.assert_allclose(emb.encode_queries([q], instruction="SciFact"), scifact, rtol=1e-6, atol=1e-6)
    custom = emb.encode([q], prompt="Instruct: find poems\nQuery: ")
    np.testing.assert_allclose(emb.encode_queries([q], instruction="find poems"), custom, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(emb.encode_documents([q]), emb.encode([q]), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="documents never get a prompt"):
        emb.encode_documents([q], prompt="query: ")


def test_prompt_format():
    assert query_prompt("STS") == "Instruct: Retrieve semantically similar text.\nQuery: "
    assert query_prompt("CQADupstackGamingRetrieval").startswith("Instruct: Given a question, retrieve detailed")
    assert query_prompt(None) == f"Instruct: {DEFAULT_INSTRUCTION}\nQuery: "


def test_truncation(tiny_embedder):
    emb = tiny_embedder
    long = "word " * 200
    ids = emb.tokenize([long], max_length=16)[0]
    assert len(ids) == 16 and ids[-1] == emb.tokenizer.eos_token_id
    full = emb.tokenize([long])[0]
    assert len(full) > 16 and ids[:15] == full[:15]
    truncated = emb.encode([long], max_length=16)
    np.testing.assert_allclose(truncated, emb.embed_token_ids([ids], normalize=True).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad,where", [(["ok", 3], "texts\\[1\\] is int"), (["a", None], "texts\\[1\\] is NoneType"),
                                       ([b"bytes"], "texts\\[0\\] is bytes"), (None, "NoneType"), (5, "int")])
def test_non_string_input_names_the_index(tiny_embedder, bad, where):
    with pytest.raises(TypeError, match=where):
        tiny_embedder.encode(bad)


def test_token_id_input(tiny_embedder):
    emb = tiny_embedder
    ids = emb.tokenize(TEXTS)
    out = emb.embed_token_ids(ids)
    assert isinstance(out, torch.Tensor) and out.shape == (4, emb.dim) and out.dtype == torch.float32
    np.testing.assert_allclose(torch.nn.functional.normalize(out, dim=-1).numpy(), emb.encode(TEXTS), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ValueError, match="sequences\\[1\\] is empty"):
        emb.embed_token_ids([[1], []])
    with pytest.raises(ValueError, match="sequences\\[0\\] has token id 99999"):
        emb.embed_token_ids([[1, 99999]])
    assert emb.embed_token_ids(torch.tensor([[5, 6, 1]])).shape == (1, emb.dim)


def test_progress_bar_for_long_work(tiny_embedder, capsys):
    tiny_embedder.encode(["short"], show_progress_bar=True)
    assert "Embedding" in capsys.readouterr().err
    tiny_embedder.encode(["short"])
    assert "Embedding" not in capsys.readouterr().err


def test_constructor_validation(tiny_embedder):
    with pytest.raises(ValueError, match="backend must be one of"):
        Embedder(tiny_embedder.model, backend="cuda")
    with pytest.raises(ValueError, match="max_length"):
        Embedder(tiny_embedder.model, max_length=-1)
    assert "dim=32" in repr(tiny_embedder)
