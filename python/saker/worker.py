"""The persistent Python worker: ``python -m saker.worker`` (docs/workers.md).

The agent starts one per slot and sends it CALL frames on stdin; each is answered on
stdout with one RETURNED or RAISED frame. The first payload byte says how to run it:
``0x01`` a pickled ``(fn, args, kwargs)`` (:mod:`saker.serialize`), ``0x02`` a Parsl
task (:mod:`saker._parsl_payload`).

Per-call overhead matters (thousands of calls per second per worker): frames are read
with ``readinto`` into one reused buffer and each answer is a single ``write``.
"""

from __future__ import annotations

import io
import os
import platform
import struct
import sys
from typing import Any, Callable, Optional, Tuple

WORKER_PROTOCOL = 1
READY, CALL, RETURNED, RAISED = 1, 2, 3, 4
_MAX_FRAME = 1 << 30

_header = struct.Struct("<IB")  # length, type
_call_ids = struct.Struct("<QQ")
_returned_head = struct.Struct("<IBQQ")
_raised_head = struct.Struct("<IBQQI")

__all__ = ["main", "serve"]


class _FrameReader:
    """Reads length-prefixed frames from a pipe into one growing buffer."""

    def __init__(self, fd: int) -> None:
        self._file = io.FileIO(fd, "rb", closefd=False)
        self._buffer = bytearray(1 << 16)
        self._view = memoryview(self._buffer)
        self._start = 0  # first unconsumed byte
        self._end = 0  # end of the bytes read

    def _fill(self, need: int) -> bool:
        """Makes ``need`` bytes available from ``_start``; False at end of input."""
        if len(self._buffer) - self._start < need:
            # Move what is left to the front, growing the buffer if the frame is big.
            pending = self._end - self._start
            if need > len(self._buffer):
                self._view.release()
                grown = bytearray(max(need, 2 * len(self._buffer)))
                grown[:pending] = self._buffer[self._start : self._end]
                self._buffer = grown
                self._view = memoryview(self._buffer)
            else:
                self._buffer[:pending] = self._buffer[self._start : self._end]
            self._start, self._end = 0, pending
        while self._end - self._start < need:
            count = self._file.readinto(self._view[self._end :])
            if not count:
                return False
            self._end += count
        return True

    def next(self) -> Optional[Tuple[int, memoryview]]:
        """``(type, body)`` of the next frame (body valid until the next call)."""
        if self._start == self._end:
            self._start = self._end = 0
        if not self._fill(4):
            return None
        (length,) = struct.unpack_from("<I", self._buffer, self._start)
        if length < 1 or length > _MAX_FRAME:
            raise ValueError(f"bad frame length {length}")
        if not self._fill(4 + length):
            return None
        start = self._start + 4
        self._start = start + length
        return self._buffer[start], self._view[start + 1 : start + length]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _returned(task: int, attempt: int, output: bytes) -> bytes:
    return _returned_head.pack(1 + 16 + len(output), RETURNED, task, attempt) + output


def _raised(task: int, attempt: int, message: str, output: bytes) -> bytes:
    text = message.encode("utf-8", "replace")
    head = _raised_head.pack(1 + 16 + 4 + len(text) + len(output), RAISED, task, attempt, len(text))
    return head + text + output


def _run_parsl(payload: Any) -> Tuple[bool, bytes, str]:
    try:
        from saker._parsl_payload import run
    except Exception as exc:
        from .serialize import dumps_exception, one_line

        error = RuntimeError(f"this worker cannot run Parsl payloads: {one_line(exc)}")
        return False, dumps_exception(error), one_line(error)
    ok, output, message = run(bytes(payload))
    return bool(ok), bytes(output), str(message)


def _unknown_format(tag: int) -> Tuple[bool, bytes, str]:
    from .serialize import dumps_exception, one_line

    error = ValueError(
        f"unknown payload format 0x{tag:02x} (this worker runs 0x01 pickled calls "
        "and 0x02 Parsl tasks)"
    )
    return False, dumps_exception(error), one_line(error)


def serve(in_fd: int, out_fd: int) -> int:
    """Sends READY, then answers CALL frames until end of input; returns an exit code."""
    from .serialize import run_call

    runners: dict[int, Callable[[Any], Tuple[bool, bytes, str]]] = {
        0x01: run_call,
        0x02: _run_parsl,
    }
    text = f"python {platform.python_version()} pid {os.getpid()}".encode()
    _write_all(out_fd, _header.pack(1 + 4 + len(text), READY) + struct.pack("<I", WORKER_PROTOCOL) + text)
    reader = _FrameReader(in_fd)
    environ = os.environ
    unpack_ids = _call_ids.unpack_from
    while True:
        frame = reader.next()
        if frame is None:
            return 0
        kind, body = frame
        if kind != CALL or len(body) < 16:
            sys.stderr.write(f"saker.worker: unexpected frame type {kind}, exiting\n")
            return 2
        task, attempt = unpack_ids(body)
        environ["SAKER_TASK_ID"] = str(task)
        environ["SAKER_ATTEMPT_ID"] = str(attempt)
        if len(body) > 16:
            tag = body[16]
            runner = runners.get(tag)
            # A copy: the frame buffer is reused while user code may keep the bytes.
            payload = bytes(body[17:])
            ok, output, message = runner(payload) if runner else _unknown_format(tag)
        else:
            ok, output, message = False, b"", "empty payload"
        del body, frame
        if ok:
            _write_all(out_fd, _returned(task, attempt, output))
        else:
            _write_all(out_fd, _raised(task, attempt, message, output))


def main() -> int:
    """Keeps the real stdout for frames and points fd 1 (user prints) at stderr."""
    out_fd = os.dup(1)
    os.dup2(2, 1)
    in_fd = os.dup(0)
    # User code reading stdin must not eat CALL frames.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        sys.stdout.flush()
        # Prints reach the worker's log as they happen, not when a buffer fills (a
        # worker killed at a time limit would lose them).
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except Exception:
        pass
    try:
        return serve(in_fd, out_fd)
    except KeyboardInterrupt:
        return 130
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass


if __name__ == "__main__":
    sys.exit(main())
