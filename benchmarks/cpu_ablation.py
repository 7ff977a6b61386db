"""Ablation of the CPU inference path's two switchable speed-ups, in one process with the variants alternating.

    python3 benchmarks/cpu_ablation.py                       # 6 layers of the 130M width, transformers' init
    python3 benchmarks/cpu_ablation.py --model recemb/models/recemb-mamba2-mini --T 4096 --V 1024

Variants: everything on; without the scratch-buffer reuse (``recemb.kernels.workspace``); without the decay cutoff
(``recemb.kernels.ssd.combined._EXP_FLOOR`` emptied: plain exp, tiny decays kept). The machine's speed drifts, so
the variants alternate (in rotating order) and each is reported as its median time and the median of its paired
ratios to "all on"; every output is checked with ``torch.equal`` against "all on".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vertical_memory_speed import CONFIG_130M, make_weights  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a model folder (default: random 130M-width weights)")
    parser.add_argument("--layers", type=int, default=6, help="layers of the random model")
    parser.add_argument("--T", type=int, default=4096)
    parser.add_argument("--V", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import recemb.core.vertical as vertical
    import recemb.kernels.ssd.combined as combined
    from recemb.core import encode_vertical, load_encoder

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model
        if folder is None:
            folder = Path(tmp)
            make_weights(folder, dict(CONFIG_130M, num_hidden_layers=args.layers))
        model = load_encoder(folder, torch.device("cpu"))
    vocab = min(32000, model.config.vocab_size)
    ids = torch.randint(3, vocab, (1, args.T), generator=torch.Generator().manual_seed(args.T))
    lengths = torch.tensor([args.T])

    workspace_cls, floors = vertical.Workspace, dict(combined._EXP_FLOOR)

    def run(variant: str) -> torch.Tensor:
        vertical.Workspace = (lambda: None) if variant == "without workspace" else workspace_cls
        combined._EXP_FLOOR.clear()
        if variant != "without cutoff":
            combined._EXP_FLOOR.update(floors)
        try:
            return encode_vertical(model, ids, lengths, args.V, backend="torch")
        finally:
            vertical.Workspace = workspace_cls
            combined._EXP_FLOOR.update(floors)

    variants = ["all on", "without workspace", "without cutoff"]
    for v in variants:
        run(v)  # warm-up
    times: dict[str, list[float]] = {v: [] for v in variants}
    outputs: dict[str, torch.Tensor] = {}
    for r in range(args.rounds):
        for v in variants[r % 3:] + variants[: r % 3]:
            start = time.perf_counter()
            outputs[v] = run(v)
            times[v].append(time.perf_counter() - start)
    print(f"{folder.name if args.model else f'random 130M-width, {args.layers} layers'}, T={args.T}, V={args.V}, "
          f"{args.rounds} rounds, {args.threads} threads")
    print("| variant | median s | median ratio to all on | output |")
    print("|---|---|---|---|")
    for v in variants:
        ratio = statistics.median(t / a for t, a in zip(times[v], times["all on"]))
        same = "equal" if torch.equal(outputs[v], outputs["all on"]) else \
            f"max diff {(outputs[v] - outputs['all on']).abs().max().item():.1e}"
        print(f"| {v} | {statistics.median(times[v]):.3f} | {ratio:.3f} | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
