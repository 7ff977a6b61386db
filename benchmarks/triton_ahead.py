"""Compile Triton kernels before their first launch: every autotuning config at once, on a pool of threads.

The first launch of an autotuned kernel compiles its configs one after the other, then benchmarks them. For the
SSD scan's five stages that is about 40 compiles per input dtype, and fp32 tiles with full-precision dots are the
slowest (see docs/benchmarks.md, "GPU"). Inside ``compiling_ahead()`` a kernel launch compiles instead of running,
and nothing is launched:

- an autotuned kernel compiles every config, or only the config its autotuner already chose for these arguments;
- compiles run on ``workers`` threads, through Triton's own asynchronous compile mode (the compiler's passes and
  ptxas run outside the GIL);
- on exit every compile has finished, and the kernels are in Triton's in-memory and on-disk caches, where the real
  launches find them.

Code run inside must not read what a kernel writes: the outputs are never written.

With ``target`` (``cuda_target("sm_90")``: an H100 or H200) it compiles for that GPU on a machine without one: the
kernels that the code inside launches, with its arguments' specialisations, which the interpreter never compiles
(it runs bf16 dots in fp32, for one). It also reports each config's shared memory against that GPU's limit. The
process must launch no kernel afterwards: Triton's driver is replaced for the duration.

This patches Triton's ``JITFunction.run`` and ``Autotuner.run`` while it is active, so it is a benchmark tool, not
part of the package. Tested against Triton 3.6 and 3.9.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime._async_compile import AsyncCompileMode
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

__all__ = ["Compiled", "AheadReport", "compiling_ahead", "cuda_target", "SHARED_MEMORY_LIMIT"]

# Shared memory one block may use (bytes), by CUDA compute capability: what Triton's autotuner checks a config
# against on that GPU (a config over it fails with OutOfResources and is left out).
SHARED_MEMORY_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448, 100: 232448}


def cuda_target(name: str) -> GPUTarget:
    """``"sm_90"`` (or ``"90"``) as Triton's target for that CUDA architecture."""
    capability = name.lower().removeprefix("sm_").rstrip("a")
    if not capability.isdigit():
        raise ValueError(f"a CUDA architecture is written sm_XY (sm_90 for an H100 or H200), got {name!r}")
    return GPUTarget("cuda", int(capability), 32)


@dataclass(frozen=True)
class Compiled:
    """One compiled kernel: its name, the constexprs and launch options it was compiled with, its shared memory."""

    kernel: str
    config: dict
    shared_bytes: int


@dataclass
class AheadReport:
    """What ``compiling_ahead`` compiled (filled in when the block ends)."""

    workers: int
    target: str
    compiled: list[Compiled] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    shared_limit: int | None = None

    def over_shared_limit(self) -> list[Compiled]:
        """Configs the target GPU cannot launch (its autotuner leaves them out)."""
        if self.shared_limit is None:
            return []
        return [c for c in self.compiled if c.shared_bytes > self.shared_limit]

    def summary(self) -> dict:
        kernels = sorted({c.kernel for c in self.compiled})
        return dict(compiled=len(self.compiled), kernels=len(kernels), workers=self.workers, target=self.target,
                    compile_wall_s=round(self.seconds, 2),
                    max_shared_bytes=max((c.shared_bytes for c in self.compiled), default=0),
                    shared_limit=self.shared_limit,
                    over_shared_limit=[f"{c.kernel} {c.config}" for c in self.over_shared_limit()],
                    failed=self.failed)


class _TargetDriver:
    """Triton's driver as far as compiling needs it, for a GPU that is not there."""

    def __init__(self, target: GPUTarget):
        self.target = target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_benchmarker(self):
        raise RuntimeError("compiling for a GPU that is not there: nothing can be benchmarked")


def _autotune_key(tuner: Autotuner, args: tuple, kwargs: dict) -> tuple:
    """The key under which ``tuner`` caches its choice for these arguments (as ``Autotuner.run`` computes it)."""
    named = {**dict(zip(tuner.arg_names, args)), **kwargs}
    named = {k: v for k, v in named.items() if k in tuner.arg_names}
    key = [named[k] for k in tuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


@contextlib.contextmanager
def compiling_ahead(workers: int | None = None, target: GPUTarget | None = None,
                    configs_per_kernel: int | None = None) -> Iterator[AheadReport]:
    """Inside, Triton kernel launches compile and launch nothing (see the module's docstring).

    workers: compile threads (default: the CPU count). target: compile for this GPU instead of the current one
    (only where no kernel is launched afterwards). configs_per_kernel: at most this many configs of each autotuned
    kernel (a quicker check that every kernel compiles)."""
    if target is not None and torch.cuda.is_available():
        raise ValueError("target= is for a machine without a GPU: here, compile for the GPU that is present")
    workers = workers or os.cpu_count() or 1
    report = AheadReport(workers=workers, target="")
    launched: list[tuple[str, dict, object, object]] = []  # name, config, kernel or its future, the raw future
    original_run, original_tune = JITFunction.run, Autotuner.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        kernel = original_run(self, *args, grid=grid, warmup=True, **kwargs)
        config = {k: v for k, v in kwargs.items() if k.isupper() or k in ("num_warps", "num_stages")}
        launched.append((self.fn.__name__, config, kernel, getattr(kernel, "future", None)))
        return kernel

    def compile_every_config(self, *args, **kwargs):
        chosen = self.cache.get(_autotune_key(self, args, kwargs))
        if chosen is not None:
            configs = [chosen]
        else:
            self.nargs = dict(zip(self.arg_names, args))
            try:
                configs = self.prune_configs(kwargs)
            finally:
                self.nargs = None
        for config in configs[:configs_per_kernel]:
            self.fn.run(*args, **kwargs, **config.all_kwargs())

    started = time.perf_counter()
    try:
        if target is not None:
            driver.set_active(_TargetDriver(target))
        JITFunction.run, Autotuner.run = compile_only, compile_every_config
        current = driver.active.get_current_target()
        report.target = f"{current.backend} sm_{current.arch}" if current.backend == "cuda" else str(current)
        # A config that fails to compile is left to fail again at its real launch, in that row: the rest still
        # compile ahead.
        with ThreadPoolExecutor(workers) as pool, AsyncCompileMode(pool, ignore_errors=True):
            yield report
    finally:
        JITFunction.run, Autotuner.run = original_run, original_tune
        capability = getattr(target, "arch", None)
        if target is None:
            with contextlib.suppress(Exception):
                capability = driver.active.get_current_target().arch
        if target is not None:
            with contextlib.suppress(RuntimeError):  # no GPU here: the stand-in stays, and nothing can launch
                driver.reset_active()
        report.seconds = time.perf_counter() - started
        report.shared_limit = SHARED_MEMORY_LIMIT.get(capability) if isinstance(capability, int) else None
        seen = set()
        for name, config, kernel, raw in launched:
            if id(kernel) in seen:  # launched again with the same specialization: one compile
                continue
            seen.add(id(kernel))
            try:
                error = raw.exception() if raw is not None else None
                compiled = None if error else kernel.result() if hasattr(kernel, "result") else kernel
            except Exception as e:
                error = e
            if error is not None:
                report.failed.append(f"{name} {config}: {type(error).__name__}: {error}"[:600])
                continue
            if compiled is not None and id(compiled) not in seen:
                seen.add(id(compiled))
                report.compiled.append(Compiled(name, {k: str(v) for k, v in config.items()},
                                                int(compiled.metadata.shared)))
