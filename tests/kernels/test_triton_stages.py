"""Each Triton SSD stage against its pure-torch reference (``recemb.kernels.ssd.reference.<stage>_ref``, run
in fp64), under the interpreter on CPU."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from recemb.kernels.ssd.bmm import bmm_chunk  # noqa: E402
from recemb.kernels.ssd.chunk_cumsum import chunk_cumsum  # noqa: E402
from recemb.kernels.ssd.chunk_scan import chunk_scan  # noqa: E402
from recemb.kernels.ssd.chunk_state import chunk_state  # noqa: E402
from recemb.kernels.ssd.reference import (  # noqa: E402
    bmm_chunk_ref,
    chunk_cumsum_ref,
    chunk_scan_ref,
    chunk_state_ref,
    state_passing_ref,
)
from recemb.kernels.ssd.state_passing import state_passing  # noqa: E402

pytestmark = pytest.mark.usefixtures("nan_filled_empty")

FP32_TOL = 1e-5
TOLS = {torch.float32: FP32_TOL, torch.bfloat16: 1e-2, torch.float16: 2e-3}

# (b, l, h, p, g, n, chunk_size): a partial last chunk, a single token, an exact multiple, a chunk size that
# is not a power of two, and one group per head.
SHAPES = [
    pytest.param((2, 37, 4, 8, 2, 16, 16), id="B2-L37-H4-P8-G2-N16-Q16"),
    pytest.param((1, 1, 2, 8, 1, 16, 16), id="B1-L1-H2-P8-G1-N16-Q16"),
    pytest.param((1, 32, 2, 16, 1, 8, 16), id="B1-L32-H2-P16-G1-N8-Q16"),
    pytest.param((1, 29, 4, 8, 4, 16, 12), id="B1-L29-H4-P8-G4-N16-Q12"),
]
# Under the interpreter bf16 dot operands are upcast to fp32 (see _triton_utils.dot_config); fp16 keeps the
# low-precision operand casts of the GPU path.
DTYPES = [
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, id="bf16"),
    pytest.param(torch.float16, id="fp16"),
]


def _stage_inputs(make_ssd_inputs, shape):
    """fp64 intermediate tensors (dt_out, dA_cumsum, ...) from the reference chain, for feeding one stage."""
    b, l, h, p, g, n, q = shape
    inp = make_ssd_inputs(b, l, h, p, g, n)
    dA_cumsum, dt = chunk_cumsum_ref(inp.dt.double(), inp.A.double(), q, inp.dt_bias.double(), True)
    return inp, dt, dA_cumsum


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "dt_mode",
    [
        pytest.param(dict(), id="raw"),
        pytest.param(dict(use_bias=True, dt_softplus=True), id="bias-softplus"),
        pytest.param(dict(use_bias=True, dt_softplus=True, dt_limit=(0.05, 0.6)), id="bias-softplus-limit"),
    ],
)
def test_chunk_cumsum(make_ssd_inputs, assert_close, shape, dt_mode):
    b, l, h, p, g, n, q = shape
    inp = make_ssd_inputs(b, l, h, p, g, n)
    dt_raw = inp.dt.clone()
    dt_raw[:, ::3] = 0.0  # exact zeros (LongMamba-style) must stay zero without a limit
    dt_bias = inp.dt_bias if dt_mode.get("use_bias") else None
    kw = dict(
        dt_softplus=dt_mode.get("dt_softplus", False),
        dt_limit=dt_mode.get("dt_limit", (0.0, float("inf"))),
    )
    tri_dA_cs, tri_dt = chunk_cumsum(dt_raw, inp.A, q, dt_bias, **kw)
    ref_dA_cs, ref_dt = chunk_cumsum_ref(
        dt_raw.double(), inp.A.double(), q, dt_bias.double() if dt_bias is not None else None, **kw
    )
    assert tri_dt.dtype == tri_dA_cs.dtype == torch.float32
    assert_close("dt_out", ref_dt, tri_dt, FP32_TOL)
    assert_close("dA_cumsum", ref_dA_cs, tri_dA_cs, FP32_TOL)
    c = ref_dt.shape[2]
    assert torch.all(tri_dt.reshape(b, h, c * q)[:, :, l:] == 0), "padded steps must be exactly zero"
    if not dt_mode:
        assert torch.all(tri_dt.reshape(b, h, c * q)[:, :, :l:3] == 0), "zero steps must stay zero"


def test_chunk_cumsum_softplus_is_accurate_elementwise():
    """softplus keeps its relative precision for very negative inputs (where log(1 + exp(x)) rounds to 0)."""
    dt = torch.linspace(-60.0, 40.0, 96).view(1, 48, 2)  # (b, l, h)
    A = -torch.ones(2)
    tri_dt = chunk_cumsum(dt, A, 16, dt_softplus=True)[1]
    ref_dt = chunk_cumsum_ref(dt.double(), A.double(), 16, dt_softplus=True)[1]
    rel = ((tri_dt.double() - ref_dt).abs() / ref_dt).max().item()
    assert rel < 1e-6, f"softplus relative error {rel:.2e}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_chunk_state(make_ssd_inputs, assert_close, shape, dtype):
    inp, dt, dA_cumsum = _stage_inputs(make_ssd_inputs, shape)
    x, B = inp.x.to(dtype), inp.B.to(dtype)
    tri = chunk_state(B, x, dt.float(), dA_cumsum.float())
    ref = chunk_state_ref(B.double(), x.double(), dt, dA_cumsum)
    assert tri.dtype == torch.float32
    assert_close("states", ref, tri, TOLS[dtype])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("has_initial_states", [False, True], ids=["zero-init", "init"])
def test_state_passing(make_ssd_inputs, assert_close, shape, has_initial_states):
    inp, dt, dA_cumsum = _stage_inputs(make_ssd_inputs, shape)
    states = chunk_state_ref(inp.B.double(), inp.x.double(), dt, dA_cumsum)  # (b, c, h, p, n)
    init = inp.initial_states.double() if has_initial_states else None
    tri_out, tri_final = state_passing(
        states.float(), dA_cumsum[..., -1].float(), init.float() if init is not None else None
    )
    ref_out, ref_final = state_passing_ref(states, dA_cumsum[..., -1], init)
    assert tri_out.dtype == tri_final.dtype == torch.float32
    if not has_initial_states:
        assert torch.all(tri_out[:, 0] == 0)
    assert_close("states_entering", ref_out, tri_out, FP32_TOL)
    assert_close("final_states", ref_final, tri_final, FP32_TOL)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm_chunk(make_ssd_inputs, assert_close, shape, causal, dtype):
    b, l, h, p, g, n, q = shape
    inp = make_ssd_inputs(b, l, h, p, g, n)
    C, B = inp.C.to(dtype), inp.B.to(dtype)
    tri = bmm_chunk(C, B, q, causal=causal)
    ref = bmm_chunk_ref(C.double(), B.double(), q, causal=causal)
    assert tri.dtype == torch.float32
    assert_close("CB", ref, tri, FP32_TOL)  # low-precision inputs too: exact products, fp32 sums
    if causal:
        assert torch.all(tri.triu(1) == 0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "extras", [pytest.param((False, False), id="plain"), pytest.param((True, True), id="D-z")]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_chunk_scan(make_ssd_inputs, assert_close, shape, extras, dtype):
    has_d, has_z = extras
    inp, dt, dA_cumsum = _stage_inputs(make_ssd_inputs, shape)
    q = dt.shape[-1]
    x, B, C = inp.x.to(dtype), inp.B.to(dtype), inp.C.to(dtype)
    CB = bmm_chunk_ref(C.double(), B.double(), q, causal=True)
    states = chunk_state_ref(B.double(), x.double(), dt, dA_cumsum)
    states, _ = state_passing_ref(states, dA_cumsum[..., -1], inp.initial_states.double())
    D = inp.D if has_d else None
    z = inp.z.to(dtype) if has_z else None
    tri = chunk_scan(
        CB.float(), x, dt.float(), dA_cumsum.float(), C, states.float(), D=D, z=z, out_dtype=torch.float32
    )
    ref = chunk_scan_ref(
        CB, x.double(), dt, dA_cumsum, C.double(), states,
        D=D.double() if D is not None else None, z=z.double() if z is not None else None,
    )  # fmt: skip
    assert tri.dtype == torch.float32
    assert_close("y", ref, tri, TOLS[dtype])


def test_chunk_scan_default_out_dtype(make_ssd_inputs):
    inp, dt, dA_cumsum = _stage_inputs(make_ssd_inputs, (1, 5, 2, 8, 1, 16, 16))
    x, C = inp.x.half(), inp.C.half()
    CB = bmm_chunk_ref(C.float(), inp.B.float(), 16, causal=True)
    states = torch.zeros(1, 1, 2, 8, 16)
    y = chunk_scan(CB, x, dt.float(), dA_cumsum.float(), C, states)
    assert y.dtype == torch.float16 and y.shape == x.shape


_COMPILE_SCRIPT = r"""
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from recemb.kernels.conv1d import conv1d_triton as cv
from recemb.kernels.gated_norm import gated_norm_triton as gn
from recemb.kernels.ssd import bmm, chunk_cumsum as cc, chunk_scan as cs, chunk_state as st
from recemb.kernels.ssd import state_passing as sp

def compile_one(kernel, dtype, consts, ints_are_one=False):
    # ints_are_one: Triton turns an int argument equal to 1 into a constexpr (unit strides, nchunks = 1,
    # seqlen = 1, ...), so the kernels must also compile with every int folded to the constant 1.
    tuned = hasattr(kernel, "configs")
    fn = kernel.fn if tuned else kernel  # unwrap the autotuner
    config = kernel.configs[-1] if tuned else None  # the smallest tile: quickest to compile
    consts = dict(consts, **(config.kwargs if config else {}))
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = f"*{dtype}" if name.split("_")[0] in ("x", "B", "C", "a", "b", "y", "z") else "*fp32"
        elif name in ("dt_min", "dt_max", "eps"):
            sig[name] = "fp32"
        elif ints_are_one:
            sig[name], consts[name] = "constexpr", 1
        else:
            sig[name] = "i32"
    options = dict(num_warps=config.num_warps if config else 4, num_stages=config.num_stages if config else 3)
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)

for dtype, dot, ones in (
    ("fp32", (tl.float32, "ieee"), False),
    ("bf16", (tl.bfloat16, "tf32"), False),
    ("fp32", (tl.float32, "ieee"), True),
):
    dots = dict(DOT_DTYPE=dot[0], DOT_PRECISION=dot[1])
    compile_one(cc._chunk_cumsum_fwd_kernel, dtype,
                dict(HAS_DT_BIAS=True, DT_SOFTPLUS=True, HAS_DT_LIMIT=True, BLOCK_SIZE_CHUNK=256), ones)
    compile_one(st._chunk_state_fwd_kernel, dtype, dots, ones)
    compile_one(sp._state_passing_fwd_kernel, dtype, dict(HAS_INITIAL_STATES=True), ones)
    compile_one(bmm._bmm_chunk_fwd_kernel, dtype, dict(IS_CAUSAL=True, **dots), ones)
    compile_one(cs._chunk_scan_fwd_kernel, dtype,
                dict(HAS_D=True, HAS_Z=True, BLOCK_SIZE_DSTATE=64, **dots), ones)
    compile_one(cv._causal_conv1d_fwd_kernel, dtype, dict(
        WIDTH=4, HAS_BIAS=True, HAS_CONV_STATE=True, SILU_ACTIVATION=True, BLOCK_SIZE_WIDTH=4), ones)
    compile_one(gn._gated_rms_norm_fwd_kernel, dtype,
                dict(HAS_Z=True, BLOCK_SIZE_M=4, BLOCK_SIZE_N=1024), ones)
print("compiled")
"""


def test_kernels_compile_for_hopper():
    """Every kernel compiles to sm_90 machine code (no GPU needed: Triton's bundled ptxas), fp32 and bf16.

    The interpreter runs kernel bodies as Python, so it accepts code that the compiler rejects (e.g. a
    variable whose shape changes in a branch); this catches that on CPU-only CI.
    """
    from triton.backends import backends

    nvidia = backends.get("nvidia")
    if nvidia is None:
        pytest.skip("Triton was built without its CUDA backend")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, don't interpret
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("ptxas is not available")
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-4000:]
