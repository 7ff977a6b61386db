"""Low-precision CPU inference: fp32, bf16 (mixed precision) and int8, measured in one run.

    python3 benchmarks/low_precision.py                  # everything (about 20 minutes on 2 cores)
    python3 benchmarks/low_precision.py --skip-quality   # the speed tables only
    python3 benchmarks/low_precision.py --quick          # a few minutes: M = 1024, 1K tokens batch 1, ADI only

1. **Matmul probe**: GFLOP/s of one in_proj-shaped product (M×768 by 768×3352, M = 1024 and 8192) in fp32, in
   bf16 (activations cast from fp32, as the mixed-precision path runs it), through recemb's per-token int8 layer
   (``recemb.core.int8.Int8Linear``: quantising the activations and dequantising included) and, for reference,
   through torch's dynamically quantised linear layer (one activation scale per call: what quantize="int8" used
   before, batch-dependent); the ceiling each mode's projections can reach on this CPU. Then what
   ``dtype="auto"``'s own probe (``recemb.core.autodtype``) measures and chooses for that config. Modes: fp32;
   bf16 (mixed precision); int8 (in_proj int8, the rest fp32: for CPUs without bf16 units); int8+bf16 (in_proj
   int8, out_proj bf16).
2. **Encoder**: tokens/s and peak memory of the 130M-class Mamba2 config (random weights, the config of
   benchmarks/vertical_memory_speed.py) at T = 1K / 4K / 16K tokens per text and batch 1 / 8, V = 1024, each
   point in a fresh process. "proj GFLOP/s" is tokens/s × the projections' 2·(d·N_in + I·d) FLOPs per token per
   layer, to set against the probe. Peak memory is the process's peak RSS after loading and warm-up (VmHWM reset
   through /proc/self/clear_refs), so it is the encode's, not the load's.
3. **Quality**: the bundled model's nDCG@10 on every collection under ../shared/data/ir in each mode
   (benchmarks/retrieval_eval.py's protocol), and the cosine of each mode's document embeddings to fp32's.
   **Batch independence**: each mode's documents embedded again in other batch compositions (shuffled, 64 per
   call; and the first ``--alone`` documents one per call): the worst cosine between a document's vectors and
   their largest difference.

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
def torch_dynamic_int8(linear):
    """torch's dynamically quantised copy of ``linear`` (oneDNN engine where there is one), for reference only."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if "onednn" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "onednn"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(torch.nn.Sequential(linear), {"0": per_channel_dynamic_qconfig},
                                dtype=torch.qint8)


def fastest(fns: dict, seconds: float = 2.0) -> dict:
    """The fastest single call of each function, timed in rounds (every function once per round, so a burst of load
    on this shared machine hits all alike) for about ``seconds`` in all."""
    best = {name: float("inf") for name in fns}
    for fn in fns.values():
        fn()
        fn()
    spent = 0.0
    while spent < seconds:
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            took = time.perf_counter() - start
            best[name], spent = min(best[name], took), spent + took
    return best


def matmul_probe(threads: int, sizes=(1024, 8192)) -> list[dict]:
    import torch

    from recemb.core.int8 import Int8Linear

    torch.set_num_threads(threads)
    rows = []
    K, N = 768, 3352
    for M in sizes:
        x = torch.randn(M, K)
        linear = torch.nn.Linear(K, N, bias=False).requires_grad_(False)
        linear.weight.copy_(torch.randn(N, K) * K ** -0.5)
        int8, dynamic, w16 = Int8Linear.from_linear(linear), torch_dynamic_int8(linear), linear.weight.bfloat16()
        with torch.inference_mode():
            best = fastest({"fp32": lambda: linear(x), "bf16": lambda: torch.nn.functional.linear(x.bfloat16(), w16),
                            "int8": lambda: int8(x), "int8 torch-dynamic": lambda: dynamic(x)},
                           seconds=2.0 * 4)
        rows += [dict(mode=mode, M=M, gflops=2 * M * K * N / s / 1e9) for mode, s in best.items()]
    return rows


def auto_probe(threads: int, config: dict) -> dict:
    """What dtype="auto" measures on this machine for ``config``'s projections, and what it picks."""
    import torch

    from recemb.core.autodtype import choose_dtype, probe_projections

    torch.set_num_threads(threads)
    d, inner = config["hidden_size"], config["expand"] * config["hidden_size"]
    gn = config.get("n_groups", 1) * config["state_size"]
    heads = inner // config["head_dim"]
    shapes = ((d, 2 * inner + 2 * gn + heads, True), (inner, d, False))
    start = time.perf_counter()
    result = probe_projections(shapes)
    took = time.perf_counter() - start
    sec = result["seconds"]
    return dict(shapes=shapes, tokens=result["tokens"], seconds=sec, probe_wall_s=took,
                bf16_speedup=None if sec["bfloat16"] is None else sec["float32"] / sec["bfloat16"],
                int8_speedup=None if sec["int8"] is None else sec["float32"] / sec["int8"],
                choice=str(choose_dtype(sec)).removeprefix("torch."))


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


def encoder_table(folder: Path, lengths, batches, V: int, threads: int, modes) -> list[dict]:
    rows = []
    for batch in batches:
        for T in lengths:
            for mode in modes:
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
def compare(a, b) -> tuple[float, float]:
    """(lowest cosine, largest absolute difference) between two (n, dim) arrays of embeddings."""
    import numpy as np

    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return float(cos.min()), float(np.abs(a - b).max())


def quality(collections: list[str] | None, modes: list[str], alone: int) -> dict:
    import numpy as np

    sys.path.insert(0, str(HERE))
    import retrieval_eval as ev

    from recemb.core import DEFAULT_MODEL, Embedder

    data = ev.data_dir()
    names = collections or sorted(p.name for p in (data / "ir").iterdir() if p.is_dir())
    out: dict = {"ndcg@10": {}, "min_cosine_to_fp32": {}, "seconds": {}, "batch_independence": {}}
    fp32_docs: dict[str, np.ndarray] = {}
    for mode in ["fp32"] + [m for m in modes if m != "fp32"]:
        system = ev.RecembSystem.__new__(ev.RecembSystem)
        system.embedder = Embedder.from_pretrained(DEFAULT_MODEL, device="cpu", **MODES[mode])
        start = time.time()
        for coll in names:
            doc_ids, doc_texts, qids, qtexts, qrels = ev.load_collection(data / "ir" / coll)
            docs = system.documents(doc_texts)
            queries = system.queries(qtexts, ev.QUERY_TASKS.get(coll))
            ranked = [[doc_ids[j] for j in row] for row in ev.dense_rank(queries, docs, 100)]
            out["ndcg@10"].setdefault(mode, {})[coll] = ev.ir_metrics(ranked, qids, qrels)["ndcg@10"]
            if mode == "fp32":
                fp32_docs[coll] = docs
            low, _ = compare(docs, fp32_docs[coll])
            out["min_cosine_to_fp32"].setdefault(mode, {})[coll] = low
            # The same documents in other batches: shuffled, 64 per call; and the first `alone` one per call.
            order = np.random.default_rng(0).permutation(len(doc_texts))
            shuffled = np.empty_like(docs)
            shuffled[order] = system.embedder.encode_documents([doc_texts[i] for i in order], batch_size=64,
                                                               show_progress_bar=False, vertical_chunk_size=1024)
            cos_other, diff_other = compare(shuffled, docs)
            if alone:
                single = np.stack([system.embedder.encode_documents([t], vertical_chunk_size=1024,
                                                                    show_progress_bar=False)[0]
                                   for t in doc_texts[:alone]])
                cos_alone, diff_alone = compare(single, docs[:alone])
                cos_other, diff_other = min(cos_other, cos_alone), max(diff_other, diff_alone)
            out["batch_independence"].setdefault(mode, {})[coll] = dict(min_cosine=cos_other,
                                                                        max_abs_diff=diff_other, alone=alone)
            print(f"  {coll:<10} {mode:<9} nDCG@10 {out['ndcg@10'][mode][coll]:.4f} min cos {low:.5f}  "
                  f"other batches: min cos {cos_other:.7f}, max diff {diff_other:.1e}", flush=True)
        out["seconds"][mode] = time.time() - start
        out["ndcg@10"][mode]["mean"] = float(np.mean([out["ndcg@10"][mode][c] for c in names]))
    return out


# --------------------------------------------------------------------------------------------- report
def markdown(result: dict) -> str:
    lines = ["| matmul (M×768 · 768×3352) | fp32 GFLOP/s | bf16 GFLOP/s | int8 GFLOP/s | int8 torch-dynamic |",
             "|---|---|---|---|---|"]
    for M in sorted({r["M"] for r in result.get("probe", [])}):
        got = {r["mode"]: r["gflops"] for r in result["probe"] if r["M"] == M}
        lines.append(f"| M = {M} | {got['fp32']:.0f} | {got['bf16']:.0f} | {got['int8']:.0f} | "
                     f"{got['int8 torch-dynamic']:.0f} |")
    auto = result.get("auto")
    if auto:
        ratio = {k: "cannot run" if auto[k] is None else f"{auto[k]:.2f}×" for k in ("bf16_speedup", "int8_speedup")}
        lines += ["", f"dtype=\"auto\" probe ({auto['tokens']} tokens, {auto['probe_wall_s']:.2f} s): bf16 "
                      f"{ratio['bf16_speedup']} fp32, int8 {ratio['int8_speedup']} -> {auto['choice']}"]
    lines += ["", "| batch × T | mode | tokens/s | × fp32 | proj GFLOP/s | peak RSS MiB (loaded) |",
              "|---|---|---|---|---|---|"]
    fp32 = {(r["batch"], r["T"]): r for r in result.get("encoder", []) if r["mode"] == "fp32" and "failed" not in r}
    for r in result.get("encoder", []):
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
        lines += ["", "| mode | " + " | ".join(colls) + " | mean nDCG@10 | Δ mean | min cos to fp32 | "
                  "other batches: min cos | max diff |", "|---|" + "---|" * (len(colls) + 5)]
        for mode, scores in q["ndcg@10"].items():
            delta = scores["mean"] - q["ndcg@10"]["fp32"]["mean"]
            indep = q["batch_independence"][mode].values()
            lines.append(f"| {mode} | " + " | ".join(f"{scores[c]:.4f}" for c in colls) +
                         f" | {scores['mean']:.4f} | {delta:+.4f} | "
                         f"{min(q['min_cosine_to_fp32'][mode].values()):.5f} | "
                         f"{min(b['min_cosine'] for b in indep):.7f} | {max(b['max_abs_diff'] for b in indep):.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--vertical-chunk-size", type=int, default=1024)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--collections", help="comma-separated (default: every folder under ir/)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES),
                        help="the modes of the encoder and quality sections (fp32 always runs in quality)")
    parser.add_argument("--alone", type=int, default=200,
                        help="documents per collection embedded one per call for the batch-independence check")
    parser.add_argument("--skip-probe", action="store_true")
    parser.add_argument("--skip-encoder", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: probe at M = 1024, encoder at 1K tokens batch 1, quality on ADI")
    parser.add_argument("--out", type=Path, help="default results/low_precision.json (--quick: "
                                                 "results/low_precision_quick.json)")
    parser.add_argument("--point", nargs=5, metavar=("MODE", "FOLDER", "T", "BATCH", "V"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.batches, args.collections = [1024], [1], args.collections or "adi"
    args.out = args.out or RESULTS / ("low_precision_quick.json" if args.quick else "low_precision.json")
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
    if not args.skip_probe:
        result["probe"] = matmul_probe(args.threads, sizes=(1024,) if args.quick else (1024, 8192))
        print(json.dumps(result["probe"]), flush=True)
        result["auto"] = auto_probe(args.threads, CONFIG_130M)
        print(json.dumps(result["auto"]), flush=True)
    if not args.skip_encoder:
        with tempfile.TemporaryDirectory() as tmp:
            make_weights(Path(tmp), CONFIG_130M)
            result["encoder"] = encoder_table(Path(tmp), args.lengths, args.batches, args.vertical_chunk_size,
                                              args.threads, args.modes)
    if not args.skip_quality:
        result["quality"] = quality(args.collections.split(",") if args.collections else None, args.modes,
                                    args.alone)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print()
    print(markdown(result))


if __name__ == "__main__":
    main()
