"""The prepared GPU run (benchmarks/gpu_check.py, launched by benchmarks/gpu_run.sh) works before a GPU is there:
every section and row runs at tiny shapes on the CPU under the Triton interpreter, a failing row is recorded and the
run goes on, and every row reaches the results file as it is made."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
LAUNCHER = ROOT / "benchmarks" / "gpu_run.sh"
INJECTED = "conv1d smoke bf16"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The launcher the GPU machine runs, with --smoke: it sets the interpreter up and passes the rest through."""
    out = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(LAUNCHER), str(out), "--smoke", "--fail-row", INJECTED], cwd=ROOT,
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    logged = [json.loads(line) for line in (out / "gpu_check.jsonl").read_text().splitlines()]
    assert (out / "gpu_check.log").read_text() == result.stdout[result.stdout.index("device cpu (smoke)"):]
    assert "cpus:" in (out / "environment.txt").read_text()
    return report, logged, result.stdout, (out / "gpu_check.md").read_text()


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_section_runs_and_every_row_reaches_the_log(smoke):
    report, logged, stdout, tables = smoke
    assert list(report["sections"]) == ["kernels", "bundled", "ssd_timing", "scale", "encoder"]  # correctness first
    assert report["triton"] and report["transformers"] and "mamba_ssm peer" in report  # the versions behind it
    scale = [r for r in report["sections"]["scale"] if r["row"] != "compile ahead"]
    assert all(r["tokens_per_s"] > 0 and r["mfu"] > 0 for r in scale) and {r["rows"] for r in scale} == {1, 8}
    bundled = {r["row"]: r for r in report["sections"]["bundled"]}
    assert bundled["bundled model fp32 vs CPU"]["lowest_cosine"] > 0.9999  # the same device: the same vectors
    assert bundled["MiniLM-shaped BERT, 256-token chunks"]["tokens_per_s"] > 0
    rows = [r for section in report["sections"].values() for r in section]
    assert rows == logged and all("seconds" in r for r in rows)
    measured = [r for r in report["sections"]["kernels"] if r["row"] != "compile ahead"]
    kernels = {r["row"].split()[0] for r in measured}
    assert kernels == {"ssd", "conv1d", "gated_norm", "rwkv7", "mlstm"}  # every Triton kernel, fp32 and bf16
    peers = [r for r in report["sections"]["kernels"] if r["row"].startswith(("rwkv7", "mlstm"))]
    assert all("CUDA" in r["skipped"] for r in peers)  # fla's and mlstm_kernels': skipped on the CPU, with why
    assert {r["row"].split()[2] for r in measured} >= {"fp32", "bf16"}
    assert "## encoder" in stdout and "| row |" in stdout  # markdown tables
    assert ("## encoder" in tables and "| row |" in tables and tables.startswith("# gpu_check on cpu (smoke)")
            and "triton " in tables)  # the same tables in a file, with the versions


def test_each_section_that_compiles_ahead_runs_every_rows_ahead_call_first(smoke):
    report, *_ = smoke
    for section in ("kernels", "bundled", "ssd_timing", "scale"):
        first = report["sections"][section][0]
        assert first["row"] == "compile ahead" and "interpreter" in first, first
        assert "rows_not_compiled_ahead" not in first and "error" not in first, first  # every ahead call ran
    assert all(r["row"] != "compile ahead" for r in report["sections"]["encoder"])


def test_a_failing_row_is_recorded_and_the_run_goes_on(smoke):
    report, logged, stdout, _ = smoke
    failed = [r for r in logged if "error" in r]
    assert [r["row"] for r in failed] == [INJECTED] and "injected" in failed[0]["error"]
    assert "traceback" in failed[0]
    after = logged[[r["row"] for r in logged].index(INJECTED) + 1:]
    assert after and {r["section"] for r in after} >= {"ssd_timing", "encoder"}
    assert f"1 failed: {INJECTED}" in stdout


def test_correctness_rows_are_within_the_cpu_tests_tolerances(smoke):
    report, *_ = smoke
    measured = [r for r in report["sections"]["kernels"] if r["row"] != "compile ahead"]
    checked = [r for r in measured if "within_tolerance" in r]
    skipped = [r for r in measured if "skipped" in r]
    assert len(checked) == len(measured) - 1 - len(skipped)  # all but the injected failure
    assert all(r["within_tolerance"] for r in checked), [r for r in checked if not r["within_tolerance"]]
    ssd = [r for r in checked if r["row"].startswith("ssd")]
    assert ssd and all("y_vs_fp64_loop" in r for r in ssd)  # the smoke shapes are anchored by the token loop


def test_a_peer_that_cannot_run_here_is_reported_as_skipped_with_its_reason(smoke):
    report, *_ = smoke
    timing = [r for r in report["sections"]["ssd_timing"] if r["row"] != "compile ahead"]
    assert timing and all(isinstance(r.get("mamba_ssm"), str) and "mamba_ssm_ms" not in r for r in timing)
    assert all(r["triton_ms"] > 0 and r["torch_ms"] > 0 for r in timing)


def test_rows_past_a_sections_time_box_are_recorded_as_skipped(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(LAUNCHER), str(tmp_path), "--smoke", "--sections", "ssd_timing,kernels",
                             "--time-box", "0"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    logged = [json.loads(line) for line in (tmp_path / "gpu_check.jsonl").read_text().splitlines()]
    assert logged and all("time box" in r["skipped"] for r in logged)
    assert {r["section"] for r in logged} == {"ssd_timing", "kernels"}


def test_time_boxes_are_cumulative_time_left_passes_on_and_an_overrun_is_taken_from_later_sections(tmp_path):
    gpu_check = load_gpu_check()
    ran = lambda: {"ran": True}  # noqa: E731

    recorder = gpu_check.Recorder(tmp_path / "slack", {"first": 600.0, "second": 0.0})
    recorder.start("first")
    recorder.row("a", ran)
    recorder.start("second")  # no box of its own, but the first section's unused time passes on
    assert recorder.row("b", ran) == {"section": "second", "row": "b", "ran": True, "seconds": pytest.approx(0, abs=1)}
    recorder.close()

    recorder = gpu_check.Recorder(tmp_path / "overrun", {"first": 0.0, "second": 0.0, "third": 600.0})
    recorder.start("first")
    assert "spent" in recorder.row("a", ran)["skipped"]
    recorder.start("second")
    assert "spent" in recorder.row("b", ran)["skipped"]
    recorder.start("third")
    assert recorder.row("c", ran)["ran"]
    recorder.close()
    logged = [json.loads(line)["row"] for line in (tmp_path / "overrun" / "gpu_check.jsonl").read_text().splitlines()]
    assert logged == ["a", "b", "c"]


def test_every_triton_kernel_compiles_for_an_h100_without_one(tmp_path):
    """The GPU run's compile-ahead tool, without a GPU: each kernel of the kernels and ssd_timing sections compiled
    for sm_90 (fp32 and bf16, bf16 dots on the tensor cores) through the same ahead calls the GPU run makes, so
    with the run's own specialisations (tests/kernels' test_kernels_compile_for_hopper compiles from written-out
    signatures), and the compiled shared memory reported against the H100's limit. One config per kernel."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")  # compiled here, not found in a user's cache
    result = subprocess.run([sys.executable, str(SCRIPT), "--compile-for", "sm_90", "--smoke", "--configs-per-kernel",
                             "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert list(report["sections"]) == ["kernels", "ssd_timing"] and "sm_90" in report["device"]
    (kernels,), (timing,) = report["sections"]["kernels"], report["sections"]["ssd_timing"]
    assert kernels["row"] == "compile ahead" and "error" not in kernels and "rows_not_compiled_ahead" not in kernels
    assert kernels["target"] == "cuda sm_90" and kernels["shared_limit"] == 232448
    assert kernels["failed"] == [] and timing["failed"] == []  # no config failed to compile
    # the SSD's five stages, the conv1d and the gated norm, fp32 and bf16 (13: the state passing is fp32 for both),
    # and the first-chunk variants (the state passing with no initial state; the conv1d with no state, both dtypes)
    assert kernels["kernels"] == 7 and kernels["compiled"] == 13 + 3
    assert timing["compiled"] >= 1 and "error" not in timing
    assert 0 < kernels["max_shared_bytes"]
    assert list(tmp_path.joinpath("triton-cache").iterdir())  # compiled into Triton's cache, where launches look


def test_fetched_wheels_are_replaced_only_by_a_complete_download(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("fetch_peers", ROOT / "benchmarks" / "fetch_peers.py")
    fetch_peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_peers)
    monkeypatch.setattr(fetch_peers, "PEERS", tmp_path)
    old = tmp_path / "wheels" / "fla_core-0.5.0-py3-none-any.whl"
    old.parent.mkdir()
    old.write_text("the previous wheel")

    def failing_download(command, check):
        Path(command[command.index("-d") + 1], "half.whl").write_text("cut off")
        raise subprocess.CalledProcessError(1, command)

    monkeypatch.setattr(fetch_peers.subprocess, "run", failing_download)
    with pytest.raises(subprocess.CalledProcessError):
        fetch_peers.fetch_wheels(["pytest"])
    assert sorted(p.name for p in tmp_path.rglob("*.whl")) == [old.name]  # kept, and no half download left

    def download(command, check):
        assert command[-1] == f"pytest=={pytest.__version__}"  # pinned to the version installed here
        Path(command[command.index("-d") + 1], "pytest-x-py3-none-any.whl").write_text("new")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(fetch_peers.subprocess, "run", download)
    assert fetch_peers.fetch_wheels(["pytest"]) == tmp_path / "wheels"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wheels"]  # one version of each: the old one is gone
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == ["pytest-x-py3-none-any.whl"]
