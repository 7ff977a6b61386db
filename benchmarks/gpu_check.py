"""One prepared GPU run: correctness of our Triton kernels on CUDA, then SSD and encoder timings and memory.

    python3 benchmarks/gpu_check.py --out $OUT            # on a CUDA machine (about 3-5 minutes on an H100/H200)
    TRITON_INTERPRET=1 python3 benchmarks/gpu_check.py --smoke   # tiny shapes on the CPU: checks the script itself

Prints markdown tables and writes gpu_check.json. Compares, on the same inputs: our Triton SSD, the torch SSD,
and mamba_ssm's ``mamba_chunk_scan_combined`` when mamba_ssm is importable (never install it on CPU machines);
and for the encoder, recemb vertical / horizontal against transformers' Mamba2Model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from recemb.kernels import ssd_chunk_scan, ssd_recurrent_ref


def rel(ref: torch.Tensor, got: torch.Tensor) -> float:
    ref, got = ref.double(), got.double()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def timed(fn, device: torch.device, repeats: int = 5) -> float:
    """Median seconds of fn() after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def ssd_inputs(b, l, h, p, g, n, dtype, device, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen).to(device)  # noqa: E731
    return dict(x=r(b, l, h, p).to(dtype), dt=r(b, l, h).to(dtype),
                A=-(torch.rand(h, generator=gen) * 4 + 0.5).to(device),
                B=r(b, l, g, n).to(dtype), C=r(b, l, g, n).to(dtype), D=r(h), dt_bias=r(h) - 2,
                initial_states=r(b, h, p, n) * 0.1)


def check_ssd(device, smoke):
    rows = []
    shapes = [(1, 37, 2, 8, 1, 8, 16)] if smoke else [(2, 1000, 24, 64, 1, 128, 256), (1, 2048, 128, 64, 8, 128, 256)]
    for b, l, h, p, g, n, q in shapes:
        for dtype in (torch.float32,) if smoke else (torch.float32, torch.bfloat16):
            t = ssd_inputs(b, l, h, p, g, n, dtype, device)
            kw = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=t["initial_states"],
                      out_dtype=torch.float32)
            y_tri, s_tri = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], q, backend="triton", **kw)
            y_tor, s_tor = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], q, backend="torch", **kw)
            row = dict(check="ssd triton vs torch", shape=f"b{b} l{l} h{h} p{p} g{g} n{n} q{q}", dtype=str(dtype),
                       y=rel(y_tor, y_tri), final_state=rel(s_tor, s_tri))
            if l <= 1000:  # the token loop is slow; it anchors the smaller shape
                y_ref, _ = ssd_recurrent_ref(*(t[k].cpu() for k in ("x", "dt", "A", "B", "C")), D=t["D"].cpu(),
                                               dt_bias=t["dt_bias"].cpu(), dt_softplus=True,
                                               initial_states=t["initial_states"].cpu())
                row["y_vs_fp64_loop"] = rel(y_ref, y_tri.cpu())
            rows.append(row)
    return rows


def time_ssd(device, smoke):
    rows = []
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception:  # not installed, or no CUDA extension
        mamba_chunk_scan_combined = None
    h, p, g, n, q = (2, 8, 1, 8, 16) if smoke else (24, 64, 1, 128, 256)
    for T in ([64] if smoke else [4096, 16384, 32768]):
        for dtype in (torch.float32,) if smoke else (torch.bfloat16, torch.float32):
            t = ssd_inputs(1, T, h, p, g, n, dtype, device)
            args = (t["x"], t["dt"], t["A"], t["B"], t["C"], q)
            kw = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True)
            row = dict(T=T, dtype=str(dtype),
                       triton_ms=1e3 * timed(lambda: ssd_chunk_scan(*args, backend="triton", **kw), device),
                       torch_ms=1e3 * timed(lambda: ssd_chunk_scan(*args, backend="torch", **kw), device))
            if mamba_chunk_scan_combined is not None and device.type == "cuda":
                row["mamba_ssm_ms"] = 1e3 * timed(lambda: mamba_chunk_scan_combined(*args, **kw), device)
                row["triton_over_mamba_ssm"] = row["triton_ms"] / row["mamba_ssm_ms"]
            rows.append(row)
    return rows


def check_and_time_encoder(device, smoke):
    from transformers import Mamba2Config, Mamba2Model

    from recemb.core import encode_vertical
    from recemb.core.architectures.mamba2 import Mamba2Config as Config
    from recemb.core.architectures.mamba2 import Mamba2Encoder

    cfg = (dict(hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16, state_size=8, chunk_size=16,
                vocab_size=300, n_groups=1)
           if smoke else dict(hidden_size=768, num_hidden_layers=24, num_heads=24, head_dim=64, state_size=128,
                              chunk_size=256, vocab_size=32768, n_groups=1))
    torch.manual_seed(0)
    ref = Mamba2Model(Mamba2Config(**cfg)).eval()
    dtype = torch.float32 if smoke else torch.bfloat16
    ours = Mamba2Encoder(Config.from_transformers_dict(ref.config.to_dict()))
    ours.load_state_dict(ref.state_dict())
    ours = ours.to(device=device, dtype=dtype).eval()
    rows = []
    ids = torch.randint(3, cfg["vocab_size"] - 1, (1, 40 if smoke else 8192), device=device)
    lengths = torch.tensor([ids.shape[1]])
    a = encode_vertical(ours, ids, lengths, 16 if smoke else 1024, backend="triton")
    b = encode_vertical(ours, ids, lengths, 16 if smoke else 1024, backend="torch")
    rows.append(dict(check="encoder triton vs torch (vertical)", dtype=str(dtype), pooled=rel(b, a)))
    ref = ref.to(device=device, dtype=dtype)
    for T in ([40] if smoke else [4096, 16384, 65536]):
        ids = torch.randint(3, cfg["vocab_size"] - 1, (1, T), device=device)
        lengths = torch.tensor([T])
        for name, fn in [
            ("recemb vertical V=4096", lambda: encode_vertical(ours, ids, lengths, 4096, backend="auto")),
            ("recemb vertical V=1024", lambda: encode_vertical(ours, ids, lengths, 1024, backend="auto")),
            ("recemb horizontal", lambda: encode_vertical(ours, ids, lengths, T, backend="auto")),
            ("transformers Mamba2Model", lambda: ref(ids).last_hidden_state[:, -1]),
        ]:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                with torch.inference_mode():
                    seconds = timed(fn, device, repeats=3)
                peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else float("nan")
                rows.append(dict(method=name, T=T, tokens_per_s=T / seconds, peak_mib=peak))
            except torch.OutOfMemoryError:
                rows.append(dict(method=name, T=T, tokens_per_s=None, peak_mib="out of memory"))
    return rows


def table(rows):
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    return "\n".join(["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
                     + ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in rows])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under TRITON_INTERPRET=1")
    args = parser.parse_args()
    if args.smoke:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        print("no CUDA device: run with --smoke (and TRITON_INTERPRET=1) to check the script on the CPU")
        return 2
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke)",
              "torch": torch.__version__}
    for name, fn in [("ssd_correctness", check_ssd), ("ssd_timing", time_ssd), ("encoder", check_and_time_encoder)]:
        start = time.perf_counter()
        report[name] = fn(device, args.smoke)
        print(f"\n## {name} ({time.perf_counter() - start:.0f} s)\n\n{table(report[name])}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
