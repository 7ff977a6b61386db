"""Calibrating Mamba2's context-extension artifacts (``recemb.core.context_extension``).

- **LongMamba** (``calibrate_longmamba``), after GATECH-EIC/LongMamba ``load_align_target.py``: run windows of
  the training length, record every layer's post-softplus Δ (l, h), clip each head's outliers at the (1 - sc)
  quantile, and per head: the cumulative decay exp(A_h · ΣΔ) (global heads: above θ) and, per target length Lk,
  the threshold that keeps only as many of the largest Δ as it takes to reach the training-length total ΣΔ
  (sorted Δ linearly resampled to Lk values, cumsum, first index past ΣΔ). Windows are aggregated by max.
- **MambaExtend** (``calibrate_mambaextend``): per-layer Δ scales, by SPSA (zeroth order, as the paper's CF-ZO,
  with its greedy accept) or by gradient (CF-BP). The objective, for an *embedding* model with no LM head, is the
  **agreement of a long text's embedding with the mean of its training-length passages' embeddings** (vanilla
  model): 1 - cos(e_s(D), normalise(mean_j e(P_j))). At the training length the model is in distribution, and an
  embedding of the whole document should summarise all of its parts rather than only its recent tail, which is
  what forgetting past the training length does. It needs no labels and no LM head, and it is what long-document
  retrieval rewards.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from recemb.core.architectures.mamba2.model import Mamba2Encoder
from recemb.core.context_extension import ContextExtension, DeltaControl, apply_delta_control, resolve_mode
from recemb.core.encoder import ChunkRun
from recemb.core.vertical import encode_vertical
from recemb.kernels import prepare_dt

__all__ = ["TARGET_MULTIPLES", "calibrate", "calibrate_longmamba", "calibrate_mambaextend", "default_target_lengths",
           "passage_mean_targets", "record_delta"]

TARGET_MULTIPLES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def default_target_lengths(train_length: int, longest: int = 262_144) -> list[int]:
    return [train_length * m for m in TARGET_MULTIPLES if train_length * m <= longest]


@torch.inference_mode()
def record_delta(model: Mamba2Encoder, input_ids: torch.Tensor, backend: str = "auto",
                 context_extension: str = "auto") -> list[torch.Tensor]:
    """Post-softplus Δ of every layer for one sequence (1, l): a list of (l, h) fp32, with the MambaExtend
    scale when ``context_extension`` runs it (LongMamba filters the scaled Δ), whatever l; no filtering."""
    recorded: list[torch.Tensor] = []
    ext = model.context_extension
    scaled = resolve_mode(ext, context_extension) in ("mambaextend", "both")
    scales = ext.delta_scale if scaled else None
    hooks = []
    for i, layer in enumerate(model.layers):
        mixer = layer.mixer

        def hook(_module, _inputs, output, mixer=mixer, i=i):
            # The mixer's own Δ path: softplus(dt + bias), then the MambaExtend scale (no filtering, no limit).
            dt = prepare_dt(output[..., mixer.config.in_proj_rows["dt"]], mixer.dt_bias, dt_softplus=True)
            if scales is not None:
                dt = apply_delta_control(dt, DeltaControl(scale=scales[i]))
            recorded.append(dt[0])  # (l, h)

        hooks.append(mixer.in_proj.register_forward_hook(hook))
    try:
        model.forward_chunk(input_ids, None, ChunkRun(backend=backend))  # no deltas: the plain forward
    finally:
        for h in hooks:
            h.remove()
    return recorded


def _window_statistics(dt: torch.Tensor, A: torch.Tensor, clamp_top: float, targets: Sequence[int], train_length: int):
    """One layer, one window: dt (l, h) -> (cumulative decay (h,), {Lk: threshold (h,)})."""
    L = dt.shape[0]
    k = int(L * clamp_top)
    if k > 0:  # clip each head's largest Δ at the (1 - clamp_top) quantile
        dt = torch.minimum(dt, torch.topk(dt, k, dim=0).values.min(dim=0).values)
    total = dt.sum(dim=0)  # (h,) ΣΔ over a training-length window
    decay = torch.exp(A * total)
    ordered = dt.sort(dim=0, descending=True).values.T[:, None, :]  # (h, 1, l)
    thresholds = {}
    for Lk in targets:
        if Lk <= train_length:
            thresholds[Lk] = torch.zeros_like(total)
            continue
        curve = F.interpolate(ordered, size=Lk, mode="linear")[:, 0]  # (h, Lk): Δ sorted, resampled to Lk tokens
        top_k = (curve.cumsum(dim=1) > total[:, None]).float().argmax(dim=1) + 1  # tokens kept to reach ΣΔ
        thresholds[Lk] = curve.gather(1, top_k.clamp(max=Lk - 1)[:, None])[:, 0]
    return decay, thresholds


def calibrate_longmamba(
    model: Mamba2Encoder,
    windows: Sequence[Sequence[int]],
    train_length: int,
    target_lengths: Sequence[int] | None = None,
    theta: float = 0.05,
    clamp_top: float = 0.1,
    min_length: int | None = None,
    backend: str = "auto",
    progress: Callable[[int], None] | None = None,
    context_extension: str = "auto",
) -> ContextExtension:
    """LongMamba's per-layer global heads and Δ thresholds from token windows of ``train_length`` tokens.

    context_extension: the mode the windows' Δ are recorded under (its MambaExtend scales, if any, are
    applied: LongMamba filters the scaled Δ). Returns the model's ContextExtension (created if absent) with
    ``global_heads`` and ``thresholds`` filled.
    """
    if not windows:
        raise ValueError("calibrate_longmamba needs at least one window")
    targets = sorted(set(target_lengths or default_target_lengths(train_length)))
    device = model.embeddings.weight.device
    decay_max = thr_max = None
    for n, window in enumerate(windows):
        ids = torch.as_tensor(list(window), dtype=torch.long, device=device)[None, :train_length]
        per_layer = record_delta(model, ids, backend, context_extension)
        decays, thrs = [], []
        for layer, dt in zip(model.layers, per_layer):
            A = -torch.exp(layer.mixer.A_log.float())
            d, t = _window_statistics(dt, A, clamp_top, targets, train_length)
            decays.append(d)
            thrs.append(torch.stack([t[Lk] for Lk in targets]))  # (targets, h)
        decay = torch.stack(decays)  # (layers, h)
        thr = torch.stack(thrs)  # (layers, targets, h)
        decay_max = decay if decay_max is None else torch.maximum(decay_max, decay)
        thr_max = thr if thr_max is None else torch.maximum(thr_max, thr)
        if progress is not None:
            progress(n + 1)
    ext = model.context_extension or ContextExtension(train_length=train_length)
    ext.train_length = train_length
    ext.min_length = min_length
    ext.global_heads = (decay_max > theta).tolist()
    ext.thresholds = {Lk: thr_max[:, j].tolist() for j, Lk in enumerate(targets)}
    ext.calibration["longmamba"] = {
        "windows": len(windows), "theta": theta, "clamp_top": clamp_top, "aggregate": "max",
        "cumulative_decay": decay_max.tolist(),
        "global_heads_per_layer": [int(sum(g)) for g in ext.global_heads],
    }
    model.context_extension = ext
    return ext


# --------------------------------------------------------------------------------------------- MambaExtend


def passage_mean_targets(model: Mamba2Encoder, documents: Sequence[Sequence[int]], train_length: int, eos: int,
                         backend: str = "auto") -> torch.Tensor:
    """normalise(mean of the vanilla embeddings of each document's training-length passages), (n, d)."""
    targets = []
    for doc in documents:
        body = list(doc[:-1]) if doc and doc[-1] == eos else list(doc)
        passages = [body[i:i + train_length - 1] + [eos] for i in range(0, len(body), train_length - 1)]
        lengths = torch.tensor([len(p) for p in passages])
        ids = torch.full((len(passages), int(lengths.max())), eos, dtype=torch.long)
        for r, p in enumerate(passages):
            ids[r, : len(p)] = torch.tensor(p)
        emb = encode_vertical(model, ids.to(model.embeddings.weight.device), lengths, None, backend,
                              context_extension="off")
        targets.append(F.normalize(F.normalize(emb.float(), dim=-1).mean(0), dim=-1))
    return torch.stack(targets)


def _agreement_loss(model, documents, targets, scales, backend, vertical_chunk_size) -> float:
    """Mean 1 - cos(e_s(D), target) with Δ scales ``scales`` on every document, no filtering (inference)."""
    saved = model.context_extension
    # min_length 1: the documents being calibrated on get the scales whatever their length.
    model.context_extension = ContextExtension(delta_scale=[float(s) for s in scales], min_length=1)
    try:
        losses = []
        for doc, target in zip(documents, targets):
            ids = torch.as_tensor(list(doc), dtype=torch.long, device=model.embeddings.weight.device)[None]
            e = encode_vertical(model, ids, torch.tensor([len(doc)]), vertical_chunk_size, backend,
                                context_extension="mambaextend")[0].float()
            losses.append(1 - F.cosine_similarity(e, target.to(e.device), dim=0).item())
        return sum(losses) / len(losses)
    finally:
        model.context_extension = saved


def calibrate_mambaextend(
    model: Mamba2Encoder,
    documents: Sequence[Sequence[int]],
    train_length: int,
    eos_token_id: int,
    method: str = "spsa",
    iterations: int = 30,
    seed: int = 0,
    backend: str = "auto",
    vertical_chunk_size: int | None = 2048,
    learning_rate: float | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> ContextExtension:
    """Per-layer Δ scales maximising long-vs-passages agreement (see the module docstring).

    documents: token-id lists (EOS last) longer than ``train_length``. method "spsa" (zeroth order: two
    evaluations per step plus a greedy accept, the paper's CF-ZO schedule c = 0.1/(1+x)^0.1) or "gradient"
    (Adam on the scales through the differentiable forward; memory grows with the document length).
    Returns the model's ContextExtension with ``delta_scale`` set to the best scales found (1.0 = identity).
    """
    if method not in ("spsa", "gradient"):
        raise ValueError(f"method must be 'spsa' or 'gradient', got {method!r}")
    long_docs = [list(d) for d in documents if len(d) > train_length]
    if not long_docs:
        raise ValueError(f"MambaExtend calibration needs documents longer than train_length={train_length} tokens")
    targets = passage_mean_targets(model, long_docs, train_length, eos_token_id, backend)
    n_layers = len(model.layers)
    rng = random.Random(seed)
    scales = [1.0] * n_layers
    best_loss = _agreement_loss(model, long_docs, targets, scales, backend, vertical_chunk_size)
    start_loss = best_loss
    history = [best_loss]
    if method == "spsa":
        lr = 1.0 if learning_rate is None else learning_rate
        for x in range(iterations):
            c = 0.1 / (1 + x) ** 0.1
            alpha = lr * math.cos(x * math.pi / (4 * iterations))  # slowly decaying step, as CF-ZO's cosine
            delta = [rng.choice((-1.0, 1.0)) for _ in range(n_layers)]
            plus = [max(s + c * d, 0.01) for s, d in zip(scales, delta)]
            minus = [max(s - c * d, 0.01) for s, d in zip(scales, delta)]
            lp = _agreement_loss(model, long_docs, targets, plus, backend, vertical_chunk_size)
            lm = _agreement_loss(model, long_docs, targets, minus, backend, vertical_chunk_size)
            step = [max(s - alpha * (lp - lm) * d / (2 * c), 0.01) for s, d in zip(scales, delta)]
            ls = _agreement_loss(model, long_docs, targets, step, backend, vertical_chunk_size)
            # Greedy accept: keep the best of the step and both probes, never a worse point.
            cand_loss, cand = min((ls, step), (lp, plus), (lm, minus), key=lambda t: t[0])
            if cand_loss < best_loss:
                best_loss, scales = cand_loss, cand
            history.append(best_loss)
            if progress is not None:
                progress(x + 1, best_loss)
    else:
        lr = 0.05 if learning_rate is None else learning_rate
        params = torch.ones(n_layers, requires_grad=True)
        opt = torch.optim.Adam([params], lr=lr)
        device = model.embeddings.weight.device
        for x in range(iterations):
            opt.zero_grad()
            total = 0.0
            for doc, target in zip(long_docs, targets):
                ids = torch.as_tensor(doc, dtype=torch.long, device=device)[None]
                deltas = [DeltaControl(scale=params[i].to(device)) for i in range(n_layers)]
                h, _ = model.forward_chunk(ids, None, ChunkRun(backend=backend, deltas=deltas))
                e = model.final_norm(h[0, -1]).float()
                loss = (1 - F.cosine_similarity(e, target.to(device), dim=0)) / len(long_docs)
                loss.backward()
                total += float(loss.detach())
            opt.step()
            with torch.no_grad():
                params.clamp_(min=0.01)
            if total < best_loss:
                best_loss, scales = total, params.detach().tolist()
            history.append(best_loss)
            if progress is not None:
                progress(x + 1, best_loss)
    ext = model.context_extension or ContextExtension(train_length=train_length)
    ext.train_length = train_length
    ext.delta_scale = [float(s) for s in scales]
    ext.calibration["mambaextend"] = {
        "method": method, "iterations": iterations, "documents": len(long_docs),
        "document_tokens": [len(d) for d in long_docs], "objective": "1 - cos(long, mean of passages)",
        "loss_start": start_loss, "loss_end": best_loss, "history": history, "seed": seed,
    }
    model.context_extension = ext
    return ext


# --------------------------------------------------------------------------------------------- from texts


def calibrate(
    embedder,
    texts: Sequence[str],
    method: str = "both",
    train_length: int = 2048,
    windows: int = 100,
    theta: float = 0.05,
    clamp_top: float = 0.1,
    target_lengths: Sequence[int] | None = None,
    min_length: int | None = None,
    documents: int = 8,
    document_length: int | None = None,
    optimizer: str = "spsa",
    iterations: int = 30,
    seed: int = 0,
    save_to: str | None = None,
    show_progress_bar: bool = True,
) -> ContextExtension:
    """Calibrate ``embedder``'s model on raw ``texts`` (long ones: books, reports) and switch the result on.

    method: "longmamba", "mambaextend" or "both" (MambaExtend first; LongMamba then filters the scaled Δ).
    LongMamba gets ``windows`` windows of ``train_length`` tokens spread evenly over the texts; MambaExtend gets
    ``documents`` documents of ``document_length`` tokens (default 8 × train_length), EOS appended.
    min_length: both methods act on inputs of at least this many tokens (None: 1.5 × train_length); shorter
    ones are embedded by the plain model.
    save_to: a model folder to write ``context_extension.json`` into (it then loads with the model).
    """
    from tqdm.auto import tqdm

    if method not in ("longmamba", "mambaextend", "both"):
        raise ValueError(f"method must be 'longmamba', 'mambaextend' or 'both', got {method!r}")
    if not texts:
        raise ValueError("calibration needs texts")
    if not isinstance(embedder.model, Mamba2Encoder):  # both methods act on Mamba2's Δ
        raise ValueError(f"context extension (MambaExtend, LongMamba) exists for Mamba2 only; this model is "
                         f"{embedder.config.model_type!r}")
    model, eos = embedder.model, embedder.tokenizer.eos_token_id
    stream: list[int] = []
    for ids in embedder.tokenize(list(texts)):
        stream.extend(ids[:-1] if ids and ids[-1] == eos else ids)
    ext = model.context_extension or ContextExtension(train_length=train_length)
    ext.train_length = train_length
    ext.min_length = min_length  # None: 1.5 × train_length
    model.context_extension = ext
    if method in ("mambaextend", "both"):
        length = document_length or 8 * train_length
        if length < ext.active_from():
            raise ValueError(f"MambaExtend documents of {length} tokens are shorter than the minimum length "
                             f"{ext.active_from()} from which the scales act; raise document_length or lower "
                             "min_length")
        if len(stream) < length:
            raise ValueError(f"the texts hold {len(stream)} tokens; MambaExtend needs documents of {length}")
        starts = [round(i * (len(stream) - length) / max(documents - 1, 1)) for i in range(documents)]
        docs = [stream[s:s + length - 1] + [eos] for s in starts]
        bar = tqdm(total=iterations, desc="MambaExtend", disable=not show_progress_bar)
        calibrate_mambaextend(model, docs, train_length, eos, method=optimizer, iterations=iterations, seed=seed,
                              backend=embedder.backend, vertical_chunk_size=embedder.vertical_chunk_size,
                              progress=lambda i, loss: (bar.update(1), bar.set_postfix(loss=f"{loss:.4f}")))
        bar.close()
    if method in ("longmamba", "both"):
        if len(stream) < train_length:
            raise ValueError(f"the texts hold {len(stream)} tokens; LongMamba needs windows of {train_length}")
        n = min(windows, len(stream) // train_length)
        starts = [round(i * (len(stream) - train_length) / max(n - 1, 1)) for i in range(n)]
        bar = tqdm(total=n, desc="LongMamba", disable=not show_progress_bar)
        calibrate_longmamba(model, [stream[s:s + train_length] for s in starts], train_length, target_lengths,
                            theta, clamp_top, min_length, embedder.backend, progress=lambda i: bar.update(1))
        bar.close()
    embedder.set_context_extension("auto")  # this caller now runs what was calibrated
    if save_to is not None:
        ext.save(save_to)
    return ext
