"""The #34 training pieces: long-document windows, the teacher's per-text cache, the contrastive static fit, the
step plan of the layer training and its resume."""

import numpy as np
import pytest
import torch

from tools.mini_model import data, distil, static_fit, teacher

DATA = data.default_data_dir()
needs_data = pytest.mark.skipif(not (DATA / "long").is_dir(), reason="../shared/data is not present")


def _book_folder(tmp_path, words_per_book=4000):
    rng = np.random.RandomState(0)
    vocab = [f"w{i}" for i in range(300)]
    (tmp_path / "long").mkdir()
    for name in ("alpha.txt", data.HELD_OUT_BOOKS[0]):
        words = []
        while len(words) < words_per_book:
            words += list(rng.choice(vocab, size=rng.randint(8, 20))) + ["end."]
        (tmp_path / "long" / name).write_text(" ".join(words))
    return tmp_path


def test_long_documents_hold_out_a_book_and_keep_validation_apart(tmp_path):
    folder = _book_folder(tmp_path)
    split = data.long_documents(folder, chunk_words=100, chunks_per_doc=4, stride=2)
    assert {d["book"] for part in split.values() for d in part} == {"alpha"}  # the held-out book never appears
    train_chunks = {c for d in split["train"] for c in d["chunks"]}
    val_chunks = [c for d in split["validation"] for c in d["chunks"]]
    assert split["train"] and split["validation"]
    assert not train_chunks & set(val_chunks) and len(val_chunks) == len(set(val_chunks))  # no overlap at all
    for d in split["train"] + split["validation"]:
        assert len(d["chunks"]) == 4 and all(len(c.split()) == 100 for c in d["chunks"])
        text = " ".join(d["chunks"])
        assert d["sentences"] and all(s in text and s.endswith(".") and 7 <= len(s.split()) <= 40
                                      for s in d["sentences"])


@needs_data
def test_long_documents_of_the_shared_books_never_touch_war_and_peace():
    held = (DATA / "long" / data.HELD_OUT_BOOKS[0]).read_text(encoding="utf-8").split()
    probe = " ".join(held[100_000:100_010])
    split = data.long_documents()
    assert all(probe not in c for part in split.values() for d in part for c in d["chunks"])


def test_teacher_cache_embeds_only_new_texts_and_survives_a_reload(tmp_path, monkeypatch):
    calls = []

    class Fake:
        def encode(self, texts, **_):
            calls.append(list(texts))
            return np.stack([np.full(384, float(len(t))) / (len(t) * np.sqrt(384)) for t in texts])

    cache = teacher.TeacherCache(tmp_path, tmp_path / "teacher")
    cache._model = Fake()
    first = cache.embed(["ab", "abc", "ab"])
    assert calls == [["ab", "abc"]] and np.allclose(first[0], first[2])
    reloaded = teacher.TeacherCache(tmp_path, tmp_path / "teacher")
    reloaded._model = Fake()
    again = reloaded.embed(["abc", "abcd"])
    assert calls == [["ab", "abc"], ["abcd"]] and np.allclose(again[0], first[1]) and len(reloaded) == 3
    assert (cache.embedded, reloaded.embedded) == (2, 1)  # what each computed, for the build's record
    other = teacher.TeacherCache(tmp_path, tmp_path / "other-teacher")
    other._model = Fake()
    other.embed(["ab"])
    assert calls[-1] == ["ab"]  # another teacher's embedding of the same text is not reused
    mean = reloaded.mean_of_chunks([["ab", "abcd"]])
    assert np.isclose(np.linalg.norm(mean), 1.0)


def test_contrastive_static_fit_tells_apart_texts_the_teacher_targets_alone_confuse():
    """Anchor i and positive i share only the topic token 0 with each other and every other text; each has its own
    rare token (1 + i and 41 + i). The targets are all the same (a teacher that sees only the topic), so
    distillation has nothing that ties anchor i to positive i; the contrastive term must learn it."""
    rng = np.random.RandomState(0)
    vocab, d, n = 90, 8, 40
    ids = [[0, 1 + i] for i in range(n)] + [[0, 41 + i] for i in range(n)]
    targets = np.tile(np.eye(d)[0], (2 * n, 1)).astype(np.float32)
    has = np.ones(2 * n, bool)
    init = rng.normal(size=(vocab, d)).astype(np.float32) * 0.1
    init[0] = np.eye(d)[0]

    def batches(epoch, r):
        order = r.permutation(n)
        for s in range(0, n, 10):
            yield [int(i) for i in order[s:s + 10]], [n + int(i) for i in order[s:s + 10]]

    def top1(vectors):
        e = np.stack([vectors[s].sum(0) for s in ids])
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        return {"score": float(((e[:n] @ e[n:].T).argmax(1) == np.arange(n)).mean())}

    plain = static_fit.StaticFitConfig(epochs=15, learning_rate=0.05, contrastive_weight=0.0)
    mixed = static_fit.StaticFitConfig(epochs=15, learning_rate=0.05, contrastive_weight=1.0)
    _, h_plain = static_fit.fit_static_vectors(ids, targets, has, batches, init, [], plain, top1)
    v, h_mixed = static_fit.fit_static_vectors(ids, targets, has, batches, init, [], mixed, top1)
    assert max(h["score"] for h in h_mixed) >= 0.9 and max(h["score"] for h in h_plain) <= 0.3
    assert top1(v)["score"] == max(h["score"] for h in h_mixed)  # the best epoch is what comes back


def _texts(n_short=20, n_windows=6):
    ids = [[5 + i % 7, 3] for i in range(2 * n_short)]
    windows, sentences = [], []
    for w in range(n_windows):
        window = len(ids)
        ids.append([9, 10, 11, 12, 3])
        sent = [len(ids), len(ids) + 1]
        ids += [[9, 3], [12, 3]]
        windows.append((window, "a" if w < 3 else "b", sent))
        sentences += sent
    targets = np.ones((len(ids), 8), np.float32)
    has = np.ones(len(ids), bool)
    has[sentences] = False
    return distil.TrainingTexts(ids, targets, has, [(i, n_short + i) for i in range(n_short)], windows)


def test_batch_plan_is_pure_and_mixes_one_book_long_steps_in():
    texts = _texts()
    config = distil.DistilConfig(steps=16, short_batch=4, long_batch=2, long_every=3)
    plan = distil.batch_plan(texts, config)
    assert plan == distil.batch_plan(texts, config) and len(plan) == 16
    assert plan != distil.batch_plan(texts, distil.DistilConfig(steps=16, short_batch=4, long_batch=2,
                                                                long_every=3, seed=1))
    window_book = {i: book for i, book, _ in texts.long_windows}
    window_sentences = {i: s for i, _, s in texts.long_windows}
    assert [long for _, _, long in plan] == [step % 4 == 3 for step in range(16)]
    for step, (anchors, positives, long) in enumerate(plan):
        if long:
            assert len({window_book[p] for p in positives}) == 1 and len(set(positives)) == 2
            assert all(a in window_sentences[p] for a, p in zip(anchors, positives))
        else:
            assert len(anchors) == 4 and all((a, p) in texts.short_pairs for a, p in zip(anchors, positives))


def _tiny_student(folder, identity_branches=False, branch=1):
    """A random 2-layer student; ``identity_branches``: layer ``branch``'s out_proj zeroed, as ``pooling_init``
    leaves the layers other than the pool layer."""
    from recemb.core.architectures.mamba2 import Mamba2Config, Mamba2Encoder

    config = Mamba2Config(hidden_size=8, num_hidden_layers=2, num_heads=2, head_dim=8, state_size=4, expand=2,
                          conv_kernel=4, chunk_size=4, vocab_size=16, pad_token_id=0, bos_token_id=1,
                          eos_token_id=3, tie_word_embeddings=False)
    torch.manual_seed(0)
    encoder = Mamba2Encoder(config)
    if identity_branches:
        with torch.no_grad():
            encoder.layers[branch].mixer.out_proj.weight.zero_()
    encoder.save(folder)
    return folder


@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated-branches"])
def test_training_resumed_from_a_checkpoint_ends_where_an_uninterrupted_run_does(tmp_path, monkeypatch, gated):
    from safetensors.torch import load_file

    student = _tiny_student(tmp_path / "student", identity_branches=gated)
    texts = _texts()
    config = distil.DistilConfig(steps=8, short_batch=4, long_batch=2, long_every=3, warmup_steps=2,
                                 checkpoint_seconds=0.0)
    whole = distil.train_layers(student, texts, tmp_path / "whole", config, log=lambda *_: None)
    # An interrupted run: stop after step 5 (the checkpoint is written after every step here).
    calls = {"n": 0}
    real = distil.step_loss

    def failing(*a, **k):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(distil, "step_loss", failing)
    with pytest.raises(KeyboardInterrupt):
        distil.train_layers(student, texts, tmp_path / "parts", config, log=lambda *_: None)
    monkeypatch.setattr(distil, "step_loss", real)
    assert torch.load(tmp_path / "parts" / distil.CHECKPOINT, weights_only=False)["step"] == 5
    resumed = distil.train_layers(student, texts, tmp_path / "parts", config, resume=True, log=lambda *_: None)
    a = load_file(str(tmp_path / "whole" / "trained" / "model.safetensors"))
    b = load_file(str(tmp_path / "parts" / "trained" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [h["step"] for h in resumed["history"]] == [h["step"] for h in whole["history"]]
    with pytest.raises(FileExistsError, match="resume it"):  # a fresh run never overwrites a checkpoint
        distil.train_layers(student, texts, tmp_path / "parts", config, log=lambda *_: None)
    assert torch.load(tmp_path / "parts" / distil.CHECKPOINT, weights_only=False)["step"] == 8
    with pytest.raises(ValueError, match="another training configuration"):
        distil.train_layers(student, texts, tmp_path / "parts", distil.DistilConfig(steps=9), resume=True)


def test_text_table_gives_each_text_its_role():
    from tools.mini_model.texts import text_table

    rows = [{"anchor": f"q{i}", "positive": f"p{i}", "instruction": ""} for i in range(3)]
    windows = {"train": [{"book": "a", "chunks": ["x y", "z"], "sentences": ["s1", "s2"]}],
               "validation": [{"book": "a", "chunks": ["v w"], "sentences": [f"t{k}" for k in range(8)]}]}
    table = text_table(rows, windows, lambda r: "Q: " + r["anchor"])
    assert table.texts[:6] == ["Q: q0", "Q: q1", "Q: q2", "p0", "p1", "p2"]
    assert table.teacher_texts[:6] == ["q0", "q1", "q2", "p0", "p1", "p2"]  # the teacher reads the bare query
    assert table.short_pairs == [(0, 3), (1, 4), (2, 5)]
    (w, book, sentences), = table.train_windows
    assert table.texts[w] == "x y z" and book == "a" and [table.texts[i] for i in sentences] == ["s1", "s2"]
    (v, _, vsent), = table.validation_windows
    assert table.texts[v] == "v w" and all(table.teacher_texts[i] is None for i in sentences + vsent)
    assert [(n, q) for n, q, _ in table.validation_queries] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    for _, quarter, s in table.validation_queries:  # one sentence from each quarter of the window
        assert table.texts[s] in {f"t{k}" for k in (2 * quarter, 2 * quarter + 1)}


def test_static_batches_cover_every_pair_and_draw_long_batches_from_one_book():
    windows = [(100 + w, "ab"[w % 2], [200 + 10 * w, 201 + 10 * w]) for w in range(40)]
    pairs = [(i, 50 + i) for i in range(30)]
    config = static_fit.StaticFitConfig(batch_size=8, long_batch=10, long_rounds=2)
    steps = list(static_fit.static_batches(pairs, windows, config)(1, np.random.RandomState(0)))
    short = [s for s in steps if s[1][0] < 100]
    long = [s for s in steps if s[1][0] >= 100]
    assert sorted(zip(sum((a for a, _ in short), []), sum((p for _, p in short), []))) == pairs
    assert len(long) == 2 * 2 * 2  # 2 books × 2 rounds × 20 windows / 10
    by_window = {i: (book, sent) for i, book, sent in windows}
    for anchors, positives in long:
        assert len({by_window[p][0] for p in positives}) == 1 and len(set(positives)) == 10
        assert all(a in by_window[p][1] for a, p in zip(anchors, positives))


def test_window_accuracy_counts_per_quarter():
    from tools.mini_model.validation import window_accuracy

    windows = np.eye(3)
    queries = np.array([[1, 0, 0], [0, 0.9, 0.1], [0.2, 0, 1], [0, 1, 0]], float)
    labels = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)]  # the last two are wrong
    assert window_accuracy(queries, windows, labels) == [1.0, 0.0]


def test_training_ships_the_best_validated_step_and_keeps_the_start_when_training_hurts(tmp_path):
    from safetensors.torch import load_file

    student = _tiny_student(tmp_path / "student")
    config = distil.DistilConfig(steps=6, short_batch=4, long_batch=2, long_every=3, warmup_steps=1,
                                 learning_rate=1e-2, validate_every=2)
    seen = []

    def worse_each_time(embedder):  # a validation that says every step made things worse
        seen.append(len(seen))
        return {"score": -float(len(seen))}

    result = distil.train_layers(student, _texts(), tmp_path / "run", config, log=lambda *_: None,
                                 validate=worse_each_time)
    assert [v["step"] for v in result["validations"]] == [0, 2, 4, 6] and result["best_step"] == 0
    start = load_file(str(student / "model.safetensors"))
    shipped = load_file(str(tmp_path / "run" / "trained" / "model.safetensors"))
    last = torch.load(tmp_path / "run" / distil.CHECKPOINT, weights_only=False)["model"]
    assert all(torch.allclose(start[k], shipped[k]) for k in start)  # the start, not the trained weights
    assert any(not torch.allclose(last[k], shipped[k]) for k in shipped)  # and training did move them

    def better_each_time(embedder):
        seen.append(len(seen))
        return {"score": float(len(seen))}

    result = distil.train_layers(student, _texts(), tmp_path / "run2", config, log=lambda *_: None,
                                 validate=better_each_time)
    last = torch.load(tmp_path / "run2" / distil.CHECKPOINT, weights_only=False)["model"]
    shipped = load_file(str(tmp_path / "run2" / "trained" / "model.safetensors"))
    assert result["best_step"] == 6 and all(torch.allclose(last[k], shipped[k]) for k in shipped)


def test_the_build_refuses_a_resume_without_a_checkpoint_and_a_fresh_run_over_one(tmp_path, monkeypatch):
    from tools.mini_model import build

    def no_work(*args, **kwargs):
        raise AssertionError("the build started work before checking its work folder")

    monkeypatch.setattr(build, "build_pairs", no_work)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        build.train_mini(tmp_path / "out", work_dir=tmp_path / "work", resume=True)
    (tmp_path / "work" / "layers").mkdir(parents=True)
    (tmp_path / "work" / "layers" / distil.CHECKPOINT).write_bytes(b"progress")
    with pytest.raises(FileExistsError, match="--resume"):
        build.train_mini(tmp_path / "out", work_dir=tmp_path / "work")
    assert (tmp_path / "work" / "layers" / distil.CHECKPOINT).read_bytes() == b"progress"
    assert not (tmp_path / "out").exists()


def test_the_build_refuses_a_work_folder_of_someone_elses_files_and_touches_nothing(tmp_path, monkeypatch):
    from tools.mini_model import build

    def no_work(*args, **kwargs):
        raise AssertionError("the build started work in a folder that is not a work folder")

    monkeypatch.setattr(build, "build_pairs", no_work)
    project = tmp_path / "project"
    (project / "init").mkdir(parents=True)
    (project / "init" / "config.json").write_text("mine")
    (project / "notes.txt").write_text("mine too")
    with pytest.raises(FileExistsError, match="notes.txt"):
        build.train_mini(tmp_path / "out", work_dir=project)
    with pytest.raises(ValueError, match="work folder is empty"):
        build.train_mini(tmp_path / "out", work_dir="  ")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError):
        build.train_mini(tmp_path / "out", work_dir=a_file)
    assert sorted(p.name for p in project.rglob("*")) == ["config.json", "init", "notes.txt"]
    assert (project / "init" / "config.json").read_text() == "mine" and a_file.read_text() == "x"
    # a work folder of this build (what a stopped run leaves) is accepted
    work = tmp_path / "work"
    (work / "init").mkdir(parents=True)
    (work / "teacher_embeddings.npz").write_bytes(b"")
    assert build.check_work_folder(work) == work


def test_the_command_takes_a_work_folder_or_a_resume_not_both_and_no_negative_steps(capsys):
    from tools.mini_model.__main__ import build_parser, main

    args = build_parser().parse_args(["--out", "o", "--resume", "w"])
    assert args.resume == "w" and args.work is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--out", "o", "--resume", "w", "--work", "v"])
    with pytest.raises(SystemExit):
        main(["--out", "o", "--layer-steps", "-1"])
    assert "--layer-steps must be 0 or more" in capsys.readouterr().err
    for bad, message in ((["--width", "200"], "--width must be a multiple of 64"),
                         (["--layers", "3", "--pool-layer", "3"], "--pool-layer one of its layers"),
                         (["--layers", "0"], "--layers must be 1 or more")):
        with pytest.raises(SystemExit):  # refused before anything is read or written
            main(["--out", "o", *bad])
        assert message in capsys.readouterr().err


def _embed_ids(embedder, ids):
    from recemb.core.vertical import pad_right

    batch, lengths = pad_right(ids, 0)
    with torch.no_grad():
        return embedder.embed_padded(batch, lengths)


@pytest.mark.parametrize("pool_layer", [0, -1], ids=["branch-above-the-sum", "branch-below-the-sum"])
def test_gated_branches_start_as_the_identity_train_and_export_as_a_plain_mamba2(tmp_path, pool_layer):
    from safetensors.torch import load_file

    from recemb.core import Embedder

    branch = 1 if pool_layer == 0 else 0
    student = _tiny_student(tmp_path / "student", identity_branches=True, branch=branch)
    probe = [[5, 9, 11, 3], [7, 3]]
    gated = Embedder.from_pretrained(student, device="cpu", dtype="float32", backend="torch")
    reference = _embed_ids(gated, probe)
    assert distil.gate_branches(gated.model, seed=0, pool_layer=pool_layer) == 1  # the zero out_proj only
    torch.testing.assert_close(_embed_ids(gated, probe), reference, rtol=0, atol=0)  # gates at 0: the identity
    start = load_file(str(student / "model.safetensors"))
    assert distil.folded_state(gated.model).keys() == start.keys()

    config = distil.DistilConfig(steps=6, short_batch=4, long_batch=2, long_every=3, warmup_steps=1,
                                 learning_rate=1e-2, gate_learning_rate=1e-1)
    distil.train_layers(student, _texts(), tmp_path / "run", config, log=lambda *_: None, pool_layer=pool_layer)
    shipped = load_file(str(tmp_path / "run" / "trained" / "model.safetensors"))
    assert shipped.keys() == start.keys()  # a plain Mamba2 checkpoint: the gates are folded into out_proj
    # base_lr_scale 0: the embeddings, the pool layer and the final norm (the static sum) stay as fitted
    frozen = [k for k in start if not k.startswith(f"layers.{branch}.")]
    assert frozen and all(torch.equal(shipped[k], start[k]) for k in frozen)
    checkpoint = torch.load(tmp_path / "run" / distil.CHECKPOINT, weights_only=False)["model"]
    prefix = f"layers.{branch}.mixer.out_proj.parametrizations.weight."
    gate, v = checkpoint[prefix + "0.gate"], checkpoint[prefix + "original"]
    assert gate.abs().max() > 0  # the branch opened
    torch.testing.assert_close(shipped[f"layers.{branch}.mixer.out_proj.weight"], gate * v)
    trained = Embedder.from_pretrained(tmp_path / "run" / "trained", device="cpu", dtype="float32", backend="torch")
    assert not torch.allclose(_embed_ids(trained, probe), reference)
    with pytest.raises(ValueError, match="another training configuration"):  # a resume with another pool layer
        distil.train_layers(student, _texts(), tmp_path / "run", config, resume=True, log=lambda *_: None,
                            pool_layer=branch)
