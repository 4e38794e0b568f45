"""Shared setup: the saker binary of this checkout, and the plugin's import path."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PYTHON_DIR = ROOT / "python"


def saker_bin() -> str:
    return os.environ.get("SAKER_BIN") or str(ROOT / "target" / "release" / "saker")


@pytest.fixture(autouse=True, scope="session")
def _saker_binary():
    binary = saker_bin()
    if not os.access(binary, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"no saker binary at {binary} (build it, or set SAKER_BIN)")
        pytest.skip(f"no saker binary at {binary} (build it, or set SAKER_BIN)")
    os.environ["SAKER_BIN"] = binary
    # Spawned `python -m snakemake` processes and embedded pilots import nothing of
    # ours, but a Snakemake run started from a test in a subprocess needs both.
    paths = [str(PYTHON_DIR), str(Path(__file__).resolve().parents[1])]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
