"""The test command's progress (tests/conftest.py): each line of dots ends with pytest's percentage, the time since
the tests began and an estimate of what is left; the last line with the total time; classic output unchanged."""

import os
import re
import subprocess
import sys
from pathlib import Path

MANY = """
import time
import pytest

@pytest.mark.parametrize("i", range(120))
def test_n(i):
    time.sleep(0.01)
    assert i >= 0
"""
REPO = Path(__file__).resolve().parents[1]


def run_pytest(folder: Path, *options: str) -> list[str]:
    """pytest -q over ``folder`` with this suite's conftest as a plugin, in a terminal 60 columns wide."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(folder), *options, str(folder / "test_many.py")],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "60"},
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith(".")]


def test_each_line_of_dots_shows_the_time_so_far_and_what_is_left(tmp_path):
    (tmp_path / "test_many.py").write_text(MANY, encoding="utf-8")
    lines = run_pytest(tmp_path)
    assert len(lines) >= 3
    for line in lines[:-1]:
        assert re.search(r"\[ ?\d\d%\] \d+:\d\d ~\d+:\d\d left$", line), line
        assert len(line) <= 60, line  # the times fit in the terminal's width
    assert re.search(r"\[100%\] \d+:\d\d$", lines[-1]), lines[-1]
    assert sum(line.split("[")[0].count(".") for line in lines) == 120  # one dot a test, none lost to the times
    seconds = [int(m.group(1)) * 60 + int(m.group(2)) for m in
               (re.search(r"\] (\d+):(\d\d)", line) for line in lines)]
    assert seconds == sorted(seconds) and seconds[-1] >= 1  # 120 tests of 10 ms: at least a second


def test_classic_output_has_no_times(tmp_path):
    (tmp_path / "test_many.py").write_text(MANY, encoding="utf-8")
    lines = run_pytest(tmp_path, "-o", "console_output_style=classic")
    assert lines and not any(re.search(r"\d:\d\d", line) for line in lines)
