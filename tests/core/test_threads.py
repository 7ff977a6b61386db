"""The thread policy: free cores and the work's size decide, the user's settings win, the caller's count returns.

No timings here: the speed under load is benchmarks/contention.py's table."""

import os
import subprocess
import sys
import time

import pytest
import torch

from recemb.core import encode_vertical
from recemb.core.threads import (
    MIN_TOKENS_PER_THREAD,
    THREADS_ENV,
    CpuSample,
    busy_seconds,
    cgroup_quota_cores,
    check_threads,
    choose_threads,
    intra_op_threads,
    others_busy_cores,
    read_cpu_sample,
    thread_policy,
)
from recemb.core.vertical import VerticalStream


@pytest.fixture(autouse=True)
def _no_user_settings(monkeypatch):
    for name in (THREADS_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------ pure decisions
def test_free_cores_decide_when_the_work_is_big():
    big = 100 * MIN_TOKENS_PER_THREAD
    assert choose_threads(big, cores=2, others_busy=0.0) == 2
    assert choose_threads(big, cores=2, others_busy=0.4) == 2
    assert choose_threads(big, cores=2, others_busy=0.6) == 1  # a core mostly taken: one thread
    assert choose_threads(big, cores=2, others_busy=2.0) == 1
    assert choose_threads(big, cores=2, others_busy=7.5) == 1  # never fewer than one
    assert choose_threads(big, cores=16, others_busy=5.2) == 11
    assert choose_threads(big, cores=16, others_busy=0.0, cap=8) == 8


def test_small_work_gets_few_threads():
    assert choose_threads(1, cores=8, others_busy=0.0) == 1
    assert choose_threads(MIN_TOKENS_PER_THREAD * 2, cores=8, others_busy=0.0) == 2
    assert choose_threads(MIN_TOKENS_PER_THREAD * 2 - 1, cores=8, others_busy=0.0) == 1
    assert choose_threads(10, cores=8, others_busy=0.0, min_tokens_per_thread=5) == 2


@pytest.mark.parametrize("cpu_max, v1, expected", [
    ("max 100000\n", None, None),
    ("150000 100000\n", None, 1.5),
    ("400000 100000", None, 4.0),
    (None, ("-1", "100000"), None),
    (None, ("200000", "100000"), 2.0),
    ("garbage", None, None),
    (None, None, None),
])
def test_cgroup_quota_is_read_from_v1_and_v2(cpu_max, v1, expected):
    quota, period = v1 if v1 else (None, None)
    assert cgroup_quota_cores(cpu_max, quota, period) == expected


def test_busy_seconds_count_only_the_given_cpus_and_skip_idle_and_iowait():
    stat = ("cpu  900 0 300 5000 100 0 0 0 0 0\n"
            "cpu0 100 10 50 1000 40 5 5 2 0 0\n"
            "cpu1 200 0 100 2000 60 0 0 0 0 0\n"
            "cpu2 600 0 150 2000 0 0 0 0 0 0\n"
            "intr 12345\n")
    assert busy_seconds(stat, {0}, tick=100) == pytest.approx((100 + 10 + 50 + 5 + 5 + 2) / 100)
    assert busy_seconds(stat, {0, 1}, tick=100) == pytest.approx((172 + 300) / 100)
    assert busy_seconds(stat, {7}, tick=100) == 0


def test_others_busy_excludes_this_process():
    before, after = CpuSample(wall=10.0, busy=100.0, own=5.0), CpuSample(wall=12.0, busy=103.0, own=6.0)
    assert others_busy_cores(before, after) == pytest.approx(1.0)  # 3 busy seconds, 1 of them ours, in 2 s
    assert others_busy_cores(before, before) is None
    assert others_busy_cores(before, CpuSample(wall=11.0, busy=100.5, own=6.0)) == 0.0  # counters' rounding


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "two", "2"])
def test_bad_threads_are_refused(bad):
    with pytest.raises(ValueError, match="threads"):
        check_threads(bad)


# ------------------------------------------------------------------------------------------ the machine
@pytest.mark.skipif(read_cpu_sample() is None, reason="no /proc/stat")
def test_a_busy_process_beside_us_is_measured_and_our_own_work_is_not():
    before = read_cpu_sample()
    spinner = subprocess.Popen([sys.executable, "-c",
                                "import time\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass"])
    spinner.wait()
    others = others_busy_cores(before, read_cpu_sample())
    assert others > 0.1  # it ran for a second on one of our cores (shared machines give it less than all)

    before = read_cpu_sample()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # our own busy loop is ours, not another process's
        pass
    after = read_cpu_sample()
    ours = after.own - before.own
    assert ours > 0.1
    # The kernel's counters include our own work (what makes subtracting it right), to within their ticks.
    assert after.busy - before.busy >= ours - 2 * len(os.sched_getaffinity(0)) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------ user settings win
def test_user_settings_win_in_order(monkeypatch):
    policy = thread_policy()
    assert policy.user_threads(None) is None
    assert policy.threads_for(10_000, 1) == 1  # the explicit option
    monkeypatch.setenv(THREADS_ENV, "1")
    assert policy.threads_for(10_000) == 1
    assert policy.threads_for(10_000, 2) == 2  # the option beats the variable
    monkeypatch.setenv(THREADS_ENV, "many")
    with pytest.raises(ValueError, match=THREADS_ENV):
        policy.threads_for(10_000)
    monkeypatch.setenv(THREADS_ENV, "auto")
    assert policy.user_threads(None) is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert policy.threads_for(10_000) is None  # torch's own setting is left alone


def test_torch_set_num_threads_after_import_is_left_alone():
    policy = thread_policy()
    seen = torch.get_num_threads()
    assert policy.user_threads(None) is None
    torch.set_num_threads(seen + 1)
    assert policy.threads_for(10_000) is None
    assert policy.threads_for(10_000, caller_threads=seen) is not None  # a count the policy set in a call


# ------------------------------------------------------------------------------------------ in the engine
@pytest.fixture()
def model(tiny_embedder):
    return tiny_embedder.model


@pytest.fixture()
def two_cores(monkeypatch):
    """The process's policy on a 2-core machine whose torch had 2 threads at import, set to 2 now."""
    policy = thread_policy()
    monkeypatch.setattr(policy, "_cores", 2)
    monkeypatch.setattr(policy, "_torch_threads_seen", 2)
    torch.set_num_threads(2)
    return policy


def _record_threads(model, monkeypatch) -> list[int]:
    seen = []
    forward = model.forward_chunk

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward_chunk", recording)
    return seen


def test_a_busy_machine_gets_one_thread_and_the_caller_keeps_its_count(model, monkeypatch, two_cores):
    seen = _record_threads(model, monkeypatch)
    ids = torch.randint(3, 300, (4, 96))
    monkeypatch.setattr(two_cores, "others_busy", lambda: 1.8)
    encode_vertical(model, ids, torch.full((4,), 96), 32, backend="torch")
    assert seen == [1, 1, 1]
    assert torch.get_num_threads() == 2

    seen.clear()
    monkeypatch.setattr(two_cores, "others_busy", lambda: 0.0)
    encode_vertical(model, ids, torch.full((4,), 96), 32, backend="torch")
    assert seen == [2, 2, 2]  # 4 rows × 32 tokens per chunk: work for two


def test_the_count_follows_the_load_from_chunk_to_chunk_and_returns_after_an_error(model, monkeypatch, two_cores):
    policy = two_cores
    seen = _record_threads(model, monkeypatch)
    loads = iter([0.0, 1.9, 0.1, 2.0])
    monkeypatch.setattr(policy, "others_busy", lambda: next(loads))
    encode_vertical(model, torch.randint(3, 300, (4, 128)), torch.full((4,), 128), 32, backend="torch")
    assert seen == [2, 1, 2, 1]

    def stop(tokens):
        raise KeyboardInterrupt

    monkeypatch.setattr(policy, "others_busy", lambda: 2.0)
    with pytest.raises(KeyboardInterrupt):
        encode_vertical(model, torch.randint(3, 300, (2, 64)), torch.full((2,), 64), 32, backend="torch",
                        on_tokens=stop)
    assert torch.get_num_threads() == 2


def test_explicit_threads_and_streams(model, monkeypatch, two_cores):
    policy = two_cores
    monkeypatch.setattr(policy, "others_busy", lambda: 0.0)
    seen = _record_threads(model, monkeypatch)
    encode_vertical(model, torch.randint(3, 300, (4, 64)), torch.full((4,), 64), 32, backend="torch", threads=1)
    assert seen == [1, 1] and torch.get_num_threads() == 2

    seen.clear()
    stream = VerticalStream(model, 2 * MIN_TOKENS_PER_THREAD, backend="torch", context_extension="off")
    stream.feed(torch.randint(3, 300, (5 * MIN_TOKENS_PER_THREAD,)))
    stream.finish()
    assert seen == [2, 2, 1]  # two full chunks, then the rest: too little for two
    assert torch.get_num_threads() == 2

    with pytest.raises(ValueError, match="threads"):
        encode_vertical(model, torch.randint(3, 300, (1, 8)), torch.full((1,), 8), threads=0)


def test_gpu_work_is_never_touched():
    with intra_op_threads(torch.device("cuda"), 1) as setting:
        before = torch.get_num_threads()
        setting.apply(10_000)
        assert torch.get_num_threads() == before


def test_an_embedders_threads_option_reaches_every_chunk(tiny_embedder, monkeypatch):
    from recemb.core import Embedder

    torch.set_num_threads(2)
    seen = _record_threads(tiny_embedder.model, monkeypatch)
    fixed = Embedder(tiny_embedder.model, tiny_embedder.tokenizer, threads=1)
    fixed.embed_token_ids([[5] * 40 + [2], [7] * 10 + [2]], vertical_chunk_size=16)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2
    assert "threads=1" in repr(fixed)
    with pytest.raises(ValueError, match="threads"):
        Embedder(tiny_embedder.model, tiny_embedder.tokenizer, threads="many")


def test_the_cli_takes_threads(tiny_folder):
    from recemb_integrations.cli import resources
    from recemb_integrations.cli.parser import build_parser

    parser = build_parser()
    assert resources.load_embedder(parser.parse_args(["embed", "--model", str(tiny_folder), "--device", "cpu",
                                                      "--threads", "1"])).threads == 1
    assert resources.load_embedder(parser.parse_args(["embed", "--model", str(tiny_folder), "--device", "cpu",
                                                      "--threads", "auto"])).threads == "auto"
    assert resources.load_embedder(parser.parse_args(["embed", "--model", str(tiny_folder),
                                                      "--device", "cpu"])).threads is None
