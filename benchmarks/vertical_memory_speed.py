"""Peak memory and tokens/s against input length: recemb vertical vs recemb horizontal vs transformers' Mamba2Model.

Every (method, T) point runs in a fresh subprocess so its peak RSS is its own. Same random weights for all
methods (a 130M-class config by default), fp32, batch 1, CPU. Prints a markdown table and writes JSON + a PNG.

    python3 benchmarks/vertical_memory_speed.py                       # T = 1K .. 64K
    python3 benchmarks/vertical_memory_speed.py --lengths 1024 4096 --out /tmp/bench
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG_130M = dict(hidden_size=768, num_hidden_layers=24, num_heads=24, head_dim=64, n_groups=1, state_size=128,
                   expand=2, conv_kernel=4, chunk_size=256, vocab_size=32768)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def make_weights(folder: Path, config: dict) -> None:
    import torch
    from transformers import Mamba2Config, Mamba2Model

    torch.manual_seed(0)
    Mamba2Model(Mamba2Config(**config)).save_pretrained(str(folder))


def run_point(method: str, folder: str, T: int, V: int, threads: int, repeats: int = 3) -> dict:
    """One measurement, meant to run in its own process."""
    import torch

    torch.set_num_threads(threads)
    ids = torch.randint(3, 32000, (1, T), generator=torch.Generator().manual_seed(T))
    if method == "transformers":
        from transformers import Mamba2Model


        model = Mamba2Model.from_pretrained(folder).eval()

        def once(x):
            return model(x).last_hidden_state[0, -1]
    else:
        from recemb.core import encode_vertical, load_encoder

        model = load_encoder(Path(folder), torch.device("cpu"))
        v = V if method == "vertical" else T

        def once(x):
            return encode_vertical(model, x, torch.tensor([x.shape[1]]), v, backend="torch")[0]

    with torch.inference_mode():
        once(ids[:, :64])  # warm-up: touches every (memory-mapped) weight, first-call allocations, lazy imports
        loaded = rss_mib()
        times = []
        while len(times) < repeats and sum(times) < 20.0:  # best of up to `repeats` for short runs: shared machines
            start = time.perf_counter()
            out = once(ids)
            times.append(time.perf_counter() - start)
        seconds = min(times)
    return dict(method=method, T=T, V=V if method == "vertical" else None, seconds=seconds,
                tokens_per_s=T / seconds, runs=len(times), peak_rss_mib=peak_rss_mib(),
                activation_peak_mib=peak_rss_mib() - loaded,
                rss_after_warmup_mib=loaded, finite=bool(torch.isfinite(out).all()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768, 65536])
    parser.add_argument("--vertical-chunk-size", type=int, default=1024)
    parser.add_argument("--methods", nargs="+",
                        default=["vertical", "horizontal", "transformers"])
    parser.add_argument("--max-transformers-length", type=int, default=16384,
                        help="transformers' torch path runs at about 90 tok/s at 16K here; longer is skipped")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--point", nargs=4, metavar=("METHOD", "FOLDER", "T", "V"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        method, folder, T, V = args.point
        print(json.dumps(run_point(method, folder, int(T), int(V), args.threads)))
        return

    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        make_weights(Path(tmp), CONFIG_130M)
        for T in args.lengths:
            for method in args.methods:
                if method == "transformers" and T > args.max_transformers_length:
                    rows.append(dict(method=method, T=T, skipped=f"> {args.max_transformers_length} tokens"))
                    continue
                cmd = [sys.executable, __file__, "--threads", str(args.threads), "--point", method, tmp, str(T),
                       str(args.vertical_chunk_size)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    rows.append(dict(method=method, T=T, skipped=f"failed: {proc.stderr.strip()[-200:]}"))
                else:
                    rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(_row(rows[-1]), flush=True)
    (args.out / "vertical_memory_speed.json").write_text(json.dumps(dict(config=CONFIG_130M, rows=rows), indent=2))
    print()
    print(table(rows))
    plot(rows, args.out / "vertical_memory_speed.png")


def _row(r: dict) -> str:
    if "skipped" in r:
        return f"| {r['method']} | {r['T']:,} | skipped: {r['skipped']} | | | |"
    return (f"| {r['method']}{' V=' + str(r['V']) if r.get('V') else ''} | {r['T']:,} | {r['tokens_per_s']:,.0f} | "
            f"{r['seconds']:.1f} | {r['peak_rss_mib']:,.0f} | {r['activation_peak_mib']:,.0f} |")


def table(rows: list[dict]) -> str:
    head = ("| method | T | tokens/s | seconds | peak RSS (MiB) | peak above warmed-up model (MiB) |\n"
            "|---|---|---|---|---|---|")
    return "\n".join([head] + [_row(r) for r in rows])


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for method in dict.fromkeys(r["method"] for r in rows):
        pts = [r for r in rows if r["method"] == method and "skipped" not in r]
        ax_t.plot([r["T"] for r in pts], [r["tokens_per_s"] for r in pts], "o-", label=method)
        ax_m.plot([r["T"] for r in pts], [r["activation_peak_mib"] for r in pts], "o-", label=method)
    for ax, label in ((ax_t, "tokens/s"), (ax_m, "peak RSS above warmed-up model (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input length T (tokens)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Mamba2 130M-class, fp32, batch 1, CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
