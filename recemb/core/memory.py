"""Memory budgets: ``max_memory="2GiB"`` turned into V (tokens per vertical chunk) and rows per forward.

Why: V is a memory dial, but people think in bytes ("use at most 2 GB"), not tokens. Each architecture estimates
the peak memory of one forward of rows x V tokens from its shapes (``Architecture.chunk_memory``, read off its
forward code); this module adds what every architecture shares (the input ids, the allocator's margin) and picks
the largest V, and the most rows of a batch per forward, whose estimate fits the budget.

The budget covers what encoding adds to a process that holds the model: the activations of one chunk and every
layer's recurrent states, and the ids of the batch being encoded. It does not cover the weights (reported
separately by ``weight_bytes``), the tokenizer's work, or the embeddings returned. The same estimate holds on the
CPU (peak RSS) and on CUDA (``torch.cuda.max_memory_allocated``; the caching allocator may reserve more).

Everything here is a pure function of shapes and numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from recemb.core.architectures.registry import architecture
from recemb.core.options import AUTO

__all__ = ["AUTO", "AUTO_MAX_CHUNK", "ChunkPlan", "MIN_CHUNK", "MemoryBudgetError", "format_bytes", "input_bytes",
           "parse_bytes", "peak_activation_bytes", "plan_chunks", "weight_bytes"]

# The smallest V a budget plans, and its step: the torch SSD scan's chunk length (and RWKV-7's, xLSTM's), so a
# planned chunk is whole scan chunks. Below it the per-chunk overhead dominates and the budget is refused.
MIN_CHUNK = 64
AUTO_MAX_CHUNK = 1 << 16  # the largest V planned when the input's length is not known (a stream)
# The margin over every estimate: the architectures' factors cover what the allocator keeps, this covers what no
# estimate models (indices, pooled rows, Python objects, noise between runs); docs/benchmarks.md, "Memory budgets".
RELATIVE_MARGIN = 0.10
FIXED_MARGIN = 1 << 20
ID_BYTES = 8  # an int64 token id

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_bytes(value: int | str, name: str = "max_memory") -> int:
    """A number of bytes from an int (bytes) or a string: "2GiB", "512MiB", "1.5GB", "1000000" (KB, MB, GB, TB
    are powers of 1000, KiB, MiB, GiB, TiB of 1024). A clear ``ValueError`` for anything else, naming ``name``
    (left out when empty: argparse names the flag itself)."""
    what = f"{name}={value!r}" if name else repr(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{what}: expected a number of bytes (an int) or a size such as '2GiB' or '512MB'")
    if isinstance(value, int):
        number, unit = value, ""
    else:
        match = _SIZE.match(value)
        if not match:
            raise ValueError(f"{what} is not a size: write a number with an optional unit, such as '2GiB', "
                             "'512MiB' or '1.5GB'")
        number, unit = float(match.group(1)), match.group(2).lower()
        if unit not in _UNITS:
            hint = (f" (write {match.group(1)}{unit.upper()}iB for powers of 1024, {match.group(1)}{unit.upper()}B "
                    "for powers of 1000)" if unit in ("k", "m", "g", "t") else "")
            raise ValueError(f"{what}: unknown unit {match.group(2)!r}{hint}; known: B, KB, MB, GB, TB, KiB, MiB, "
                             "GiB, TiB")
    size = int(number * _UNITS[unit])
    if size < 1:
        raise ValueError(f"{what}: must be at least 1 byte")
    return size


def format_bytes(size: float, round_up: bool = False) -> str:
    """Bytes in binary units with one decimal, for messages: "3.2 MiB". ``round_up``: the decimal rounded up, for a
    size that must be at least ``size`` (a smallest budget to give)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            value = math.ceil(size / scale * 10) / 10 if round_up else size / scale
            return f"{value:.1f} {unit}"
    return f"{math.ceil(size) if round_up else int(size)} B"


class MemoryBudgetError(ValueError):
    """A ``max_memory`` budget below what one chunk of the model needs: ``budget`` and ``needed`` (the smallest
    budget that runs) in bytes, and the fixed ``vertical_chunk_size`` it was measured at (None: MIN_CHUNK tokens,
    the smallest V a budget plans), and the bytes of ``needed`` that are the input's ids (``ids``)."""

    def __init__(self, message: str, budget: int, needed: int, vertical_chunk_size: int | None = None,
                 ids: int = 0):
        super().__init__(message)
        self.budget, self.needed, self.vertical_chunk_size, self.ids = budget, needed, vertical_chunk_size, ids


def input_bytes(rows: int, longest: int, total_tokens: int = 0) -> int:
    """The ids encoding holds besides the model's activations: the batch right-padded to its longest row and its
    copy sorted longest first (int64 each), plus a list copy of every input sequence (8 bytes per token)."""
    return 2 * ID_BYTES * rows * longest + 8 * total_tokens


def peak_activation_bytes(config, dtype: torch.dtype, rows: int, vertical_chunk_size: int,
                          chunk_size: int | None = None, backend: str = "torch") -> int:
    """The peak bytes one forward of ``rows`` rows x ``vertical_chunk_size`` tokens adds to a loaded model: the
    architecture's estimate (activations and states, ``Architecture.chunk_memory``) with the allocator's margin.
    ``config`` is the model's (its ``model_type`` names the architecture); ``backend`` the resolved one ("torch" or
    "triton"). Not the weights, nor the input ids (``input_bytes``)."""
    estimate = architecture(config.model_type).chunk_memory
    if estimate is None:
        raise ValueError(f"max_memory is not available for {config.model_type!r} models: its memory is not "
                         "modelled; set vertical_chunk_size instead")
    memory = estimate(config, dtype, rows, vertical_chunk_size, chunk_size, backend)
    return int(math.ceil(memory.total * (1 + RELATIVE_MARGIN))) + FIXED_MARGIN


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of a model's parameters and buffers (outside any budget: loaded once, shared by its callers)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass(frozen=True)
class ChunkPlan:
    """How a batch is encoded under a budget: V tokens per vertical chunk, ``rows`` rows per forward (a larger
    batch is split), and the estimated peak of one forward (bytes)."""

    vertical_chunk_size: int
    rows: int
    peak_bytes: int


def plan_chunks(budget: int, peak: Callable[[int, int], int], rows: int = 1, longest: int | None = None,
                preferred: int | None = None, vertical_chunk_size: int | None = None, fixed: int = 0) -> ChunkPlan:
    """The plan for ``rows`` rows of at most ``longest`` tokens whose estimated ``peak(rows, V) + fixed`` fits
    ``budget`` (``fixed``: what the call holds whatever the plan, e.g. the input's ids).

    V: the largest multiple of MIN_CHUNK that fits, up to the input's length (``longest`` rounded up; AUTO_MAX_CHUNK
    when unknown); a fixed ``vertical_chunk_size`` is kept as given. Rows: all of them when they fit at V =
    min(``preferred``, the input's length) (the V a batch would run without a budget); otherwise the most that do,
    down to one row with whatever V fits. ``peak`` must grow with both arguments. A budget that one row of one
    MIN_CHUNK chunk (or of the fixed V) exceeds is refused, with the number it needs.
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    cap = AUTO_MAX_CHUNK if longest is None else max(MIN_CHUNK, _round_up(longest, MIN_CHUNK))
    smallest = MIN_CHUNK if vertical_chunk_size is None else vertical_chunk_size
    need = peak(1, smallest) + fixed
    if need > budget:
        chunk = (f"{MIN_CHUNK} tokens" if vertical_chunk_size is None else
                 f"vertical_chunk_size={vertical_chunk_size} tokens")
        ids = f", {format_bytes(fixed)} of them the input's ids" if fixed >= FIXED_MARGIN else ""
        advice = "" if vertical_chunk_size is None else "; set vertical_chunk_size='auto' to pick V from the budget"
        least = format_bytes(need, round_up=True).replace(" ", "")
        raise MemoryBudgetError(f"max_memory={format_bytes(budget)} is below the {format_bytes(need)} one chunk of "
                                f"{chunk} needs for this model (its layers' states included{ids}): the smallest "
                                f"budget is max_memory='{least}'{advice}", budget, need, vertical_chunk_size,
                                fixed)
    if vertical_chunk_size is not None:
        fit = _largest(lambda r: peak(r, vertical_chunk_size) + fixed <= budget, 1, rows)
        return ChunkPlan(vertical_chunk_size, fit, peak(fit, vertical_chunk_size) + fixed)
    target = min(preferred or cap, cap)

    def largest_v(r: int) -> int:  # the largest fitting V for r rows, 0 when none
        steps = _largest(lambda s: peak(r, s * MIN_CHUNK) + fixed <= budget, 0, cap // MIN_CHUNK)
        return steps * MIN_CHUNK

    fit = _largest(lambda r: largest_v(r) >= target, 1, rows) if largest_v(1) >= target else 1
    V = largest_v(fit)
    return ChunkPlan(V, fit, peak(fit, V) + fixed)


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high] with fits(n), for a monotone ``fits`` that holds at ``low`` (or ``low`` when
    it holds nowhere above)."""
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
