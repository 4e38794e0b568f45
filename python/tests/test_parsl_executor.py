"""SakerExecutor end to end: Parsl apps on a real embedded pilot.

One DataFlowKernel (one local pilot, two slots) for the module; the binary comes from
conftest's ``saker_bin`` fixture ($SAKER_BIN or target/release/saker).
"""

from __future__ import annotations

import os
import time

import pytest
from conftest import parsl_kernel, wait_for

parsl = pytest.importorskip("parsl")

from parsl.app.app import bash_app, join_app, python_app  # noqa: E402
from parsl.app.errors import BashExitFailure  # noqa: E402
from parsl.executors.errors import InvalidResourceSpecification  # noqa: E402

from saker.parsl import SakerExecutor, SakerTaskError  # noqa: E402


@pytest.fixture(scope="module")
def dfk(tmp_path_factory, saker_bin):
    with parsl_kernel(tmp_path_factory.mktemp("parsl-run"), saker_bin, slots=2) as kernel:
        yield kernel


@python_app
def add(a, b=0):
    return a + b


@python_app
def worker_pid():
    return os.getpid()


@python_app
def fail(message):
    raise ValueError(message)


@python_app
def sleep_then(seconds, value, parsl_resource_specification={}):
    import time

    time.sleep(seconds)
    return value


@python_app
def kill_worker():
    os._exit(7)


@python_app
def echo_spec(parsl_resource_specification={}):
    return "ran"


@bash_app
def write_file(path, text, stdout=None, stderr=None):
    return f"echo {text} > {path}"


@bash_app
def exit_with(code):
    return f"exit {code}"


@join_app
def fan_in(n):
    return add(sum(range(n)), 0)


@join_app
def fan_out(n):
    from parsl.app.app import python_app as app

    @app
    def square(x):
        return x * x

    return [square(i) for i in range(n)]


@python_app
def described(data):
    import os

    return {"type": type(data).__name__, "len": len(data), "node": os.environ.get("SAKER_NODE")}


@python_app
def filled(byte, size):
    return bytes([byte]) * size


def test_large_arguments_and_values_go_by_reference(dfk):
    """Over the 16 MiB a task carries inline, both ways: the argument is put in the
    node's store and mapped by the worker, the value stored there and read back;
    neither file is left once the task has ended."""
    from saker.parsl import SakerExecutor

    executor = next(e for e in dfk.executors.values() if isinstance(e, SakerExecutor))
    stores = executor.pilot._object_stores().seen()
    before = {name for _, scratch in stores for name in os.listdir(scratch) if name.startswith("obj-")}
    big = b"z" * (20 << 20)
    assert described(big).result(timeout=60)["len"] == 20 << 20
    assert filled(3, 20 << 20).result(timeout=60) == b"\x03" * (20 << 20)
    assert add(2, 3).result(timeout=60) == 5

    def left():
        return {name for _, scratch in stores for name in os.listdir(scratch) if name.startswith("obj-")} - before

    wait_for(lambda: not left(), what="the task's stored argument and value removed")


def test_from_a_client_on_no_node_large_arguments_and_values_go_node_to_node(dfk, monkeypatch):
    """As on a login node (no node's store in sight): the same app's 20 MiB argument
    and value travel to and from the nodes' agents directly, none of it through the
    pilot's root, and the objects are freed after."""
    import saker

    executor = next(e for e in dfk.executors.values() if isinstance(e, SakerExecutor))
    pilot = executor.pilot
    stores = pilot._object_stores()
    fresh = saker.stores.Stores(pilot._require_connection(), pilot.pilot_id, stores.binary)
    monkeypatch.setattr(fresh, "_sees", lambda node, directory: ())
    monkeypatch.setattr(pilot, "_stores", fresh)
    assert fresh.seen() == [] and fresh.sees_none()
    held = pilot.status()["items"]
    assert described(b"z" * (20 << 20)).result(timeout=60)["len"] == 20 << 20
    assert filled(4, 20 << 20).result(timeout=60) == b"\x04" * (20 << 20)
    assert pilot.status()["data_root_bytes"] == 0
    # Freed once their refs are garbage, with the client's next request (free()).
    wait_for(lambda: not pilot.free() and pilot.status()["items"] == held,
             what="the argument's and value's objects freed")


def test_python_app(dfk):
    assert add(1, 2).result(timeout=60) == 3
    futures = [add(i, i) for i in range(200)]
    assert [f.result(timeout=60) for f in futures] == [2 * i for i in range(200)]


def test_workers_are_persistent_processes(dfk):
    pids = {worker_pid().result(timeout=60) for _ in range(20)}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2  # one worker per slot, reused


def test_bash_app(dfk, tmp_path):
    target = tmp_path / "out.txt"
    assert write_file(str(target), "hello").result(timeout=60) == 0
    assert target.read_text().strip() == "hello"
    with pytest.raises(BashExitFailure) as info:
        exit_with(3).result(timeout=60)
    assert info.value.exitcode == 3


def test_join_app(dfk):
    assert fan_in(10).result(timeout=60) == 45
    assert fan_out(5).result(timeout=60) == [0, 1, 4, 9, 16]


def test_remote_exception_is_reraised(dfk):
    with pytest.raises(ValueError, match="bad input") as info:
        fail("bad input").result(timeout=60)
    # the remote traceback travels with it (RemoteExceptionWrapper)
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "fail" in frames


def test_dependencies_between_apps(dfk):
    a = add(1, 1)
    b = add(a, 10)
    c = add(b, a)
    assert c.result(timeout=60) == 14


def test_resource_specification_accepted(dfk):
    spec = {"cores": 1, "priority": 3, "walltime": 30, "memory": 100, "gpus": 0, "num_nodes": 1}
    assert echo_spec(parsl_resource_specification=spec).result(timeout=60) == "ran"


@python_app
def cores_seen(parsl_resource_specification={}):
    import os

    names = ("SAKER_CORES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    return {name: os.environ.get(name) for name in names}, len(os.sched_getaffinity(0))


def test_an_app_gets_the_cores_it_asks_for_pinned_and_sees_them(dfk):
    # Two cores on this two-slot pilot (the machine CI runs on has two CPUs): a
    # threaded library in the app sizes its pools by the variables, and the app is
    # pinned to as many CPUs when the machine has one per slot.
    names = ("SAKER_CORES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    for cores in (2, 1):
        told, cpus = cores_seen(parsl_resource_specification={"cores": cores}).result(timeout=60)
        assert told == {name: str(cores) for name in names}
        if os.cpu_count() == 2:
            assert cpus == cores


@pytest.mark.parametrize("spec, key", [
    ({"cpus": 1}, "cpus"),
    ({"gpus": 1.5}, "gpus"),
    ({"num_nodes": 0}, "num_nodes"),
    ({"cores": 0}, "cores"),
    ({"walltime": -1}, "walltime"),
])
def test_resource_specification_refused(dfk, spec, key):
    with pytest.raises(InvalidResourceSpecification) as info:
        echo_spec(parsl_resource_specification=spec).result(timeout=60)
    assert key in info.value.invalid_keys


def test_walltime_becomes_a_time_limit(dfk):
    started = time.monotonic()
    future = sleep_then(30, "late", parsl_resource_specification={"walltime": 1})
    with pytest.raises(SakerTaskError) as info:
        future.result(timeout=60)
    assert time.monotonic() - started < 20
    assert "time" in str(info.value).lower()
    # the slot's next worker works
    assert add(2, 2).result(timeout=60) == 4


def test_lost_task_fails_with_the_pilot_reason(dfk):
    with pytest.raises(SakerTaskError) as info:
        kill_worker().result(timeout=60)
    assert "without an answer" in str(info.value)
    assert info.value.reason
    assert add(3, 4).result(timeout=60) == 7


# --- the mapping itself, without a pilot -------------------------------------------


def options(spec, **executor_args):
    return SakerExecutor(**executor_args)._task_options(spec)


def test_mapping_cores_time_limits():
    assert options({"cores": 4})["cores"] == 4
    assert options({"walltime": 90})["time_limit"] == 90
    assert options({"running_time_min": 2})["time_limit"] == 120
    assert options({"walltime": 30, "running_time_min": 2})["time_limit"] == 30
    assert options({"walltime": 1.5})["time_limit"] == 1.5
    assert "time_limit" not in options({})
    assert options({"memory": 4096})["memory_mib"] == 4096
    assert options({"memory": 0.5})["memory_mib"] == 1  # MB, rounded up
    assert options({"gpus": 2})["gpus"] == 2
    assert "gpus" not in options({"gpus": 0})
    assert options({}, task_options={"max_replays": 1, "tags": ["p"]})["tags"] == ["p"]


def test_mapping_priority_follows_htex_order():
    # HTEX: lower value first, tasks without a priority last. Saker: higher first, 0 default.
    high, low = options({"priority": 1})["priority"], options({"priority": 10})["priority"]
    assert high > low > 0
    assert "priority" not in options({})  # Saker's default 0: after every prioritised task
    assert options({"priority": -5})["priority"] > high
    assert options({"priority": 10**12})["priority"] == 1
    assert options({"priority": -(10**12)})["priority"] == 2**31 - 1
    assert options({"priority": 2.4})["priority"] == options({"priority": 2})["priority"]
    assert options({}, default_priority=0)["priority"] == options({"priority": 0})["priority"]


def test_mapping_refusals():
    for spec in ({"cpus": 1}, {"gpus": 0.5}, {"gpus": -1}, {"num_nodes": 3, "num_ranks": 2}, {"cores": 1.5}, {"priority": "high"},
                 {"running_time_min": 0}, {"memory": -1}):
        with pytest.raises(InvalidResourceSpecification):
            options(spec)


# --- connecting to a running pilot, without a DataFlowKernel -------------------------


def triple(x):
    return 3 * x


def test_connect_to_a_running_pilot(pilot, tmp_path):
    executor = SakerExecutor(label="remote", pilot_dir=str(pilot.dir))
    assert not executor.is_local
    executor.run_dir = str(tmp_path)
    executor.start()
    try:
        futures = [executor.submit(triple, {}, i) for i in range(10)]
        assert [f.result(timeout=60) for f in futures] == [3 * i for i in range(10)]
        assert all(isinstance(f.parsl_executor_task_id, int) for f in futures)
    finally:
        executor.shutdown()
    # the executor only disconnected: the pilot still serves
    assert pilot.status()["agents"] == 1
    with pytest.raises(Exception):
        executor.submit(triple, {}, 1)


def test_task_error_pickles():
    import pickle

    error = SakerTaskError(SakerExecutor(label="x"), "task 3 ended without an answer: lost")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) == "Executor x failed due to: task 3 ended without an answer: lost"


def start_time(seconds, marker=None):
    import pathlib
    import time

    start = time.time()
    if marker:
        pathlib.Path(marker).touch()
    time.sleep(seconds)
    return start


def test_priority_order_as_with_htex(saker_bin, tmp_path):
    # Tasks queued at the pilot start lower Parsl priority first, those without one
    # last. One slot; blockers (no priority) are submitted until one of them stays
    # queued at the root: the node's slot and prefetch window are then full, so the
    # prioritized tasks submitted next all wait at the root, which orders them.
    # (Requests on one connection are handled in order: a status after a submit sees
    # whether that submit was dispatched at once.) Blockers last 2 s, so that none ends
    # and frees the slot while the loop still submits on a loaded machine.
    executor = SakerExecutor(label="prio", slots=1, saker_bin=saker_bin)
    executor.run_dir = str(tmp_path)
    executor.start()
    try:
        # The loop below reads "queued" as "the node is full": with no node joined yet,
        # the first blocker would stay queued and the loop end too early (the node then
        # took the first prioritized task into its prefetch: seen once in CI).
        wait_for(lambda: executor.pilot.status()["agents"] >= 1, what="the agent to join")
        blockers = []
        while not blockers or executor.pilot.status()["queued"] == 0:
            assert len(blockers) < 10, "the node took every blocker"
            blockers.append(executor.submit(start_time, {}, 2.0))
        queued = {name: executor.submit(start_time, spec, 0.15) for name, spec in [
            ("p5", {"priority": 5}), ("none", {}), ("p1", {"priority": 1}),
            ("p7", {"priority": 7}), ("p3", {"priority": 3})]}
        for b in blockers:
            b.result(timeout=60)
        start = {name: f.result(timeout=60) for name, f in queued.items()}
    finally:
        executor.shutdown()
    assert sorted(start, key=start.get) == ["p1", "p3", "p5", "p7", "none"], start


def test_undecodable_remote_exception_keeps_the_pilot_reason():
    from concurrent.futures import Future

    import saker

    class Result:
        output = b"not a parsl buffer"
        reason = "raised: RuntimeError: this worker cannot run Parsl payloads"

    executor = SakerExecutor(label="x")
    inner, fut = Future(), Future()
    fut.parsl_executor_task_id = 9
    inner.set_exception(saker.TaskFailed(Result(), "failed"))
    executor._complete(fut, inner)
    error = fut.exception()
    assert isinstance(error, SakerTaskError)
    assert "task 9 failed: raised: RuntimeError: this worker cannot run Parsl payloads" in str(error)
