"""Fixtures: the saker binary and a shared local pilot (1 agent, 2 slots).

Tests run real pilot processes. The binary is $SAKER_BIN, else target/release/saker;
when it is missing the tests that need it skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import time
from typing import Any, Callable, Iterator, Optional, TypeVar

import pytest

import saker

REPO = pathlib.Path(__file__).resolve().parents[2]
T = TypeVar("T")


def binary_path() -> str:
    return os.environ.get("SAKER_BIN") or str(REPO / "target" / "release" / "saker")


@pytest.fixture(scope="session")
def saker_bin() -> str:
    path = binary_path()
    if not os.access(path, os.X_OK):
        message = f"no saker binary at {path} (build it with cargo build --release, or set SAKER_BIN)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def pilot(saker_bin: str) -> Iterator[saker.Pilot]:
    with saker.Pilot.start(agents=1, slots=2, saker_bin=saker_bin) as p:
        yield p


def wait_for(condition: Callable[[], Optional[T]], timeout: float = 15.0, what: str = "condition") -> T:
    """Polls ``condition`` until it returns something truthy, failing after ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@pytest.fixture
def idle(pilot: saker.Pilot) -> saker.Pilot:
    """The shared pilot, once nothing runs on it (tests that fill its slots need that)."""
    wait_for(lambda: pilot.status()["busy_slots"] == 0 and pilot.status()["queued"] == 0,
             what="an idle pilot")
    return pilot


@contextlib.contextmanager
def parsl_kernel(run_dir: pathlib.Path, saker_bin: str, **executor_args: Any) -> Iterator[Any]:
    """A Parsl DataFlowKernel on a SakerExecutor's embedded pilot (no replays, so a
    lost task fails at once), cleaned up on leaving."""
    import parsl
    from parsl.config import Config

    from saker.parsl import SakerExecutor

    executor = SakerExecutor(label="saker", saker_bin=saker_bin, task_options={"max_replays": 0},
                             **executor_args)
    kernel = parsl.load(Config(executors=[executor], run_dir=str(run_dir), strategy="none"))
    try:
        yield kernel
    finally:
        kernel.cleanup()
