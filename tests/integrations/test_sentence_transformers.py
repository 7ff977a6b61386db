"""RecembModule through SentenceTransformer: export, load (folder and offline hub id), prompts, batching."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

st = pytest.importorskip("sentence_transformers")

from recemb.core import Embedder  # noqa: E402
from recemb.core.prompts import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS  # noqa: E402
from recemb_integrations.sentence_transformers import RecembModule, export_sentence_transformers  # noqa: E402
from tests.utils import assert_close, save_mamba_ssm_checkpoint, transformers_model  # noqa: E402

TEXTS = ["a first sentence", "", "a much longer second text about recurrent state " * 12, "third one"]


@pytest.fixture(scope="module")
def exported(tiny_folder, tmp_path_factory):
    return export_sentence_transformers(tiny_folder, tmp_path_factory.mktemp("st") / "tiny-st")


@pytest.fixture(scope="module")
def st_model(exported):
    return st.SentenceTransformer(str(exported), trust_remote_code=True, device="cpu")


@pytest.fixture(scope="module")
def embedder(exported):
    return Embedder.from_pretrained(exported, device="cpu")


def test_exported_folder_layout(exported):
    modules = json.loads((exported / "modules.json").read_text())
    assert len(modules) == 2 and modules[0]["path"] == ""
    assert modules[0]["type"] == "recemb_integrations.sentence_transformers.RecembModule"
    assert modules[1]["type"].startswith("sentence_transformers.") and modules[1]["type"].endswith("Normalize")
    config = json.loads((exported / "config_sentence_transformers.json").read_text())
    assert config["prompts"]["query"] == f"Instruct: {DEFAULT_INSTRUCTION}\nQuery: "
    assert config["prompts"]["document"] == ""
    assert config["prompts"]["SciFact"] == f"Instruct: {TASK_INSTRUCTIONS['SciFact']}\nQuery: "
    assert config.get("default_prompt_name") is None
    assert json.loads((exported / "recemb_config.json").read_text()) == {"max_seq_length": None,
                                                                        "vertical_chunk_size": None,
                                                                        "quantize": None}
    assert json.loads((exported / "config.json").read_text())["model_type"] == "mamba2"
    assert (exported / "tokenizer.json").exists() and (exported / "model.safetensors").exists()
    card = (exported / "README.md").read_text()
    assert "trust_remote_code=True" in card and "vertical_chunk_size" in card


def test_folder_saved_under_the_old_class_name_loads(exported, st_model, tmp_path):
    """Folders exported before one capitalisation name ``RecEmbModule`` in modules.json: they load the same model."""
    import shutil

    from recemb_integrations import sentence_transformers as module

    old = shutil.copytree(exported, tmp_path / "old")
    modules = json.loads((old / "modules.json").read_text())
    modules[0]["type"] = "recemb_integrations.sentence_transformers.RecEmbModule"
    (old / "modules.json").write_text(json.dumps(modules))
    assert module.RecEmbModule is RecembModule and "RecEmbModule" not in module.__all__
    loaded = st.SentenceTransformer(str(old), trust_remote_code=True, device="cpu")
    assert isinstance(loaded[0], RecembModule)
    assert_close("old folder", st_model.encode(TEXTS[:2]), loaded.encode(TEXTS[:2]), 0.0)


def test_backbone_loads_in_transformers(exported, tiny_folder):
    from transformers import Mamba2Model

    ids = torch.randint(3, 300, (1, 20))
    with torch.no_grad():
        a = Mamba2Model.from_pretrained(str(exported)).eval()(ids).last_hidden_state
        b = Mamba2Model.from_pretrained(str(tiny_folder)).eval()(ids).last_hidden_state
    assert torch.equal(a, b)


def test_encode_equals_embedder(st_model, embedder):
    for batch_size in (1, 3, 8):  # sentence-transformers sorts by length and pads its own batches
        assert_close("embeddings", embedder.encode(TEXTS),
                     st_model.encode(TEXTS, batch_size=batch_size), 1e-5)
    single = st_model.encode("a first sentence")
    assert single.shape == (embedder.dim,)
    np.testing.assert_allclose(np.linalg.norm(st_model.encode(TEXTS), axis=1), 1.0, rtol=1e-5)
    assert st_model.get_embedding_dimension() == embedder.dim


def test_queries_get_instruction_documents_never(st_model, embedder):
    q = ["what limits the memory of an embedder?"]
    assert_close("embeddings", embedder.encode_queries(q), st_model.encode_query(q), 1e-5)
    assert_close("embeddings", embedder.encode_documents(TEXTS), st_model.encode_document(TEXTS), 1e-5)
    assert_close("embeddings", embedder.encode_queries(q, instruction="SciFact"),
                 st_model.encode_query(q, prompt_name="SciFact"), 1e-5)
    assert not np.allclose(st_model.encode_query(q), st_model.encode_document(q), atol=1e-4)


def test_vertical_chunk_size_per_call_and_on_module(st_model):
    base = st_model.encode(TEXTS)
    assert_close("embeddings", base, st_model.encode(TEXTS, vertical_chunk_size=3), 1e-5)
    st_model[0].vertical_chunk_size = 5
    try:
        assert_close("embeddings", base, st_model.encode(TEXTS), 1e-5)
    finally:
        st_model[0].vertical_chunk_size = None


def test_max_seq_length_truncates(st_model, embedder):
    assert st_model.max_seq_length is None
    st_model.max_seq_length = 12
    try:
        assert_close("embeddings", embedder.encode(TEXTS, max_length=12), st_model.encode(TEXTS), 1e-5)
        assert not np.allclose(embedder.encode(TEXTS[2:3]), st_model.encode(TEXTS[2:3]), atol=1e-4)
    finally:
        st_model.max_seq_length = None


def test_save_load_round_trip(st_model, tmp_path):
    st_model[0].max_seq_length = 64
    try:
        st_model.save(str(tmp_path / "again"))
    finally:
        st_model[0].max_seq_length = None
    again = st.SentenceTransformer(str(tmp_path / "again"), trust_remote_code=True, device="cpu")
    assert again.max_seq_length == 64
    st_model.max_seq_length = 64
    try:
        assert np.array_equal(st_model.encode(TEXTS), again.encode(TEXTS))
    finally:
        st_model.max_seq_length = None


def test_missing_flag_gives_sentence_transformers_error(exported):
    with pytest.raises(ValueError, match="trust_remote_code"):
        st.SentenceTransformer(str(exported), device="cpu")


def test_offline_hub_id(exported, tmp_path, monkeypatch):
    """A temp HF cache holding the export as recemb/codestral-mamba2, loaded with HF_HUB_OFFLINE=1."""
    import shutil

    commit = "f" * 40
    repo = tmp_path / "hub" / "models--recemb--codestral-mamba2"
    shutil.copytree(exported, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    model = st.SentenceTransformer("recemb/codestral-mamba2", trust_remote_code=True, device="cpu",
                                   cache_folder=str(tmp_path / "hub"))
    emb = Embedder.from_pretrained("recemb/codestral-mamba2", device="cpu", cache_dir=tmp_path / "hub")
    q = ["how do state space models scale?"]
    assert_close("embeddings", emb.encode_queries(q), model.encode_query(q), 1e-5)
    assert_close("embeddings", emb.encode_documents(TEXTS), model.encode_document(TEXTS), 1e-5)


def test_export_from_mamba_ssm_checkpoint(tmp_path, tiny_folder):
    src = save_mamba_ssm_checkpoint(transformers_model("g3", vocab_size=320), tmp_path / "ssm")
    with pytest.raises(ValueError, match="no tokenizer files"):
        export_sentence_transformers(src, tmp_path / "out")
    dst = export_sentence_transformers(src, tmp_path / "out", tokenizer=tiny_folder)
    model = st.SentenceTransformer(str(dst), trust_remote_code=True, device="cpu")
    emb = Embedder.from_pretrained(src, device="cpu", tokenizer=tiny_folder)
    assert_close("embeddings", emb.encode(TEXTS), model.encode(TEXTS), 1e-5)


def test_bad_input_names_index(st_model):
    with pytest.raises(TypeError, match="inputs\\[1\\] is int"):
        st_model[0].preprocess(["ok", 5])


def test_module_is_registered_for_device_moves(st_model):
    assert any(p is st_model[0].encoder.embeddings.weight for p in st_model.parameters())
    assert isinstance(st_model[0], RecembModule)


def test_missing_framework_names_the_extra():
    code = ("import sys; sys.modules['sentence_transformers'] = None; sys.modules['sentence_transformers.base'] = None;"
            "sys.modules['sentence_transformers.base.modules'] = None\n"
            "try:\n import recemb_integrations.sentence_transformers\nexcept ImportError as e: print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "bash scripts/install.sh sentence-transformers" in out


def test_context_extension_switch_and_artifacts_travel(exported, tmp_path):
    import shutil

    from recemb.core.context_extension import ContextExtension

    folder = tmp_path / "calibrated"
    shutil.copytree(exported, folder)
    ContextExtension(delta_scale=[0.5, 1.8], train_length=8, min_length=10).save(folder)  # scales from 10 tokens
    on = st.SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    off = st.SentenceTransformer(str(folder), trust_remote_code=True, device="cpu",
                                 model_kwargs={"context_extension": "off"})
    plain = st.SentenceTransformer(str(exported), trust_remote_code=True, device="cpu")
    assert np.array_equal(off.encode(TEXTS), plain.encode(TEXTS))
    lengths = [len(ids) for ids in on[0].embedder.tokenize(TEXTS)]
    long = np.array(lengths) >= 10
    assert long.any() and not long.all(), lengths
    assert not np.allclose(on.encode(TEXTS)[long], plain.encode(TEXTS)[long], atol=1e-4)
    assert np.array_equal(on.encode(TEXTS[1:2]), plain.encode(TEXTS[1:2]))  # "" is 2 tokens: the plain model
    on[0].set_context_extension("off")
    assert np.array_equal(on.encode(TEXTS), plain.encode(TEXTS))
    on[0].set_context_extension("mambaextend")
    on.save(str(tmp_path / "saved"))  # the artifacts are saved with the weights
    assert (tmp_path / "saved" / "context_extension.json").is_file()
    again = st.SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True, device="cpu")
    assert np.allclose(again.encode(TEXTS), on.encode(TEXTS), atol=1e-6)


# --------------------------------------------------------------- low precision (recemb/core/precision.py)
def test_int8_export_is_recorded_and_loads_quantised(tiny_folder, tmp_path):
    from recemb.core.precision import is_quantized

    out = export_sentence_transformers(tiny_folder, tmp_path / "int8", quantize="int8")
    assert json.loads((out / "recemb_config.json").read_text())["quantize"] == "int8"
    weights = json.loads((out / "config.json").read_text())
    assert weights["model_type"] == "mamba2"  # the weights on disk stay a plain (unquantised) checkpoint
    model = st.SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    assert model[0].quantize == "int8" and is_quantized(model[0].encoder)
    expected = Embedder.from_pretrained(tiny_folder, device="cpu", quantize="int8").encode_documents(TEXTS)
    assert_close("int8 export", torch.as_tensor(expected), torch.as_tensor(model.encode_document(TEXTS)), 1e-5)
    # model_kwargs overrides the recorded choice: unquantised is the fp32 model
    plain = st.SentenceTransformer(str(out), trust_remote_code=True, device="cpu",
                                   model_kwargs={"quantize": None})
    assert plain[0].quantize is None and not is_quantized(plain[0].encoder)
    fp32 = Embedder.from_pretrained(tiny_folder, device="cpu").encode_documents(TEXTS)
    assert_close("unquantised", torch.as_tensor(fp32), torch.as_tensor(plain.encode_document(TEXTS)), 1e-5)
    # a quantised SentenceTransformer is not saved over a folder (its checkpoint is the fp32 one)
    with pytest.raises(ValueError, match="int8"):
        model.save(str(tmp_path / "resaved"))


def test_model_kwargs_choose_bf16_and_int8(exported):
    for options in ({"dtype": "bfloat16"}, {"torch_dtype": "bfloat16"}, {"quantize": "int8"}):
        model = st.SentenceTransformer(str(exported), trust_remote_code=True, device="cpu", model_kwargs=options)
        load = {"dtype": options.get("dtype", options.get("torch_dtype")), "quantize": options.get("quantize")}
        expected = Embedder.from_pretrained(exported, device="cpu", **load).encode_documents(TEXTS)
        assert_close(str(options), torch.as_tensor(expected), torch.as_tensor(model.encode_document(TEXTS)), 1e-5)
        reference = Embedder.from_pretrained(exported, device="cpu").encode_documents(TEXTS)
        cos = torch.nn.functional.cosine_similarity(torch.as_tensor(expected), torch.as_tensor(reference))
        assert (cos >= 0.995).all(), cos


def test_export_refuses_an_unknown_quantize_before_writing(tiny_folder, tmp_path):
    with pytest.raises(ValueError, match="quantize"):
        export_sentence_transformers(tiny_folder, tmp_path / "bad", quantize="int4")
    assert not (tmp_path / "bad").exists()


def test_multi_process_pool_gives_the_single_process_vectors(st_model, embedder):
    """sentence-transformers' multi-process encode (one process per device, here two CPU processes) pickles the
    module into spawned workers: the vectors are the single-process ones, queries keep their instruction."""
    texts = TEXTS + [f"text number {i} " * (1 + i) for i in range(7)]
    want_docs, want_queries = embedder.encode_documents(texts), embedder.encode_queries(texts)
    got = st_model.encode_document(texts, device=["cpu", "cpu"], chunk_size=3)
    assert_close("documents, two processes", want_docs, got, 1e-5)
    pool = st_model.start_multi_process_pool(["cpu", "cpu"])
    try:
        assert_close("queries, a pool", want_queries, st_model.encode_query(texts, pool=pool, chunk_size=4), 1e-5)
    finally:
        st_model.stop_multi_process_pool(pool)
