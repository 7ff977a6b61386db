"""Low-precision CPU inference: fp32, bf16 (mixed precision) and int8, measured in one run.

    python3 benchmarks/low_precision.py                  # everything (about 20 minutes on 2 cores)
    python3 benchmarks/low_precision.py --skip-quality   # the speed tables only

1. **Matmul probe**: GFLOP/s of one in_proj-shaped product (M×768 by 768×3352, M = 1024 and 8192) in fp32, in
   bf16 and through torch's dynamically quantised int8 linear layer (quantising the activations included), the
   ceiling each mode's projections can reach on this CPU. Modes: fp32; bf16 (mixed precision); int8 (in_proj
   int8, the rest fp32: for CPUs without bf16 units); int8+bf16 (in_proj int8, out_proj bf16).
2. **Encoder**: tokens/s and peak memory of the 130M-class Mamba2 config (random weights, the config of
   benchmarks/vertical_memory_speed.py) at T = 1K / 4K / 16K tokens per text and batch 1 / 8, V = 1024, each
   point in a fresh process. "proj GFLOP/s" is tokens/s × the projections' 2·(d·N_in + I·d) FLOPs per token per
   layer, to set against the probe. Peak memory is the process's peak RSS after loading and warm-up (VmHWM reset
   through /proc/self/clear_refs), so it is the encode's, not the load's.
3. **Quality**: the bundled model's nDCG@10 on every collection under ../shared/data/ir in each mode
   (benchmarks/retrieval_eval.py's protocol), and the cosine of each mode's document embeddings to fp32's.

Writes benchmarks/results/low_precision.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import transformers  # noqa: F401  (before the repo root goes on sys.path: see benchmarks/architectures.py)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# int8: in_proj int8, the rest fp32 (for CPUs without bf16 units); int8+bf16: out_proj and embeddings bf16 too
MODES = {"fp32": {}, "bf16": {"dtype": "bfloat16"}, "int8": {"quantize": "int8"},
         "int8+bf16": {"quantize": "int8", "dtype": "bfloat16"}}


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --------------------------------------------------------------------------------------------- 1. probe
def matmul_probe(threads: int) -> list[dict]:
    import torch

    from recemb.core.precision import quantize_int8

    torch.set_num_threads(threads)
    rows = []
    K, N = 768, 3352
    for M in (1024, 8192):
        x, w = torch.randn(M, K), torch.randn(N, K) * K ** -0.5
        linear = torch.nn.Linear(K, N, bias=False)
        linear.weight.data.copy_(w)

        class One(torch.nn.Module):
            int8_projections = ("layer",)

            def __init__(self):
                super().__init__()
                self.layer = linear

            def prepare_int8(self):
                pass

        int8 = quantize_int8(One(), torch.device("cpu")).layer
        xb, wb = x.bfloat16(), w.bfloat16()
        for mode, fn in (("fp32", lambda: x @ w.t()), ("bf16", lambda: xb @ wb.t()), ("int8", lambda: int8(x))):
            with torch.inference_mode():
                fn()
                fn()
                best, spent = float("inf"), 0.0
                while spent < 2.0:  # best single call over 2 s: the machine is shared and noisy
                    start = time.perf_counter()
                    fn()
                    took = time.perf_counter() - start
                    best, spent = min(best, took), spent + took
                seconds = best
            rows.append(dict(mode=mode, M=M, gflops=2 * M * K * N / seconds / 1e9))
    return rows


# --------------------------------------------------------------------------------------------- 2. encoder
def run_point(mode: str, folder: str, T: int, batch: int, V: int, threads: int) -> dict:
    """One measurement, meant to run in its own process."""
    import torch

    torch.set_num_threads(threads)
    from recemb.core import encode_vertical, load_encoder

    model = load_encoder(Path(folder), torch.device("cpu"), **MODES[mode])
    ids = torch.randint(3, 32000, (batch, T), generator=torch.Generator().manual_seed(T))
    lengths = torch.full((batch,), T)
    with torch.inference_mode():
        encode_vertical(model, ids[:, :64], torch.full((batch,), 64), V, backend="torch")  # warm-up
        loaded = rss_mib()
        reset_peak()
        times = []
        while len(times) < 3 and sum(times) < 20.0:  # best of up to 3 for short runs: shared machines
            start = time.perf_counter()
            out = encode_vertical(model, ids, lengths, V, backend="torch")
            times.append(time.perf_counter() - start)
    c = model.config
    proj_flops = 2 * (c.hidden_size * c.in_proj_size + c.intermediate_size * c.hidden_size) * c.num_hidden_layers
    seconds = min(times)
    return dict(mode=mode, T=T, batch=batch, V=V, seconds=seconds, tokens_per_s=batch * T / seconds,
                proj_gflops=batch * T / seconds * proj_flops / 1e9, runs=len(times), rss_loaded_mib=loaded,
                peak_rss_mib=vm_hwm_mib(), finite=bool(torch.isfinite(out).all()))


def encoder_table(folder: Path, lengths, batches, V: int, threads: int) -> list[dict]:
    rows = []
    for batch in batches:
        for T in lengths:
            for mode in MODES:
                cmd = [sys.executable, __file__, "--threads", str(threads), "--point", mode, str(folder), str(T),
                       str(batch), str(V)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    rows.append(dict(mode=mode, T=T, batch=batch, failed=proc.stderr.strip()[-300:]))
                else:
                    rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(json.dumps(rows[-1]), flush=True)
    return rows


# --------------------------------------------------------------------------------------------- 3. quality
def quality(collections: list[str] | None) -> dict:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    import retrieval_eval as ev

    from recemb.core import DEFAULT_MODEL, Embedder

    data = ev.data_dir()
    names = collections or sorted(p.name for p in (data / "ir").iterdir() if p.is_dir())
    out: dict = {"ndcg@10": {}, "min_cosine_to_fp32": {}, "seconds": {}}
    fp32_docs: dict[str, np.ndarray] = {}
    for mode, options in MODES.items():
        system = ev.RecembSystem.__new__(ev.RecembSystem)
        system.embedder = Embedder.from_pretrained(DEFAULT_MODEL, device="cpu", **options)
        start = time.time()
        for coll in names:
            doc_ids, doc_texts, qids, qtexts, qrels = ev.load_collection(data / "ir" / coll)
            docs = system.documents(doc_texts)
            queries = system.queries(qtexts, ev.QUERY_TASKS.get(coll))
            ranked = [[doc_ids[j] for j in row] for row in ev.dense_rank(queries, docs, 100)]
            out["ndcg@10"].setdefault(mode, {})[coll] = ev.ir_metrics(ranked, qids, qrels)["ndcg@10"]
            if mode == "fp32":
                fp32_docs[coll] = docs
            cos = torch.nn.functional.cosine_similarity(torch.as_tensor(docs).double(),
                                                        torch.as_tensor(fp32_docs[coll]).double(), dim=-1)
            out["min_cosine_to_fp32"].setdefault(mode, {})[coll] = float(cos.min())
            print(f"  {coll:<10} {mode:<5} nDCG@10 {out['ndcg@10'][mode][coll]:.4f} "
                  f"min cos {float(cos.min()):.5f}", flush=True)
        out["seconds"][mode] = time.time() - start
        out["ndcg@10"][mode]["mean"] = float(np.mean([out["ndcg@10"][mode][c] for c in names]))
    return out


# --------------------------------------------------------------------------------------------- report
def markdown(result: dict) -> str:
    lines = ["| matmul (M×768 · 768×3352) | fp32 GFLOP/s | bf16 GFLOP/s | int8 GFLOP/s |", "|---|---|---|---|"]
    for M in sorted({r["M"] for r in result["probe"]}):
        got = {r["mode"]: r["gflops"] for r in result["probe"] if r["M"] == M}
        lines.append(f"| M = {M} | {got['fp32']:.0f} | {got['bf16']:.0f} | {got['int8']:.0f} |")
    lines += ["", "| batch × T | mode | tokens/s | × fp32 | proj GFLOP/s | peak RSS MiB (loaded) |",
              "|---|---|---|---|---|---|"]
    fp32 = {(r["batch"], r["T"]): r for r in result["encoder"] if r["mode"] == "fp32" and "failed" not in r}
    for r in result["encoder"]:
        if "failed" in r:
            lines.append(f"| {r['batch']} × {r['T']:,} | {r['mode']} | failed | | | |")
            continue
        base = fp32.get((r["batch"], r["T"]))
        ratio = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
        lines.append(f"| {r['batch']} × {r['T']:,} | {r['mode']} | {r['tokens_per_s']:,.0f} | {ratio:.2f}× | "
                     f"{r['proj_gflops']:.0f} | {r['peak_rss_mib']:,.0f} ({r['rss_loaded_mib']:,.0f}) |")
    q = result.get("quality")
    if q:
        colls = [c for c in q["ndcg@10"]["fp32"] if c != "mean"]
        lines += ["", "| mode | " + " | ".join(colls) + " | mean nDCG@10 | Δ mean | min cos to fp32 |",
                  "|---|" + "---|" * (len(colls) + 3)]
        for mode, scores in q["ndcg@10"].items():
            delta = scores["mean"] - q["ndcg@10"]["fp32"]["mean"]
            lines.append(f"| {mode} | " + " | ".join(f"{scores[c]:.4f}" for c in colls) +
                         f" | {scores['mean']:.4f} | {delta:+.4f} | "
                         f"{min(q['min_cosine_to_fp32'][mode].values()):.5f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--vertical-chunk-size", type=int, default=1024)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--collections", help="comma-separated (default: every folder under ir/)")
    parser.add_argument("--out", type=Path, default=RESULTS / "low_precision.json")
    parser.add_argument("--point", nargs=5, metavar=("MODE", "FOLDER", "T", "BATCH", "V"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        mode, folder, T, batch, V = args.point
        print(json.dumps(run_point(mode, folder, int(T), int(batch), int(V), args.threads)))
        return

    import tempfile

    import torch

    sys.path.insert(0, str(HERE))
    from vertical_memory_speed import CONFIG_130M, make_weights

    from recemb.core.precision import cpu_has_native_bf16

    result = dict(cpu_has_native_bf16=cpu_has_native_bf16(), torch=torch.__version__, threads=args.threads,
                  config=CONFIG_130M)
    result["probe"] = matmul_probe(args.threads)
    print(json.dumps(result["probe"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        make_weights(Path(tmp), CONFIG_130M)
        result["encoder"] = encoder_table(Path(tmp), args.lengths, args.batches, args.vertical_chunk_size,
                                          args.threads)
    if not args.skip_quality:
        result["quality"] = quality(args.collections.split(",") if args.collections else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print()
    print(markdown(result))


if __name__ == "__main__":
    main()
