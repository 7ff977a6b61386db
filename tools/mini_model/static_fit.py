"""Static token vectors fitted to the teacher *and* to the task: the sum over a text's token vectors is pulled
towards the teacher's embedding of the text (distillation) and, for (query, passage) pairs, towards its own
passage and away from the other passages of its batch (InfoNCE). Batches of sentence → long-document pairs are
drawn from one book, so a sentence must find its window among windows of the same novel: the vectors learn to
keep what tells one part of a book from another, which the teacher's targets alone do not ask for.

Everything here is an EmbeddingBag (seconds per epoch on a CPU); ``initialise.pooling_init`` then makes the
student's first Mamba layer compute the same sum."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["StaticFitConfig", "bag_embed", "fit_static_vectors", "static_batches"]


@dataclass(frozen=True)
class StaticFitConfig:
    epochs: int = 5
    learning_rate: float = 3e-3
    temperature: float = 0.05
    contrastive_weight: float = 0.1
    batch_size: int = 256  # (query, passage) pairs per step
    long_batch: int = 64  # sentence -> window pairs per long step, one book
    long_rounds: int = 4  # passes over each book's windows per epoch
    seed: int = 0


def _offsets(lengths: list[int]) -> torch.Tensor:
    return torch.tensor(np.cumsum([0] + lengths[:-1]), dtype=torch.long)


def bag_embed(bag: torch.nn.EmbeddingBag, token_ids: list[list[int]], idx) -> torch.Tensor:
    """(len(idx), D): the plain sum of each text's token vectors (the unnormalised static embedding)."""
    flat = torch.tensor([t for i in idx for t in token_ids[i]], dtype=torch.long)
    return bag(flat, _offsets([len(token_ids[i]) for i in idx]))


def fit_static_vectors(token_ids: list[list[int]], targets: np.ndarray, has_target: np.ndarray,
                       pair_batches, init: np.ndarray, silent_ids: list[int], config: StaticFitConfig,
                       validate=None) -> tuple[np.ndarray, list[dict]]:
    """Fit (vocab, D) vectors from ``init``.

    token_ids: every text (as the student reads it, no special tokens); targets (n, D) the teacher's embedding of
    each text where ``has_target`` (n,) is true. pair_batches(epoch, rng) yields (anchor indices, positive
    indices) per step: InfoNCE of each anchor against the batch's positives. Loss = mean distillation cosine
    distance over the batch's texts that have targets + contrastive_weight × InfoNCE. ``validate(vectors)`` ->
    dict with a "score" (higher is better) is called before training and after every epoch; the best epoch's
    vectors are returned with the history.
    """
    rng = np.random.RandomState(config.seed)
    bag = torch.nn.EmbeddingBag(init.shape[0], init.shape[1], mode="sum", sparse=True)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(init).float())
        bag.weight[silent_ids] = 0.0
    y = torch.from_numpy(targets).float()
    mask = torch.from_numpy(has_target.astype(bool))
    opt = torch.optim.SparseAdam(bag.parameters(), lr=config.learning_rate)
    history = [dict(epoch=0, **(validate(bag.weight.detach().numpy()) if validate else {}))]
    best, best_score = bag.weight.detach().clone(), history[0].get("score", -np.inf)
    for epoch in range(1, config.epochs + 1):
        losses = []
        for anchors, positives in pair_batches(epoch, rng):
            opt.zero_grad()
            a = bag_embed(bag, token_ids, anchors)
            p = bag_embed(bag, token_ids, positives)
            texts = torch.cat([torch.as_tensor(anchors), torch.as_tensor(positives)])
            both = torch.cat([a, p])
            keep = mask[texts]
            loss = (1 - torch.nn.functional.cosine_similarity(both[keep], y[texts[keep]], dim=-1)).mean() \
                if keep.any() else both.sum() * 0
            if config.contrastive_weight:
                logits = torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(p, dim=-1).T
                target = torch.arange(len(anchors))
                loss = loss + config.contrastive_weight * torch.nn.functional.cross_entropy(
                    logits / config.temperature, target)
            loss.backward()
            opt.step()
            with torch.no_grad():
                bag.weight[silent_ids] = 0.0
            losses.append(loss.item())
        record = dict(epoch=epoch, train_loss=float(np.mean(losses)),
                      **(validate(bag.weight.detach().numpy()) if validate else {}))
        history.append(record)
        print(record, flush=True)
        if record.get("score", 0) >= best_score:
            best, best_score = bag.weight.detach().clone(), record.get("score", 0)
    return best.numpy(), history


def static_batches(short_pairs: list[tuple[int, int]], windows: list[tuple[int, str, list[int]]],
                   config: StaticFitConfig, min_long: int = 8):
    """pair_batches for ``fit_static_vectors``: per epoch the short pairs in shuffled batches of
    ``config.batch_size``, and ``config.long_rounds`` passes over each book's windows in batches of
    ``config.long_batch`` windows (a random sentence of each as its anchor; batches under ``min_long`` windows are
    dropped: too few negatives), all steps in shuffled order."""
    by_book: dict[str, list[int]] = {}
    for w, (_, book, sentences) in enumerate(windows):
        if sentences:
            by_book.setdefault(book, []).append(w)

    def batches(epoch: int, rng: np.random.RandomState):
        steps = []
        order = rng.permutation(len(short_pairs))
        for s in range(0, len(order), config.batch_size):
            part = [short_pairs[k] for k in order[s:s + config.batch_size]]
            steps.append(([a for a, _ in part], [p for _, p in part]))
        for book in sorted(by_book):
            for _ in range(config.long_rounds):
                docs = list(rng.permutation(by_book[book]))
                for s in range(0, len(docs), config.long_batch):
                    part = [windows[w] for w in docs[s:s + config.long_batch]]
                    if len(part) >= min_long:
                        steps.append(([int(sent[rng.randint(len(sent))]) for _, _, sent in part],
                                      [int(i) for i, _, _ in part]))
        for k in rng.permutation(len(steps)):
            yield steps[k]

    return batches
