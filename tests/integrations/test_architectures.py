"""The whole stack on xLSTM and RWKV-7 model folders: Embedder, export -> SentenceTransformer, LangChain,
LlamaIndex and ``recemb sync`` / ``search``, with EOS pooling and instructions on queries only, as for Mamba2."""

import json

import numpy as np
import pytest
import torch

from recemb.core import Embedder, clear_shared
from recemb.core.loading import detect_architecture
from recemb_integrations.cli import main
from tests.utils import SAMPLE_TEXT, assert_close, build_tokenizer

TEXTS = ["a first sentence", "", SAMPLE_TEXT * 2, "third one"]
VOCAB = 320  # the tiny tokenizer's ids fit


def tiny_xlstm(folder):
    from transformers import xLSTMConfig, xLSTMModel

    torch.manual_seed(0)
    # hidden 128 with 2 heads: transformers' own xLSTM fails on some smaller shapes
    config = xLSTMConfig(vocab_size=VOCAB, hidden_size=128, embedding_dim=128, num_blocks=2, num_hidden_layers=2,
                         num_heads=2, qk_dim_factor=0.5, v_dim_factor=1.0, chunk_size=16, pad_token_id=2,
                         bos_token_id=0, eos_token_id=1, mode="inference")
    model = xLSTMModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(str(folder))
    build_tokenizer(folder)
    return folder


def tiny_rwkv7(folder):
    from tests.rwkv7_utils import random_pth_state, save_pth

    save_pth(random_pth_state(vocab_size=VOCAB, hidden_size=32, num_layers=2, head_size=8), folder)
    build_tokenizer(folder)
    return folder


@pytest.fixture(scope="module", params=["xlstm", "rwkv7"])
def arch_folder(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param) / "model"
    folder.mkdir()
    (tiny_xlstm if request.param == "xlstm" else tiny_rwkv7)(folder)
    yield request.param, folder
    clear_shared()


def test_embedder_pools_at_eos_and_instructs_queries_only(arch_folder):
    arch, folder = arch_folder
    assert detect_architecture(folder)[0] == arch
    emb = Embedder.from_pretrained(folder, device="cpu")
    assert emb.config.model_type == arch and emb.context_extension == "off"
    docs = emb.encode_documents(TEXTS)
    assert docs.shape == (4, emb.dim) and np.allclose(np.linalg.norm(docs, axis=1), 1, atol=1e-5)
    # Pooled at the appended EOS: equal to the ids API on the tokenised texts, EOS last.
    ids = emb.tokenize(TEXTS)
    assert all(seq[-1] == emb.tokenizer.eos_token_id for seq in ids)
    assert_close("ids API", emb.embed_token_ids(ids, normalize=True), docs, 1e-6)
    # Vertical chunk size is a memory dial only.
    for V in (1, 7, 1000):
        assert_close(f"V={V}", docs, emb.encode_documents(TEXTS, vertical_chunk_size=V), 1e-5)
    queries = emb.encode_queries(TEXTS[:1])
    assert not np.allclose(queries, docs[:1], atol=1e-4)  # the instruction changes the query side only
    assert_close("query prompt", emb.encode(TEXTS[:1], prompt="Instruct: Given a web search query, retrieve "
                 "relevant passages that answer the query\nQuery: "), queries, 1e-6)
    with pytest.raises(ValueError, match="exists for Mamba2 only"):
        Embedder.from_pretrained(folder, device="cpu", context_extension="mambaextend")


def test_export_to_sentence_transformers(arch_folder, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from recemb_integrations.sentence_transformers import export_sentence_transformers

    arch, folder = arch_folder
    out = export_sentence_transformers(folder, tmp_path / "st")
    model = st.SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    emb = Embedder.from_pretrained(folder, device="cpu")
    assert_close("documents", emb.encode_documents(TEXTS), model.encode_document(TEXTS), 1e-5)
    assert_close("queries", emb.encode_queries(TEXTS[:2]), model.encode_query(TEXTS[:2]), 1e-5)
    assert_close("reloaded folder", emb.encode(TEXTS), Embedder.from_pretrained(out, device="cpu").encode(TEXTS), 1e-6)
    assert detect_architecture(out)[0] == arch
    card = (out / "README.md").read_text()
    assert {"xlstm": "xLSTM", "rwkv7": "RWKV-7"}[arch] in card
    if arch == "xlstm":  # the backbone loads with its own library
        from transformers import xLSTMModel

        backbone = xLSTMModel.from_pretrained(str(out)).eval()
        ids = torch.tensor([emb.tokenize([TEXTS[2]])[0]])
        with torch.no_grad():
            ref = backbone(ids).last_hidden_state[0, -1]
        got = emb.embed_token_ids(ids, normalize=False)[0]
        assert_close("transformers xLSTMModel on the export", ref[None], got[None], 1e-4)


def test_langchain_and_llama_index_adapters(arch_folder):
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    from recemb_integrations.langchain import RecembEmbeddings
    from recemb_integrations.llama_index import RecembEmbedding

    _, folder = arch_folder
    emb = Embedder.from_pretrained(folder, device="cpu")
    lc = RecembEmbeddings(model_name=str(folder), model_kwargs={"device": "cpu"})
    li = RecembEmbedding(model_name=str(folder), model_kwargs={"device": "cpu"})
    assert lc._embedder.model is li.embedder.model
    assert_close("langchain documents", emb.encode_documents(TEXTS), lc.embed_documents(TEXTS), 1e-5)
    assert_close("langchain query", emb.encode_queries(["a claim"]), [lc.embed_query("a claim")], 1e-5)
    assert_close("llama_index nodes", emb.encode_documents(TEXTS), li._get_text_embeddings(TEXTS), 1e-5)
    assert_close("llama_index query", emb.encode_queries(["a claim"]), [li._get_query_embedding("a claim")], 1e-5)


def test_recemb_sync_and_search(arch_folder, tmp_path, capsys):
    pytest.importorskip("qdrant_client")
    arch, folder = arch_folder
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("state space models keep a fixed-size state")
    (corpus / "b.txt").write_text("sourdough needs a long cold fermentation " * 20)
    common = ["--model", str(folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c", "--json"]
    assert main(["sync", str(corpus), *common]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["added"] == 2
    assert main(["sync", str(corpus), *common]) == 0  # a rerun embeds nothing
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["unchanged"] == 2
    assert main(["search", "sourdough fermentation", "--limit", "2", *common]) == 0
    hits = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert hits[0]["document_id"] == "b.txt"  # BM25 finds it even with random weights; the dense side runs too
    assert main(["info", str(folder), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["architecture"] == arch
