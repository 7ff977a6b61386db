"""``dtype="auto"`` on the CPU: decided by measuring this machine, once, on the model's projection shapes.

Why measure: whether bf16 pays depends on the CPU more than on its feature flags. AMX makes torch's bf16 GEMM
several times faster than fp32, AVX-512 BF16 alone made it slower, and what a given CPU, torch build and thread
count do is only known by running them. Almost all of an encoder's FLOPs are its projections, so the probe times
those products (M tokens by the model's in/out shapes) in fp32, in bf16 as the mixed-precision path runs them
(fp32 activations cast to bf16, bf16 weights), and in int8 as ``quantize="int8"`` runs them (``Int8Linear`` where
the model quantises, fp32 elsewhere). It takes a fraction of a second and is cached per machine in the user cache
folder; a cache that cannot be read or written costs a probe per process, never a failed load, and a probe taken
while the machine was visibly busy is used but not cached (the next process measures again).

The choice (``choose_dtype``, a pure function of the timings): bf16 where it ran at least ``MIN_SPEEDUP`` times
faster than fp32, else fp32. "auto" never quantises: int8 is batch-independent now and within the tested cosine
bound (>= 0.995), but it changes what a model is (it cannot be saved, exports record it) and costs more accuracy
than bf16's tested >= 0.999, so it stays an explicit ``quantize="int8"``; its measured speed is reported beside
the choice (``recemb info``) for the caller to decide.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from recemb.core.int8 import Int8Linear

__all__ = ["AutoChoice", "CACHE_ENV", "MIN_SPEEDUP", "ProjectionShape", "auto_choice", "cache_file", "choose_dtype",
           "machine_key", "probe_projections", "read_probe", "shapes_key", "write_probe"]

# (in_features, out_features, quantised by quantize="int8")
ProjectionShape = tuple[int, int, bool]

CACHE_ENV = "RECEMB_CACHE_DIR"  # a folder; default $XDG_CACHE_HOME/recemb, else ~/.cache/recemb
CACHE_NAME = "dtype_probe.json"
PROBE_VERSION = 1
# bf16 must beat fp32 by this factor on the projections: the rest of a mixed-precision encoder (its fp32 last
# tokens, the casts between the projections and the fp32 scan) takes back part of the gain, and a tie is not worth
# bf16's rounding.
MIN_SPEEDUP = 1.2
# Tokens per probed product: as many as fit in PROBE_FLOPS per layer (both projections), within these bounds, so
# the whole probe stays well under a second on small and large models alike; a wider layer is timed on its first
# PROBE_MAX_OUT output columns (columns are independent, so the speed per FLOP is the same).
PROBE_TOKENS = (64, 1024)
PROBE_FLOPS = 1e9
PROBE_MAX_OUT = 4096
# Timed rounds after a warm-up (each round times every mode once, so a burst of load on a shared machine hits
# all modes alike; each mode's fastest round counts), stopping early once PROBE_SECONDS are spent.
PROBE_ROUNDS = (2, 6)
PROBE_SECONDS = 0.3
# A mode whose two fastest rounds differ by more than this factor was timed on a busy machine: not cached.
STEADY_SPREAD = 1.5
MODES = ("float32", "bfloat16", "int8")


@dataclass(frozen=True)
class AutoChoice:
    """What "auto" resolved to on the CPU and why: the dtype, the probe's seconds per mode (None for a mode that
    cannot run; no timings at all for an architecture without a mixed-precision path), when it was probed and
    where it is cached (None: not written, and why)."""

    dtype: torch.dtype
    seconds: dict[str, float | None] | None = None
    tokens: int | None = None
    probed: str | None = None
    cache: Path | None = None
    from_cache: bool = False
    not_cached: str = ""  # why a fresh probe was not written (cache is None)

    def speedup(self, mode: str) -> float | None:
        """How many times faster than fp32 ``mode`` ran the projections (None if it did not run)."""
        if not self.seconds or self.seconds.get(mode) is None:
            return None
        return self.seconds["float32"] / self.seconds[mode]

    def describe(self) -> str:
        """One line for ``recemb info``, e.g. "bfloat16 (bf16 2.7x fp32, int8 2.3x; probed 2026-12-03, cached at
        ...)"."""
        name = str(self.dtype).removeprefix("torch.")
        if self.seconds is None:
            return f"{name} (no mixed-precision CPU path)"
        ratios = []
        for mode, label in (("bfloat16", "bf16"), ("int8", "int8")):
            ratio = self.speedup(mode)
            ratios.append(f"{label} cannot run here" if ratio is None else f"{label} {ratio:.1f}x")
        ratios[0] += " fp32"
        where = f"cached at {self.cache}" if self.cache is not None else f"not cached: {self.not_cached}"
        return f"{name} ({', '.join(ratios)}; probed {self.probed}, {where})"

    def to_dict(self) -> dict:
        return {"dtype": str(self.dtype).removeprefix("torch."), "seconds": self.seconds, "tokens": self.tokens,
                "bf16_speedup": self.speedup("bfloat16"), "int8_speedup": self.speedup("int8"),
                "probed": self.probed, "cache": None if self.cache is None else str(self.cache)}


def choose_dtype(seconds: dict[str, float | None], supports_mixed: bool = True) -> torch.dtype:
    """The dtype "auto" loads, from the probe's seconds per mode: bf16 if the architecture has a mixed-precision
    path and bf16 ran at least ``MIN_SPEEDUP`` times faster than fp32, else fp32. int8 is never chosen (module
    docstring)."""
    fp32, bf16 = seconds.get("float32"), seconds.get("bfloat16")
    if supports_mixed and fp32 is not None and bf16 is not None and bf16 > 0 and fp32 / bf16 >= MIN_SPEEDUP:
        return torch.bfloat16
    return torch.float32


# ---------------------------------------------------------------------------------------------- the probe
def probe_tokens(shapes: Sequence[ProjectionShape]) -> int:
    """The power of two M within PROBE_TOKENS whose products over ``shapes`` fit in PROBE_FLOPS."""
    per_token = 2 * sum(k * min(n, PROBE_MAX_OUT) for k, n, _ in shapes)
    fits = 2 ** int(math.floor(math.log2(max(PROBE_FLOPS / max(per_token, 1), 1))))
    return max(PROBE_TOKENS[0], min(PROBE_TOKENS[1], fits))


def _products(shapes: Sequence[ProjectionShape], tokens: int) -> dict[str, list[Callable[[], object]] | None]:
    """Per mode, one call per shape (None: the mode cannot even be set up here). Constant operands: the speed of
    a product does not depend on its values, and filling a large layer's weights randomly would cost more than
    timing it."""
    calls: dict[str, list | None] = {mode: [] for mode in MODES}
    for k, n, quantised in shapes:
        x = torch.full((tokens, k), 0.5)
        linear = torch.nn.Linear(k, min(n, PROBE_MAX_OUT), bias=False)
        linear.weight.fill_(k ** -0.5)
        calls["float32"].append(functools.partial(F.linear, x, linear.weight))
        if calls["bfloat16"] is not None:
            try:
                calls["bfloat16"].append(functools.partial(_bf16_product, x, linear.weight.bfloat16()))
            except (RuntimeError, TypeError):
                calls["bfloat16"] = None
        int8 = functools.partial(Int8Linear.from_linear(linear), x) if quantised else calls["float32"][-1]
        calls["int8"].append(int8)
    return calls


def _bf16_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x.bfloat16(), weight)  # as the mixed-precision path runs it: fp32 activations cast to bf16


def probe_projections(shapes: Sequence[ProjectionShape], tokens: int | None = None) -> dict:
    """Seconds per mode for one pass of ``tokens`` rows through every shape (its fastest round):
    {"tokens": M, "seconds": {"float32": s, "bfloat16": s or None, "int8": s or None}, "steady": bool}. A mode
    that raises is None (cannot run here). ``steady`` is False when a mode's two fastest rounds differ by more
    than STEADY_SPREAD or the load average says other work was running: the machine was busy, and such a probe
    is used but not cached."""
    tokens = tokens or probe_tokens(shapes)
    rounds: dict[str, list[float] | None] = {}
    with torch.inference_mode():
        calls = _products(shapes, tokens)
        for mode in MODES:  # the warm-up: oneDNN builds its kernels on a shape's first call
            try:
                for call in calls[mode] or ():
                    call()
                rounds[mode] = [] if calls[mode] is not None else None
            except (RuntimeError, NotImplementedError):
                rounds[mode] = None
        if rounds["float32"] is None:
            raise RuntimeError("the fp32 probe product failed on this CPU")
        start = time.perf_counter()
        for done in range(PROBE_ROUNDS[1]):
            if done >= PROBE_ROUNDS[0] and time.perf_counter() - start > PROBE_SECONDS:
                break
            for mode in MODES:
                if rounds[mode] is not None:
                    began = time.perf_counter()
                    for call in calls[mode]:
                        call()
                    rounds[mode].append(time.perf_counter() - began)
    timed = [sorted(r) for r in rounds.values() if r is not None]
    return {"tokens": tokens, "seconds": {mode: None if r is None else min(r) for mode, r in rounds.items()},
            "steady": all(r[1] <= STEADY_SPREAD * r[0] for r in timed) and not _machine_busy()}


def _machine_busy() -> bool:
    """Whether other work held the CPUs while probing: a 1-minute load average above the CPU count (this process
    alone stays below it). Sustained load slows bf16 and int8 (oneDNN's threads wait on each other) far more than
    fp32, steadily, which the spread of the rounds does not show."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except (OSError, AttributeError):  # no load average on this platform
        return False


# ---------------------------------------------------------------------------------------------- the cache
def cache_file() -> Path:
    """Where the probe is cached: $RECEMB_CACHE_DIR, else $XDG_CACHE_HOME/recemb, else ~/.cache/recemb."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        folder = Path(base) / "recemb"
    return Path(folder) / CACHE_NAME


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":", 1)[0].strip() in ("model name", "Model", "Hardware"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key() -> dict:
    """What a cached probe is valid for: the CPU model, the architecture, torch's version and its thread count."""
    return {"cpu": _cpu_name(), "machine": platform.machine(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def shapes_key(shapes: Sequence[ProjectionShape]) -> str:
    return ",".join(f"{k}x{n}{':int8' if q else ''}" for k, n, q in shapes)


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("probes"), dict) else None


def _valid(result) -> bool:
    if not isinstance(result, dict) or not isinstance(result.get("seconds"), dict):
        return False
    seconds = result["seconds"]
    return isinstance(seconds.get("float32"), (int, float)) and seconds["float32"] > 0 and all(
        seconds.get(m) is None or (isinstance(seconds[m], (int, float)) and seconds[m] > 0) for m in MODES)


def read_probe(path: Path, key: dict, shapes: str) -> dict | None:
    """The cached probe of ``shapes`` on the machine ``key``; None if the file is missing, unreadable, corrupt, of
    another version or another machine, or has no probe of these shapes."""
    data = _read(path)
    if data is None or data.get("version") != PROBE_VERSION or data.get("machine") != key:
        return None
    result = data["probes"].get(shapes)
    return result if _valid(result) else None


def write_probe(path: Path, key: dict, shapes: str, result: dict) -> bool:
    """Add a probe to the cache file (kept probes: those of the same machine and version), atomically. False if
    it could not be written (read-only home, full disk...): the caller goes on without a cache."""
    data = _read(path)
    if data is None or data.get("version") != PROBE_VERSION or data.get("machine") != key:
        data = {"version": PROBE_VERSION, "machine": key, "probes": {}}
    data["probes"][shapes] = result
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


# Probes of this process, by (cache file, machine, shapes): one probe per process even without a writable cache.
_PROBED: dict[tuple[str, str, str], tuple[dict, Path | None, bool]] = {}


def auto_choice(shapes: Sequence[ProjectionShape], supports_mixed: bool = True, path: Path | None = None,
                probe: Callable[[Sequence[ProjectionShape]], dict] = probe_projections) -> AutoChoice:
    """What "auto" loads on this CPU for a model with these projection shapes: the cached probe of this machine
    if there is one, else a fresh probe (written to the cache when possible)."""
    if not supports_mixed:
        return AutoChoice(torch.float32)
    path = path or cache_file()
    key, skey = machine_key(), shapes_key(shapes)
    memo = (str(path), json.dumps(key, sort_keys=True), skey)
    if memo not in _PROBED:
        result = read_probe(path, key, skey)
        if result is not None:
            _PROBED[memo] = (result, path, True, "")
        else:
            result = dict(probe(shapes), probed=datetime.date.today().isoformat())
            if not result.pop("steady", True):
                _PROBED[memo] = (result, None, False, "the machine was busy while probing")
            elif write_probe(path, key, skey, result):
                _PROBED[memo] = (result, path, False, "")
            else:
                _PROBED[memo] = (result, None, False, f"{path} could not be written")
    result, cache, from_cache, why = _PROBED[memo]
    return AutoChoice(choose_dtype(result["seconds"], supports_mixed), dict(result["seconds"]),
                      result.get("tokens"), result.get("probed"), cache, from_cache, why)
