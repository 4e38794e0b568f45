"""How Python calls travel as function-task payloads (format byte ``0x01``).

Payload: ``b"\\x01" + pickle((fn, args, kwargs))``, made with cloudpickle when it is
importable and with the standard pickle otherwise. The worker answers RETURNED with
``pickle(value)`` or RAISED with the pickle of the exception, rebuilt on the client
with the worker's traceback text as ``__cause__`` (a :class:`RemoteTraceback`).

Without cloudpickle, functions and classes of a script's ``__main__`` travel by
reference to the script (or to the module of ``python -m``); the worker runs that
script once as ``__mp_main__`` (what ``multiprocessing``'s spawn start method does),
so ``if __name__ == "__main__":`` blocks do not run there. Everything else pickles as
the standard pickle does, so bound methods keep their ``self``, partials their
function and callable objects their state. What cannot travel (a lambda, a local
function, a script read from standard input) is refused with a hint before it is
sent.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import traceback
import types
from typing import Any, Callable, Dict, Optional, Tuple

from .errors import RemoteError, RemoteTraceback, SakerError

try:  # optional: pickles lambdas, closures and interactive functions by value
    import cloudpickle as _cloudpickle  # type: ignore[import-not-found, unused-ignore]
except Exception:  # pragma: no cover - depends on the environment
    _cloudpickle = None

FORMAT_PICKLE = 0x01
FORMAT_PARSL = 0x02
_TAG = bytes([FORMAT_PICKLE])
_PROTOCOL = pickle.HIGHEST_PROTOCOL
# Arguments of these types pickle identically with pickle and cloudpickle, and the
# C pickler is several times faster than cloudpickle's Python-level hooks.
_SIMPLE_TYPES = frozenset((int, float, str, bytes, bool, type(None), complex))
_MESSAGE_LIMIT = 500

__all__ = [
    "dumps_call",
    "prepare_function",
    "loads_output",
    "loads_exception",
    "run_call",
    "one_line",
]


# ----------------------------------------------------------------------------- client


def _cloud_dumps(obj: Any) -> bytes:
    assert _cloudpickle is not None
    data: bytes = _cloudpickle.dumps(obj, protocol=_PROTOCOL)
    return data


class _MainPickler(pickle.Pickler):
    """The standard pickler, with the script's ``__main__`` sent by reference.

    A worker does not have the client's ``__main__``: functions and classes defined
    there pickle as a reference to the script (or ``-m`` module) instead, which the
    worker loads once as ``__mp_main__`` (what ``multiprocessing``'s spawn does).
    Everything else pickles as usual, so a bound method keeps its ``self``, a
    ``functools.partial`` its function and a callable object its class, wherever
    they are defined.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) == "__main__":
            return (_main_attribute, (_main_source(obj), obj.__qualname__))
        return NotImplemented


def _main_source(obj: Any) -> Tuple[str, str]:
    """How a worker finds the client's ``__main__``: ``("path", P)`` or ``("module", M)``."""
    qualname = getattr(obj, "__qualname__", "")
    if "<" in qualname:  # <lambda>, <locals>
        raise SakerError(
            f"cannot send {obj!r} to a worker: a lambda or a function defined inside "
            "another function has no name a worker can import; define it at the top "
            "level of the script or a module, or install cloudpickle (pip install cloudpickle)"
        )
    main = sys.modules.get("__main__")
    # What the worker's __mp_main__ pickles (return values of __main__ classes) must
    # resolve here too; multiprocessing sets the same alias.
    if main is not None:
        sys.modules.setdefault("__mp_main__", main)
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if name and name != "__main__":  # python -m package.module
        return ("module", name)
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        raise SakerError(
            f"cannot send {obj!r} to a worker: it is defined in an interactive session "
            "or a script read from standard input, which a worker cannot load; save the "
            "script to a file, define it in a module, or install cloudpickle "
            "(pip install cloudpickle)"
        )
    return ("path", os.path.abspath(path))


def _main_dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _MainPickler(buffer, protocol=_PROTOCOL).dump(obj)
    return buffer.getvalue()


class _Preloaded:
    """A function pickled once (by :func:`prepare_function`) and sent as bytes.

    ``map`` sends the same function thousands of times: this pickles it once on the
    client and unpickles it once per worker (cached by its bytes).
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> Tuple[Any, Tuple[bytes]]:
        return (_load_preloaded, (self.data,))


def _dumps(obj: Any, what: Any) -> bytes:
    """``obj`` pickled for a worker; ``what`` names it in the error if it cannot be."""
    try:
        if _cloudpickle is not None:
            return _cloud_dumps(obj)
        return _main_dumps(obj)
    except SakerError:
        raise
    except Exception as exc:
        hint = "" if _cloudpickle is not None else "; or install cloudpickle (pip install cloudpickle)"
        raise SakerError(
            f"cannot send {what!r} and its arguments to a worker: {one_line(exc)} "
            f"(the function, its arguments and what they refer to must pickle{hint})"
        ) from exc


def prepare_function(fn: Callable[..., Any]) -> Any:
    """A picklable stand-in for ``fn`` that is cheap to pickle again and again."""
    return _Preloaded(_dumps(fn, fn))


def dumps_call(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bytes:
    """The payload of one call; ``fn`` may be a :func:`prepare_function` result."""
    if type(fn) is _Preloaded:
        # map's hot path: arguments of simple types pickle the same with the plain C
        # pickler, several times faster than cloudpickle's or the __main__ hook.
        simple = _SIMPLE_TYPES
        for arg in args:
            if type(arg) not in simple:
                return _TAG + _dumps((fn, args, kwargs), fn)
        for arg in kwargs.values():
            if type(arg) not in simple:
                return _TAG + _dumps((fn, args, kwargs), fn)
        return _TAG + pickle.dumps((fn, args, kwargs), protocol=_PROTOCOL)
    return _TAG + _dumps((fn, args, kwargs), fn)


def loads_output(data: bytes) -> Any:
    """The value a worker returned."""
    return pickle.loads(data)


def loads_exception(data: Optional[bytes], reason: Optional[str]) -> BaseException:
    """The exception a worker raised, with its traceback text as ``__cause__``."""
    text = reason or "raised"
    if text.startswith("raised: "):
        text = text[len("raised: ") :]
    if data is None:
        return _remote_error_from_text(text)
    try:
        exc = pickle.loads(data)
    except Exception as failure:
        error = _remote_error_from_text(text)
        error.__cause__ = RemoteTraceback(
            f"the remote exception could not be unpickled here: {one_line(failure)}"
        )
        return error
    if isinstance(exc, BaseException):
        return exc
    return _remote_error_from_text(f"{text} (worker answered {type(exc).__name__})")


def _remote_error_from_text(text: str) -> RemoteError:
    name, sep, message = text.partition(": ")
    if not sep or " " in name:
        return RemoteError("Exception", text)
    return RemoteError(name, message)


def _run_chunk(fn: Callable[..., Any], chunk: Any) -> list:  # type: ignore[type-arg]
    """Runs ``map``'s chunk of argument tuples in one task."""
    return [fn(*args) for args in chunk]


# ----------------------------------------------------------------------------- worker

_preloaded: Dict[bytes, Any] = {}
_main_modules: Dict[Tuple[str, str], types.ModuleType] = {}


def _load_preloaded(data: bytes) -> Any:
    fn = _preloaded.get(data)
    if fn is None:
        fn = pickle.loads(data)
        if len(_preloaded) >= 256:
            _preloaded.clear()
        _preloaded[data] = fn
    return fn


def _main_attribute(source: Tuple[str, str], qualname: str) -> Any:
    """Loads the client's script as ``__mp_main__`` (once) and finds ``qualname``."""
    module = _main_modules.get(source)
    if module is None:
        import runpy

        kind, where = source
        module = types.ModuleType("__mp_main__")
        sys.modules["__mp_main__"] = module
        if kind == "module":
            code = runpy.run_module(where, run_name="__mp_main__", alter_sys=True)
        else:
            directory = os.path.dirname(where)
            if directory not in sys.path:
                sys.path.insert(0, directory)
            code = runpy.run_path(where, run_name="__mp_main__")
        module.__dict__.update(code)
        sys.modules["__mp_main__"] = module
        # Pickles of the client name its __main__ classes "__main__.X".
        sys.modules["__main__"] = module
        _main_modules[source] = module
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class _ExceptionWithTraceback:
    """Pickles as the exception, rebuilt with the traceback text as ``__cause__``."""

    def __init__(self, exc: BaseException, tb: str) -> None:
        self.exc = exc
        self.tb = tb

    def __reduce__(self) -> Tuple[Any, Tuple[BaseException, str]]:
        return (_rebuild_exception, (self.exc, self.tb))


def _rebuild_exception(exc: BaseException, tb: str) -> BaseException:
    exc.__cause__ = RemoteTraceback(tb)
    return exc


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, short enough for a RAISED frame's message."""
    text = str(exc)
    name = type(exc).__qualname__
    message = " ".join(f"{name}: {text}".split()) if text else name
    if len(message) > _MESSAGE_LIMIT:
        message = message[: _MESSAGE_LIMIT - 3] + "..."
    return message


def dumps_exception(exc: BaseException) -> bytes:
    """The exception as the client will rebuild it; a RemoteError if it won't pickle."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    tb = '\n"""\n' + tb + '"""'
    try:
        data = pickle.dumps(_ExceptionWithTraceback(exc, tb), protocol=_PROTOCOL)
        pickle.loads(data)  # an exception whose __init__ needs other args fails here
        return data
    except Exception:
        pass
    if _cloudpickle is not None:
        try:
            data = _cloud_dumps(_ExceptionWithTraceback(exc, tb))
            pickle.loads(data)
            return data
        except Exception:
            pass
    stand_in = RemoteError(type(exc).__qualname__, " ".join(str(exc).split()))
    return pickle.dumps(_ExceptionWithTraceback(stand_in, tb), protocol=_PROTOCOL)


def run_call(payload: Any) -> Tuple[bool, bytes, str]:
    """Runs a ``0x01`` payload (without its tag): ``(returned, output, message)``."""
    try:
        fn, args, kwargs = pickle.loads(payload)
        value = fn(*args, **kwargs)
    except BaseException as exc:
        return False, dumps_exception(exc), one_line(exc)
    try:
        return True, pickle.dumps(value, protocol=_PROTOCOL), ""
    except Exception as first:
        if _cloudpickle is not None:
            try:
                return True, _cloud_dumps(value), ""
            except Exception:
                pass
        error = TypeError(f"the return value could not be pickled: {one_line(first)}")
        return False, dumps_exception(error), one_line(error)
