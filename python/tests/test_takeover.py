"""A client that keeps its connection through a root's death: with a standby root
(``saker pilot --standby 1``) taking over, pending futures complete from the new root;
without one, they fail once ``reconnect_for`` has passed.

Real processes: the root is the process Pilot.start runs, SIGKILLed; the standby is
another process, found by its command line.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, List

import pytest

import remote_funcs
import saker
from conftest import wait_for
from saker.client import _BATCH


def processes(*words: str) -> List[int]:
    """Pids of live processes (not this one) whose command line holds all of ``words``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and all(word in cmdline for word in words):
            found.append(int(entry))
    return found


def standbys(directory: Path) -> List[int]:
    """Standby roots waiting for ``directory``'s lock (not the root that holds it)."""
    try:
        root = int((directory / "root.lock").read_text().strip())
    except (OSError, ValueError):
        root = None
    return [pid for pid in processes("pilot", str(directory), "--take-over") if pid != root]


@pytest.fixture
def directory(saker_bin: str, tmp_path: Path) -> Iterator[Path]:
    """A pilot directory whose processes (roots, standbys, agents) end with the test."""
    path = tmp_path / "pilot"
    yield path
    # Whichever root serves it now stops, with its standbys and agents; then whatever
    # is left (agents of a root that died without a standby) is killed.
    signal_all(path, signal.SIGCONT)  # a test that failed may have left one stopped
    try:
        stopped = subprocess.run([saker_bin, "shutdown", "--dir", str(path)], capture_output=True,
                                 timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        stopped = False
    deadline = time.monotonic() + 30
    while stopped and processes(str(path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    signal_all(path, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while processes(str(path)) and time.monotonic() < deadline:
        time.sleep(0.05)


def signal_all(directory: Path, signum: int) -> None:
    for pid in processes(str(directory)):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def start(saker_bin: str, directory: Path, standby: bool, reconnect_for: float = 60.0) -> saker.Pilot:
    extra = ["--standby", "1"] if standby else []
    pilot = saker.Pilot.start(directory, agents=2, slots=2, saker_bin=saker_bin, extra_args=extra,
                              reconnect_for=reconnect_for, log=directory.parent / "pilot.log")
    if standby:
        wait_for(lambda: len(standbys(directory)) == 1, 30, "the standby root")
    return pilot


def kill_root(pilot: saker.Pilot) -> float:
    """SIGKILLs the root Pilot.start ran; the time it was killed."""
    process = pilot._process
    assert process is not None
    process.kill()
    killed = time.monotonic()
    process.wait(10)
    return killed


@pytest.mark.parametrize("transport", ["local", "tls"])
def test_a_standby_takes_over_and_every_future_completes(saker_bin: str, directory: Path, transport: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if transport == "tls":
        monkeypatch.setattr(socket, "gethostname", lambda: "another-host")  # as from another node
    pilot = start(saker_bin, directory, standby=True)
    try:
        connection = pilot._require_connection()
        pilot_id = pilot.pilot_id
        futures = [pilot.call(remote_funcs.sleep_then, 0.02, i) for i in range(300)]
        wait_for(lambda: all(f.task is not None for f in futures), 30, "every submission's answer")
        wait_for(lambda: sum(f.done() for f in futures) >= 60, 60, "some results")
        done_before = sum(f.done() for f in futures)
        assert done_before < 300, "the kill comes while work remains"

        killed = kill_root(pilot)
        wait_for(lambda: connection.reconnects == 1, 30, "the client to reconnect")
        reconnected = time.monotonic() - killed
        deadline = time.monotonic() + 120
        values = [f.result(max(0.0, deadline - time.monotonic())) for f in futures]
        finished = time.monotonic() - killed
        assert values == list(range(300))
        tasks = [f.task for f in futures]
        assert len(set(tasks)) == 300
        assert not connection.closed and connection.reconnects == 1
        # The new root's local socket (client.sock), or TLS to its new address.
        assert connection.transport.encrypted == (transport == "tls")
        assert pilot.pilot_id == pilot_id
        print(f"\n{done_before} of 300 done at the kill; reconnected after {reconnected * 1000:.0f} ms; "
              f"the rest done {finished:.2f} s after the kill")

        # Still usable: new work, the pilot's status, a command.
        assert pilot.call(remote_funcs.add, 2, 3).result(30) == 5
        assert pilot.submit("echo again").result(30).stdout == "again\n"
        assert pilot.status()["pilot_id"] == pilot_id

        # One accepted result per task, in the new root's journal as well.
        counts = collections.Counter(r.task for r in pilot.results() if r.task in set(tasks))
        assert set(counts) == set(tasks) and set(counts.values()) == {1}, counts.most_common(3)
    finally:
        pilot.close()


def test_a_submission_in_flight_fails_and_a_queued_one_goes_to_the_new_root(
        saker_bin: str, directory: Path) -> None:
    pilot = start(saker_bin, directory, standby=True)
    try:
        connection = pilot._require_connection()
        accepted = pilot.call(remote_funcs.sleep_then, 0.5, "accepted")
        wait_for(lambda: accepted.task is not None, 30, "the first submission's answer")
        process = pilot._process
        assert process is not None
        standby = standbys(directory)[0]
        # The root stops reading: this submission is sent and never answered.
        os.kill(process.pid, signal.SIGSTOP)
        unanswered = pilot.call(remote_funcs.add, 1, 1)
        wait_for(lambda: any(entry[0] == _BATCH and unanswered in entry[2]
                             for entry in list(connection._pending.values())),
                 10, "the submission to be sent")
        # The standby cannot take over yet: the client keeps trying meanwhile.
        os.kill(standby, signal.SIGSTOP)
        try:
            kill_root(pilot)
            with pytest.raises(saker.PilotClosed, match="may or may not have accepted it"):
                unanswered.result(30)
            assert connection._reconnecting and not connection.closed
            queued = pilot.call(remote_funcs.add, 2, 2)  # sent once reconnected
            assert not accepted.done()
        finally:
            os.kill(standby, signal.SIGCONT)
        assert queued.result(60) == 4
        assert accepted.result(60) == "accepted"
        assert connection.reconnects == 1 and not connection.closed
    finally:
        pilot.close()


def test_without_a_standby_pending_futures_fail_after_reconnect_for(saker_bin: str, directory: Path) -> None:
    pilot = start(saker_bin, directory, standby=False, reconnect_for=2.0)
    try:
        pending = pilot.call(remote_funcs.sleep_then, 60, "never")
        wait_for(lambda: pending.task is not None, 30, "the submission's answer")
        killed = kill_root(pilot)
        with pytest.raises(saker.PilotClosed, match="lost the connection to the pilot") as info:
            pending.result(30)
        failed = time.monotonic() - killed
        assert "no root of the pilot" in str(info.value) and "within 2 s" in str(info.value)
        print(f"\nfailed {failed:.2f} s after the kill (reconnect_for=2)")
        assert 1.5 <= failed <= 5.0, failed
        assert pilot._require_connection().closed
        with pytest.raises(saker.PilotClosed):
            pilot.call(remote_funcs.add, 1, 1)
    finally:
        pilot.close()


def test_calls_running_at_the_kill_run_on_and_none_starts_twice(saker_bin: str, directory: Path) -> None:
    """Function calls on persistent workers are adopted like command tasks: the ones
    running when the root dies finish on their workers, and each call starts once
    (counted by the calls themselves)."""
    pilot = start(saker_bin, directory, standby=True)
    log = directory.parent / "started.log"
    try:
        connection = pilot._require_connection()
        # Four calls of 3 s on two slots: two run at the kill, two wait.
        futures = [pilot.call(remote_funcs.log_then_sleep, str(log), 3, i) for i in range(4)]
        wait_for(lambda: log.exists() and len(log.read_text().split()) == 2, 60, "two calls to start")
        kill_root(pilot)
        wait_for(lambda: connection.reconnects == 1, 30, "the client to reconnect")
        assert [f.result(120) for f in futures] == [0, 1, 2, 3]
        started = sorted(int(line) for line in log.read_text().split())
        assert started == [0, 1, 2, 3], f"each call starts once: {started}"
        status = pilot.status()
        adoption = status.get("adoption") or {}
        assert adoption.get("adopted") == 2, status
    finally:
        pilot.close()
