"""max_memory: sizes parsed, V and the rows per forward planned from a budget (monotone, refusing what cannot fit
with the number it needs), the same embeddings under any budget, and the promise itself: the peak RSS that
encoding adds to a loaded model stays under the budget, for inputs of 1K to 64K tokens (each in a fresh process)."""

import dataclasses
import json
import re
import subprocess
import sys

import pytest
import torch

from recemb.core import ARCHITECTURES, Embedder, architecture
from recemb.core.architectures.mamba2 import Mamba2Config
from recemb.core.architectures.mamba2.memory import scan_chunk_size
from recemb.core.architectures.mamba2.mixer import TORCH_SCAN_CHUNK_SIZE
from recemb.core.architectures.rwkv7 import RWKV7Config, RWKV7Encoder
from recemb.core.architectures.xlstm import XLSTMConfig, XLSTMEncoder
from recemb.core.memory import (
    AUTO_MAX_CHUNK,
    MIN_CHUNK,
    format_bytes,
    parse_bytes,
    peak_activation_bytes,
    plan_chunks,
    weight_bytes,
)
from tests.utils import SAMPLE_TEXT, assert_close, transformers_model

TEXTS = [SAMPLE_TEXT * 6, "short", SAMPLE_TEXT, SAMPLE_TEXT[:90], SAMPLE_TEXT * 3]
# benchmarks/vertical_memory_speed.py's 130M-class shapes with fewer layers: per-layer activations are what a chunk
# holds, and the states (which grow with the layers) are in the budget all the same.
CONFIG_130M = dict(hidden_size=768, num_heads=24, head_dim=64, n_groups=1, state_size=128, expand=2, conv_kernel=4,
                   chunk_size=256)


# ---------------------------------------------------------------------------------------------------- sizes
@pytest.mark.parametrize("value, size", [
    (123, 123), ("2GiB", 2 * 2**30), ("512MiB", 512 * 2**20), ("1.5GB", 1_500_000_000), (" 64 kib ", 65536),
    ("1000", 1000), ("2 TB", 2 * 10**12), (".5MiB", 2**19), ("3B", 3),
])
def test_sizes_are_bytes_or_strings_with_units(value, size):
    assert parse_bytes(value) == size


@pytest.mark.parametrize("value, message", [
    ("2G", "unknown unit 'G' (write 2GiB for powers of 1024, 2GB for powers of 1000)"),
    ("3 parsecs", "unknown unit 'parsecs'"), ("lots", "is not a size"), ("-1MiB", "is not a size"), ("", "not a size"),
    (0, "must be at least 1 byte"), ("0.1B", "must be at least 1 byte"), (True, "expected a number of bytes"),
    (1.5, "expected a number of bytes"), (None, "expected a number of bytes"),
])
def test_bad_sizes_are_refused_clearly(value, message):
    with pytest.raises(ValueError, match=re.escape(f"max_memory={value!r}") + ".*" + re.escape(message)):
        parse_bytes(value)


def test_sizes_are_written_in_binary_units():
    assert [format_bytes(n) for n in (12, 2048, 3_355_443, 2 * 2**30)] == ["12 B", "2.0 KiB", "3.2 MiB", "2.0 GiB"]


# ---------------------------------------------------------------------------------------------------- the planner
def linear_peak(per_token: int = 1000, per_row: int = 50_000):
    """A peak shaped like the architectures': rows x (per token x V + the states)."""
    return lambda rows, V: rows * (per_token * V + per_row)


def test_the_plan_is_the_largest_V_that_fits():
    peak = linear_peak()
    for budget in range(150_000, 3_000_000, 37_000):
        plan = plan_chunks(budget, peak)
        assert plan.rows == 1 and plan.vertical_chunk_size % MIN_CHUNK == 0
        assert plan.peak_bytes == peak(1, plan.vertical_chunk_size) <= budget
        assert peak(1, plan.vertical_chunk_size + MIN_CHUNK) > budget


def test_more_budget_never_plans_less():
    peak = linear_peak()
    previous = None
    for budget in range(150_000, 40_000_000, 250_000):
        single = plan_chunks(budget, peak)
        batch = plan_chunks(budget, peak, rows=8, longest=5000, preferred=512)
        assert batch.peak_bytes <= budget
        if previous is not None:
            assert single.vertical_chunk_size >= previous[0].vertical_chunk_size
            assert batch.rows >= previous[1].rows
            if batch.rows == previous[1].rows:
                assert batch.vertical_chunk_size >= previous[1].vertical_chunk_size
        previous = single, batch
    assert previous[1].rows == 8  # a budget large enough runs the whole batch at once


def test_a_batch_keeps_the_rows_that_fit_at_the_batch_V():
    peak = linear_peak()
    budget = peak(3, 512) + 1000  # three rows at the V batches run without a budget, not four
    plan = plan_chunks(budget, peak, rows=8, longest=5000, preferred=512)
    assert plan.rows == 3 and plan.vertical_chunk_size >= 512
    # Not even one row reaches the batch V: one row, with the largest V that fits.
    small = plan_chunks(peak(1, 256), peak, rows=8, longest=5000, preferred=512)
    assert (small.rows, small.vertical_chunk_size) == (1, 256)


def test_V_stops_at_the_input_length():
    peak = linear_peak()
    assert plan_chunks(10**12, peak, longest=100).vertical_chunk_size == 128  # whole MIN_CHUNK chunks
    assert plan_chunks(10**12, peak, longest=1).vertical_chunk_size == MIN_CHUNK
    assert plan_chunks(10**12, peak).vertical_chunk_size == AUTO_MAX_CHUNK  # a stream of unknown length


def test_a_fixed_V_is_kept_and_the_batch_split_around_it():
    peak = linear_peak()
    plan = plan_chunks(peak(2, 1000), peak, rows=8, vertical_chunk_size=1000)
    assert (plan.vertical_chunk_size, plan.rows) == (1000, 2)
    with pytest.raises(ValueError, match=re.escape(f"below the {format_bytes(peak(1, 1000))} one chunk of "
                                                   "vertical_chunk_size=1000 tokens needs") + ".*'auto'"):
        plan_chunks(peak(1, 999), peak, vertical_chunk_size=1000)


def test_a_budget_below_one_chunk_is_refused_with_what_it_needs():
    peak = linear_peak()
    need = peak(1, MIN_CHUNK)
    assert plan_chunks(need, peak).vertical_chunk_size == MIN_CHUNK
    with pytest.raises(ValueError, match=re.escape(f"max_memory={format_bytes(need - 1)} is below the "
                                                   f"{format_bytes(need)} one chunk of 64 tokens needs")):
        plan_chunks(need - 1, peak)
    with pytest.raises(ValueError, match=re.escape("3.0 MiB of them the input's ids")):
        plan_chunks(need + 2**20, peak, fixed=3 * 2**20)


# ---------------------------------------------------------------------------------------------------- estimates
CONFIGS = {
    "mamba2": Mamba2Config(**CONFIG_130M, num_hidden_layers=4, vocab_size=1024),
    "xlstm": XLSTMConfig(hidden_size=256, num_hidden_layers=2, num_heads=4, vocab_size=300),
    "rwkv7": RWKV7Config(hidden_size=256, num_hidden_layers=2, head_dim=64, vocab_size=300),
}


@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_every_architecture_estimates_a_chunk_that_grows_with_V_rows_and_layers(model_type):
    assert architecture(model_type).chunk_memory is not None
    config = CONFIGS[model_type]
    estimate = lambda rows, V: peak_activation_bytes(config, torch.float32, rows, V)  # noqa: E731
    sizes = [estimate(1, V) for V in (64, 128, 512, 1024, 4096)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert estimate(3, 512) > 2 * estimate(1, 512)
    deeper = dataclasses.replace(config, num_hidden_layers=2 * config.num_hidden_layers)
    assert peak_activation_bytes(deeper, torch.float32, 1, 512) > estimate(1, 512)  # the states


def test_mamba2s_estimate_counts_its_states_and_its_scan_chunks():
    config = Mamba2Config(**CONFIG_130M, num_hidden_layers=24, vocab_size=1024)
    memory = architecture("mamba2").chunk_memory(config, torch.float32, 1, 1024, None, "torch")
    c = config
    assert memory.states == 2 * 4 * 24 * (c.conv_dim * c.conv_kernel + c.num_heads * c.head_dim * c.state_size)
    # The scan chunk length q is the one the mixer runs: the torch backend's default, the checkpoint's on Triton.
    assert [scan_chunk_size(config, backend, q) for backend, q in (("torch", None), ("triton", None), ("torch", 32))] \
        == [TORCH_SCAN_CHUNK_SIZE, 256, 32]
    q32 = architecture("mamba2").chunk_memory(config, torch.float32, 1, 1024, 32, "torch")
    assert q32.activations > memory.activations  # a shorter q: a smaller decay matrix, twice the chunk states
    # 24 layers' states alone are ~39 MiB: 32 MiB is refused, with the number.
    with pytest.raises(ValueError, match=r"below the 4\d\.\d MiB one chunk of 64 tokens needs"):
        plan_chunks(32 * 2**20, lambda r, V: peak_activation_bytes(config, torch.float32, r, V))


# ---------------------------------------------------------------------------------------------------- Embedder
def test_a_budget_picks_V_and_changes_no_embedding(tiny_folder):
    free = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch")
    budget = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch", max_memory="2MiB")
    plan = budget.chunk_plan()
    assert plan.vertical_chunk_size > MIN_CHUNK and plan.peak_bytes <= 2 * 2**20
    assert f"vertical_chunk_size='auto' (V={plan.vertical_chunk_size} under max_memory=2.0 MiB)" in repr(budget)
    assert_close("budget", free.encode(TEXTS), budget.encode(TEXTS), 1e-5)
    assert_close("per call", free.encode(TEXTS), budget.encode(TEXTS, vertical_chunk_size=64), 1e-5)
    assert_close("stream", free.encode(TEXTS[0]), budget.embed_stream([budget.tokenize([TEXTS[0]])[0]],
                                                                      normalize=True), 1e-5)
    assert budget.max_memory == 2 * 2**20 and weight_bytes(budget.model) > 0


def test_a_batch_under_a_budget_runs_as_many_rows_as_fit(tiny_folder, monkeypatch):
    import recemb.core.embedder as embedder_module

    emb = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch", max_memory="2MiB")
    ids = [torch.randint(3, 300, (n,), generator=torch.Generator().manual_seed(n)).tolist() + [1]
           for n in (900, 800, 700, 30, 600, 500)]
    plan = emb.chunk_plan(6, 901, total_tokens=sum(map(len, ids)))
    assert 1 < plan.rows < 6  # the budget splits this batch
    forwards = []
    encode = embedder_module.encode_vertical

    def counted(model, input_ids, lengths, V, **kwargs):
        forwards.append((input_ids.shape[0], V))
        return encode(model, input_ids, lengths, V, **kwargs)

    monkeypatch.setattr(embedder_module, "encode_vertical", counted)
    got = emb.embed_token_ids(ids, batch_size=6)
    assert forwards[0] == (plan.rows, plan.vertical_chunk_size) and sum(r for r, _ in forwards) == 6
    monkeypatch.undo()
    assert_close("split", Embedder.from_pretrained(tiny_folder, device="cpu").embed_token_ids(ids), got, 1e-5)


def test_budgets_that_cannot_work_are_refused(tiny_folder):
    with pytest.raises(ValueError, match=r"max_memory=1\.0 KiB is below the 1\.\d MiB one chunk of 64 tokens"):
        Embedder.from_pretrained(tiny_folder, device="cpu", max_memory="1KiB")
    with pytest.raises(ValueError, match="vertical_chunk_size='auto' picks V from a memory budget: pass max_memory"):
        Embedder.from_pretrained(tiny_folder, device="cpu", vertical_chunk_size="auto")
    with pytest.raises(ValueError, match="unknown unit"):
        Embedder.from_pretrained(tiny_folder, device="cpu", max_memory="2G")
    with pytest.raises(ValueError, match="vertical_chunk_size must be a positive int, 'auto' or None"):
        Embedder.from_pretrained(tiny_folder, device="cpu", vertical_chunk_size="big")
    plain = Embedder.from_pretrained(tiny_folder, device="cpu")
    with pytest.raises(ValueError, match="this Embedder has no max_memory"):
        plain.encode(TEXTS, vertical_chunk_size="auto")
    fixed = Embedder.from_pretrained(tiny_folder, device="cpu", max_memory="2MiB", vertical_chunk_size=128)
    assert fixed.chunk_plan().vertical_chunk_size == 128 and "128 (V=128 under" in repr(fixed)
    with pytest.raises(ValueError, match="vertical_chunk_size=100000 tokens needs"):
        fixed.encode(TEXTS, vertical_chunk_size=100_000)


@pytest.mark.parametrize("model_type", ["xlstm", "rwkv7"])
def test_other_architectures_under_a_budget(model_type):
    torch.manual_seed(0)
    model = {"xlstm": XLSTMEncoder, "rwkv7": RWKV7Encoder}[model_type](CONFIGS[model_type]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    ids = [torch.randint(3, 300, (n,)).tolist() for n in (700, 300, 500)]
    budget = Embedder(model, max_memory="24MiB", backend="torch")
    plan = budget.chunk_plan(3, 700, total_tokens=1500)
    assert plan.peak_bytes <= 24 * 2**20 and plan.vertical_chunk_size < 700  # the budget does cut the chunks
    assert_close(model_type, Embedder(model, backend="torch").embed_token_ids(ids), budget.embed_token_ids(ids),
                 1e-5)


def test_the_cli_takes_max_memory_next_to_the_vertical_chunk_size(tiny_folder):
    from recemb_integrations.cli import resources
    from recemb_integrations.cli.parser import build_parser

    args = build_parser().parse_args(["embed", "--model", str(tiny_folder), "--device", "cpu", "--max-memory",
                                      "1.5MiB", "--vertical-chunk-size", "auto"])
    assert (args.max_memory, args.vertical_chunk_size) == (3 * 2**19, "auto")
    emb = resources.load_embedder(args)
    assert emb.max_memory == 3 * 2**19 and emb.vertical_chunk_size == "auto"


def test_the_adapters_take_max_memory_in_their_model_kwargs(tiny_folder):
    from recemb.core import clear_shared
    from recemb.core.options import CALLER_OPTIONS

    assert "max_memory" in CALLER_OPTIONS
    found = 0
    if _importable("sentence_transformers"):
        from recemb_integrations.sentence_transformers import MODULE_MODEL_KWARGS

        assert "max_memory" in MODULE_MODEL_KWARGS
        found += 1
    if _importable("langchain_core"):
        from recemb_integrations.langchain import RecembEmbeddings

        lc = RecembEmbeddings(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "max_memory": "2MiB"})
        assert lc._embedder.max_memory == 2 * 2**20 and lc._embedder.chunk_plan() is not None
        found += 1
    if _importable("llama_index.core"):
        from recemb_integrations.llama_index import RecembEmbedding

        li = RecembEmbedding(model_name=str(tiny_folder), model_kwargs={"device": "cpu", "max_memory": 2 * 2**20})
        assert li.embedder.max_memory == 2 * 2**20
        found += 1
    clear_shared()
    if not found:
        pytest.skip("no adapter framework installed")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------- the promise
CHILD = """
import json, sys
import torch
from recemb.core import Embedder

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

folder, budget, lengths, batch = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(2)
emb = Embedder.from_pretrained(folder, device="cpu", backend="torch", max_memory=budget)
generator = torch.Generator().manual_seed(0)
seqs = [torch.randint(3, emb.config.vocab_size, (n,), generator=generator).tolist() for n in lengths]
emb.embed_token_ids([seqs[0][:64]])  # the weights faulted in, the first call's allocations made
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the high-water mark starts again from here
emb.embed_token_ids(seqs, batch_size=batch)
plan = emb.chunk_plan(min(batch, len(seqs)), max(lengths), total_tokens=sum(lengths))
print(json.dumps(dict(delta=status("VmHWM") - before, V=plan.vertical_chunk_size, rows=plan.rows,
                      estimate=plan.peak_bytes)))
"""


def measure(folder, budget: str, lengths: list[int], batch: int = 1) -> dict:
    """Peak RSS above the loaded, warmed-up model while ``lengths`` random sequences are embedded under ``budget``,
    in a fresh process (a process's high-water mark is its own)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(folder), budget, json.dumps(lengths), str(batch)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model_130m(tmp_path_factory):
    folder = tmp_path_factory.mktemp("budget") / "mamba2-130m-class"
    transformers_model("g1", **CONFIG_130M, num_hidden_layers=2, vocab_size=1024).save_pretrained(str(folder))
    return folder


def clear_refs_works() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not clear_refs_works(),
                    reason="peak RSS is read from /proc/self (VmHWM, reset through clear_refs)")
@pytest.mark.parametrize("model, budget", [("tiny", "4MiB"), ("130m", "48MiB")])
def test_the_peak_stays_under_the_budget_from_1k_to_64k_tokens(model, budget, tiny_folder, model_130m):
    folder = tiny_folder if model == "tiny" else model_130m
    limit = parse_bytes(budget)
    for T in (1024, 8192, 65536):
        got = measure(folder, budget, [T])
        assert got["estimate"] <= limit and got["delta"] < limit, (T, got)
        if model == "130m":  # the chunk is cut to the budget, and the budget is used, not idle
            assert MIN_CHUNK < got["V"] < 1024 and got["delta"] > limit / 4, (T, got)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not clear_refs_works(),
                    reason="peak RSS is read from /proc/self (VmHWM, reset through clear_refs)")
def test_a_split_batch_stays_under_the_budget(model_130m):
    got = measure(model_130m, "128MiB", [2048, 2000, 1900, 1500, 1200, 1000], batch=6)
    assert 1 < got["rows"] < 6 and got["delta"] < 128 * 2**20, got
