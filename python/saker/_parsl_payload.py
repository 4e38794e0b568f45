"""Worker side of Saker's Parsl executor: runs one Parsl task payload.

The Python worker (``python -m saker.worker``) calls :func:`run` for every payload whose
format tag (first byte) is ``0x02``, with the bytes after the tag: a buffer made by
``parsl.serialize.pack_apply_message(func, args, kwargs)`` on the submit side
(:class:`saker.parsl.SakerExecutor`).

It does what the worker of Parsl's HighThroughputExecutor does with a task
(``process_worker_pool.worker`` → ``parsl.executors.execute_task.execute_task``):
unpack the function and its arguments, call it, and answer with ``serialize(result)``;
when anything raises (unpacking, the call, or serializing the result) it answers with
``serialize(RemoteExceptionWrapper(*sys.exc_info()))``, which the executor re-raises on
the submit side, exactly like HTEX.

Parsl is imported on the first call only, so that a worker that never runs a Parsl
task never pays for importing it.
"""

from __future__ import annotations

import sys

# Tag of this payload format, as the worker dispatches on it (first payload byte).
TAG = 0x02

# Results larger than this are still serialized; Parsl only logs a warning above it.
# Same value as HTEX's worker.
_RESULT_BUFFER_THRESHOLD = 1_000_000

# The one-line message travels in a RAISED frame and in the task's `reason`.
_MESSAGE_LIMIT = 500


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    message = f"{name}: {text}" if text else name
    message = " ".join(message.split())
    if len(message) > _MESSAGE_LIMIT:
        message = message[: _MESSAGE_LIMIT - 3] + "..."
    return message


def _serialize_exception(exc_info) -> bytes:
    from parsl.app.errors import RemoteExceptionWrapper
    from parsl.serialize import serialize

    try:
        return serialize(RemoteExceptionWrapper(*exc_info))
    except Exception as failure:  # the exception (or its traceback) does not pickle
        exc = exc_info[1]
        replacement = RuntimeError(
            f"{_one_line(exc)} (the original exception could not be serialized: "
            f"{_one_line(failure)})"
        )
        return serialize(RemoteExceptionWrapper(RuntimeError, replacement, None))


def _execute(buffer: bytes):
    # parsl.executors.execute_task.execute_task, without its exec() indirection: it
    # only renames the function for the user's namespace.
    from parsl.serialize import unpack_apply_message

    func, args, kwargs = unpack_apply_message(buffer)
    return func(*args, **kwargs)


def run(buffer: bytes) -> tuple[bool, bytes, str]:
    """Run one Parsl task.

    Returns ``(True, serialize(result), "")`` when the function returned, and
    ``(False, serialize(RemoteExceptionWrapper(...)), "Type: message")`` when it (or
    unpacking its arguments, or serializing its result) raised.

    ``SystemExit`` raised by the task is reported like any exception rather than
    ending the worker (HTEX's worker would die and lose the task). ``KeyboardInterrupt``
    and ``GeneratorExit`` propagate.
    """
    try:
        from parsl.serialize import serialize

        result = _execute(bytes(buffer) if not isinstance(buffer, bytes) else buffer)
        output = serialize(result, buffer_threshold=_RESULT_BUFFER_THRESHOLD)
    except (Exception, SystemExit) as exc:
        exc_info = sys.exc_info()
        try:
            return False, _serialize_exception(exc_info), _one_line(exc)
        finally:
            del exc_info
    return True, output, ""
