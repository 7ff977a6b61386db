"""Training recipe: the loss falls on tiny models, LoRA merges exactly, trained folders round-trip."""

import json

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("datasets")

from sentence_transformers import SentenceTransformer  # noqa: E402

from recemb.core import Embedder  # noqa: E402
from recemb.core.loading import load_encoder  # noqa: E402
from recemb.core.prompts import query_prompt  # noqa: E402
from recemb.core.vertical import encode_vertical, pad_right, pool_last_token  # noqa: E402
from recemb_integrations.training import (  # noqa: E402
    DistillInfoNCELoss,
    TrainingConfig,
    apply_lora,
    build_dataset,
    infonce_logits,
    load_pairs,
    merge_lora,
    train,
)
from tests.utils import assert_close  # noqa: E402

TOPICS = ["apple orchard harvest", "river boat sailing", "mountain snow climbing", "violin concert music",
          "python code compiler", "bread oven baking", "chess opening gambit", "rain storm thunder",
          "garden rose flower", "train station ticket", "ocean whale song", "desert camel sand"]


def topic_pairs(repeats: int = 2) -> list[dict]:
    rows = []
    for r in range(repeats):
        for i, t in enumerate(TOPICS):
            words = t.split()
            rows.append({"anchor": f"{words[r % 3]} {words[(r + 1) % 3]}",
                         "positive": f"note {i}: {t}"})
    return rows


def test_pool_last_token_equals_encode_vertical_and_has_gradients(tiny_folder):
    model = load_encoder(tiny_folder, device="cpu", dtype=torch.float32)
    ids, lengths = pad_right([[5, 6, 7, 1], [9, 1], [3, 4, 5, 6, 7, 8, 1]], pad_id=2)
    expected = encode_vertical(model, ids, lengths, 3, backend="torch")
    model.requires_grad_(True)
    pooled = pool_last_token(model, ids, lengths, backend="torch")
    assert_close("pooled", expected, pooled.detach(), 1e-5)
    pooled.square().sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    for name in ("embeddings.weight", "layers.0.mixer.in_proj.weight", "layers.1.mixer.A_log",
                 "layers.0.mixer.dt_bias", "norm_f.weight"):
        assert grads[name] is not None and grads[name].abs().sum() > 0, name
    with pytest.raises(ValueError, match="lengths"):
        pool_last_token(model, ids, torch.tensor([0, 1, 1]))


def test_build_dataset_puts_instructions_on_anchors_only():
    rows = [{"anchor": "q1", "positive": "d1", "negative": ["n1", "m1"]},
            {"anchor": "q2", "positive": "d2", "negative": ["n2", "m2"], "instruction": "SciFact"},
            {"anchor": "q3", "positive": "d3", "negative": ["n3", "m3"], "instruction": ""}]
    ds = build_dataset(rows)
    assert ds.column_names == ["anchor", "positive", "negative_1", "negative_2"]
    assert ds["anchor"] == [query_prompt(None) + "q1", query_prompt("SciFact") + "q2", "q3"]
    assert ds["positive"] == ["d1", "d2", "d3"] and ds["negative_2"] == ["m1", "m2", "m3"]
    with pytest.raises(ValueError, match="hard negatives"):
        build_dataset([{"anchor": "a", "positive": "b", "negative": "c"}, {"anchor": "a", "positive": "b"}])


def test_load_pairs_reports_the_bad_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "a"}\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl:2: 'positive'"):
        load_pairs(path)
    path.write_text('{"anchor": "a", "positive": "b"}\nnot json\n')
    with pytest.raises(ValueError, match=r":2: not JSON"):
        load_pairs(path)


def test_infonce_logits_are_cosine_over_temperature():
    a, c = torch.randn(3, 8), torch.randn(5, 8)
    expected = torch.nn.functional.cosine_similarity(a[:, None], c[None], dim=-1) / 0.02
    assert_close("logits", expected, infonce_logits(a, c, 0.02), 1e-5)


@pytest.mark.parametrize("mini_batch_size", [None, 4])
def test_infonce_training_lowers_the_loss_and_round_trips(tiny_folder, tmp_path, mini_batch_size):
    rows = topic_pairs(repeats=3)
    # No instruction here: a long shared prefix makes this 2-layer, width-32 random model far slower to train.
    config = TrainingConfig(loss="infonce", batch_size=12, max_steps=24, learning_rate=1e-3, warmup_steps=2,
                            logging_steps=4, mini_batch_size=mini_batch_size, lora=False, max_length=64,
                            query_instruction="")
    before = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch")
    out = tmp_path / "trained"
    summary = train(tiny_folder, rows, out, config)
    losses = [h["loss"] for h in summary["history"]]
    assert len(losses) >= 5 and losses[-1] < 0.6 * losses[0], losses
    assert summary["steps"] == 24 and summary["lora"] is False
    assert json.loads((out / "training.json").read_text())["steps"] == 24

    # The trained folder loads both ways and agrees; the weights moved.
    st = SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    emb = Embedder.from_pretrained(out, device="cpu", backend="torch")
    texts = ["apple harvest", "note 6: chess opening gambit"]
    assert_close("st vs embedder", torch.as_tensor(emb.encode(texts)), torch.as_tensor(st.encode(texts)), 1e-5)
    assert abs(emb.encode(texts) - before.encode(texts)).max() > 1e-3
    # Queries now find their own topic's document more often than chance.
    q = torch.as_tensor(emb.encode([r["anchor"] for r in rows[:12]]))
    d = torch.as_tensor(emb.encode_documents([r["positive"] for r in rows[:12]]))
    hits = (q @ d.T).argmax(1).eq(torch.arange(12)).float().mean()
    assert hits > 0.5, hits


def test_distill_loss_pulls_the_student_onto_teacher_targets(tiny_folder, tmp_path):
    torch.manual_seed(0)
    rows = topic_pairs(repeats=2)
    targets = torch.nn.functional.normalize(torch.randn(len(TOPICS), 32), dim=-1)
    for i, r in enumerate(rows):
        t = targets[i % len(TOPICS)]
        r["label"] = torch.stack([t, t]).tolist()
    config = TrainingConfig(loss="distill", batch_size=12, max_steps=30, learning_rate=3e-3, warmup_steps=2,
                            logging_steps=5, contrastive_weight=0.1, lora=False, max_length=64, query_instruction="")
    summary = train(tiny_folder, rows, tmp_path / "student", config)
    losses = [h["loss"] for h in summary["history"]]
    assert losses[-1] < 0.6 * losses[0], losses
    emb = Embedder.from_pretrained(tmp_path / "student", device="cpu", backend="torch")
    cos = (torch.as_tensor(emb.encode_documents([r["positive"] for r in rows[:12]])) * targets).sum(-1)
    assert cos.mean() > 0.5, cos


def test_distill_loss_checks_label_shape(tiny_folder):
    from recemb_integrations.training import build_model

    st, _ = build_model(tiny_folder, TrainingConfig(loss="distill", lora=False))
    loss = DistillInfoNCELoss(st)
    features = [st.preprocess(["a", "b"]), st.preprocess(["c", "d"])]
    with pytest.raises(ValueError, match=r"\(b, 2, d\)"):
        loss(features, torch.zeros(2, 32))


def test_lora_trains_adapters_only_and_merges_exactly(tiny_folder):
    model = load_encoder(tiny_folder, device="cpu", dtype=torch.float32)
    keys = set(model.state_dict())
    ids, lengths = pad_right([[5, 6, 7, 8, 9, 1], [4, 1]], pad_id=2)
    apply_lora(model, r=4, alpha=8)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert any("in_proj" in n for n in trainable) and any("out_proj" in n for n in trainable)
    with torch.no_grad():  # LoRA's B starts at zero; give the adapters something to merge
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    with_adapters = pool_last_token(model, ids, lengths, backend="torch").detach()
    merge_lora(model)
    assert set(model.state_dict()) == keys
    merged = encode_vertical(model, ids, lengths, 2, backend="torch")
    assert_close("merged", with_adapters, merged, 1e-5)
    plain = load_encoder(tiny_folder, device="cpu", dtype=torch.float32)
    assert (encode_vertical(plain, ids, lengths, 2, backend="torch") - merged).abs().max() > 1e-4


def test_lora_training_saves_a_plain_checkpoint(tiny_folder, tmp_path):
    config = TrainingConfig(loss="infonce", batch_size=12, max_steps=6, learning_rate=1e-2, warmup_steps=1,
                            logging_steps=2, lora=True, lora_r=4, lora_alpha=4, max_length=64, query_instruction="")
    summary = train(tiny_folder, topic_pairs(), tmp_path / "lora", config)
    assert summary["lora"] is True
    from safetensors.torch import load_file

    trained = load_file(str(tmp_path / "lora" / "model.safetensors"))
    original = load_file(str(tiny_folder / "model.safetensors"))
    assert set(trained) == set(original)
    moved = [k for k in original if not torch.equal(trained[k], original[k])]
    # Only the LoRA-adapted linear layers change; embeddings, norms and SSM parameters stay frozen.
    assert moved and all(k.endswith(("in_proj.weight", "out_proj.weight")) for k in moved), moved


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="loss"):
        TrainingConfig(loss="triplet")
    with pytest.raises(ValueError, match="batch_size"):
        TrainingConfig(batch_size=1)
