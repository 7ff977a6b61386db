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


def test_a_single_sequence_on_the_cpu_defaults_to_the_cpu_v_and_gets_the_same_vector(tiny_embedder):
    from recemb.core.vertical import CPU_SINGLE_SEQUENCE_V, VerticalStream, default_vertical_chunk_size

    assert default_vertical_chunk_size(1, 256, "cpu") == CPU_SINGLE_SEQUENCE_V == 1024
    assert default_vertical_chunk_size(1, 256, "cuda") == default_vertical_chunk_size(1, 256) == 4096
    assert default_vertical_chunk_size(8, 256, "cpu") == 512
    assert VerticalStream(tiny_embedder.model).V == CPU_SINGLE_SEQUENCE_V
    text = " ".join(["recurrent state"] * 700)
    base = torch.from_numpy(tiny_embedder.encode([text]))
    paper = torch.from_numpy(tiny_embedder.encode([text], vertical_chunk_size=4096))
    assert_close("V=1024 against V=4096", paper, base, 1e-5)  # over 1,400 tokens: more than one chunk of 1024


def test_scan_chunk_size_changes_only_rounding(tiny_embedder):
    base = torch.from_numpy(tiny_embedder.encode(TEXTS))
    other = Embedder(tiny_embedder.model, tiny_embedder.tokenizer, chunk_size=3)
    assert_close("chunk_size=3", base, torch.from_numpy(other.encode(TEXTS)), 1e-5)
    # The setting is the other Embedder's own: the shared model, and so this one, are unchanged.
    assert np.array_equal(tiny_embedder.encode(TEXTS), base.numpy())
    assert not np.array_equal(other.encode(TEXTS), base.numpy())  # q = 3 does round differently


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


@pytest.mark.parametrize("limit", [None, 1, 2, 5, 11, 12, 13, 40])
def test_token_stream_truncates_exactly_like_tokenize(tiny_embedder, limit):
    from recemb.core.streaming import TokenStream

    text = "a second, rather longer text " * 3
    whole = tiny_embedder.tokenize([text], max_length=limit)[0]
    full = tiny_embedder.tokenize([text])[0]
    for piece_size in (1, 3, 100):
        pieces = [full[i : i + piece_size] for i in range(0, len(full), piece_size)]
        stream = TokenStream(pieces, tiny_embedder.tokenizer.eos_token_id, limit)
        assert sum(stream, []) == whole and stream.tokens == len(whole)
        assert stream.truncated == (len(full) > len(whole))
    stream = tiny_embedder.tokenize_stream(text, max_length=limit)
    assert sum(stream, []) == whole
    with pytest.raises(RuntimeError, match="only once"):
        list(stream)


def test_tokenizer_failures_in_a_stream_are_named(tiny_embedder):
    from recemb.core.streaming import TokenizationError, TokenStream

    def failing():
        yield [5, 6]
        raise RuntimeError("bad bytes")

    with pytest.raises(TokenizationError, match="tokenization failed: bad bytes"):
        list(TokenStream(failing(), 1))


def test_long_texts_are_streamed_with_the_same_embeddings(tiny_folder, monkeypatch):
    import recemb.core.embedder as embedder_module

    emb = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch", vertical_chunk_size=32)
    texts = ["short one", "a long text that goes on " * 40, "", "another long text, a bit different " * 30]
    reference = emb.encode(texts)
    monkeypatch.setattr(embedder_module, "STREAM_MIN_CHARS", 200)
    assert [emb.streams(t) for t in texts] == [False, True, False, True]
    fed = []
    real = emb.embed_stream
    monkeypatch.setattr(emb, "embed_stream", lambda pieces, **k: fed.append(1) or real(pieces, **k))
    streamed = emb.encode(texts)
    assert len(fed) == 2
    np.testing.assert_allclose(streamed, reference, rtol=1e-5, atol=1e-6)
    single = emb.encode_stream(texts[1], show_progress_bar=False, max_length=20)
    np.testing.assert_allclose(single.numpy(), emb.encode(texts[1], max_length=20), rtol=1e-5, atol=1e-6)
    assert emb.count_tokens(texts[1]) == len(emb.tokenize([texts[1]])[0])


def test_stream_with_context_extension_counts_first(tiny_folder, monkeypatch):
    """Context extension is keyed by the whole length, so a stream is counted before it is embedded."""
    import recemb.core.embedder as embedder_module
    from recemb.core.context_extension import ContextExtension

    emb = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch", vertical_chunk_size=16)
    heads = emb.config.num_heads
    emb.model.context_extension = ContextExtension(
        delta_scale=[0.7, 1.6], global_heads=[[True, False] * (heads // 2)] * 2,
        thresholds={16: [[0.1] * heads] * 2, 256: [[0.3] * heads] * 2}, train_length=8, min_length=12)
    assert emb.needs_whole_length
    text = "a long text that goes on and on " * 20
    ids = emb.tokenize([text])[0]
    expected = emb.embed_token_ids([ids], normalize=True)[0]
    monkeypatch.setattr(embedder_module, "STREAM_MIN_CHARS", 100)
    assert torch.equal(emb.encode_stream(text, show_progress_bar=False), expected)
    np.testing.assert_allclose(emb.encode([text, "short"])[0], expected.numpy(), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="whole input length"):
        emb.embed_stream([ids])
