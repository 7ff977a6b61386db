"""One prepared GPU run: correctness of our Triton kernels on CUDA, then SSD and encoder timings and memory.

    bash benchmarks/gpu_run.sh OUT                 # on a CUDA machine (at most 7 minutes on an H100/H200); it sets
                                                   # up what benchmarks/fetch_peers.py fetched, then runs this
    TRITON_INTERPRET=1 python3 benchmarks/gpu_check.py --smoke --out /tmp/g   # tiny shapes on the CPU: the script

GPU time comes in short windows and a machine can stop mid-run, so the run is built to bring back what it reached:

- every row runs on its own: an exception is recorded in that row (its type, message and the end of its traceback)
  and the run goes on;
- every section has a time box (``SECTIONS``) and the boxes are cumulative: a section must end by the sum of its
  own box and those before it (time an earlier section left unused passes on, an overrun is taken from the later
  ones), so the whole run ends within their sum (7 minutes) plus at most one row; rows past the deadline are
  recorded as skipped;
- every row is appended to ``gpu_check.jsonl`` in ``--out`` as soon as it is measured (flushed and synced), and
  ``gpu_check.json`` plus the markdown tables (``gpu_check.md``) are rewritten after each section.

Before the rows of the kernels, bundled, ssd_timing and scale sections, a "compile ahead" row compiles every Triton
kernel those rows will launch, every autotuning config, at once on all CPU cores (``triton_ahead.py``): serially,
the first launches would spend minutes of the window compiling one config after another. ``--compile-for sm_90`` does
the same on a machine without a GPU, for that GPU, and reports compile time and shared memory per config: the
kernels the run will launch, compiled from the run's own calls (the interpreter compiles nothing).

Correctness compares, on the same inputs, each Triton kernel with the torch path and the pure-torch reference, at the
shapes of three Mamba2 configs (``CONFIGS``: 130M-class, 1.3B-class, Codestral-7B-class), fp32 and bf16, with initial
states and lengths that are not multiples of the chunk, against the tolerances the CPU tests use (``TOLERANCES``).
Timing compares our SSD with the torch path and with mamba_ssm's ``mamba_chunk_scan_combined`` where it can be
imported, and recemb's encoder (vertical, horizontal) with transformers' ``Mamba2Model``. ``--smoke`` runs every
section and row at tiny shapes on the CPU (under ``TRITON_INTERPRET=1``), peers that cannot run there recorded as
skipped with the reason; ``tests/tools/test_gpu_check.py`` runs it in the test suite.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import torch

from recemb.kernels import (
    causal_conv1d,
    causal_conv1d_ref,
    gated_rms_norm,
    gated_rms_norm_ref,
    ssd_chunk_scan,
    ssd_recurrent_ref,
)
from recemb.kernels.conv1d.conv1d_triton import causal_conv1d_triton
from recemb.kernels.gated_norm.gated_norm_triton import gated_rms_norm_triton
from recemb.kernels.ssd.triton_combined import ssd_chunk_scan_triton

sys.path.insert(0, str(Path(__file__).resolve().parent))  # triton_ahead: imported where used (async compile mode)

# Mamba2 shapes (heads, head_dim, groups, state, conv width, hidden size, layers) of the checkpoints people run.
CONFIGS = {
    "130M": dict(h=24, p=64, g=1, n=128, k=4, d=768, layers=24),
    "1.3B": dict(h=64, p=64, g=1, n=128, k=4, d=2048, layers=48),
    "7B (Codestral Mamba)": dict(h=128, p=64, g=8, n=128, k=4, d=4096, layers=64),
}
SMOKE_CONFIG = dict(h=2, p=8, g=1, n=8, k=4, d=8, layers=2)
# The CPU tests' tolerances (relative error, tests/utils.rel_err), per kernel and dtype.
TOLERANCES = {
    "ssd": {torch.float32: 1e-4, torch.bfloat16: 1e-2},
    "conv1d": {torch.float32: 1e-6, torch.bfloat16: 1e-2},
    "gated_norm": {torch.float32: 1e-6, torch.bfloat16: 1e-2},
}
# Seconds each section may take on the GPU (compilation and autotuning included), in the order they run: the
# correctness of the kernels and of the bundled model first, so that a run cut short still brings them back. The
# boxes are cumulative (a section's deadline is the run's start plus its box and those before it): 7 minutes in all.
# The smoke run has no box.
SECTIONS = {"kernels": 120, "bundled": 40, "ssd_timing": 70, "scale": 100, "encoder": 90}


def rel(ref: torch.Tensor, got: torch.Tensor) -> float:
    """||got - ref|| / ||ref||, in fp64."""
    ref, got = ref.double().cpu(), got.double().cpu()
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


class Recorder:
    """Runs rows one at a time: each row's result or failure is kept, appended to ``gpu_check.jsonl`` at once, and
    rows past their section's deadline are recorded as skipped. The deadlines are cumulative: a section's is the
    recorder's start plus the boxes of every section started so far, its own included."""

    def __init__(self, out: Path, boxes: dict[str, float] | None, fail_rows: set[str] = frozenset()):
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.boxes, self.fail_rows = out, boxes, fail_rows
        self.rows: list[dict] = []
        self.section, self.deadline = "", float("inf")
        self.started, self.boxed = time.perf_counter(), 0.0
        self._log = open(out / "gpu_check.jsonl", "a", encoding="utf-8")  # noqa: SIM115  (open for the run)

    def start(self, section: str) -> None:
        self.section = section
        if self.boxes is not None:
            self.boxed += self.boxes[section]
            self.deadline = self.started + self.boxed

    def row(self, name: str, fn: Callable[[], dict]) -> dict:
        row = {"section": self.section, "row": name}
        started = time.perf_counter()
        if started > self.deadline:
            row["skipped"] = f"the run's time boxes up to this section ({self.boxed:g} s) were spent"
        else:
            try:
                if name in self.fail_rows:  # --fail-row: proves a failing row is recorded and the run goes on
                    raise RuntimeError("failure injected by --fail-row")
                row.update(fn())
            except Exception as e:  # one row's failure is that row's: recorded, and the run goes on
                row["error"] = f"{type(e).__name__}: {e}"[:500]
                row["traceback"] = "".join(traceback.format_exception(e))[-1500:]
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        row["seconds"] = round(time.perf_counter() - started, 3)
        self.rows.append(row)
        self._log.write(json.dumps(row, default=str) + "\n")
        self._log.flush()
        os.fsync(self._log.fileno())
        status = row.get("error") or row.get("skipped") or "ok"
        print(f"  [{self.section}] {name}: {status} ({row['seconds']:.1f} s)", flush=True)
        return row

    def close(self) -> None:
        self._log.close()


# ----------------------------------------------------------------------------------------------- correctness
def ssd_inputs(b, l, h, p, g, n, dtype, device, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen).to(device)  # noqa: E731
    return dict(x=r(b, l, h, p).to(dtype), dt=r(b, l, h).to(dtype),
                A=-(torch.rand(h, generator=gen) * 4 + 0.5).to(device),
                B=r(b, l, g, n).to(dtype), C=r(b, l, g, n).to(dtype), D=r(h), dt_bias=r(h) - 2,
                initial_states=r(b, h, p, n) * 0.1)


def ssd_row(cfg: dict, l: int, q: int, dtype, device, loop: bool, carried: bool = True, ahead: bool = False
            ) -> dict:
    """Our Triton SSD against the torch path (and, for short inputs, the fp64 token loop), with initial states
    (``carried``: a later vertical chunk) or without (a document's first chunk, another compiled variant).
    ``ahead``: only the Triton call, with the same arguments (what the dispatcher passes it), to compile it ahead."""
    t = ssd_inputs(2, l, cfg["h"], cfg["p"], cfg["g"], cfg["n"], dtype, device)
    if not carried:
        t["initial_states"] = None
    kw = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=t["initial_states"],
              out_dtype=torch.float32)
    args = (t["x"], t["dt"], t["A"], t["B"], t["C"], q)
    if ahead:
        ssd_chunk_scan_triton(*args, **kw)
        return {}
    y_tri, s_tri = ssd_chunk_scan(*args, backend="triton", **kw)
    y_tor, s_tor = ssd_chunk_scan(*args, backend="torch", **kw)
    tol = TOLERANCES["ssd"][dtype]
    row = dict(y_vs_torch=rel(y_tor, y_tri), state_vs_torch=rel(s_tor, s_tri), tolerance=tol)
    if loop:  # the token loop is slow on long inputs: it anchors the short ones
        y_ref, s_ref = ssd_recurrent_ref(*(t[k].cpu() for k in ("x", "dt", "A", "B", "C")), D=t["D"].cpu(),
                                         dt_bias=t["dt_bias"].cpu(), dt_softplus=True,
                                         initial_states=None if not carried else t["initial_states"].cpu())
        row.update(y_vs_fp64_loop=rel(y_ref, y_tri), state_vs_fp64_loop=rel(s_ref, s_tri))
    row["within_tolerance"] = all(v <= tol for k, v in row.items() if k.endswith(("_torch", "_loop")))
    return row


def conv_row(cfg: dict, l: int, dtype, device, carried: bool = True, ahead: bool = False) -> dict:
    """The causal conv1d over the mixer's x|B|C channels, with a carried state (or, ``carried=False``, from zeros:
    a document's first chunk); the new state must be exact."""
    channels = cfg["h"] * cfg["p"] + 2 * cfg["g"] * cfg["n"]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, l, channels, generator=gen).to(device=device, dtype=dtype)
    weight = torch.randn(channels, cfg["k"], generator=gen).to(device)
    bias = torch.randn(channels, generator=gen).to(device)
    state = torch.randn(2, channels, cfg["k"], generator=gen).to(device) if carried else None
    if ahead:
        causal_conv1d_triton(x, weight, bias, state, "silu")
        return {}
    y_tri, s_tri = causal_conv1d(x, weight, bias, state, "silu", backend="triton")
    y_tor, _ = causal_conv1d(x, weight, bias, state, "silu", backend="torch")
    y_ref, s_ref = causal_conv1d_ref(x.cpu(), weight.cpu(), bias.cpu(), None if state is None else state.cpu(),
                                     "silu")
    tol = TOLERANCES["conv1d"][dtype]
    row = dict(y_vs_torch=rel(y_tor, y_tri), y_vs_ref=rel(y_ref, y_tri), state_exact=bool(torch.equal(
        s_tri.cpu(), s_ref)), tolerance=tol)
    row["within_tolerance"] = row["y_vs_torch"] <= tol and row["y_vs_ref"] <= tol and row["state_exact"]
    return row


def norm_row(cfg: dict, l: int, dtype, device, ahead: bool = False) -> dict:
    """The gated RMSNorm per group over the heads' output."""
    d = cfg["h"] * cfg["p"]
    gen = torch.Generator().manual_seed(2)
    y = torch.randn(2, l, d, generator=gen).to(device=device, dtype=dtype)
    z = torch.randn(2, l, d, generator=gen).to(device=device, dtype=dtype)
    weight = torch.randn(d, generator=gen).to(device=device, dtype=dtype)
    group = d // cfg["g"]
    if ahead:
        gated_rms_norm_triton(y, z, weight, group)
        return {}
    tri = gated_rms_norm(y, z, weight, group, backend="triton")
    tor = gated_rms_norm(y, z, weight, group, backend="torch")
    ref = gated_rms_norm_ref(y.cpu(), z.cpu(), weight.cpu(), group)
    tol = TOLERANCES["gated_norm"][dtype]
    row = dict(out_vs_torch=rel(tor, tri), out_vs_ref=rel(ref, tri), tolerance=tol)
    row["within_tolerance"] = row["out_vs_torch"] <= tol and row["out_vs_ref"] <= tol
    return row


def rwkv7_row(h: int, n: int, l: int, device, ahead: bool = False) -> dict:
    """RWKV-7's time mixing through flash-linear-attention's chunk kernel against recemb's chunked torch form and,
    for short inputs, the fp64 token loop (fp32 inputs, initial state carried)."""
    from recemb.kernels.rwkv7 import fla_available, rwkv7_chunked, rwkv7_fla, rwkv7_recurrent_ref

    if device.type != "cuda" or not fla_available():
        return {"skipped": "flash-linear-attention's kernel needs CUDA and the fla package"}
    gen = torch.Generator().manual_seed(4)
    r, k, v = (torch.randn(2, l, h, n, generator=gen) * s for s in (1.0, 0.5, 1.0))
    w = -torch.rand(2, l, h, n, generator=gen) * 2 - 0.01
    kk = torch.nn.functional.normalize(torch.randn(2, l, h, n, generator=gen), dim=-1)
    a, b = -kk, kk * torch.rand(2, l, h, n, generator=gen)
    state = torch.randn(2, h, n, n, generator=gen) * 0.1
    args = [t.to(device) for t in (r, w, k, v, a, b)]
    if ahead:
        rwkv7_fla(*args, initial_state=state.to(device))
        return {}
    o_fla, s_fla = rwkv7_fla(*args, initial_state=state.to(device))
    o_tor, s_tor = rwkv7_chunked(*args, initial_state=state.to(device))
    tol = TOLERANCES["ssd"][torch.float32]
    row = dict(o_vs_torch=rel(o_tor, o_fla), state_vs_torch=rel(s_tor, s_fla), tolerance=tol,
               fla_ms=1e3 * timed(lambda: rwkv7_fla(*args, initial_state=state.to(device)), device),
               torch_ms=1e3 * timed(lambda: rwkv7_chunked(*args, initial_state=state.to(device)), device))
    if l <= 1000:
        o_ref, s_ref = rwkv7_recurrent_ref(r, w, k, v, a, b, initial_state=state)
        row.update(o_vs_fp64_loop=rel(o_ref, o_fla), state_vs_fp64_loop=rel(s_ref, s_fla))
    row["within_tolerance"] = all(v <= tol for key, v in row.items() if key.endswith(("_torch", "_loop")))
    return row


def mlstm_row(h: int, dk: int, dv: int, l: int, device, ahead: bool = False) -> dict:
    """xLSTM's mLSTM through the mlstm_kernels package's Triton kernel against recemb's chunkwise torch form and,
    for short inputs, the fp64 token loop (fp32 inputs, initial state carried, odd lengths padded)."""
    from recemb.kernels.mlstm import mlstm_chunkwise, mlstm_kernels_available, mlstm_recurrent_ref, mlstm_xl_chunk

    if device.type != "cuda" or not mlstm_kernels_available():
        return {"skipped": "the mlstm_kernels package's kernel needs CUDA and the package"}
    gen = torch.Generator().manual_seed(6)
    q, k = torch.randn(2, l, h, dk, generator=gen), torch.randn(2, l, h, dk, generator=gen)
    v = torch.randn(2, l, h, dv, generator=gen)
    i, f = torch.randn(2, l, h, generator=gen), torch.randn(2, l, h, generator=gen) + 2
    state = (torch.randn(2, h, dk, dv, generator=gen) * 0.1, torch.randn(2, h, dk, generator=gen) * 0.1,
             torch.randn(2, h, generator=gen) * 0.1)
    args = [t.to(device) for t in (q, k, v, i, f)]
    on_device = tuple(t.to(device) for t in state)
    if ahead:
        mlstm_xl_chunk(*args, initial_state=on_device)
        return {}
    y_ker, s_ker = mlstm_xl_chunk(*args, initial_state=on_device)
    y_tor, s_tor = mlstm_chunkwise(*args, initial_state=on_device)
    tol = TOLERANCES["ssd"][torch.float32]
    row = dict(h_vs_torch=rel(y_tor, y_ker), C_vs_torch=rel(s_tor[0], s_ker[0]), tolerance=tol,
               kernel_ms=1e3 * timed(lambda: mlstm_xl_chunk(*args, initial_state=on_device), device),
               torch_ms=1e3 * timed(lambda: mlstm_chunkwise(*args, initial_state=on_device), device))
    if l <= 1000:
        y_ref, s_ref = mlstm_recurrent_ref(q, k, v, i, f, initial_state=state)
        row.update(h_vs_fp64_loop=rel(y_ref, y_ker), C_vs_fp64_loop=rel(s_ref[0], s_ker[0]))
    row["within_tolerance"] = all(v <= tol for key, v in row.items() if key.endswith(("_torch", "_loop")))
    return row


def kernel_rows(device, smoke) -> Iterator[tuple[str, Callable[[], dict]]]:
    """Breadth first: every kernel once at the smallest config and the shortest length (fp32, then bf16), then the
    larger configs and lengths, so that a time box spent on compilation loses repeats at larger shapes, not kernels."""
    configs = {"smoke": SMOKE_CONFIG} if smoke else CONFIGS
    lengths = [37] if smoke else [1000, 4099]  # neither a multiple of the chunk
    q = 16 if smoke else 256

    def mamba2_rows(label, cfg, dtype, ls, first_chunk=False):
        short = "fp32" if dtype == torch.float32 else "bf16"
        for l in ls:
            loop = l <= 1000 and (smoke or cfg["h"] <= 24)  # the fp64 loop: minutes on the big configs
            yield f"ssd {label} {short} l={l}", partial(ssd_row, cfg, l, q, dtype, device, loop)
            if first_chunk:
                yield f"ssd {label} {short} l={l} from zero", partial(ssd_row, cfg, l, q, dtype, device, loop, False)
        yield f"conv1d {label} {short}", partial(conv_row, cfg, lengths[-1], dtype, device)
        if first_chunk:
            yield f"conv1d {label} {short} from zero", partial(conv_row, cfg, lengths[-1], dtype, device, False)
        yield f"gated_norm {label} {short}", partial(norm_row, cfg, lengths[-1], dtype, device)

    def peer_rows(ls):
        # xLSTM-7B's mLSTM shape (8 heads, qk 256, v 512) on the mlstm_kernels package's kernel, and RWKV-7 (the
        # paper's 1.5B-class shape: 32 heads of 64) on flash-linear-attention's kernel.
        for l in ls:
            yield f"mlstm xl_chunk fp32 l={l}", partial(mlstm_row, 2 if smoke else 8, 8 if smoke else 256,
                                                        16 if smoke else 512, l, device)
            yield f"rwkv7 fla fp32 l={l}", partial(rwkv7_row, 2 if smoke else 32, 8 if smoke else 64, l, device)

    (first, first_cfg), *larger = configs.items()
    # the smallest config also without carried states: the variant every document's first chunk runs
    yield from mamba2_rows(first, first_cfg, torch.float32, lengths[:1], first_chunk=True)
    yield from peer_rows(lengths[:1])
    yield from mamba2_rows(first, first_cfg, torch.bfloat16, lengths[:1], first_chunk=True)
    for label, cfg in larger:
        for dtype in (torch.float32, torch.bfloat16):
            yield from mamba2_rows(label, cfg, dtype, lengths)
    if len(lengths) > 1:
        for dtype in (torch.float32, torch.bfloat16):
            yield from (row for row in mamba2_rows(first, first_cfg, dtype, lengths[1:]) if row[0].startswith("ssd"))
        yield from peer_rows(lengths[1:])


# ----------------------------------------------------------------------------------------------- timing
PEERS = Path(__file__).resolve().parent / ".peers"  # benchmarks/fetch_peers.py puts mamba_ssm's Triton ops here


def mamba_ssm_scan():
    """mamba_ssm's ``mamba_chunk_scan_combined`` (an installed mamba_ssm, else its Triton ops as source in
    ``PEERS``), or the reason it cannot run here. The source folder is on ``sys.path`` only for this import, and
    its modules are dropped from ``sys.modules`` after it, so transformers (which takes another path when it finds
    mamba_ssm) never sees them; the function keeps its own references."""
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        return mamba_chunk_scan_combined, None
    except Exception as installed:  # not installed (never on CPU machines), or no CUDA extension
        reason = f"mamba_ssm not importable: {type(installed).__name__}: {installed}"[:200]
    if not (PEERS / "mamba_ssm").is_dir():
        return None, reason + "; run benchmarks/fetch_peers.py for its Triton ops as source"
    sys.path.insert(0, str(PEERS))
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        return mamba_chunk_scan_combined, None
    except Exception as e:
        return None, f"mamba_ssm's Triton ops from {PEERS}: {type(e).__name__}: {e}"[:200]
    finally:
        sys.path.remove(str(PEERS))
        for name in [m for m in sys.modules if m == "mamba_ssm" or m.startswith("mamba_ssm.")]:
            del sys.modules[name]


def ssd_timing_rows(device, smoke) -> Iterator[tuple[str, Callable[[], dict]]]:
    peer, why_not = mamba_ssm_scan()
    cfg = SMOKE_CONFIG if smoke else CONFIGS["130M"]
    q = 16 if smoke else 256
    for T in ([64] if smoke else [4096, 16384, 65536]):
        for dtype in (torch.bfloat16,) if smoke else (torch.bfloat16, torch.float32):
            def row(T=T, dtype=dtype, ahead=False):
                t = ssd_inputs(1, T, cfg["h"], cfg["p"], cfg["g"], cfg["n"], dtype, device)
                args = (t["x"], t["dt"], t["A"], t["B"], t["C"], q)
                kw = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True)
                if ahead:  # the dispatcher's call of the Triton path, and the peer's
                    ssd_chunk_scan_triton(*args, **kw, out_dtype=dtype)
                    if peer is not None and device.type == "cuda":
                        peer(*args, **kw)
                    return {}
                out = dict(T=T, dtype=str(dtype).replace("torch.", ""),
                           triton_ms=1e3 * timed(lambda: ssd_chunk_scan(*args, backend="triton", **kw), device),
                           torch_ms=1e3 * timed(lambda: ssd_chunk_scan(*args, backend="torch", **kw), device))
                if peer is None:
                    out["mamba_ssm"] = why_not
                elif device.type != "cuda":
                    out["mamba_ssm"] = "imported; its kernels select a CUDA device (torch.cuda.device), GPU only"
                else:
                    out["mamba_ssm_ms"] = 1e3 * timed(lambda: peer(*args, **kw), device)
                    out["triton_over_mamba_ssm"] = out["triton_ms"] / out["mamba_ssm_ms"]
                return out

            yield f"ssd T={T} {str(dtype).replace('torch.', '')}", row


def encoder_rows(device, smoke) -> Iterator[tuple[str, Callable[[], dict]]]:
    from transformers import Mamba2Config, Mamba2Model

    from recemb.core import encode_vertical
    from recemb.core.architectures.mamba2 import Mamba2Config as Config
    from recemb.core.architectures.mamba2 import Mamba2Encoder

    cfg = (dict(hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16, state_size=8, chunk_size=16,
                vocab_size=300, n_groups=1)
           if smoke else dict(hidden_size=768, num_hidden_layers=24, num_heads=24, head_dim=64, state_size=128,
                              chunk_size=256, vocab_size=32768, n_groups=1))
    dtype = torch.float32 if smoke else torch.bfloat16
    built: dict = {}

    def models():
        if not built:
            torch.manual_seed(0)
            ref = Mamba2Model(Mamba2Config(**cfg)).eval()
            ours = Mamba2Encoder(Config.from_transformers_dict(ref.config.to_dict()))
            ours.load_state_dict(ref.state_dict())
            built["ours"] = ours.to(device=device, dtype=dtype).eval()
            built["ref"] = ref.to(device=device, dtype=dtype)
        return built["ours"], built["ref"]

    def triton_vs_torch():
        ours, _ = models()
        ids = torch.randint(3, cfg["vocab_size"] - 1, (1, 40 if smoke else 8192), device=device)
        lengths = torch.tensor([ids.shape[1]])
        a = encode_vertical(ours, ids, lengths, 16 if smoke else 1024, backend="triton")
        b = encode_vertical(ours, ids, lengths, 16 if smoke else 1024, backend="torch")
        return dict(dtype=str(dtype), pooled_vs_torch=rel(b, a))

    yield "encoder triton vs torch (vertical)", triton_vs_torch
    for T in ([40] if smoke else [4096, 16384, 65536]):
        methods = {
            "recemb vertical V=4096": lambda ours, ref, ids, lengths: encode_vertical(ours, ids, lengths, 4096),
            "recemb vertical V=1024": lambda ours, ref, ids, lengths: encode_vertical(ours, ids, lengths, 1024),
            "recemb horizontal": lambda ours, ref, ids, lengths: encode_vertical(ours, ids, lengths, ids.shape[1]),
            "transformers Mamba2Model": lambda ours, ref, ids, lengths: ref(ids).last_hidden_state[:, -1],
        }
        for name, method in methods.items():
            def row(T=T, method=method):
                ours, ref = models()
                ids = torch.randint(3, cfg["vocab_size"] - 1, (1, T), device=device)
                lengths = torch.tensor([T])
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                try:
                    with torch.inference_mode():
                        seconds = timed(lambda: method(ours, ref, ids, lengths), device, repeats=3)
                except torch.OutOfMemoryError:
                    return dict(T=T, tokens_per_s=None, peak_mib="out of memory")
                peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
                return dict(T=T, tokens_per_s=T / seconds, peak_mib=peak)

            yield f"{name} T={T}", row


# ----------------------------------------------------------------------------------------------- scale
def matmul_rate(device, dtype) -> float:
    """FLOP/s of a large square matmul in ``dtype``, measured here: the denominator of MFU."""
    size = 256 if device.type != "cuda" else 8192
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    return 2 * size ** 3 / timed(lambda: a @ b, device, repeats=10)


def random_mamba2(cfg: dict, device, dtype):
    """A Mamba2 encoder of ``cfg``'s shape with small random weights, built on ``device`` (speed depends only on
    shape); and its non-embedding parameter count."""
    from recemb.core.architectures.mamba2 import Mamba2Config, Mamba2Encoder
    from recemb.core.files import meta_skeleton

    config = Mamba2Config(hidden_size=cfg["d"], num_hidden_layers=cfg["layers"], num_heads=cfg["h"],
                          head_dim=cfg["p"], n_groups=cfg["g"], state_size=cfg["n"], vocab_size=32768)
    with meta_skeleton():
        model = Mamba2Encoder(config)
    model = model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("A_log"):
                param.copy_(torch.log(torch.rand(param.shape, device=device, generator=generator) * 15 + 1))
            elif name.endswith(("dt_bias", "D")) or "norm" in name:
                param.fill_(1.0 if "norm" in name or name.endswith("D") else -4.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)
    model = model.to(dtype).eval()
    embedding = sum(p.numel() for n, p in model.named_parameters() if "embed" in n)
    return model, sum(p.numel() for p in model.parameters()) - embedding


def scale_rows(device, smoke) -> Iterator[tuple[str, Callable[[], dict]]]:
    """Tokens/s, MFU (2 x non-embedding parameters per token over the measured bf16 matmul rate) and peak memory of
    vertical (V = 4096) and horizontal encoding at the three configs' full sizes, batch 1 and batched; and the
    activation memory at T past V, which must stay flat."""
    from recemb.core import encode_vertical

    dtype = torch.float32 if smoke else torch.bfloat16
    configs = {"smoke": SMOKE_CONFIG} if smoke else CONFIGS
    rate: dict = {}
    models: dict = {}

    def model_of(label):
        if label not in models:
            models.clear()  # one config on the device at a time
            if device.type == "cuda":
                torch.cuda.empty_cache()
            models[label] = random_mamba2(configs[label], device, dtype)
        return models[label]

    order = list(reversed(configs))  # the 7B-class model first: its 16K row is the MFU target

    def measure(label, rows, T, V, ahead=False):
        if ahead:
            # The first config's calls: the configs share the kernels' autotuning keys (head size, state, chunk and
            # dtypes), so this compiles every config they autotune over; the others' new specialisations compile
            # only the config chosen. And that model stays loaded for the rows.
            if label == order[0]:
                model, _ = model_of(label)
                encode_vertical(model, torch.randint(3, 32000, (rows, T), device=device), torch.full((rows,), T), V)
            return {}
        if "bf16" not in rate:
            rate["bf16"] = matmul_rate(device, dtype)
        model, params = model_of(label)
        ids = torch.randint(3, 32000, (rows, T), device=device)
        lengths = torch.full((rows,), T)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        seconds = timed(lambda: encode_vertical(model, ids, lengths, V), device, repeats=2)
        peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 20 if device.type == "cuda" else None
        tokens_per_s = rows * T / seconds
        return dict(config=label, rows=rows, T=T, V=V, tokens_per_s=tokens_per_s,
                    mfu=2 * params * tokens_per_s / rate["bf16"], matmul_tflops=rate["bf16"] / 1e12,
                    activation_peak_mib=peak, parameters_non_embedding=params)

    lengths = [64, 256] if smoke else [4096, 16384, 65536]
    V = 32 if smoke else 4096
    for label in order:
        for T in lengths:
            if configs[label]["layers"] >= 64 and T > 16384:
                continue  # the 7B-class model: 16K tokens is the target row
            yield f"{label} vertical T={T}", partial(measure, label, 1, T, V)
        yield f"{label} horizontal T={lengths[1]}", partial(measure, label, 1, lengths[1], lengths[1])
        yield f"{label} vertical 8 x {lengths[0]}", partial(measure, label, 8, lengths[0], V)


# ----------------------------------------------------------------------------------------------- bundled model
def sample_texts(count: int) -> tuple[list[str], str]:
    """``count`` documents of a shared IR collection (cisi): from the shared data where it is there, else from the
    sample ``fetch_peers.py`` copied beside the peers (a GPU machine gets only the repository and what is carried);
    failing both, the paragraphs of this repository's docs. Returns the texts and where they came from."""
    data = Path(os.environ.get("RECEMB_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
    corpus = data / "ir" / "cisi" / "corpus.jsonl"
    if not corpus.is_file():
        corpus = PEERS / "cisi.jsonl"
    if corpus.is_file():
        texts = []
        with open(corpus, encoding="utf-8") as f:
            for line in f:
                doc = json.loads(line)
                texts.append(((doc.get("title") or "") + "\n" + doc["text"]).strip())
                if len(texts) == count:
                    break
        return texts, "cisi"
    docs = Path(__file__).resolve().parents[1] / "docs"
    paragraphs = [p.strip() for md in sorted(docs.glob("*.md")) for p in md.read_text().split("\n\n")
                  if len(p.strip()) > 200]
    return paragraphs[:count], "docs/*.md paragraphs"


def bundled_rows(device, smoke) -> Iterator[tuple[str, Callable[[], dict]]]:
    """The bundled model end to end on this device against its CPU vectors, and its speed against a BERT of
    all-MiniLM-L6-v2's shape (random weights: speed depends only on shape) on 256-token chunks."""
    count = 12 if smoke else 300
    cache: dict = {}

    def cpu_vectors():
        if "cpu" not in cache:
            from recemb.core import DEFAULT_MODEL, Embedder

            texts, source = sample_texts(count)
            cpu = Embedder.from_pretrained(DEFAULT_MODEL, device="cpu", dtype=torch.float32)
            cache["cpu"] = (texts, source, cpu.encode_documents(texts))
        return cache["cpu"]

    def agreement(dtype, ahead=False):
        import numpy as np

        from recemb.core import DEFAULT_MODEL, Embedder

        if ahead:  # the warm-up call below, its kernels compiled ahead
            Embedder.from_pretrained(DEFAULT_MODEL, device=device, dtype=dtype).encode_documents(
                sample_texts(count)[0][:2])
            return {}
        texts, source, ref = cpu_vectors()
        model = Embedder.from_pretrained(DEFAULT_MODEL, device=device, dtype=dtype)
        model.encode_documents(texts[:2])  # compile and autotune outside the timing
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        got = model.encode_documents(texts)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        tokens = sum(len(ids) for ids in model.tokenize(texts))
        cosine = np.sum(np.asarray(ref) * np.asarray(got), axis=1)
        return dict(documents=len(texts), source=source, lowest_cosine=float(cosine.min()),
                    mean_cosine=float(cosine.mean()), documents_per_s=len(texts) / seconds,
                    tokens_per_s=tokens / seconds)

    def minilm_shape(ahead=False):
        from transformers import BertConfig, BertModel

        if ahead:
            return {}  # no Triton kernel

        texts, source, _ = cpu_vectors()
        config = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                            max_position_embeddings=512, vocab_size=30522)
        model = BertModel(config).to(device=device, dtype=torch.float32 if smoke else torch.bfloat16).eval()
        words = sum(len(t.split()) for t in texts)
        chunks = max(1, round(words * 1.3 / 254))  # 256-token chunks ([CLS] and [SEP] included) of the same text
        ids = torch.randint(1000, 30000, (chunks, 256), device=device)

        def run():
            with torch.inference_mode():
                for start in range(0, chunks, 32):
                    model(input_ids=ids[start : start + 32])

        seconds = timed(run, device, repeats=3)
        return dict(documents=len(texts), source=source, chunks=chunks, documents_per_s=len(texts) / seconds,
                    tokens_per_s=chunks * 256 / seconds)

    yield "bundled model fp32 vs CPU", partial(agreement, torch.float32)
    yield "bundled model bf16 vs CPU", partial(agreement, torch.bfloat16)
    yield "MiniLM-shaped BERT, 256-token chunks", minilm_shape


# ----------------------------------------------------------------------------------------------- report
def table(rows: list[dict]) -> str:
    if not rows:
        return ""
    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in ("section", "traceback")]
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    return "\n".join(["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
                     + ["| " + " | ".join(fmt(r.get(k, "")) for k in keys) + " |" for r in rows])


def environment() -> dict[str, str]:
    """The versions the run's numbers depend on (a package that is not there is reported as such)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for package in ("torch", "triton", "transformers", "flash-linear-attention", "mlstm_kernels"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    if torch.cuda.is_available():
        found["cuda"] = str(torch.version.cuda)
    found["mamba_ssm peer"] = "installed" if importlib.util.find_spec("mamba_ssm") else (
        "source in benchmarks/.peers" if (PEERS / "mamba_ssm").is_dir() else "absent")
    return found


RUNS = {"kernels": kernel_rows, "bundled": bundled_rows, "ssd_timing": ssd_timing_rows, "scale": scale_rows,
        "encoder": encoder_rows}
assert list(RUNS) == list(SECTIONS)


# Sections whose rows take ``ahead=True`` (their Triton calls alone), compiled at once before the rows run; and those
# whose Triton calls need no GPU to compile (the others load models onto one).
AHEAD = ("kernels", "bundled", "ssd_timing", "scale")
COMPILE_WITHOUT_GPU = ("kernels", "ssd_timing")


def compile_ahead(rows, interpreter: bool, **options) -> dict:
    """Every row's Triton calls compiled at once on a pool of threads (``triton_ahead.compiling_ahead``), so that
    the rows, and their autotuners, find every config compiled. A row whose ahead call fails compiles at its own
    first launch instead (named in the result). Under the interpreter nothing compiles: the ahead calls just run."""
    failures = []

    def call_all():
        for name, fn in rows:
            try:
                fn(ahead=True)
            except Exception as e:  # that row compiles at its first launch instead
                failures.append(f"{name}: {type(e).__name__}: {e}"[:300])

    if interpreter:
        call_all()
        out = {"interpreter": "the rows' ahead calls ran; nothing is compiled under the interpreter"}
    else:
        from triton_ahead import compiling_ahead  # a Triton without its async compile mode fails this row alone

        with compiling_ahead(**options) as report:
            call_all()
        out = report.summary()
    if failures:
        out["rows_not_compiled_ahead"] = failures
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under TRITON_INTERPRET=1")
    parser.add_argument("--sections", default=",".join(RUNS), help="sections to run, comma-separated")
    parser.add_argument("--time-box", type=float,
                        help="seconds per section for every section (default: SECTIONS on a GPU, none with --smoke)")
    parser.add_argument("--compile-for", metavar="sm_XY",
                        help="no GPU needed: compile the Triton kernels of the kernels and ssd_timing sections for "
                             "this GPU (sm_90: H100, H200) as the run would, and report; runs no kernel")
    parser.add_argument("--compile-workers", type=int, help="threads compiling ahead (default: the CPU count)")
    parser.add_argument("--configs-per-kernel", type=int,
                        help="compile at most this many configs of each autotuned kernel ahead (a quicker check)")
    parser.add_argument("--no-ahead", action="store_true",
                        help="do not compile ahead: each kernel compiles at its first launch, config after config")
    parser.add_argument("--fail-row", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if set(sections) - set(RUNS):
        parser.error(f"--sections takes {', '.join(RUNS)}")
    target = None
    if args.compile_for:
        try:
            from triton_ahead import cuda_target

            target = cuda_target(args.compile_for)
        except ValueError as e:
            parser.error(str(e))
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            parser.error("--compile-for compiles: unset TRITON_INTERPRET")
        sections = [s for s in sections if s in COMPILE_WITHOUT_GPU]
    if args.smoke or target is not None:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        print("no CUDA device: run with --smoke (and TRITON_INTERPRET=1) to check the script on the CPU")
        return 2
    device_name = (torch.cuda.get_device_name() if device.type == "cuda" else
                   f"cpu, compiling for {args.compile_for}" if target is not None else "cpu (smoke)")
    report = {"device": device_name,
              **environment(), "smoke": args.smoke, "sections": {}}
    print(" · ".join(f"{k} {v}" for k, v in report.items() if k not in ("smoke", "sections")), flush=True)
    boxes = ({s: args.time_box for s in RUNS} if args.time_box is not None
             else None if args.smoke or target is not None else dict(SECTIONS))
    interpreter = device.type == "cpu" and target is None
    ahead_options = dict(workers=args.compile_workers, target=target, configs_per_kernel=args.configs_per_kernel)
    recorder = Recorder(args.out, boxes, fail_rows=set(args.fail_row))

    def write_report() -> None:  # after each section, and once more on the way out of a stopped run
        for section in dict.fromkeys(r["section"] for r in recorder.rows):
            report["sections"][section] = [r for r in recorder.rows if r["section"] == section]
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
        versions = " · ".join(f"{k} {v}" for k, v in report.items() if k not in ("device", "smoke", "sections"))
        (args.out / "gpu_check.md").write_text(
            f"# gpu_check on {report['device']}\n\n{versions}\n"
            + "".join(f"\n## {section}\n\n{table(rows)}\n" for section, rows in report["sections"].items()))

    try:
        for section in sections:
            recorder.start(section)
            started = time.perf_counter()
            try:
                rows = list(RUNS[section](device, args.smoke))
            except Exception as e:  # the section could not even list its rows (an import): one failed row
                rows = [(f"{section} set-up", lambda e=e: (_ for _ in ()).throw(e))]
            if section in AHEAD and not args.no_ahead:
                recorder.row("compile ahead", lambda rows=rows: compile_ahead(rows, interpreter, **ahead_options))
            for name, fn in rows if target is None else ():
                recorder.row(name, fn)
            done = [r for r in recorder.rows if r["section"] == section]
            print(f"\n## {section} ({time.perf_counter() - started:.0f} s)\n\n{table(done)}\n", flush=True)
            write_report()
    finally:
        recorder.close()
        write_report()
    failed = [r["row"] for r in recorder.rows if "error" in r]
    outside = [r["row"] for r in recorder.rows if r.get("within_tolerance") is False]
    print(f"{len(recorder.rows)} rows; {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}; "
          f"{len(outside)} outside the CPU tests' tolerances{': ' + ', '.join(outside) if outside else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
