"""The paper's Figure 5 on this machine: Mamba2, RWKV-7 and xLSTM under the same vertical engine.

Peak memory and tokens/s against input length, recemb vertical (V = 1024) vs recemb horizontal (V = T) vs each
architecture's reference implementation on the same random weights: transformers' ``Mamba2Model`` (torch path),
transformers' ``xLSTMModel`` (its native torch kernels) and the ``rwkv`` package's RWKV-7 (strategy "cpu fp32", a
token loop without CUDA). Configs of about 130M parameters, fp32, batch 1, CPU; every (architecture, method, T)
point runs in a fresh process so its peak RSS is its own.

    python3 benchmarks/architectures.py                                  # T = 1K .. 64K, all three
    python3 benchmarks/architectures.py --archs rwkv7 --lengths 1024 4096

Targets (issue #20): peak memory at 64K within 5% of 4K for recemb vertical, for all three; each at least 2x its
reference's tokens/s at 16K (or the reference runs out of memory or time first). Prints a markdown table, writes
results/architectures.json and results/architectures.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vertical_memory_speed import CONFIG_130M, peak_rss_mib, rss_mib

ROOT = Path(__file__).resolve().parents[1]
# About 130M parameters each with a 32K vocabulary (the embedding is 25M of it).
XLSTM_130M = dict(vocab_size=32768, hidden_size=768, embedding_dim=768, num_blocks=15, num_hidden_layers=15,
                  num_heads=4, qk_dim_factor=0.5, v_dim_factor=1.0, chunk_size=64, ffn_proj_factor=2.667,
                  ffn_round_up_to_multiple_of=64, mode="inference", return_last_states=True)
# RWKV-7 "0.1B" (L12-D768, head 64, LoRA ranks 64/64/32/128) with a 32K vocabulary.
RWKV7_130M = dict(vocab_size=32768, hidden_size=768, num_layers=12, head_size=64, decay_rank=64, a_rank=64,
                  v_rank=32, gate_rank=128, intermediate_size=3072)
ARCHS = {"mamba2": CONFIG_130M, "xlstm": XLSTM_130M, "rwkv7": RWKV7_130M}
REFERENCES = {"mamba2": "transformers Mamba2Model", "xlstm": "transformers xLSTMModel", "rwkv7": "rwkv package"}


def make_weights(arch: str, folder: Path) -> Path:
    """Random weights in a format both recemb and the reference read; returns what the reference loads."""
    import torch

    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    if arch == "mamba2":
        from transformers import Mamba2Config, Mamba2Model

        Mamba2Model(Mamba2Config(**CONFIG_130M)).save_pretrained(str(folder))
    elif arch == "xlstm":
        from transformers import xLSTMConfig, xLSTMModel

        xLSTMModel(xLSTMConfig(**XLSTM_130M)).save_pretrained(str(folder))
    else:
        sys.path.insert(0, str(ROOT))  # for tests.rwkv7_utils
        from tests.rwkv7_utils import random_pth_state, save_pth

        return save_pth(random_pth_state(**RWKV7_130M), folder)
    return folder


def reference_runner(arch: str, path: str):
    """A function (1, T) ids -> the last token's output, of the reference implementation."""
    if arch == "mamba2":
        from transformers import Mamba2Model

        model = Mamba2Model.from_pretrained(path).eval()
        return lambda x: model(x).last_hidden_state[0, -1]
    if arch == "xlstm":
        from transformers import xLSTMModel

        model = xLSTMModel.from_pretrained(path).eval()
        return lambda x: model(x).last_hidden_state[0, -1]
    sys.path.insert(0, str(ROOT))
    from tests.rwkv7_utils import rwkv_package_model

    model = rwkv_package_model(Path(path))
    return lambda x: model.forward(x[0].tolist(), None)[0]


def run_point(arch: str, method: str, path: str, T: int, V: int, threads: int, repeats: int = 3) -> dict:
    """One measurement, meant to run in its own process."""
    import torch

    torch.set_num_threads(threads)
    ids = torch.randint(3, 32000, (1, T), generator=torch.Generator().manual_seed(T))
    if method == "reference":
        once = reference_runner(arch, path)
        parameters = None
    else:
        from recemb.core import encode_vertical, load_encoder

        folder = Path(path).parent if path.endswith(".pth") else Path(path)
        model = load_encoder(folder, torch.device("cpu"))
        parameters = sum(p.numel() for p in model.parameters())
        v = V if method == "vertical" else T

        def once(x):
            return encode_vertical(model, x, torch.tensor([x.shape[1]]), v, backend="torch")[0]

    with torch.inference_mode():
        once(ids[:, :64])  # warm-up: touches every weight, first-call allocations, lazy imports
        loaded = rss_mib()
        times = []
        while len(times) < repeats and sum(times) < 20.0:  # best of up to `repeats` for short runs
            start = time.perf_counter()
            out = once(ids)
            times.append(time.perf_counter() - start)
    seconds = min(times)
    return dict(arch=arch, method=method, T=T, V=V if method == "vertical" else None, seconds=seconds,
                tokens_per_s=T / seconds, runs=len(times), peak_rss_mib=peak_rss_mib(),
                activation_peak_mib=peak_rss_mib() - loaded, rss_after_warmup_mib=loaded, parameters=parameters,
                finite=bool(torch.isfinite(torch.as_tensor(out)).all()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", nargs="+", default=list(ARCHS), choices=list(ARCHS))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--vertical-chunk-size", type=int, default=1024)
    parser.add_argument("--methods", nargs="+", default=["vertical", "horizontal", "reference"])
    parser.add_argument("--max-reference-length", type=int, default=16384,
                        help="the references are slow or memory-hungry beyond this; longer is skipped")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per point")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--point", nargs=5, metavar=("ARCH", "METHOD", "PATH", "T", "V"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        arch, method, path, T, V = args.point
        print(json.dumps(run_point(arch, method, path, int(T), int(V), args.threads)))
        return

    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs:
            path = make_weights(arch, Path(tmp) / arch)
            for T in args.lengths:
                for method in args.methods:
                    if method == "reference" and T > args.max_reference_length:
                        rows.append(dict(arch=arch, method=method, T=T,
                                         skipped=f"> {args.max_reference_length} tokens"))
                        print(_row(rows[-1]), flush=True)
                        continue
                    cmd = [sys.executable, __file__, "--threads", str(args.threads), "--point", arch, method,
                           str(path), str(T), str(args.vertical_chunk_size)]
                    try:
                        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                        if proc.returncode != 0:
                            rows.append(dict(arch=arch, method=method, T=T,
                                             skipped=f"failed: {proc.stderr.strip()[-300:]}"))
                        else:
                            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
                    except subprocess.TimeoutExpired:
                        rows.append(dict(arch=arch, method=method, T=T, skipped=f"over {args.timeout} s"))
                    print(_row(rows[-1]), flush=True)
    configs = {a: ARCHS[a] for a in args.archs}
    (args.out / "architectures.json").write_text(json.dumps(dict(configs=configs, rows=rows), indent=2))
    print()
    print(table(rows))
    print()
    print(verdict(rows))
    plot(rows, args.out / "architectures.png")


def _row(r: dict) -> str:
    name = r["method"] if r["method"] != "reference" else f"reference ({REFERENCES[r['arch']]})"
    if "skipped" in r:
        return f"| {r['arch']} | {name} | {r['T']:,} | skipped: {r['skipped']} | | | |"
    v = f" V={r['V']}" if r.get("V") else ""
    return (f"| {r['arch']} | {name}{v} | {r['T']:,} | {r['tokens_per_s']:,.0f} | {r['seconds']:.1f} | "
            f"{r['peak_rss_mib']:,.0f} | {r['activation_peak_mib']:,.0f} |")


def table(rows: list[dict]) -> str:
    head = ("| architecture | method | T | tokens/s | seconds | peak RSS (MiB) | peak above warmed-up model (MiB) |\n"
            "|---|---|---|---|---|---|---|")
    return "\n".join([head] + [_row(r) for r in rows])


def verdict(rows: list[dict]) -> str:
    """The two targets, per architecture."""
    def find(arch, method, T):
        return next((r for r in rows if r["arch"] == arch and r["method"] == method and r["T"] == T
                     and "skipped" not in r), None)

    lines = []
    for arch in dict.fromkeys(r["arch"] for r in rows):
        short, long_ = find(arch, "vertical", 4096), find(arch, "vertical", 65536)
        if short and long_:
            growth = long_["peak_rss_mib"] / short["peak_rss_mib"] - 1
            lines.append(f"{arch}: vertical peak RSS 64K vs 4K: {growth:+.1%} "
                         f"({'within' if abs(growth) <= 0.05 else 'OUTSIDE'} 5%)")
        ours, ref = find(arch, "vertical", 16384), find(arch, "reference", 16384)
        if ours and ref:
            ratio = ours["tokens_per_s"] / ref["tokens_per_s"]
            lines.append(f"{arch}: tokens/s at 16K, vertical / reference: {ratio:.1f}x "
                         f"({'meets' if ratio >= 2 else 'BELOW'} 2x)")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    archs = list(dict.fromkeys(r["arch"] for r in rows))
    fig, axes = plt.subplots(2, len(archs), figsize=(4.5 * len(archs), 7), squeeze=False)
    for j, arch in enumerate(archs):
        for method in dict.fromkeys(r["method"] for r in rows):
            pts = [r for r in rows if r["arch"] == arch and r["method"] == method and "skipped" not in r]
            label = method if method != "reference" else REFERENCES[arch]
            axes[0][j].plot([r["T"] for r in pts], [r["peak_rss_mib"] for r in pts], "o-", label=label)
            axes[1][j].plot([r["T"] for r in pts], [r["tokens_per_s"] for r in pts], "o-", label=label)
        axes[0][j].set_title(arch)
        for ax, label in ((axes[0][j], "peak RSS (MiB)"), (axes[1][j], "tokens/s")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("input length T (tokens)")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("130M-class, fp32, batch 1, CPU: recemb vertical (V = 1024) vs horizontal vs reference")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
