"""saker._parsl_payload.run: the worker side of the Parsl executor, without a pilot."""

import pytest

pytest.importorskip("parsl")

from parsl.app.errors import RemoteExceptionWrapper  # noqa: E402
from parsl.serialize import deserialize, pack_apply_message  # noqa: E402

from saker import _parsl_payload  # noqa: E402


def add(a, b=0):
    return a + b


def fail(message):
    raise ValueError(message)


def leave():
    raise SystemExit(3)


def unpicklable():
    return (x for x in range(3))  # generators do not pickle, even with dill


def chained():
    try:
        raise KeyError("inner")
    except KeyError as e:
        raise RuntimeError("outer\nsecond line") from e


def test_returns_serialized_result():
    ok, output, message = _parsl_payload.run(pack_apply_message(add, (2,), {"b": 40}))
    assert ok and message == ""
    assert deserialize(output) == 42


def test_accepts_memoryview():
    ok, output, _ = _parsl_payload.run(memoryview(pack_apply_message(add, (1, 2), {})))
    assert ok and deserialize(output) == 3


def test_exception_travels_as_remote_exception_wrapper():
    ok, output, message = _parsl_payload.run(pack_apply_message(fail, ("bad",), {}))
    assert not ok
    assert message == "ValueError: bad"
    wrapper = deserialize(output)
    assert isinstance(wrapper, RemoteExceptionWrapper)
    with pytest.raises(ValueError, match="bad"):
        wrapper.reraise()


def test_message_is_one_line_and_cause_kept():
    ok, output, message = _parsl_payload.run(pack_apply_message(chained, (), {}))
    assert not ok
    assert message == "RuntimeError: outer second line"
    with pytest.raises(RuntimeError) as info:
        deserialize(output).reraise()
    assert isinstance(info.value.__cause__, KeyError)


def test_system_exit_is_reported_not_fatal():
    ok, output, message = _parsl_payload.run(pack_apply_message(leave, (), {}))
    assert not ok and message == "SystemExit: 3"
    with pytest.raises(SystemExit):
        deserialize(output).reraise()


def test_unserializable_result_is_an_exception():
    ok, output, message = _parsl_payload.run(pack_apply_message(unpicklable, (), {}))
    assert not ok
    assert isinstance(deserialize(output), RemoteExceptionWrapper)
    assert message


def test_garbage_buffer_is_an_exception():
    ok, output, message = _parsl_payload.run(b"not a parsl buffer")
    assert not ok
    assert isinstance(deserialize(output), RemoteExceptionWrapper)
