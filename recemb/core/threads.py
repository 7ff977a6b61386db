"""How many intra-op threads a CPU call gets: what the work can use, on the cores that are free right now.

Why: torch's OpenMP workers wait for each other at the end of every op, spinning. When another process takes a
core away, two workers on two cores spend most of their time waiting for the one that lost its core, and short
inputs (many small ops) lose most: the bundled model ran 2-5x slower with torch's default threads than with one
beside a CPU-bound process (docs/benchmarks.md, "Threads under load"). So before each chunk the vertical engine
asks ``ThreadPolicy.threads_for(tokens)``:

- the cores this process may use: its CPU affinity, capped by a cgroup CPU quota (containers);
- minus the cores other processes kept busy lately, measured from the kernel's CPU counters of those same CPUs
  (``/proc/stat``) less this process's own CPU time, over windows of ``SAMPLE_SECONDS``;
- no more threads than the work has ``MIN_TOKENS_PER_THREAD`` tokens for each, nor than torch had when recemb
  was imported (its default, the physical cores, or a count the user set before).

User settings win, in this order: an explicit ``threads`` option, ``RECEMB_NUM_THREADS``, ``OMP_NUM_THREADS`` or
``MKL_NUM_THREADS`` in the environment (torch's threads are then left as they are), and ``torch.set_num_threads``
called after recemb was imported (a count that differs from the one seen then). A ``threads`` option or
``RECEMB_NUM_THREADS`` above the cores this process may use is capped at them, with a ``ThreadsCappedWarning``:
more workers than cores only wait for each other. ``intra_op_threads`` sets the chosen count for a call's chunks and
restores the caller's when the call ends. GPU work is never touched.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["MIN_TOKENS_PER_THREAD", "SAMPLE_SECONDS", "THREADS_ENV", "USER_THREAD_ENVS", "CpuSample",
    "IntraOpThreads", "ThreadPolicy", "ThreadsCappedWarning", "available_cores", "busy_seconds", "cap_threads",
    "cgroup_quota_cores", "check_threads", "choose_threads", "intra_op_threads", "others_busy_cores",
    "read_cpu_sample", "thread_policy"]

THREADS_ENV = "RECEMB_NUM_THREADS"
USER_THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Below this many tokens per thread in one chunk, a second thread costs more in waiting than it saves (measured
# on the bundled model, docs/benchmarks.md "Threads under load").
MIN_TOKENS_PER_THREAD = 16
SAMPLE_SECONDS = 0.25  # the shortest window the busy cores are measured over; shorter ones reuse the last


def check_threads(threads) -> int | str | None:
    """``threads`` checked: None or "auto" (the policy), or a positive int (fixed)."""
    if threads is None or threads == "auto":
        return threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be 'auto', None or a positive int, got {threads!r}")
    return threads


class ThreadsCappedWarning(UserWarning):
    """A thread count above the cores this process may use, capped at them: ``asked``, ``cores`` and ``source``
    (what set it: "threads" or the environment variable's name)."""

    def __init__(self, asked: int, cores: int, source: str = "threads"):
        super().__init__(f"{source}={asked} is more than the {cores} cores this process may use (its CPU affinity, "
                         f"capped by a cgroup CPU quota); using {cores} threads")
        self.asked, self.cores, self.source = asked, cores, source


def cap_threads(threads, stacklevel: int = 2) -> int | str | None:
    """``threads`` checked (``check_threads``), an int above the usable cores (``available_cores``, as the policy
    read them) capped at them with a ``ThreadsCappedWarning`` (``stacklevel`` as ``warnings.warn``'s, from the
    caller of this function)."""
    threads = check_threads(threads)
    cores = thread_policy().cores
    if isinstance(threads, int) and threads > cores:
        warnings.warn(ThreadsCappedWarning(threads, cores), stacklevel=stacklevel + 1)
        return cores
    return threads


# ---------------------------------------------------------------------------------------------- pure decisions
def choose_threads(work_tokens: int, cores: int, others_busy: float, cap: int | None = None,
                   min_tokens_per_thread: int = MIN_TOKENS_PER_THREAD) -> int:
    """Threads for ``work_tokens`` tokens of one chunk on ``cores`` usable cores of which other processes keep
    ``others_busy`` busy: the free cores (rounded to the nearest), no more than the work can use nor ``cap``, at
    least one."""
    free = int(math.floor(cores - max(0.0, others_busy) + 0.5))
    by_work = max(1, work_tokens // max(1, min_tokens_per_thread))
    return max(1, min(cores, free, by_work, cap if cap is not None else cores))


def cgroup_quota_cores(cpu_max: str | None = None, cfs_quota_us: str | None = None,
                       cfs_period_us: str | None = None) -> float | None:
    """Cores a cgroup CPU quota allows, from cgroup v2's ``cpu.max`` ("max 100000" or "200000 100000") or v1's
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` ("-1" when unlimited); None when there is no quota."""
    try:
        if cpu_max is not None:
            quota, _, period = cpu_max.strip().partition(" ")
            if quota != "max" and period:
                return int(quota) / int(period)
        if cfs_quota_us is not None and cfs_period_us is not None:
            quota_us, period_us = int(cfs_quota_us), int(cfs_period_us)
            if quota_us > 0 and period_us > 0:
                return quota_us / period_us
    except ValueError:
        return None
    return None


@dataclass(frozen=True)
class CpuSample:
    """One reading of the counters: wall time, busy seconds of this process's CPUs (every process), and this
    process's own CPU seconds."""
    wall: float
    busy: float
    own: float


def others_busy_cores(before: CpuSample, after: CpuSample) -> float | None:
    """Cores that other processes kept busy between two samples (None when the window is empty)."""
    wall = after.wall - before.wall
    if wall <= 0:
        return None
    return max(0.0, ((after.busy - before.busy) - (after.own - before.own)) / wall)


# ---------------------------------------------------------------------------------------------- the machine
def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota (at least one)."""
    cores = len(_affinity())
    quota = cgroup_quota_cores(_read("/sys/fs/cgroup/cpu.max"), _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                               _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    if quota is not None:
        cores = min(cores, int(quota))
    return max(1, cores)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_seconds(proc_stat: str, cpus: set[int], tick: int = _TICK) -> float:
    """Seconds the CPUs in ``cpus`` have been busy (any process), from the text of ``/proc/stat``."""
    busy = 0
    for line in proc_stat.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit() or int(name[3:]) not in cpus:
            continue
        fields = [int(v) for v in rest.split()]
        # user nice system idle iowait irq softirq steal (guest time is already counted in user)
        busy += sum(fields[:8]) - fields[3] - fields[4]
    return busy / tick


def read_cpu_sample(cpus: set[int] | None = None) -> CpuSample | None:
    """The counters now, over ``cpus`` (default: this process's affinity); None where ``/proc/stat`` is absent."""
    text = _read("/proc/stat")
    if text is None:
        return None
    return CpuSample(wall=time.monotonic(), busy=busy_seconds(text, _affinity() if cpus is None else cpus),
                     own=time.process_time())


# ---------------------------------------------------------------------------------------------- the policy
class ThreadPolicy:
    """The process-wide measurement of free cores and the user's settings (``thread_policy()`` is the one)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cores = available_cores()
        self._sample = read_cpu_sample()
        self._others = 0.0
        self._torch_threads_seen = torch.get_num_threads()  # what the user had when recemb was imported
        self._warned: set[str] = set()  # RECEMB_NUM_THREADS values already warned of as capped

    @property
    def cores(self) -> int:
        return self._cores

    def others_busy(self) -> float:
        """Cores other processes kept busy over the latest window of at least ``SAMPLE_SECONDS``."""
        with self._lock:
            if self._sample is None:
                return 0.0
            if time.monotonic() - self._sample.wall >= SAMPLE_SECONDS:
                now = read_cpu_sample()
                if now is not None:
                    measured = others_busy_cores(self._sample, now)
                    if measured is not None:
                        self._others = measured
                    self._sample = now
            return self._others

    def user_threads(self, threads: int | str | None = None, caller_threads: int | None = None
                     ) -> int | str | None:
        """The user's own setting: an int (use it), "keep" (leave torch's as it is) or None (the policy's).
        ``caller_threads``: torch's count when the call began (default: now)."""
        threads = check_threads(threads)
        if isinstance(threads, int):
            return min(threads, self._cores)  # cap_threads warned where the option was given
        env = os.environ.get(THREADS_ENV, "").strip()
        if env and env != "auto":
            try:
                count = check_threads(int(env))
            except ValueError:
                raise ValueError(f"{THREADS_ENV} must be 'auto' or a positive int, got {env!r}") from None
            if count > self._cores:
                if env not in self._warned:  # once per value, not per chunk
                    self._warned.add(env)
                    warnings.warn(ThreadsCappedWarning(count, self._cores, THREADS_ENV), stacklevel=2)
                return self._cores
            return count
        if any(os.environ.get(name, "").strip() for name in USER_THREAD_ENVS):
            return "keep"
        if (torch.get_num_threads() if caller_threads is None else caller_threads) != self._torch_threads_seen:
            return "keep"  # torch.set_num_threads after import
        return None

    def threads_for(self, work_tokens: int, threads: int | str | None = None, caller_threads: int | None = None
                    ) -> int | None:
        """Intra-op threads for one chunk of ``work_tokens`` tokens (None: leave torch's setting alone).
        ``threads``: the caller's option; ``caller_threads``: torch's count when the call began."""
        user = self.user_threads(threads, caller_threads)
        if user == "keep":
            return None
        if isinstance(user, int):
            return user
        # Never more than torch had at import: its default (the physical cores) or the user's count set before.
        return choose_threads(work_tokens, self._cores, self.others_busy(), cap=self._torch_threads_seen)

    def note_user_change(self) -> None:
        """Take the current torch thread count as the user's baseline (after tests or tools reset it)."""
        self._torch_threads_seen = torch.get_num_threads()


_POLICY: ThreadPolicy | None = None
_POLICY_LOCK = threading.Lock()


def thread_policy() -> ThreadPolicy:
    """The process's policy, created on first use (the first window then starts at import time)."""
    global _POLICY
    with _POLICY_LOCK:
        if _POLICY is None:
            _POLICY = ThreadPolicy()
        return _POLICY


class IntraOpThreads:
    """The intra-op thread count of one call on ``device``: ``apply(tokens)`` before each chunk sets what the
    policy (or the user's ``threads``) says, and the caller's count is restored when the call ends. It is not
    restored between chunks: after an op on two threads the idle worker keeps spinning for a while, so switching
    back and forth would keep a core busy."""

    def __init__(self, device: torch.device, threads: int | str | None = None):
        self._cpu = device.type == "cpu"
        self._threads = cap_threads(threads) if self._cpu else check_threads(threads)
        self.caller_threads = torch.get_num_threads()

    def apply(self, work_tokens: int) -> None:
        """Set the policy's count for a chunk of ``work_tokens`` tokens."""
        if not self._cpu:
            return
        count = thread_policy().threads_for(work_tokens, self._threads, self.caller_threads)
        if count is not None and count != torch.get_num_threads():
            torch.set_num_threads(count)

    def restore(self) -> None:
        if self._cpu and torch.get_num_threads() != self.caller_threads:
            torch.set_num_threads(self.caller_threads)


@contextmanager
def intra_op_threads(device: torch.device, threads: int | str | None = None) -> Iterator[IntraOpThreads]:
    """An ``IntraOpThreads`` for the body, the caller's count restored after it."""
    setting = IntraOpThreads(device, threads)
    try:
        yield setting
    finally:
        setting.restore()


thread_policy()  # the first window of busy cores starts at import, so the first call has a measurement
