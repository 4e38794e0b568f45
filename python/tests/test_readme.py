"""python/README.md's quick start runs as written when pasted into a file, with
cloudpickle and without it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]

# Runs a script as python would, with cloudpickle unimportable when asked.
RUNNER = """
import os, runpy, sys
if os.environ["CLOUDPICKLE"] == "without":
    sys.modules["cloudpickle"] = None
path = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(path))
runpy.run_path(path, run_name="__main__")
"""


def quick_start() -> str:
    text = (PYTHON_DIR / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "python/README.md has no python block"
    return blocks[0]


@pytest.mark.parametrize("mode", ["with", "without"])
def test_the_quick_start_runs_as_written(saker_bin: str, tmp_path: Path, mode: str) -> None:
    if mode == "with":
        pytest.importorskip("cloudpickle")
    script = tmp_path / "quickstart.py"
    script.write_text(quick_start())
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), CLOUDPICKLE=mode, SAKER_BIN=os.path.abspath(saker_bin))
    done = subprocess.run([sys.executable, str(runner), str(script)], capture_output=True, text=True,
                          env=env, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "49", done.stdout
    assert lines[1] == str([x * x for x in range(10)]), done.stdout
    # simulate draws 1,000 numbers per seed (one generator per call, not per draw):
    # every seed's mean is close to 0.5.
    low, high = (float(word) for word in lines[2].split())
    assert 0.45 < low < high < 0.55, lines[2]
    # map(progress=True) showed its line (tqdm's bar, or the plain one) on stderr.
    assert "100/100" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_the_objects_quick_start_runs_as_written(saker_bin: str, tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    text = (PYTHON_DIR / "README.md").read_text()
    block = re.search(r"<!-- quickstart: objects -->\n```python\n(.*?)```", text, flags=re.S)
    assert block, "python/README.md has no objects quick start"
    script = tmp_path / "objects.py"
    script.write_text(block.group(1))
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), CLOUDPICKLE="with", SAKER_BIN=os.path.abspath(saker_bin))
    done = subprocess.run([sys.executable, str(runner), str(script)], capture_output=True, text=True,
                          env=env, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True 8", "(2000000, 4)"], done.stdout


def test_the_joblib_quick_start_runs_as_written(saker_bin: str, tmp_path: Path) -> None:
    text = (PYTHON_DIR / "README.md").read_text()
    block = re.search(r"<!-- quickstart: joblib -->\n```python\n(.*?)```", text, flags=re.S)
    assert block, "python/README.md has no joblib quick start"
    script = tmp_path / "search.py"
    script.write_text(block.group(1))
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), SAKER_BIN=os.path.abspath(saker_bin))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # The same best as joblib's own backend finds (test_joblib.py compares them all).
    assert done.stdout.splitlines() == ["{'C': 1.0, 'gamma': 0.1} 0.98"], done.stdout
