"""The default model's recipe: training text never contains evaluation queries, judgments or held-out text."""

import json

import numpy as np
import pytest

from tools.mini_model import data, initialise

DATA = data.default_data_dir()
needs_data = pytest.mark.skipif(not (DATA / "ir").is_dir(), reason="../shared/data is not present")


@needs_data
def test_pairs_never_contain_evaluation_queries_or_sts_test_sentences():
    import random

    pairs = data._ir_pairs(DATA) + data._sts_pairs(DATA) + data._book_pairs(DATA, random.Random(0), 50)
    texts = {t for a, p, _ in pairs for t in (a, p)}
    joined = "\n".join(texts)
    for queries in sorted((DATA / "ir").glob("*/queries.jsonl")):
        for line in open(queries, encoding="utf-8"):
            q = json.loads(line)["text"].strip()
            if len(q.split()) >= 6:  # short queries could collide with titles by chance
                assert q not in texts, (queries.parent.name, q)
    with open(DATA / "sts" / "stsbenchmark" / "test.tsv", encoding="utf-8") as f:
        next(f)
        test_sentences = {s for line in f for s in line.rstrip("\n").split("\t")[:2]}
    with open(DATA / "sts" / "stsbenchmark" / "train.tsv", encoding="utf-8") as f:
        next(f)
        train_sentences = {s for line in f for s in line.rstrip("\n").split("\t")[:2]}
    leaked = (test_sentences - train_sentences) & texts
    assert not leaked, sorted(leaked)[:3]
    # The held-out book feeds the long-document test only.
    held_out = (DATA / "long" / data.HELD_OUT_BOOKS[0]).read_text(encoding="utf-8")
    probe = " ".join(held_out.split()[50_000:50_012])
    assert probe not in joined


def test_roff_text_strips_markup():
    lines = [".TH LS 1", r"\fB\-\-all\fR lists \fIall\fR entries", ".B bold words", ".PP", r"done\(em here"]
    assert data._roff_text(lines) == "--all lists all entries bold words done here"


def test_principal_directions_keep_dot_products_best():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 4)) @ rng.normal(size=(4, 12)) + 0.01 * rng.normal(size=(500, 12))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    p = principal = initialise.principal_directions(x, 4)
    assert p.shape == (12, 4) and np.allclose(principal.T @ principal, np.eye(4), atol=1e-5)
    err = np.abs((x @ p) @ (x @ p).T - x @ x.T).max()
    q, _ = np.linalg.qr(rng.normal(size=(12, 4)))
    assert err < 0.05 < np.abs((x @ q) @ (x @ q).T - x @ x.T).max()


def test_student_config_fits_the_size_budget():
    c = initialise.student_config(30522, 0, 101, 102)
    per_layer = c.hidden_size * c.in_proj_size + c.intermediate_size * c.hidden_size + c.conv_dim * (c.conv_kernel + 1)
    params = c.vocab_size * c.hidden_size + c.num_hidden_layers * per_layer
    assert params * 2 < 50e6  # fp16 bytes on disk: small enough to ship inside the package


@pytest.mark.parametrize("pool_layer", [0, -1], ids=["pool-first", "pool-last"])
def test_pooling_init_makes_the_student_a_weighted_sum_of_static_vectors(pool_layer):
    """After ``pooling_init`` the Mamba2 student embeds a text as normalise(sum_t w_t s_t) over its tokens,
    checked against that sum computed here in numpy, whichever layer sums; silent tokens add nothing, and the
    weights matter."""
    import torch

    from recemb.core.architectures.mamba2 import Mamba2Config, Mamba2Encoder
    from recemb.core.vertical import encode_vertical

    vocab, d = 50, 16
    config = Mamba2Config(hidden_size=d, num_hidden_layers=3, num_heads=4, head_dim=8, state_size=8, expand=2,
                          conv_kernel=4, chunk_size=8, vocab_size=vocab, pad_token_id=0, bos_token_id=1,
                          eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    encoder = Mamba2Encoder(config).eval()
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(vocab, d - 1)).astype(np.float32)
    weights = np.exp(rng.uniform(np.log(1e-3), 0, size=vocab))  # three decades, like SIF weights
    initialise.pooling_init(encoder, vectors, weights, silent_ids=[0, 1, 2], pool_layer=pool_layer)

    texts = [rng.integers(3, vocab, size=n).tolist() for n in (1, 5, 17, 60, 200)]
    ids = [[1] + t + [2] for t in texts]  # [CLS] tokens [SEP]; [SEP] is the EOS
    width = max(map(len, ids))
    batch = torch.tensor([s + [0] * (width - len(s)) for s in ids])
    lengths = torch.tensor([len(s) for s in ids])
    with torch.no_grad():
        out = encode_vertical(encoder, batch, lengths, vertical_chunk_size=32, backend="torch").numpy()
    assert np.abs(out[:, d - 1]).max() < 1e-6  # the weight channel is dropped by norm_f
    got = out[:, :d - 1] / np.linalg.norm(out[:, :d - 1], axis=1, keepdims=True)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def pooled(w):
        e = np.stack([(unit[t] * w[t, None]).sum(0) for t in texts])
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    weighted = (got * pooled(weights)).sum(1)
    unweighted = (got * pooled(np.ones(vocab))).sum(1)
    assert weighted.min() > 0.999, weighted
    assert (weighted > unweighted + 0.02)[1:].all(), (weighted, unweighted)  # one token: the weight is moot
    pool = pool_layer % len(encoder.layers)
    for i, layer in enumerate(encoder.layers):
        if i == pool:
            continue
        assert not layer.mixer.out_proj.weight.any()  # a branch of zero
        # above the sum a branch keeps a long memory (only the EOS is read; the default init has |A| = 1..h), below
        # it its heads span local context to a long memory
        lo, hi = initialise.BRANCH_DECAY_RANGE if i > pool else initialise.CONTEXT_DECAY_RANGE
        decays = torch.exp(layer.mixer.A_log)
        assert decays.min().item() == pytest.approx(lo, rel=1e-5) and decays.max().item() == pytest.approx(hi, rel=1e-5)


def test_static_fit_recovers_sums_of_hidden_token_vectors():
    """Targets made by summing hidden per-token vectors: distillation alone must recover them well enough that
    texts it never saw point where their targets do, and silent tokens must stay zero."""
    from tools.mini_model.static_fit import StaticFitConfig, fit_static_vectors

    rng = np.random.default_rng(0)
    vocab, dim, silent = 60, 8, [0, 1]
    hidden = rng.normal(size=(vocab, dim)) * rng.uniform(0.2, 2.0, size=(vocab, 1))
    texts = [rng.integers(2, vocab, size=rng.integers(3, 12)).tolist() for _ in range(3000)]
    targets = np.stack([hidden[t].sum(0) for t in texts])
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    start = rng.normal(size=(vocab, dim)) * 0.1
    fresh = [rng.integers(2, vocab, size=6).tolist() for _ in range(200)]  # texts the fit never sees
    want = np.stack([hidden[t].sum(0) for t in fresh])

    def batches(epoch, r):
        order = r.permutation(len(texts))
        for s in range(0, len(texts), 64):
            part = [int(i) for i in order[s:s + 64]]
            yield part[:32], part[32:]  # with no contrastive term the split is moot: both halves are distilled

    def fresh_cosine(vectors):
        got = np.stack([vectors[t].sum(0) for t in fresh])
        cos = (got * want).sum(1) / np.maximum(np.linalg.norm(got, axis=1), 1e-12) / np.linalg.norm(want, axis=1)
        return {"score": float(cos.mean())}

    config = StaticFitConfig(epochs=6, learning_rate=0.05, contrastive_weight=0.0)
    fitted, history = fit_static_vectors(texts, targets, np.ones(len(texts), bool), batches, start, silent, config,
                                         fresh_cosine)
    assert fitted.shape == (vocab, dim) and np.all(fitted[silent] == 0)
    assert history[0]["score"] < 0.5 and fresh_cosine(fitted)["score"] > 0.97


def test_the_build_refuses_a_destination_of_someone_elses_files_before_any_work(tmp_path, monkeypatch):
    from tools.mini_model import build

    def no_work(*args, **kwargs):
        raise AssertionError("the build started before its destination was checked")

    monkeypatch.setattr(build, "build_pairs", no_work)
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds no model"):
        build.train_mini(project)
    with pytest.raises(ValueError, match="destination folder is empty"):
        build.train_mini("")
    assert [p.name for p in project.iterdir()] == ["notes.txt"]
    assert not (tmp_path / ".project-work").exists()


def _tiny_data(tmp_path):
    """A data folder with one IR collection's queries and an STS-B train/test split."""
    (tmp_path / "ir" / "demo").mkdir(parents=True)
    (tmp_path / "ir" / "demo" / "corpus.jsonl").write_text(json.dumps(
        {"_id": "d1", "title": "Heat transfer in thin plates", "text": " ".join(["conduction"] * 20)}) + "\n")
    (tmp_path / "ir" / "demo" / "queries.jsonl").write_text("\n".join(json.dumps({"_id": str(i), "text": t}) for i, t in
        enumerate(["how does heat flow through a thin metal plate", "short query"])) + "\n")
    sts = tmp_path / "sts" / "stsbenchmark"
    sts.mkdir(parents=True)
    (sts / "train.tsv").write_text("s1\ts2\tscore\nA man plays a guitar.\tA man is playing music.\t4.0\n")
    (sts / "test.tsv").write_text("s1\ts2\tscore\nA dog runs in a field.\tA man plays a guitar.\t0.5\n")
    return tmp_path


def test_evaluation_texts_are_the_long_queries_and_the_sts_test_sentences_not_in_train(tmp_path):
    banned = data.evaluation_texts(_tiny_data(tmp_path))
    # the short query could match a title by chance; a test sentence also in train is not the test's own
    assert banned == ["A dog runs in a field.", "how does heat flow through a thin metal plate"]


def test_host_text_that_contains_an_evaluation_text_is_never_a_training_pair(tmp_path, monkeypatch):
    folder = _tiny_data(tmp_path)
    leaking = ("Explain the plate model in detail here", "Example: HOW does heat flow through a thin metal plate, "
               "answered by the solver below with enough words to pass the length filter of pairs.", "docstring")
    clean = ("Parse a configuration file into sections", "Reads each line, strips comments and returns a mapping "
             "of section names to their key and value pairs, in file order.", "docstring")
    monkeypatch.setattr(data, "_docstring_pairs", lambda root=None, source="docstring": [
        (f"{a} ({source})", p, source) for a, p, _ in (leaking, clean)])
    monkeypatch.setattr(data, "_manpage_pairs",
                        lambda: [("list a dog runs in a field. here", clean[1] + " ls", "manpage")])
    rows = data.build_pairs(folder)
    kept = {r["anchor"] for r in rows}
    assert {f"{clean[0]} (docstring)", f"{clean[0]} (package_docstring)"} <= kept
    assert not kept & {f"{leaking[0]} (docstring)", f"{leaking[0]} (package_docstring)",
                       "list a dog runs in a field. here"}
    assert {r["source"] for r in rows} == {"ir", "sts", "docstring", "package_docstring"}
    assert data.contains_any(("x", "A DOG runs in a field. y"), ["a dog runs in a field."])
    assert not data.contains_any(("a dog runs",), ["a dog runs in a field."])


def test_source_limits_cap_each_source_and_none_keeps_all(tmp_path, monkeypatch):
    folder = _tiny_data(tmp_path)
    many = [(f"summary line number {i} here", f"body {i} " + "word " * 20, "docstring") for i in range(30)]
    monkeypatch.setattr(data, "_docstring_pairs", lambda root=None, source="docstring": [
        (a, p, source) for a, p, _ in many])
    monkeypatch.setattr(data, "_manpage_pairs", lambda: [])
    rows = data.build_pairs(folder, limits={"docstring": 7, "package_docstring": None})
    counts = {s: sum(r["source"] == s for r in rows) for s in ("docstring", "package_docstring")}
    assert counts == {"docstring": 7, "package_docstring": 23}  # no pair twice: the rest of the same 30
    rows = data.build_pairs(folder, limits={"docstring": 7, "package_docstring": 12})
    assert [sum(r["source"] == s for r in rows) for s in ("docstring", "package_docstring")] == [7, 12]
