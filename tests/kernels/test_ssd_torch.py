"""The torch SSD backend against the token-by-token loop (fp64), and the references against each other."""

import math

import pytest
import torch

from recemb.kernels import prepare_dt, ssd_chunk_scan, ssd_chunked_ref, ssd_recurrent_ref
from tests.utils import assert_close, rel_err


def random_inputs(b=2, l=37, h=4, p=8, g=2, n=16, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    return dict(
        x=r(b, l, h, p), dt=r(b, l, h), A=-torch.rand(h, generator=gen, dtype=dtype) * 2 - 0.1,
        B=r(b, l, g, n), C=r(b, l, g, n), D=r(h), z=r(b, l, h, p), dt_bias=r(h),
        initial_states=r(b, h, p, n),
    )


@pytest.mark.parametrize("chunk_size", [1, 4, 16, 64], ids=lambda q: f"Q{q}")
def test_chunked_ref_equals_recurrent_ref(chunk_size):
    t = random_inputs()
    dt = prepare_dt(t["dt"], t["dt_bias"], dt_softplus=True)
    y_ref, s_ref = ssd_recurrent_ref(t["x"], dt, t["A"], t["B"], t["C"], D=t["D"],
                                       initial_states=t["initial_states"])
    y, s = ssd_chunked_ref(t["x"], dt, t["A"], t["B"], t["C"], chunk_size, D=t["D"],
                             initial_states=t["initial_states"])
    assert_close("y", y_ref, y, 1e-12)
    assert_close("final_states", s_ref, s, 1e-12)


CASES = [
    pytest.param(dict(b=1, l=1, h=2, p=4, g=1, n=8), 8, id="B1-L1-H2-G1-Q8"),
    pytest.param(dict(b=2, l=37, h=4, p=8, g=2, n=16), 8, id="B2-L37-H4-G2-Q8"),
    pytest.param(dict(b=2, l=64, h=6, p=8, g=3, n=8), 16, id="B2-L64-H6-G3-Q16"),
    pytest.param(dict(b=3, l=50, h=4, p=16, g=4, n=32), 64, id="B3-L50-H4-G4-Q64"),
    pytest.param(dict(b=1, l=129, h=2, p=8, g=1, n=16), 32, id="B1-L129-H2-G1-Q32"),
]


@pytest.mark.parametrize("shape,chunk_size", CASES)
@pytest.mark.parametrize("with_init", [False, True], ids=["no-init", "init"])
def test_torch_scan_fp64_matches_token_loop(shape, chunk_size, with_init):
    t = random_inputs(**shape)
    init = t["initial_states"] if with_init else None
    kwargs = dict(D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=init)
    y_ref, s_ref = ssd_recurrent_ref(t["x"], t["dt"], t["A"], t["B"], t["C"], **kwargs)
    y, s = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size, backend="torch", **kwargs)
    assert y.dtype == torch.float64 and s.dtype == torch.float64
    assert_close("y", y_ref, y, 1e-10)
    assert_close("final_states", s_ref, s, 1e-10)


@pytest.mark.parametrize("shape,chunk_size", CASES[1:3])
def test_torch_scan_fp32_within_1e5_of_fp64_loop(shape, chunk_size):
    t = random_inputs(**shape)
    t32 = {k: v.float() for k, v in t.items()}
    kwargs = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=t["initial_states"])
    y_ref, s_ref = ssd_recurrent_ref(t["x"], t["dt"], t["A"], t["B"], t["C"], **kwargs)
    kwargs32 = {k: (v.float() if torch.is_tensor(v) else v) for k, v in kwargs.items()}
    y, s = ssd_chunk_scan(t32["x"], t32["dt"], t32["A"], t32["B"], t32["C"], chunk_size, backend="torch", **kwargs32)
    assert y.dtype == torch.float32 and s.dtype == torch.float32
    assert_close("y", y_ref, y, 1e-5)
    assert_close("final_states", s_ref, s, 1e-5)


def test_dt_limit_is_applied_after_softplus():
    t = random_inputs(l=20)
    limit = (0.05, 0.3)
    kwargs = dict(dt_bias=t["dt_bias"], dt_softplus=True, dt_limit=limit)
    y_ref, s_ref = ssd_recurrent_ref(t["x"], t["dt"], t["A"], t["B"], t["C"], **kwargs)
    y, s = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 8, backend="torch", **kwargs)
    assert_close("y", y_ref, y, 1e-10)
    y_nolimit = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 8, backend="torch", dt_bias=t["dt_bias"],
                               dt_softplus=True, return_final_states=False)
    assert (y_nolimit - y).abs().max() > 1e-3  # the clamp is active on these inputs


@pytest.mark.parametrize("split", [1, 7, 8, 30], ids=lambda s: f"split{s}")
def test_carried_state_equals_one_pass(split):
    """Scanning [0, split) then [split, l) with the carried state equals one scan: the vertical-chunk carry."""
    t = random_inputs(l=37)
    kw = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True)
    y, s = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 8, backend="torch", **kw)
    parts = [slice(0, split), slice(split, None)]
    state, ys = None, []
    for sl in parts:
        yi, state = ssd_chunk_scan(t["x"][:, sl], t["dt"][:, sl], t["A"], t["B"][:, sl], t["C"][:, sl], 8,
                                   backend="torch", initial_states=state, **kw)
        ys.append(yi)
    assert_close("y", y, torch.cat(ys, dim=1), 1e-12)
    assert_close("final_states", s, state, 1e-12)


def test_out_dtype_and_return_final_states():
    t = {k: v.float() for k, v in random_inputs(l=9).items()}
    y = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 4, backend="torch", return_final_states=False,
                       out_dtype=torch.bfloat16)
    assert torch.is_tensor(y) and y.dtype == torch.bfloat16 and y.shape == t["x"].shape


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda t: t.update(x=t["x"][0]), "x must be"),
        (lambda t: t.update(A=t["A"][:-1]), "A must have shape"),
        (lambda t: t.update(B=t["B"][:, :, :1].expand(-1, -1, 3, -1)), "must divide nheads"),
        (lambda t: t.update(dt=t["dt"][:, :-1]), "dt must have shape"),
    ],
    ids=["x-3d", "A-short", "groups", "dt-short"],
)
def test_shape_errors_are_clear(change, message):
    t = random_inputs(l=9)
    change(t)
    with pytest.raises(ValueError, match=message):
        ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 4, backend="torch")


def test_unknown_backend_is_rejected():
    t = random_inputs(l=4)
    with pytest.raises(ValueError, match="backend must be one of"):
        ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 4, backend="cuda")


@pytest.mark.parametrize("with_init", [False, True], ids=["no-init", "init"])
def test_autograd_path_equals_inference_path(with_init):
    """The scan writes states in place when nothing needs a gradient; with gradients it keeps them apart.
    Both give the token loop's answer, and the gradient path still back-propagates."""
    t = random_inputs(l=50)
    init = t["initial_states"] if with_init else None
    kwargs = dict(D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=init)
    y_ref, s_ref = ssd_recurrent_ref(t["x"], t["dt"], t["A"], t["B"], t["C"], **kwargs)
    x = t["x"].clone().requires_grad_()
    y_grad, s_grad = ssd_chunk_scan(x, t["dt"], t["A"], t["B"], t["C"], 8, backend="torch", **kwargs)
    with torch.no_grad():
        y_inf, s_inf = ssd_chunk_scan(x, t["dt"], t["A"], t["B"], t["C"], 8, backend="torch", **kwargs)
    for name, ref, got in (("y grad", y_ref, y_grad), ("y inference", y_ref, y_inf),
                           ("state grad", s_ref, s_grad), ("state inference", s_ref, s_inf)):
        assert_close(name, ref, got.detach(), 1e-10)
    (y_grad.sum() + s_grad.sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_workspace_calls_equal_fresh_calls_and_keep_their_states():
    """One workspace over calls of changing shapes (as vertical chunks and finished rows make them): every y equals
    a call without workspace to the bit, and earlier final states are never overwritten by later calls."""
    from recemb.kernels.workspace import Workspace

    ws = Workspace()
    kept = []
    for i, (shape, q) in enumerate([(dict(b=2, l=50), 8), (dict(b=2, l=50), 8), (dict(b=2, l=37), 8),
                                    (dict(b=1, l=129, g=1), 32), (dict(b=3, l=64, h=6, g=3), 16),
                                    (dict(b=3, l=64, h=6, g=3), 16), (dict(b=2, l=50), 8)]):
        t = {k: v.float() for k, v in random_inputs(seed=i, **shape).items()}
        kwargs = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True,
                      initial_states=t["initial_states"] if i % 2 else None)
        with torch.no_grad():
            y_fresh, s_fresh = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], q, backend="torch", **kwargs)
            y_ws, s_ws = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], q, backend="torch",
                                        workspace=ws, **kwargs)
        assert torch.equal(y_fresh, y_ws) and torch.equal(s_fresh, s_ws)
        kept.append((s_ws, s_fresh.clone()))
    for s_ws, s_expected in kept:
        assert torch.equal(s_ws, s_expected)


def test_decays_below_the_cutoff_are_exact_zeros():
    from recemb.kernels.ssd.combined import _EXP_FLOOR, _decay_exp_

    for dtype, (floor, cutoff) in _EXP_FLOOR.items():
        t = torch.cat([torch.linspace(-1000.0, 0.0, 5001, dtype=dtype), torch.tensor([float("-inf")], dtype=dtype)])
        got = _decay_exp_(t.clone())
        exact = torch.exp(t)
        kept = exact > cutoff
        assert torch.equal(got[kept], exact[kept])  # above the cutoff: exp itself
        assert (got[~kept] == 0).all()  # at or below: exactly zero, never a tiny normal or a denormal
        assert math.exp(floor) <= cutoff  # the clamp floor itself lands on zero
    big = torch.tensor([0.0, 50.0, 1e4], dtype=torch.float32)
    assert torch.isfinite(_decay_exp_(big, upper=80.0)).all()


def test_fast_forgetting_heads_lose_nothing_to_the_cutoff():
    """Large |A|·dt: most intra-chunk decays and every chunk-to-chunk decay fall below the cutoff. The fp32
    inference path (which cuts them) equals the uncut autograd path up to rounding and is exactly as close to the
    fp64 token loop (that distance is fp32's cumsum of exponents near -1000, the same on both paths); in fp64 the
    inference path matches the loop at full precision."""
    t = random_inputs(b=2, l=96, h=4, p=8, g=2, n=16, seed=3)
    t["A"] = -torch.tensor([1.0, 30.0, 120.0, 400.0], dtype=torch.float64)
    t["dt"] = t["dt"].abs() + 1.0  # softplus(dt + bias) around 1-3: down to e^-1200 per token
    kwargs = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True, initial_states=t["initial_states"])
    y_ref, s_ref = ssd_recurrent_ref(t["x"], t["dt"], t["A"], t["B"], t["C"], **kwargs)
    with torch.no_grad():
        y64, s64 = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 16, backend="torch", **kwargs)
    assert_close("fp64 y", y_ref, y64, 1e-10)
    assert_close("fp64 final_states", s_ref, s64, 1e-10)

    t32 = {k: v.float() for k, v in t.items()}
    kw32 = {k: (v.float() if torch.is_tensor(v) else v) for k, v in kwargs.items()}
    with torch.no_grad():
        y_cut, s_cut = ssd_chunk_scan(t32["x"], t32["dt"], t32["A"], t32["B"], t32["C"], 16, backend="torch", **kw32)
    x = t32["x"].clone().requires_grad_()
    y_uncut, s_uncut = ssd_chunk_scan(x, t32["dt"], t32["A"], t32["B"], t32["C"], 16, backend="torch", **kw32)
    y_uncut, s_uncut = y_uncut.detach(), s_uncut.detach()
    assert_close("y against the uncut path", y_uncut, y_cut, 1e-6)
    assert_close("states against the uncut path", s_uncut, s_cut, 1e-6)
    assert rel_err(y_ref, y_cut) <= rel_err(y_ref, y_uncut) * 1.01 + 1e-7
    assert rel_err(s_ref, s_cut) <= rel_err(s_ref, s_uncut) * 1.01 + 1e-7


@pytest.mark.parametrize("own,padded_to", [(1, 16), (5, 16), (5, 64), (20, 40), (33, 64), (70, 100)],
                         ids=lambda v: str(v))
def test_a_row_gives_the_same_bits_alone_and_in_a_padded_batch(own, padded_to):
    """A text's last vertical chunk runs alone at its own length, or in a batch right-padded to the longest row
    (with rows after it): its outputs and final state must be the same bits either way (fp32 inference). Zero
    steps on the padding keep the state; the chunk length and the vectorised loops must not move with it."""
    t = {k: v.float() for k, v in random_inputs(b=3, l=padded_to, h=12, p=16, g=1, n=16, seed=5).items()}
    kwargs = dict(D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True)
    row = 1
    t["dt"][row, own:] = -1e4  # steps of exactly 0 after the row's end: its state stays as it was
    with torch.no_grad():
        alone, state_alone = ssd_chunk_scan(
            *(t[k][row:row + 1, :own] for k in ("x", "dt")), t["A"], *(t[k][row:row + 1, :own] for k in ("B", "C")),
            64, backend="torch", initial_states=t["initial_states"][row:row + 1], **kwargs)
        batch, state_batch = ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 64, backend="torch",
                                            initial_states=t["initial_states"], **kwargs)
    assert torch.equal(alone[0], batch[row, :own]), (alone[0] - batch[row, :own]).abs().max()
    assert torch.equal(state_alone[0], state_batch[row]), (state_alone[0] - state_batch[row]).abs().max()


def test_softplus_steps_do_not_depend_on_their_place_in_the_tensor():
    """The same raw step gives the same effective step at any offset of a tensor of any length (fp32)."""
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(37, generator=gen) * 3
    alone = prepare_dt(values, dt_softplus=True)
    for pad in (1, 3, 16, 29, 100):
        padded = torch.cat([torch.randn(pad, generator=gen), values])
        assert torch.equal(prepare_dt(padded, dt_softplus=True)[pad:], alone), pad
