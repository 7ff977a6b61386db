"""Training the student's Mamba layers around the fitted static sum, resumable.

The student starts as the static sum (``pooling_init``: one layer, the pool layer, sums the fitted token vectors;
the others are the identity because their out_proj is zero, so they start as residual branches of zero). Below the
pool layer a branch rewrites each token from what came before it, so every token's rewrite reaches the sum; above
it a branch reads the running sum and only its output at the EOS counts. Two things keep training from undoing that
start, which the sentence-transformers run did (its loss rose 0.23 → 0.38 in 50 steps): the embeddings, the pool
layer and the final norm learn at ``base_lr_scale`` × the learning rate of the branches (0 by default: frozen, as
the static fit left them, which its own validation chose), and batches mix short (query, passage) pairs with
sentence → long-window pairs from one book, so the branches are asked for what a sum cannot give (a window that a
sentence from anywhere in it must find).

With ``gate_learning_rate`` > 0 each branch trains as ``out_proj.weight = gate ⊙ V`` (a per-channel gate that
starts at 0, V random: ReZero / LayerScale): a zero out_proj under Adam moves every weight by the full learning
rate from the first step, noise included, while a gate moves the branch only as far as its output helps. The gates
are folded into out_proj in every saved model, so the exported checkpoint is a plain Mamba2.

Checkpoints (weights, optimiser, step, the data order's seed) go to ``work/checkpoint.pt`` every
``checkpoint_seconds``; ``resume`` continues from the last one with the same batches in the same order."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = ["BranchGate", "DistilConfig", "TrainingTexts", "batch_plan", "folded_state", "gate_branches",
           "train_layers"]

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class DistilConfig:
    steps: int = 300
    learning_rate: float = 1e-3  # the branches (every layer but the pool layer)
    base_lr_scale: float = 0.0  # embeddings, the pool layer, final norm: learning_rate × this (0: frozen)
    warmup_steps: int = 30
    weight_decay: float = 0.01
    short_batch: int = 32  # (query, passage) pairs per short step
    long_batch: int = 8  # sentence -> window pairs per long step, one book
    long_every: int = 3  # one long step after this many short ones
    short_max_tokens: int = 256
    long_max_tokens: int = 2048
    temperature: float = 0.05
    contrastive_weight: float = 0.3
    checkpoint_seconds: float = 300.0
    validate_every: int = 50  # steps between validations (and before the first step)
    gate_learning_rate: float = 3e-2  # the branch gates (0: no gates, out_proj trains as it is)
    seed: int = 0


@dataclass(frozen=True)
class TrainingTexts:
    """Token ids (with prompt and EOS, as the student reads them) and teacher targets, all in the student's width.

    short_pairs: (anchor index, positive index) into ``ids``; long_windows: per window (index into ``ids``, book,
    sentence indices into ``ids``); targets (len(ids), d) with has_target (len(ids),)."""

    ids: list[list[int]]
    targets: np.ndarray
    has_target: np.ndarray
    short_pairs: list[tuple[int, int]]
    long_windows: list[tuple[int, str, list[int]]]


def batch_plan(texts: TrainingTexts, config: DistilConfig) -> list[tuple[list[int], list[int], bool]]:
    """Every step's (anchor indices, positive indices, is a long step), fixed by the seed: short pairs in
    shuffled order, and after every ``long_every`` of them a long step of ``long_batch`` windows of one book
    with a random sentence of each as its anchor. Pure: the same texts and config always give the same plan
    (resume relies on it)."""
    rng = np.random.RandomState(config.seed)
    by_book: dict[str, list[int]] = {}
    for w, (_, book, sentences) in enumerate(texts.long_windows):
        if sentences:
            by_book.setdefault(book, []).append(w)
    books = sorted(by_book)
    plan: list[tuple[list[int], list[int], bool]] = []
    short_order: list[int] = []
    while len(plan) < config.steps:
        if texts.long_windows and books and len(plan) % (config.long_every + 1) == config.long_every:
            book = books[rng.randint(len(books))]
            chosen = rng.choice(by_book[book], size=min(config.long_batch, len(by_book[book])), replace=False)
            windows = [texts.long_windows[w] for w in chosen]
            plan.append(([int(s[rng.randint(len(s))]) for _, _, s in windows], [int(i) for i, _, _ in windows], True))
            continue
        if len(short_order) < config.short_batch:
            short_order += list(rng.permutation(len(texts.short_pairs)))
        take, short_order = short_order[:config.short_batch], short_order[config.short_batch:]
        pairs = [texts.short_pairs[k] for k in take]
        plan.append(([a for a, _ in pairs], [p for _, p in pairs], False))
    return plan


class BranchGate(torch.nn.Module):
    """A parametrisation of out_proj.weight (d, I): gate (d, 1) ⊙ V, the gate starting at zero."""

    def __init__(self, d: int):
        super().__init__()
        self.gate = torch.nn.Parameter(torch.zeros(d, 1))

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return self.gate * v


def gate_branches(encoder, seed: int, pool_layer: int = 0) -> int:
    """Put a ``BranchGate`` on the out_proj of every layer but ``pool_layer`` whose out_proj is zero (a branch that
    starts as the identity, ``pooling_init``), V drawn like nn.Linear's default (seeded); return how many. The
    encoder's function is unchanged: the gates are 0."""
    from torch.nn.utils import parametrize

    generator = torch.Generator().manual_seed(seed)
    gated = 0
    for i, layer in enumerate(encoder.layers):
        if i == pool_layer % len(encoder.layers):
            continue
        out_proj = layer.mixer.out_proj
        if bool(out_proj.weight.any()):
            continue
        bound = 1 / math.sqrt(out_proj.in_features)
        v = (torch.rand(out_proj.weight.shape, generator=generator) * 2 - 1) * bound
        parametrize.register_parametrization(out_proj, "weight", BranchGate(out_proj.out_features))
        with torch.no_grad():
            out_proj.parametrizations.weight.original.copy_(v)
        gated += 1
    return gated


def folded_state(encoder) -> dict[str, torch.Tensor]:
    """The encoder's state dict with every parametrised weight as the plain tensor it computes (gate ⊙ V)."""
    from torch.nn.utils import parametrize

    state = {k: v.detach().clone() for k, v in encoder.state_dict().items() if ".parametrizations." not in k}
    for name, module in encoder.named_modules():
        if parametrize.is_parametrized(module, "weight"):
            state[f"{name}.weight"] = module.weight.detach().clone()
    return state


def _param_groups(encoder, config: DistilConfig, pool_layer: int) -> list[dict]:
    low, high, gates = [], [], []
    for name, p in encoder.named_parameters():
        if not p.requires_grad:
            continue
        if name.endswith(".gate"):
            gates.append(p)
        elif _in_branch(name, pool_layer, len(encoder.layers)):
            high.append(p)
        else:
            low.append(p)
    low_lr = config.learning_rate * config.base_lr_scale
    groups = [{"params": high, "lr": config.learning_rate, "base_lr": config.learning_rate},
              {"params": low, "lr": low_lr, "base_lr": low_lr},
              {"params": gates, "lr": config.gate_learning_rate, "base_lr": config.gate_learning_rate,
               "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _in_branch(name: str, pool_layer: int, n_layers: int) -> bool:
    """Whether the parameter ``name`` belongs to a layer other than the pool layer (a branch)."""
    parts = name.split(".")
    return parts[0] == "layers" and parts[1] != str(pool_layer % n_layers)


def _lr_factor(step: int, config: DistilConfig) -> float:
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))  # cosine decay to 0


def _embed(embedder, ids: list[list[int]], max_tokens: int) -> torch.Tensor:
    from recemb.core.vertical import pad_right

    eos = embedder.config.eos_token_id
    seqs = [s if len(s) <= max_tokens else s[:max_tokens - 1] + [eos] for s in ids]
    pad = embedder.config.pad_token_id if embedder.config.pad_token_id is not None else 0
    batch, lengths = pad_right(seqs, pad)
    return embedder.embed_padded(batch, lengths, differentiable=True)


def step_loss(embedder, texts: TrainingTexts, anchors: list[int], positives: list[int], long_step: bool,
              config: DistilConfig) -> torch.Tensor:
    """Cosine distance to the teacher for every text of the step that has a target + contrastive_weight ×
    InfoNCE of each anchor against the step's positives."""
    nn = torch.nn.functional
    max_tokens = config.long_max_tokens if long_step else config.short_max_tokens
    a = _embed(embedder, [texts.ids[i] for i in anchors], config.short_max_tokens)
    p = _embed(embedder, [texts.ids[i] for i in positives], max_tokens)
    index = torch.tensor(anchors + positives)
    both = torch.cat([a, p])
    keep = torch.from_numpy(texts.has_target[index.numpy()])
    target = torch.from_numpy(texts.targets[index.numpy()]).float()
    loss = (1 - nn.cosine_similarity(both[keep], target[keep], dim=-1)).mean() if keep.any() else both.sum() * 0
    logits = nn.normalize(a, dim=-1) @ nn.normalize(p, dim=-1).T / config.temperature
    return loss + config.contrastive_weight * nn.cross_entropy(logits, torch.arange(len(anchors)))


def train_layers(student_dir: Path, texts: TrainingTexts, work: Path, config: DistilConfig,
                 resume: bool = False, log=print, validate=None, pool_layer: int = 0) -> dict:
    """Train the student in ``student_dir`` (loaded on the CPU in fp32) for ``config.steps`` steps, its layer
    ``pool_layer`` (the static sum) with the embeddings and the final norm at ``base_lr_scale``; checkpoint
    into ``work`` (refused if ``work`` already holds a checkpoint and ``resume`` is false); return {history,
    validations, best_step, steps, seconds}.

    ``validate(embedder)`` -> dict with a "score" (higher is better) runs before the first step and every
    ``validate_every`` steps; ``work/trained`` gets the weights of the best validation (step 0 = the start, so
    training that does not help ships the start). Without ``validate`` it gets the last step's weights."""
    from recemb.core import Embedder
    from recemb.core.loading import load_encoder, save_encoder

    work.mkdir(parents=True, exist_ok=True)
    embedder = Embedder.from_pretrained(student_dir, device="cpu", dtype="float32", backend="torch")
    encoder = embedder.model
    n_layers = len(encoder.layers)
    if config.gate_learning_rate > 0:
        gate_branches(encoder, config.seed, pool_layer)
    encoder.requires_grad_(True)
    if config.base_lr_scale == 0:  # the static sum stays exactly as fitted (and its gradients are not computed)
        for name, p in encoder.named_parameters():
            if not _in_branch(name, pool_layer, n_layers):
                p.requires_grad_(False)
    encoder.train()
    optimiser = torch.optim.AdamW(_param_groups(encoder, config, pool_layer), weight_decay=config.weight_decay)
    plan = batch_plan(texts, config)
    start_step, history, seconds_before = 0, [], 0.0
    validations: list[dict] = []
    best = {"step": None, "score": -math.inf}
    ckpt_path = work / CHECKPOINT
    best_dir = work / "trained"
    if resume:
        if not ckpt_path.exists():
            raise FileNotFoundError(f"{ckpt_path} does not exist: nothing to resume")
        ckpt = torch.load(ckpt_path, weights_only=False)
        if ckpt["config"] != asdict(config) or ckpt.get("pool_layer", 0) != pool_layer:
            raise ValueError(f"{ckpt_path} was written with another training configuration: {ckpt['config']}, "
                             f"pool layer {ckpt.get('pool_layer', 0)}")
        encoder.load_state_dict(ckpt["model"])
        optimiser.load_state_dict(ckpt["optimiser"])
        start_step, history, seconds_before = ckpt["step"], ckpt["history"], ckpt["seconds"]
        validations, best = ckpt["validations"], ckpt["best"]
        log(f"resumed at step {start_step} of {config.steps}")
    elif ckpt_path.exists():  # a fresh run would overwrite another run's progress
        raise FileExistsError(f"{ckpt_path} holds a run's checkpoint: resume it (resume=True) or use another "
                              "work folder")

    def save(step: int, seconds: float) -> None:
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save({"model": encoder.state_dict(), "optimiser": optimiser.state_dict(), "step": step,
                    "history": history, "seconds": seconds, "config": asdict(config), "validations": validations,
                    "best": best, "pool_layer": pool_layer}, tmp)
        tmp.replace(ckpt_path)  # a crash mid-save keeps the previous checkpoint

    def save_trained() -> None:
        best_dir.mkdir(parents=True, exist_ok=True)
        plain = load_encoder(student_dir, device="cpu", dtype=torch.float32)
        plain.load_state_dict(folded_state(encoder))
        save_encoder(plain, best_dir)
        if embedder.tokenizer is not None:
            embedder.tokenizer.save(best_dir)

    def check(step: int) -> None:
        if validate is None or (step % config.validate_every and step != config.steps):
            return
        if validations and validations[-1]["step"] == step:
            return  # already validated before a resume
        encoder.eval()
        with torch.no_grad():
            record = {"step": step, **validate(embedder)}
        encoder.train()
        validations.append(record)
        log(json.dumps({"validation": record}))
        if record["score"] > best["score"]:
            best.update(step=step, score=record["score"])
            save_trained()

    flush_before = torch.set_flush_denormal(True)  # denormal gradients slow CPUs down many times over
    t0, last_save, window = time.time(), time.time(), []
    try:
        check(start_step)
        for step in range(start_step, config.steps):
            for group in optimiser.param_groups:
                group["lr"] = group["base_lr"] * _lr_factor(step, config)
            anchors, positives, long_step = plan[step]
            optimiser.zero_grad(set_to_none=True)
            loss = step_loss(embedder, texts, anchors, positives, long_step, config)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in encoder.parameters() if p.requires_grad], 1.0)
            optimiser.step()
            window.append(loss.item())
            if (step + 1) % 25 == 0 or step + 1 == config.steps:
                history.append({"step": step + 1, "loss": round(float(np.mean(window)), 5),
                                "seconds": round(seconds_before + time.time() - t0, 1)})
                log(json.dumps(history[-1]))
                window = []
            check(step + 1)
            if time.time() - last_save > config.checkpoint_seconds:
                save(step + 1, seconds_before + time.time() - t0)
                last_save = time.time()
    finally:
        torch.set_flush_denormal(flush_before)
    seconds = seconds_before + time.time() - t0
    save(config.steps, seconds)
    encoder.requires_grad_(False)
    encoder.eval()
    if validate is None:
        save_trained()
    return {"history": history, "validations": validations, "best_step": best["step"], "steps": config.steps,
            "seconds": round(seconds, 1),
            "seconds_this_run": round(time.time() - t0, 1), "config": asdict(config)}
