"""The worker protocol of ``python -m saker.worker`` (docs/workers.md), through pipes."""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

import remote_funcs
from saker import RemoteError, RemoteTraceback
from saker.serialize import dumps_call, prepare_function

PYTHON_DIR = Path(__file__).resolve().parents[1]
READY, CALL, RETURNED, RAISED = 1, 2, 3, 4


class Worker:
    def __init__(self, tmp_path: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), str(Path(__file__).parent)])
        self.stderr_path = tmp_path / "worker.stderr"
        self.stderr = open(self.stderr_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "saker.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )

    def read_frame(self) -> Tuple[int, bytes]:
        assert self.process.stdout is not None
        head = self.process.stdout.read(4)
        assert len(head) == 4, f"worker closed its stdout; stderr: {self.stderr_path.read_text()}"
        (length,) = struct.unpack("<I", head)
        body = self.process.stdout.read(length)
        assert len(body) == length
        return body[0], body[1:]

    def send_call(self, task: int, attempt: int, payload: bytes) -> None:
        assert self.process.stdin is not None
        body = struct.pack("<BQQ", CALL, task, attempt) + payload
        self.process.stdin.write(struct.pack("<I", len(body)) + body)
        self.process.stdin.flush()

    def answer(self) -> Tuple[int, int, int, str, bytes]:
        """(type, task, attempt, message, output) of the next RETURNED/RAISED."""
        kind, body = self.read_frame()
        task, attempt = struct.unpack_from("<QQ", body)
        if kind == RETURNED:
            return kind, task, attempt, "", body[16:]
        assert kind == RAISED, kind
        (length,) = struct.unpack_from("<I", body, 16)
        message = body[20 : 20 + length].decode()
        return kind, task, attempt, message, body[20 + length :]

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(10)
        self.stderr.close()
        return code


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    w = Worker(tmp_path)
    kind, body = w.read_frame()
    assert kind == READY
    (version,) = struct.unpack_from("<I", body)
    assert version == 1
    assert body[4:].decode().startswith("python ")
    yield w
    if w.process.poll() is None:
        w.process.kill()
        w.process.wait()
    w.stderr.close()


def test_returned_carries_ids_and_pickled_value(worker: Worker) -> None:
    worker.send_call(7, 11, dumps_call(remote_funcs.add, (2,), {"b": 3}))
    kind, task, attempt, _, output = worker.answer()
    assert (kind, task, attempt) == (RETURNED, 7, 11)
    assert pickle.loads(output) == 5
    assert worker.close() == 0


def test_environment_per_call(worker: Worker) -> None:
    for task, attempt in ((1, 100), (2, 205)):
        worker.send_call(task, attempt, dumps_call(remote_funcs.environment, (), {}))
        kind, _, _, _, output = worker.answer()
        assert kind == RETURNED
        env = pickle.loads(output)
        assert env["SAKER_TASK_ID"] == str(task)
        assert env["SAKER_ATTEMPT_ID"] == str(attempt)


def test_raised_carries_exception_and_traceback(worker: Worker) -> None:
    worker.send_call(3, 4, dumps_call(remote_funcs.fail, ("boom",), {}))
    kind, task, attempt, message, output = worker.answer()
    assert (kind, task, attempt) == (RAISED, 3, 4)
    assert message == "ValueError: boom"
    exc = pickle.loads(output)
    assert isinstance(exc, ValueError) and str(exc) == "boom"
    assert isinstance(exc.__cause__, RemoteTraceback)
    assert "in fail" in str(exc.__cause__)
    # The worker goes on after an exception.
    worker.send_call(5, 6, dumps_call(remote_funcs.square, (9,), {}))
    assert pickle.loads(worker.answer()[4]) == 81


def test_exceptions_that_do_not_round_trip_become_remote_errors(worker: Worker) -> None:
    worker.send_call(1, 1, dumps_call(remote_funcs.fail_unpicklable, (), {}))
    kind, _, _, message, output = worker.answer()
    assert kind == RAISED and message == "Unpicklable: secret"
    exc = pickle.loads(output)
    assert isinstance(exc, RemoteError)
    assert exc.type_name == "Unpicklable" and exc.message == "secret"

    worker.send_call(2, 2, dumps_call(remote_funcs.fail_custom, (), {}))
    kind, _, _, message, output = worker.answer()
    assert kind == RAISED and message == "NeedsTwoArgs: needs 1 and 2"
    assert isinstance(pickle.loads(output), RemoteError)

    worker.send_call(3, 3, dumps_call(remote_funcs.return_unpicklable, (), {}))
    kind, _, _, message, output = worker.answer()
    assert kind == RAISED and "could not be pickled" in message
    assert isinstance(pickle.loads(output), TypeError)


def test_prints_go_to_stderr_and_stdin_is_not_the_frames(worker: Worker) -> None:
    worker.send_call(1, 1, dumps_call(remote_funcs.hello_print, ("hello from user code",), {}))
    assert pickle.loads(worker.answer()[4]) == "printed"
    worker.send_call(2, 1, dumps_call(remote_funcs.read_stdin, (), {}))
    assert pickle.loads(worker.answer()[4]) == ""
    assert worker.close() == 0
    assert "hello from user code" in worker.stderr_path.read_text()


def test_unknown_format_and_empty_payload(worker: Worker) -> None:
    worker.send_call(1, 2, b"\x7fwhatever")
    kind, task, attempt, message, output = worker.answer()
    assert (kind, task, attempt) == (RAISED, 1, 2)
    assert "unknown payload format 0x7f" in message
    worker.send_call(3, 4, b"")
    kind, task, _, message, _ = worker.answer()
    assert (kind, task) == (RAISED, 3) and "empty payload" in message


def test_back_to_back_and_large_frames(worker: Worker) -> None:
    prepared = prepare_function(remote_funcs.identity)
    # Several small calls written at once: answered one by one, in order.
    values: List[Any] = [b"x", "y" * 1000, 42]
    for i, value in enumerate(values):
        worker.send_call(i, i, dumps_call(prepared, (value,), {}))
    for i, value in enumerate(values):
        kind, task, _, _, output = worker.answer()
        assert (kind, task) == (RETURNED, i)
        assert pickle.loads(output) == value
    # Frames larger than the read buffer (one at a time: a pipe holds far less).
    for size in (3 << 20, 100, 9 << 20):
        big = os.urandom(size)
        worker.send_call(size, 1, dumps_call(prepared, (big,), {}))
        kind, task, _, _, output = worker.answer()
        assert (kind, task) == (RETURNED, size)
        assert pickle.loads(output) == big


def test_main_functions_load_the_script_without_running_its_main_block(worker: Worker, tmp_path: Path) -> None:
    # A client script makes the payload in its __main__ block, as a user's script would.
    script = tmp_path / "user_script.py"
    payload_path = tmp_path / "payload"
    runs = tmp_path / "main-block-runs"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.modules["cloudpickle"] = None  # by reference to this script, as without it
        from saker.serialize import dumps_call

        class Point:
            def __init__(self, x):
                self.x = x

        def double(p):
            return Point(p.x * 2)

        if __name__ == "__main__":
            with open({str(runs)!r}, "a") as f:
                f.write("ran\\n")
            with open({str(payload_path)!r}, "wb") as f:
                f.write(dumps_call(double, (Point(21),), {{}}))
    """))
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    subprocess.run([sys.executable, str(script)], check=True, env=env, timeout=30)
    worker.send_call(1, 1, payload_path.read_bytes())
    kind, _, _, message, output = worker.answer()
    assert kind == RETURNED, message
    # The worker's copy of the script is __mp_main__ (what the client aliases too).
    assert b"__mp_main__" in output and b"Point" in output
    assert runs.read_text() == "ran\n"


def test_end_of_input_exits(worker: Worker) -> None:
    assert worker.close() == 0
