"""The client against real pilots: connecting, commands, calls, map, executor, cancel,
replays and time limits."""

from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, List

import pytest

import remote_funcs
import saker
from conftest import wait_for


# ----------------------------------------------------------------------------- connect


def test_connect_to_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(saker.PilotNotFound, match="no such directory"):
        saker.Pilot.connect(tmp_path / "nope")


def test_connect_to_a_directory_that_is_not_a_pilot(tmp_path: Path) -> None:
    with pytest.raises(saker.PilotNotFound, match="not a pilot directory"):
        saker.Pilot.connect(tmp_path)


def test_connect_to_a_stale_client_json(tmp_path: Path, pilot: saker.Pilot) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_bytes((pilot.dir / name).read_bytes())
    (tmp_path / "client.json").write_text(json.dumps({"addr": f"127.0.0.1:{port}", "protocol": 2, "pid": 1, "pilot_id": "0" * 32}))
    with pytest.raises(saker.PilotNotFound, match="refused"):
        saker.Pilot.connect(tmp_path)


def test_an_agent_certificate_cannot_open_a_session(tmp_path: Path, pilot: saker.Pilot) -> None:
    # The pilot's own agent certificate and key, where a client's would be.
    (tmp_path / "ca.pem").write_bytes((pilot.dir / "ca.pem").read_bytes())
    (tmp_path / "client.pem").write_bytes((pilot.dir / "agent.pem").read_bytes())
    (tmp_path / "client.key").write_bytes((pilot.dir / "agent.key").read_bytes())
    (tmp_path / "client.json").write_bytes((pilot.dir / "client.json").read_bytes())
    jobs = pilot.status()["jobs"]
    with pytest.raises(saker.PilotNotFound, match="did not answer the hello|TLS"):
        saker.Pilot.connect(tmp_path)
    # Refused before any request: the pilot serves its real clients as before.
    assert pilot.status()["jobs"] == jobs
    assert pilot.submit(["true"]).result(30).ok


def test_the_client_checks_that_the_root_serves_the_socket(tmp_path: Path, pilot: saker.Pilot) -> None:
    import ssl

    # A server presenting the pilot's agent certificate is not the root.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pilot.dir / "agent.pem"), str(pilot.dir / "agent.key"))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        for name in ("ca.pem", "client.pem", "client.key"):
            (tmp_path / name).write_bytes((pilot.dir / name).read_bytes())
        (tmp_path / "client.json").write_text(
            json.dumps({"addr": f"127.0.0.1:{port}", "protocol": 2, "pid": 1, "pilot_id": pilot.pilot_id})
        )

        def serve() -> None:
            connection, _ = listener.accept()
            with connection:
                try:
                    context.wrap_socket(connection, server_side=True)
                except (OSError, ssl.SSLError):
                    pass  # the client hangs up on us

        server = concurrent.futures.ThreadPoolExecutor(1)
        served = server.submit(serve)
        with pytest.raises(saker.PilotNotFound, match="root role"):
            saker.Pilot.connect(tmp_path)
        served.result(30)
        server.shutdown()


def test_protocol_1_pilots_still_run_commands(tmp_path: Path, pilot: saker.Pilot) -> None:
    # A client.json that offers only version 1 (as older pilots write it).
    endpoint = json.loads((pilot.dir / "client.json").read_text())
    endpoint.pop("protocols", None)
    endpoint["protocol"] = 1
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_bytes((pilot.dir / name).read_bytes())
    (tmp_path / "client.json").write_text(json.dumps(endpoint))
    with saker.Pilot.connect(tmp_path) as old:
        assert old._require_connection().protocol == 1
        assert old.submit(["echo", "v1"]).result(30).stdout == "v1\n"


def test_a_client_on_the_roots_host_uses_the_local_socket(pilot: saker.Pilot) -> None:
    endpoint = json.loads((pilot.dir / "client.json").read_text())
    assert endpoint["socket"] == "client.sock" and endpoint["host"] == socket.gethostname()
    with saker.Pilot.connect(pilot.dir) as local:
        assert not local._require_connection().transport.encrypted, "no TLS on the local socket"
        assert local.call(remote_funcs.add, 2, 3).result(30) == 5
        assert local.submit(["echo", "local"]).result(30).stdout == "local\n"


def test_a_client_on_another_host_uses_tls(pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "another-host")
    with saker.Pilot.connect(pilot.dir) as remote:
        assert remote._require_connection().transport.encrypted
        assert remote.call(remote_funcs.add, 4, 5).result(30) == 9


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_the_local_socket_refuses_another_user(pilot: saker.Pilot) -> None:
    import subprocess
    import sys

    # Open the directory's gate on purpose: the server itself must still refuse.
    path = pilot.dir / "client.sock"
    gates = [pilot.dir.parent, pilot.dir, path]
    modes = [gate.stat().st_mode & 0o7777 for gate in gates]
    for gate, mode in zip(gates, (0o711, 0o711, 0o666)):
        os.chmod(gate, mode)
    try:
        probe = (
            "import os, socket, sys\n"
            "os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "s.connect(sys.argv[1])\n"
            "s.settimeout(20)\n"
            "try:\n"
            "    s.sendall(b'{\"hello\": {\"protocol\": 3}}\\n')\n"
            "    print('answered' if s.recv(4096) else 'closed')\n"
            "except (BrokenPipeError, ConnectionResetError):\n"
            "    print('closed')\n"
        )
        done = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    finally:
        for gate, mode in zip(gates, modes):
            os.chmod(gate, mode)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed", "closed without an answer"
    assert pilot.submit(["true"]).result(30).ok


def test_second_connection_sees_the_same_pilot(pilot: saker.Pilot) -> None:
    with saker.Pilot.connect(pilot.dir) as other:
        assert other.pilot_id == pilot.pilot_id
        status = other.status()
        assert status["slots"] == 2
        assert other.call(remote_funcs.add, 1, 2).result(30) == 3
    # Closing a connected Pilot leaves the pilot running.
    assert pilot.call(remote_funcs.add, 2, 2).result(30) == 4


def test_start_reports_the_pilots_error(saker_bin: str, pilot: saker.Pilot) -> None:
    with pytest.raises(saker.SakerError, match="already holds a pilot"):
        saker.Pilot.start(dir=pilot.dir, saker_bin=saker_bin, timeout=30)


def test_start_with_a_missing_binary(tmp_path: Path) -> None:
    with pytest.raises(saker.SakerError, match="cannot run"):
        saker.Pilot.start(saker_bin=tmp_path / "no-such-saker")


def test_an_embedded_pilot_ends_with_its_killed_driver_and_leaves_nothing(saker_bin: str) -> None:
    driver = (
        "import os, saker\n"
        f"pilot = saker.Pilot.start(slots=1, saker_bin={saker_bin!r})\n"
        "print(pilot.dir, pilot._process.pid, pilot.pilot_id, flush=True)\n"
        "assert pilot.call(pow, 2, 3).result(30) == 8\n"
        "os.kill(os.getpid(), 9)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(saker.__file__).parent.parent))
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == -9, done.stderr
    directory, pid, pilot_id = done.stdout.split()
    temporary = Path(directory).parent
    scratch = Path(tempfile.gettempdir()) / f"saker-{pilot_id}"

    def gone() -> bool:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return not temporary.exists() and not scratch.exists()
        return False

    wait_for(gone, timeout=30, what="the pilot to stop and its directories to go")


# ---------------------------------------------------------------------------- commands


def test_commands(pilot: saker.Pilot, tmp_path: Path) -> None:
    shell = pilot.submit("echo hello; echo oops >&2")
    argv = pilot.submit(["printf", "%s-%s", "a", "b"])
    env = pilot.submit("echo $SAKER_TEST_VALUE", env={"SAKER_TEST_VALUE": "from-env"})
    cwd = pilot.submit(["pwd"], cwd=tmp_path)
    result = shell.result(30)
    assert isinstance(result, saker.Result)
    assert result.state == "succeeded" and result.exit_code == 0 and result.ok
    assert result.stdout == "hello\n" and result.stderr == "oops\n"
    assert result.output is None and result.task == shell.task and result.job == shell.job
    # RFC 3339 UTC text of one format: accepted after it ended (the root's clock and
    # the agent's are this machine's).
    assert result.end_time is not None and result.accept_time is not None
    assert result.end_time <= result.accept_time
    assert isinstance(result.node_id, int)
    assert result.dispatch_time is not None
    assert result.submit_time <= result.dispatch_time <= result.accept_time
    assert result.received_time is not None
    assert result.dispatch_time <= result.received_time <= result.start_time
    assert argv.result(30).stdout == "a-b"
    assert env.result(30).stdout == "from-env\n"
    assert cwd.result(30).stdout.strip() == str(tmp_path)


def test_failed_command(pilot: saker.Pilot) -> None:
    future = pilot.submit("echo bad >&2; exit 3")
    with pytest.raises(saker.TaskFailed) as info:
        future.result(30)
    assert not isinstance(info.value, saker.TaskLost)
    result = info.value.result
    assert result.state == "failed" and result.exit_code == 3 and result.stderr == "bad\n"
    assert "exit" in str(info.value) and "bad" in str(info.value)


def test_dependencies_order_jobs_and_a_failure_cancels_its_dependents(pilot: saker.Pilot, tmp_path: Path) -> None:
    marker = tmp_path / "first"
    first = pilot.submit(f"sleep 0.2; touch {marker}")
    # A future stands for its job; the dependent sees the first's effect.
    second = pilot.submit(f"test -e {marker} && echo after", after=first)
    assert second.result(30).stdout == "after\n"
    failing = pilot.submit("exit 3")
    doomed = pilot.submit("echo never", after=[failing])
    cleanup = pilot.submit("echo cleanup", after_any=failing)
    with pytest.raises(saker.TaskFailed):
        failing.result(30)
    # Cancelled by the pilot ("dependency N failed"): a cancelled future that says why.
    with pytest.raises(concurrent.futures.CancelledError):
        doomed.result(30)
    with pytest.raises(saker.DependencyFailed, match=f"depends on job {failing.job}, which failed"):
        doomed.result(30)
    assert doomed.cancelled()
    assert cleanup.result(30).stdout == "cleanup\n"
    with pytest.raises(TypeError):
        pilot.submit("true", after=[1.5])


def test_a_dependent_of_a_failed_call_raises_dependency_failed(pilot: saker.Pilot) -> None:
    failing = pilot.call(remote_funcs.fail, "boom")
    doomed = pilot.options(after=failing).call(remote_funcs.add, 1, 2)
    then = pilot.options(after=doomed).submit("echo never")
    with pytest.raises(ValueError, match="boom"):
        failing.result(30)
    with pytest.raises(saker.DependencyFailed) as info:
        doomed.result(30)
    error = info.value
    assert isinstance(error, concurrent.futures.CancelledError) and isinstance(error, saker.SakerError)
    assert doomed.cancelled() and doomed.done()
    assert error.job == failing.job and error.dependency is failing
    assert error.task == doomed.task and error.result.state == "cancelled"
    assert error.reason == f"dependency {failing.job} failed"
    assert str(error) == (
        f"task {doomed.task} (job {doomed.job}) was cancelled: it depends on job "
        f"{failing.job}, which failed: ValueError: boom"
    )
    assert isinstance(error.__cause__, ValueError)
    with pytest.raises(saker.DependencyFailed):
        doomed.exception(30)
    # A chain: the dependent of the cancelled dependent says that one was cancelled.
    with pytest.raises(saker.DependencyFailed, match=f"depends on job {doomed.job}, which was cancelled"):
        then.result(30)
    # By job id, its future never named: the pilot is asked how that job ended.
    exited = pilot.submit("exit 3")
    with pytest.raises(saker.TaskFailed):
        exited.result(30)
    late = pilot.submit("echo never", after=[exited.job])
    with pytest.raises(saker.DependencyFailed) as info:
        late.result(30)
    assert info.value.job == exited.job and info.value.dependency is None
    assert info.value.state == "ended with 1 failed, 0 cancelled, 0 succeeded"
    assert str(info.value).endswith(f"depends on job {exited.job}, which ended with 1 failed, 0 cancelled, 0 succeeded")
    # A cancel of our own stays a plain CancelledError.
    own = pilot.submit("true", not_before="2099-01-01T00:00:00Z")
    assert own.cancel()
    with pytest.raises(concurrent.futures.CancelledError) as cancelled:
        own.result(30)
    assert not isinstance(cancelled.value, saker.DependencyFailed)


def test_running_is_true_while_a_call_runs(saker_bin: str, tmp_path: Path) -> None:
    # One slot: the call that runs is running, the one queued behind it is not (the
    # pilot's whole status, queued 1, could not tell which of them runs).
    import datetime
    with saker.Pilot.start(tmp_path / "pilot", slots=1, saker_bin=saker_bin, extra_args=["--no-sync"]) as own:
        files = {name: (tmp_path / f"{name}-started", tmp_path / f"{name}-release") for name in "ab"}
        calls = {name: own.call(remote_funcs.block_until, str(started), str(release), 60.0)
                 for name, (started, release) in files.items()}
        # A task that waits for its time is queued, not running, all along.
        far = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        later = own.options(not_before=far).call(remote_funcs.add, 1, 1)
        first = wait_for(lambda: next((n for n, (started, _) in files.items() if started.exists()), None),
                         what="a call to start")
        second = "b" if first == "a" else "a"
        running, queued = calls[first], calls[second]
        wait_for(lambda: later.task is not None, what="the later call to be accepted")
        connection = own._require_connection()
        asked: List[Any] = []
        request = connection.request

        def counting(name: str, body: Any) -> Any:
            if name == "status":
                asked.append(body)
            return request(name, body)

        connection.request = counting  # type: ignore[method-assign]
        wait_for(running.running, what="running() while the call runs")
        assert running.running() and not running.done()
        # Polled together for a while: the other stays not running, and the futures
        # share requests (at most one per 50 ms).
        began = time.monotonic()
        while time.monotonic() - began < 0.5:
            assert not queued.running() and not later.running()
            assert running.running()
        assert not files[second][0].exists()
        assert 1 <= len(asked) <= 0.5 / 0.05 + 3, asked
        assert any(len(body["jobs"]) > 1 for body in asked), asked
        files[first][1].touch()
        assert running.result(30) == "released"
        assert not running.running() and running.done()
        wait_for(files[second][0].exists, what="the queued call to start")
        wait_for(queued.running, what="running() once the queued call runs")
        assert not later.running()
        files[second][1].touch()
        assert queued.result(30) == "released"
        assert not queued.running() and queued.done()
        assert later.cancel()
        assert not later.running()


def test_running_guesses_from_the_whole_status_with_an_older_pilot(idle: saker.Pilot, tmp_path: Path) -> None:
    # A pilot that predates `status` with `jobs` refuses the field: running() guesses
    # from the pilot's whole status, as before.
    connection = idle._require_connection()
    request = connection.request
    refused: List[Any] = []

    def older(name: str, body: Any) -> Any:
        if name == "status" and "jobs" in body:
            refused.append(body)
            answer: concurrent.futures.Future[Any] = concurrent.futures.Future()
            answer.set_exception(saker.ProtocolError("invalid `status` request: unknown field `jobs`", "malformed"))
            return answer
        return request(name, body)

    connection.request = older  # type: ignore[method-assign]
    try:
        started, release = tmp_path / "started", tmp_path / "release"
        future = idle.call(remote_funcs.block_until, str(started), str(release), 60.0)
        wait_for(started.exists, what="the call to start")
        wait_for(future.running, what="running() while the call runs")
        assert len(refused) == 1, refused
        release.touch()
        assert future.result(30) == "released"
        assert not future.running()
    finally:
        del connection.request
        connection._running._job_counts = True


def test_a_too_large_argument_is_refused_with_a_hint(
    pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client that sees a node's store sends such arguments and gets such values by
    # reference (test_refs.py); this one sees none.
    monkeypatch.setattr(pilot, "_stores", saker.stores.Stores(pilot._require_connection(), pilot.pilot_id))
    monkeypatch.setattr(pilot._stores, "_sees", lambda node, directory: False)
    jobs = pilot.status()["jobs"]
    big = b"x" * (20 << 20)
    with pytest.raises(saker.SakerError) as info:
        list(pilot.map(remote_funcs.identity, [big, "small"]))
    message = str(info.value)
    assert "16 MiB" in message and "20.0 MiB" in message, message
    assert "argument 0, bytes" in message, message
    assert "files" in message and "data items" in message, message
    with pytest.raises(saker.SakerError, match="16 MiB"):
        pilot.submit_function(b"\x01" + big)
    assert pilot.status()["jobs"] == jobs  # refused before sending
    # A return value that large fails with the same hint, from the worker.
    with pytest.raises(ValueError, match="16 MiB a call's answer may carry; ask for it by reference"):
        pilot.call(bytes, 20 << 20).result(60)


def test_a_bad_duration_names_the_field_not_the_parser_position(pilot: saker.Pilot) -> None:
    with pytest.raises(saker.ProtocolError) as info:
        pilot.options(time_limit="5 parsecs").call(remote_funcs.add, 1, 2).result(30)
    message = str(info.value)
    assert 'jobs[0].spec.time_limit: invalid duration "5 parsecs"' in message, message
    assert '"90s"' in message, message
    assert "line 1" not in message and "column" not in message, message
    with pytest.raises(saker.ProtocolError, match=r"jobs\[0\]\.spec\.time_limit: duration \"90\" has no unit") as info:
        pilot.submit("true", time_limit="90").result(30)
    assert "column" not in str(info.value)
    waiting = pilot.submit("true", not_before="2099-01-01T00:00:00Z")
    with pytest.raises(saker.ProtocolError, match='^invalid `update` request: time_limit: invalid duration "5 parsecs"'):
        pilot.update(waiting, time_limit="5 parsecs")
    waiting.cancel()
    # Sent in one burst with good calls, the bad one fails alone.
    bad = pilot.options(time_limit="5 parsecs")
    futures = [pilot.call(remote_funcs.square, i) if i % 10 else bad.call(remote_funcs.square, i)
               for i in range(40)]
    for i, future in enumerate(futures):
        if i % 10:
            assert future.result(30) == i * i
        else:
            with pytest.raises(saker.ProtocolError, match="time_limit"):
                future.result(30)


def test_data_items_pass_from_a_writer_to_its_reader(pilot: saker.Pilot) -> None:
    writer = pilot.submit('echo "from the writer" > "$SAKER_SCRATCH/py-greeting"', writes="py-greeting")
    reader = pilot.submit('cat "$SAKER_SCRATCH/py-greeting"', after=writer, reads=["py-greeting"])
    assert reader.result(30).stdout == "from the writer\n"
    lazy = pilot.submit("true", writes=["py-never"])
    with pytest.raises(saker.TaskFailed, match="without writing data item"):
        lazy.result(30)
    with pytest.raises(TypeError):
        pilot.submit("true", reads=[3])


def test_not_before_holds_a_task_until_its_time(pilot: saker.Pilot) -> None:
    import datetime
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    result = pilot.submit("echo late", not_before=at).result(30)
    started = datetime.datetime.strptime(result.start_time, "%Y-%m-%dT%H:%M:%S.%fZ")
    assert started.replace(tzinfo=datetime.timezone.utc) >= at - datetime.timedelta(milliseconds=50)
    with pytest.raises(TypeError):
        pilot.submit("true", not_before=12)


def test_update_moves_a_waiting_job_and_limits_its_time(pilot: saker.Pilot) -> None:
    import datetime
    far = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    waiting = pilot.submit("sleep 30", not_before=far)
    # Brought forward to now, with a limit it cannot meet: it runs at once and is killed.
    assert pilot.update(waiting, not_before=None, time_limit=1) == 1
    with pytest.raises(saker.TaskFailed) as info:
        waiting.result(30)
    assert "time limit" in (info.value.result.reason or "")
    with pytest.raises(saker.SakerError):
        pilot.update(waiting, priority=3)  # it has ended
    with pytest.raises(saker.SakerError):
        pilot.update(10**6, priority=1)  # no such job
    with pytest.raises(TypeError):
        pilot.update(waiting, priority="high")


def test_spawn_failure_and_retries(pilot: saker.Pilot) -> None:
    with pytest.raises(saker.TaskFailed) as info:
        pilot.submit(["/no/such/program"]).result(30)
    assert info.value.result.reason
    retried = pilot.options(retries=1).submit("exit 1")
    with pytest.raises(saker.TaskFailed) as info:
        retried.result(60)
    assert info.value.result.attempts == 2
    assert len(info.value.result.history) == 1


# ------------------------------------------------------------------------------- calls


def test_call_returns_values(pilot: saker.Pilot) -> None:
    assert pilot.call(remote_funcs.add, 40, b=2).result(30) == 42
    big = os.urandom(1 << 20)
    assert pilot.call(remote_funcs.identity, big).result(30) == big
    value = {"nested": [1, 2.5, None, ("t", frozenset({3}))]}
    assert pilot.call(remote_funcs.identity, value).result(30) == value
    env = pilot.call(remote_funcs.environment).result(30)
    assert env["SAKER_WORKER_KIND"] == "python"
    assert int(env["SAKER_TASK_ID"]) > 0 and int(env["SAKER_ATTEMPT_ID"]) > 0


def test_calls_see_the_cores_they_hold(pilot: saker.Pilot) -> None:
    # Threaded libraries size their pools by these: a 1-core call's worker says 1, a
    # 2-core call's (a worker started for it) 2, each pinned to as many CPUs.
    names = ("SAKER_CORES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    for cores in (1, 2, 1):
        seen = pilot.options(cores=cores).call(remote_funcs.cores_seen).result(60)
        assert {name: seen[name] for name in names} == {name: str(cores) for name in names}, seen
        if os.cpu_count() == 2:  # one CPU per slot: the pilot pins
            assert seen["cpus"] == str(cores), seen


def test_function_tasks_see_their_own_gpus(saker_bin: str, tmp_path: Path) -> None:
    # A node declared with 2 GPUs and 4 slots: a call asking one sees exactly one; a
    # call asking none on a GPU node sees none; a third GPU no node has is refused.
    with saker.Pilot.start(tmp_path / "gpus", agents=1, slots=4, saker_bin=saker_bin,
                           extra_args=["--gpus-per-node", "2"]) as gpu_pilot:
        one = gpu_pilot.options(gpus=1)
        seen = [f.result(60) for f in [one.call(remote_funcs.devices) for _ in range(8)]]
        for call in seen:
            assert call["CUDA_VISIBLE_DEVICES"] in ("0", "1")
            assert call["CUDA_VISIBLE_DEVICES"] == call["ROCR_VISIBLE_DEVICES"] == call["SAKER_GPUS"]
        none = gpu_pilot.call(remote_funcs.devices).result(60)
        assert none["CUDA_VISIBLE_DEVICES"] == ""
        with pytest.raises(saker.SpecError, match="GPUs per task; no node has more than 2"):
            gpu_pilot.options(gpus=3).call(remote_funcs.devices).result(60)


def test_workers_persist(pilot: saker.Pilot) -> None:
    pids = {pilot.call(remote_funcs.pid).result(30) for _ in range(20)}
    assert 1 <= len(pids) <= 2  # one worker per slot, reused


def test_remote_exceptions(pilot: saker.Pilot) -> None:
    with pytest.raises(ValueError, match="^kaboom$") as info:
        pilot.call(remote_funcs.fail, "kaboom").result(30)
    cause = info.value.__cause__
    assert isinstance(cause, saker.RemoteTraceback)
    assert "remote_funcs.py" in str(cause) and "in fail" in str(cause)

    with pytest.raises(saker.RemoteError) as remote:
        pilot.call(remote_funcs.fail_unpicklable).result(30)
    assert remote.value.type_name == "Unpicklable" and remote.value.message == "secret"
    assert isinstance(remote.value.__cause__, saker.RemoteTraceback)

    with pytest.raises(TypeError, match="could not be pickled"):
        pilot.call(remote_funcs.return_unpicklable).result(30)


def test_submit_function_raw(pilot: saker.Pilot) -> None:
    from saker.serialize import dumps_call

    output = pilot.submit_function(dumps_call(remote_funcs.square, (7,), {})).result(30)
    assert output == __import__("pickle").dumps(49, protocol=5)
    with pytest.raises(saker.TaskFailed) as info:
        pilot.submit_function(b"\x66hello").result(30)
    assert not isinstance(info.value, saker.TaskLost)
    assert info.value.result.output is not None
    assert "unknown payload format 0x66" in (info.value.result.reason or "")


# --------------------------------------------------------------------------------- map


def test_map(pilot: saker.Pilot) -> None:
    assert list(pilot.map(remote_funcs.square, range(200))) == [i * i for i in range(200)]
    assert list(pilot.map(remote_funcs.add, [1, 2, 3], [10, 20, 30])) == [11, 22, 33]
    assert list(pilot.map(remote_funcs.square, range(50), chunksize=7)) == [i * i for i in range(50)]
    unordered = list(pilot.map(remote_funcs.square, range(100), ordered=False))
    assert sorted(unordered) == [i * i for i in range(100)]
    assert list(pilot.map(remote_funcs.square, [])) == []
    many = [pilot.call(remote_funcs.square, i) for i in range(2000)]
    assert sorted(f.result() for f in saker.as_completed(many, timeout=60)) == [i * i for i in range(2000)]


def test_map_order_and_timeout(idle: saker.Pilot) -> None:
    delays = [0.8, 0.0, 0.0]
    ordered = list(idle.map(remote_funcs.sleep_then, delays, ["slow", "a", "b"]))
    assert ordered == ["slow", "a", "b"]
    unordered = list(idle.map(remote_funcs.sleep_then, delays, ["slow", "a", "b"], ordered=False))
    assert unordered[-1] == "slow"
    results = idle.map(remote_funcs.sleep_then, [5.0], [1], timeout=0.3)
    with pytest.raises(concurrent.futures.TimeoutError):
        next(results)
    # Leaving the iterator cancelled the rest (the slot is free again soon).
    wait_for(lambda: idle.status()["busy_slots"] == 0, what="the timed-out map's task to be cancelled")


def test_as_completed_and_wait(idle: saker.Pilot) -> None:
    slow = idle.call(remote_funcs.sleep_then, 0.8, "slow")
    fast = idle.call(remote_funcs.sleep_then, 0.0, "fast")
    order = [f.result() for f in saker.as_completed([slow, fast], timeout=30)]
    assert order == ["fast", "slow"]
    futures = [idle.call(remote_funcs.square, i) for i in range(10)]
    done, not_done = saker.wait(futures, timeout=30)
    assert not not_done and {f.result() for f in done} == {i * i for i in range(10)}
    first = idle.call(remote_funcs.sleep_then, 0.0, 1)
    second = idle.call(remote_funcs.sleep_then, 5.0, 2)
    done, not_done = saker.wait([first, second], timeout=30, return_when=saker.FIRST_COMPLETED)
    assert done == {first} and not_done == {second}
    assert second.cancel() and second.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        second.result()


# ---------------------------------------------------------------------------- executor


def test_executor(pilot: saker.Pilot) -> None:
    executor = pilot.executor()
    assert isinstance(executor, concurrent.futures.Executor)
    with executor:
        future = executor.submit(remote_funcs.add, 1, b=2)
        assert isinstance(future, concurrent.futures.Future)
        assert future.result(30) == 3
        assert list(executor.map(remote_funcs.square, range(10))) == [i * i for i in range(10)]
        assert list(executor.map(remote_funcs.square, range(10), chunksize=3)) == [i * i for i in range(10)]
        slow = executor.submit(remote_funcs.sleep_then, 0.3, "done")
    # shutdown(wait=True) waited for it.
    assert slow.done() and slow.result() == "done"
    with pytest.raises(RuntimeError):
        executor.submit(remote_funcs.add, 1)
    # The pilot itself is still usable.
    assert pilot.call(remote_funcs.add, 5).result(30) == 5


def test_executor_submit_of_a_call_that_cannot_be_sent_fails_its_future(pilot: saker.Pilot) -> None:
    with pilot.executor() as executor:
        future = executor.submit(remote_funcs.add, threading.Lock())
        with pytest.raises(saker.SakerError, match="cannot pickle"):
            future.result(0)
        # Submitted from a done-callback, as a dependency executor does: the failure
        # reaches the callback's future, not a lost exception in the callback.
        chained: "queue.Queue[concurrent.futures.Future[int]]" = queue.Queue()
        first = executor.submit(remote_funcs.add, 1)
        first.add_done_callback(lambda _: chained.put(executor.submit(remote_funcs.add, threading.Lock())))
        assert first.result(30) == 1
        with pytest.raises(saker.SakerError, match="cannot pickle"):
            chained.get(timeout=30).result(0)
        assert executor.submit(remote_funcs.add, 2).result(30) == 2


def test_a_call_from_a_done_callback_never_waits_for_an_answer(pilot: saker.Pilot) -> None:
    # Callbacks run on the thread that reads the pilot's answers (joblib dispatches
    # its next batch from one): a call made there must not wait for an answer, such
    # as the list of stores it asks for again when stale.
    stores = pilot._object_stores()
    chained: "queue.Queue[concurrent.futures.Future[int]]" = queue.Queue()

    def then(_: Any) -> None:
        stores._asked = -1e9  # stale: the next call asks for the list again
        chained.put(pilot.call(remote_funcs.add, 2))

    pilot.call(remote_funcs.add, 1).add_done_callback(then)
    assert chained.get(timeout=30).result(30) == 2


def test_a_large_argument_goes_by_reference_from_a_done_callback(pilot: saker.Pilot) -> None:
    # From the reader thread the put is not waited for: the pilot handles the put and
    # the call after it in order.
    np = pytest.importorskip("numpy")
    array = np.ones(1 << 18)  # 2 MiB
    chained: "queue.Queue[concurrent.futures.Future[Any]]" = queue.Queue()
    pilot.call(remote_funcs.add, 1).add_done_callback(lambda _: chained.put(pilot.call(remote_funcs.described, array)))
    got = chained.get(timeout=30).result(30)
    assert got["mapped"] and got["sum"] == 1 << 18


def test_waiting_for_an_answer_in_a_done_callback_fails_at_once(pilot: saker.Pilot) -> None:
    raised: "queue.Queue[BaseException]" = queue.Queue()

    def then(_: Any) -> None:
        try:
            pilot.status(timeout=30)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            raised.put(exc)

    started = time.monotonic()
    pilot.call(remote_funcs.add, 1).add_done_callback(then)
    error = raised.get(timeout=30)
    assert isinstance(error, saker.SakerError) and "done-callback" in str(error)
    assert time.monotonic() - started < 10


def test_executor_shutdown_cancel_futures(idle: saker.Pilot, tmp_path: Path) -> None:
    executor = idle.options(priority=5).executor()
    started, release = tmp_path / "started", tmp_path / "release"
    blockers = [executor.submit(remote_funcs.block_until, str(started), str(release)) for _ in range(2)]
    queued = executor.submit(remote_funcs.add, 1)
    wait_for(lambda: started.exists() and len(started.read_text().split()) == 2, what="both slots busy")
    executor.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled() and all(b.cancelled() for b in blockers)
    wait_for(lambda: idle.status()["busy_slots"] == 0, what="cancelled blockers to stop")


# ------------------------------------------------------------------------------ cancel


def test_cancel_a_queued_task(idle: saker.Pilot, tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    before = idle.status()["cancelled"]
    blockers = [idle.call(remote_funcs.block_until, str(started), str(release)) for _ in range(2)]
    wait_for(lambda: started.exists() and len(started.read_text().split()) == 2, what="both slots busy")
    queued = idle.call(remote_funcs.add, 1, 1)
    wait_for(lambda: queued.task is not None, what="the submission to be accepted")
    assert idle.cancel(queued) is True
    assert queued.cancelled() and queued.done()
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result()
    wait_for(lambda: idle.status()["cancelled"] == before + 1, what="the pilot to cancel the task")
    release.touch()
    assert [b.result(30) for b in blockers] == ["released", "released"]


def test_cancel_a_running_task(idle: saker.Pilot, tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    before = idle.status()["cancelled"]
    running = idle.call(remote_funcs.block_until, str(started), str(release), 60.0)
    wait_for(started.exists, what="the task to start")
    assert running.cancel() is True
    assert running.cancelled()
    assert running.cancel() is True  # idempotent
    wait_for(lambda: idle.status()["cancelled"] == before + 1, what="the pilot to cancel the task")
    wait_for(lambda: idle.status()["busy_slots"] == 0, what="the killed task's slot to be free")
    # The slot works again (with a new worker).
    assert idle.call(remote_funcs.add, 2, 3).result(30) == 5


def test_cancel_before_the_submission_is_answered(pilot: saker.Pilot) -> None:
    futures = [pilot.call(remote_funcs.sleep_then, 0.2, i) for i in range(20)]
    for f in futures:
        f.cancel()
    assert all(f.cancelled() for f in futures)
    wait_for(lambda: all(f.job is not None for f in futures), what="the jobs to be known")
    wait_for(lambda: pilot.status()["queued"] == 0 and pilot.status()["busy_slots"] == 0,
             what="the cancelled jobs to leave the pilot")


# ------------------------------------------------------------------- replays and limits


def test_worker_crash_is_replayed(pilot: saker.Pilot, tmp_path: Path) -> None:
    marker = tmp_path / "crashed-once"
    replays = pilot.status()["replays"]
    second_attempt = pilot.call(remote_funcs.crash_first_attempt, str(marker)).result(60)
    first_attempt = marker.read_text()
    assert first_attempt and second_attempt != first_attempt
    assert pilot.status()["replays"] == replays + 1
    # The history says the first attempt was lost.
    marker2 = tmp_path / "crashed-once-2"
    from saker.serialize import dumps_call

    raw = pilot.submit_function(dumps_call(remote_funcs.crash_first_attempt, (str(marker2),), {})).result(60)
    assert __import__("pickle").loads(raw) != marker2.read_text()


def test_lost_beyond_replays(pilot: saker.Pilot, tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    future = pilot.options(max_replays=0).call(remote_funcs.crash_first_attempt, str(marker))
    with pytest.raises(saker.TaskLost) as info:
        future.result(60)
    assert info.value.result.output is None
    assert info.value.result.failure == "lost"
    assert pilot.call(remote_funcs.add, 1, 1).result(30) == 2


def test_time_limit_kills_a_hung_worker(pilot: saker.Pilot) -> None:
    t0 = time.monotonic()
    hung = pilot.options(time_limit=1).call(time.sleep, 60)
    with pytest.raises(saker.TaskFailed) as info:
        hung.result(30)
    assert time.monotonic() - t0 < 20
    assert isinstance(info.value, saker.TaskLost)
    assert "time limit" in (info.value.result.reason or "")
    assert "time limit" in str(info.value)
    assert info.value.result.failure == "time_limit"
    assert pilot.call(remote_funcs.add, 1, 2).result(30) == 3


@pytest.mark.parametrize("command", ["/nonexistent/python3 -m saker.worker", "{python} -I -m saker.worker"],
                         ids=["no-program", "no-saker"])
def test_a_worker_that_cannot_start_says_so_in_failure(saker_bin: str, tmp_path: Path, command: str) -> None:
    # The venv's base interpreter in isolated mode: no saker package on its path.
    base = Path(sys.base_prefix) / "bin" / "python3"
    worker = command.format(python=base)
    probe = subprocess.run([str(base), "-I", "-c", "import saker"], capture_output=True)
    if sys.prefix == sys.base_prefix or probe.returncode == 0:
        pytest.skip("needs a base Python without saker (tests run from a venv)")
    with saker.Pilot.start(tmp_path / "pilot", slots=1, workers={"python": worker}, saker_bin=saker_bin) as broken:
        with pytest.raises(saker.TaskLost) as info:
            broken.call(remote_funcs.add, 1, 2).result(60)
    result = info.value.result
    assert result.failure == "worker_start", result
    assert result.state == "failed"


# ------------------------------------------------------------------------------ errors


def test_options_are_checked_before_submitting(pilot: saker.Pilot) -> None:
    with pytest.raises(TypeError, match="unknown task option"):
        pilot.options(colour="blue")
    with pytest.raises(TypeError):
        pilot.options(cores="two")
    with pytest.raises(TypeError, match="command tasks only"):
        pilot.options(env={"A": "1"}).call(remote_funcs.add, 1)
    with pytest.raises(ValueError):
        pilot.options(cores=0)
    view = pilot.options(priority=-3, cores=1, tags="t", time_limit="1m", idempotent=True, max_replays=1)
    assert view.call(remote_funcs.add, 1, 1).result(30) == 2
    assert view.options(time_limit=30.5).submit("true").result(30).ok


def test_a_task_placed_on_a_node_runs_there_and_a_missing_node_is_refused(pilot: saker.Pilot) -> None:
    assert pilot.options(node=0).call(os.getenv, "SAKER_NODE").result(30) == "0"
    with pytest.raises(saker.SpecError, match="node 64"):
        pilot.options(node=64).call(os.getenv, "SAKER_NODE").result(30)


def test_invalid_spec_fails_only_its_own_call(pilot: saker.Pilot) -> None:
    good: List[Any] = []
    bad: List[Any] = []
    gang = pilot.options(nodes=2)
    for i in range(50):
        good.append(pilot.call(remote_funcs.square, i))
        if i % 20 == 7:
            bad.append(gang.call(remote_funcs.square, i))
    assert [f.result(30) for f in good] == [i * i for i in range(50)]
    for f in bad:
        with pytest.raises(saker.SpecError):
            f.result(30)


def test_pending_futures_fail_when_the_pilot_stops(saker_bin: str, tmp_path: Path) -> None:
    own = saker.Pilot.start(slots=1, saker_bin=saker_bin, extra_args=["--no-sync"])
    try:
        started, release = tmp_path / "started", tmp_path / "release"
        running = own.call(remote_funcs.block_until, str(started), str(release), 60.0)
        queued = own.call(remote_funcs.add, 1)
        wait_for(started.exists, what="the task to start")
        with saker.Pilot.connect(own.dir) as other:
            other.shutdown(kill_running=True)
        for future in (running, queued):
            with pytest.raises(saker.PilotClosed):
                future.result(30)
        # Refused (unavailable) while the pilot stops, PilotClosed once it is gone.
        with pytest.raises((saker.PilotClosed, saker.ProtocolError)):
            own.call(remote_funcs.add, 1).result(30)
    finally:
        own.close()
    assert not own.dir.exists()  # a temporary pilot directory is removed


def test_close_fails_pending_futures(saker_bin: str, tmp_path: Path) -> None:
    with saker.Pilot.start(slots=1, saker_bin=saker_bin, dir=tmp_path / "p", extra_args=["--no-sync"]) as own:
        future = own.call(remote_funcs.sleep_then, 30, 1)
    with pytest.raises(saker.PilotClosed):
        future.result(30)
    with pytest.raises(saker.PilotClosed):
        own.call(remote_funcs.add, 1)
    assert (tmp_path / "p" / "journal").exists()  # a given directory stays
    with pytest.raises(saker.PilotNotFound, match="no client.json"):
        saker.Pilot.connect(tmp_path / "p")


# --------------------------------------------------------------------------- HPC jobs


def test_an_hpc_job_runs_its_ranks_on_several_agents(saker_bin: str) -> None:
    # Three agents act as nodes; each rank reports its rendezvous variables.
    with saker.Pilot.start(agents=3, slots=6, saker_bin=saker_bin) as hpc:
        result = hpc.submit(
            'echo "$RANK/$WORLD_SIZE on $SAKER_NODE_RANK"',
            nodes=3, ranks_per_node=2,
        ).result(60)
        assert result.stdout == "0/6 on 0\n"
        assert result.gang is not None
        assert result.gang["ranks"] == 6
        processes = result.gang["processes"]
        assert [p["rank"] for p in processes] == list(range(6))
        assert sorted({p["member"] for p in processes}) == [0, 1, 2]
        with pytest.raises(saker.SpecError) as info:
            hpc.submit("true", nodes=4).result(30)
        assert "at most 3" in str(info.value)


@pytest.mark.parametrize("mpi", ["mpich", "openmpi"])
def test_an_mpi_job_started_by_the_agents_through_pmi(saker_bin: str, tmp_path: Path, mpi: str) -> None:
    # Ranks that the agents start and serve PMI themselves: no mpiexec, no mpirun
    # (Open MPI's through Saker's PMI library).
    probe = tmp_path / "probe"
    source = Path(__file__).resolve().parents[2] / "pilot" / "tests" / "mpi" / "probe.c"
    try:
        subprocess.run([f"mpicc.{mpi}", "-O2", "-o", str(probe), str(source)], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        if os.environ.get("SAKER_REQUIRE_MPI") == "1":
            raise
        pytest.skip(f"no {mpi} to build the probe with: {exc}")
    with saker.Pilot.start(agents=2, slots=4, saker_bin=saker_bin) as hpc:
        result = hpc.submit([str(probe)], nodes=2, ranks_per_node=2, mpi="pmi").result(60)
        line = next(line for line in result.stdout.splitlines() if line.startswith("probe rank=0"))
        assert " size=4 " in line and " sum=10 " in line, line
        wireup = result.gang["wireup"]
        assert 0 < wireup["init_us"] <= wireup["fence_us"]
        with pytest.raises(ValueError, match="option mpi must be one of none, pmi"):
            hpc.submit("true", nodes=2, mpi="pmix")
