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
sent. Objects of ``__main__`` that pickle by name (an ``lru_cache`` function, a
``NewType``) travel by reference to the script too, with cloudpickle or without.

The reference names the script, a digest of its text and the driver's ``sys.argv``:
a persistent worker that loaded an earlier version of the script (or the same script
run with other arguments, which its top-level code may read) loads it again rather
than run stale code. A payload larger than a function task may carry (16 MiB) is
refused before it is sent, and so is a return value that large, with a hint to pass
large data as files or data items.
"""

from __future__ import annotations

import copyreg
import hashlib
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
SIMPLE_TYPES = frozenset((int, float, str, bytes, bool, type(None), complex))
_MESSAGE_LIMIT = 500
#: Most bytes of a function task's payload and of its answer (the pilot's
#: MAX_FUNCTION_BYTES): both travel inline through the pilot, its journal and clients.
MAX_PAYLOAD = 16 << 20
_LARGE_DATA_HINT = (
    "pass large data as files instead (write it where the workers can read it and pass "
    "the path), or as data items (the reads=/writes= options, docs/data.md)"
)

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
    assert _CloudPickler is not None
    buffer = io.BytesIO()
    _CloudPickler(buffer, protocol=_PROTOCOL).dump(obj)
    return buffer.getvalue()


_DEFAULT_REDUCE_EX = object.__reduce_ex__
_DEFAULT_REDUCE = object.__reduce__


def _main_reduce(pickler: Any, obj: Any) -> Any:
    """A reference to the script for a ``__main__`` object pickle would name, else None.

    Functions and classes are the caller's business; this finds the other objects of
    ``__main__`` that pickle by name (``__reduce__`` returns a string: an
    ``lru_cache`` function, a ``NewType``), which a worker would look up in its own
    ``__main__`` and not find. For other instances of ``__main__`` classes it returns
    what their ``__reduce_ex__`` returned, so that they are not reduced twice.
    """
    try:
        if getattr(obj, "__module__", None) != "__main__" or isinstance(obj, types.ModuleType):
            return None
    except Exception:  # a proxy whose attributes fail
        return None
    kind = type(obj)
    if kind.__reduce_ex__ is _DEFAULT_REDUCE_EX and kind.__reduce__ is _DEFAULT_REDUCE:
        return None  # an instance reduced the default way: never by name
    table = getattr(pickler, "dispatch_table", copyreg.dispatch_table)
    if kind in table:
        return None  # a registered reducer (a bound method under cloudpickle) knows best
    try:
        reduced = obj.__reduce_ex__(_PROTOCOL)
    except Exception:
        return None  # pickle raises it again, with its own message
    if isinstance(reduced, str):
        return (_main_attribute, (_main_source(obj, reduced), reduced))
    return reduced


class _MainPickler(pickle.Pickler):
    """The standard pickler, with the script's ``__main__`` sent by reference.

    A worker does not have the client's ``__main__``: functions and classes defined
    there (and other objects pickle names) pickle as a reference to the script (or
    ``-m`` module) instead, which the worker loads once as ``__mp_main__`` (what
    ``multiprocessing``'s spawn does). Everything else pickles as usual, so a bound
    method keeps its ``self``, a ``functools.partial`` its function and a callable
    object its class, wherever they are defined.
    """

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (types.FunctionType, type)):
            if getattr(obj, "__module__", None) == "__main__":
                return (_main_attribute, (_main_source(obj), obj.__qualname__))
            return NotImplemented
        reduced = _main_reduce(self, obj)
        return NotImplemented if reduced is None else reduced


if _cloudpickle is not None:

    class _CloudPickler(_cloudpickle.Pickler):  # type: ignore[misc, name-defined, unused-ignore]
        """cloudpickle's pickler (``__main__`` functions and classes by value), and
        ``__main__`` objects that pickle by name by reference to the script."""

        def reducer_override(self, obj: Any) -> Any:
            # Called for nearly every object pickled: the common case returns fast.
            if getattr(obj, "__module__", None) == "__main__" and not isinstance(obj, (types.FunctionType, type)):
                wrapped = getattr(obj, "__wrapped__", None)
                parameters = getattr(obj, "cache_parameters", None)
                if isinstance(wrapped, types.FunctionType) and parameters is not None:
                    # An lru_cache function of the script: its function by value,
                    # cached again there (the cache itself stays here).
                    cache = parameters()
                    return (_lru_cached, (wrapped, cache["maxsize"], cache["typed"]))
                reduced = _main_reduce(self, obj)
                if reduced is not None:
                    return reduced
            return _cloud_reducer_override(self, obj)

    _cloud_reducer_override = _cloudpickle.Pickler.reducer_override

else:
    _CloudPickler = None


_source: Optional[Tuple[Any, Tuple[Any, ...]]] = None


def _by_value_hint() -> str:
    if _cloudpickle is not None:
        return ""
    return ", or install cloudpickle (pip install cloudpickle), which sends it by value"


def _lru_cached(fn: Callable[..., Any], maxsize: Optional[int], typed: bool) -> Any:
    """``functools.lru_cache`` applied again on the worker (to a function sent by value)."""
    import functools

    return functools.lru_cache(maxsize=maxsize, typed=typed)(fn)


def _main_source(obj: Any, qualname: Optional[str] = None) -> Tuple[Any, ...]:
    """How a worker finds the client's ``__main__``.

    ``("path", P, digest, argv)`` or ``("module", M, digest, argv)``: the script (or
    the module of ``python -m``), a digest of its text and ``sys.argv``, which a
    worker loads again when either differs from what it loaded before.
    """
    global _source
    if qualname is None:
        qualname = getattr(obj, "__qualname__", "")
    if "<" in qualname:  # <lambda>, <locals>
        raise SakerError(
            f"cannot send {obj!r} to a worker: a lambda, or a function or class defined "
            "inside another function, has no name a worker can import; define it at the "
            f"top level of the script or a module{_by_value_hint()}"
        )
    main = sys.modules.get("__main__")
    cached = _source
    if cached is not None and cached[0] is main:
        return cached[1]
    # What the worker's __mp_main__ pickles (return values of __main__ classes) must
    # resolve here too; multiprocessing sets the same alias.
    if main is not None:
        sys.modules.setdefault("__mp_main__", main)
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    path = getattr(main, "__file__", None)
    if name and name != "__main__":  # python -m package.module
        kind, where = "module", name
    elif not path or not os.path.isfile(path):
        raise SakerError(
            f"cannot send {obj!r} to a worker: it is defined in an interactive session "
            "or a script read from standard input, which a worker cannot load; save the "
            f"script to a file or define it in a module{_by_value_hint()}"
        )
    else:
        kind, where = "path", os.path.abspath(path)
    try:
        with open(path, "rb") as f:  # type: ignore[arg-type]
            digest = hashlib.sha1(f.read()).hexdigest()[:16]
    except (OSError, TypeError):
        digest = ""
    source = (kind, where, digest, tuple(str(arg) for arg in sys.argv))
    _source = (main, source)
    return source


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
    """The payload of one call; ``fn`` may be a :func:`prepare_function` result.

    Raises :class:`SakerError` when it cannot travel: it does not pickle, or it is
    larger than a function task may carry.
    """
    if type(fn) is _Preloaded:
        # map's hot path: arguments of simple types pickle the same with the plain C
        # pickler, several times faster than cloudpickle's or the __main__ hook.
        simple = SIMPLE_TYPES
        for arg in args:
            if type(arg) not in simple:
                payload = _TAG + _dumps((fn, args, kwargs), fn)
                break
        else:
            for arg in kwargs.values():
                if type(arg) not in simple:
                    payload = _TAG + _dumps((fn, args, kwargs), fn)
                    break
            else:
                payload = _TAG + pickle.dumps((fn, args, kwargs), protocol=_PROTOCOL)
    else:
        payload = _TAG + _dumps((fn, args, kwargs), fn)
    if len(payload) > MAX_PAYLOAD:
        raise _too_large(fn, args, kwargs, len(payload))
    return payload


class PayloadTooLarge(SakerError):
    """A call larger than a function task may carry inline."""


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def _too_large(fn: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], size: int) -> PayloadTooLarge:
    """The error for a call too large to send, naming its largest argument."""
    what = getattr(fn, "__qualname__", None) or type(fn).__name__
    if type(fn) is _Preloaded:
        what = "the call"
    parts = [(f"argument {i}", arg) for i, arg in enumerate(args)]
    parts += [(f"argument {name}=", arg) for name, arg in kwargs.items()]
    largest = ""
    sizes = []
    for name, arg in parts:
        try:
            sizes.append((len(pickle.dumps(arg, protocol=_PROTOCOL)), name, arg))
        except Exception:
            pass
    if sizes:
        arg_size, name, arg = max(sizes, key=lambda item: item[0])
        if arg_size > size // 2:
            largest = f" ({name}, {type(arg).__name__}, takes {_mib(arg_size)})"
    return PayloadTooLarge(
        f"cannot send {what}: its function and arguments pickle to {_mib(size)}{largest}, "
        f"over the {MAX_PAYLOAD >> 20} MiB a function task may carry; {_LARGE_DATA_HINT}"
    )


def check_payload_size(size: int) -> None:
    """Refuses a payload larger than a function task may carry, before it is sent."""
    if size > MAX_PAYLOAD:
        raise SakerError(
            f"the payload of {_mib(size)} is over the {MAX_PAYLOAD >> 20} MiB a function "
            f"task may carry; {_LARGE_DATA_HINT}"
        )


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


def prepare_chunk_function() -> Any:
    """What ``map`` with a ``chunksize`` sends as the function of each task, called
    there with ``(fn, chunk)``; prepared as :func:`prepare_function` does. It travels by
    its name, ``saker.serialize._run_chunk``, kept as it was so that payloads are too."""
    return prepare_function(_run_chunk)


# ----------------------------------------------------------------------------- worker

_preloaded: Dict[bytes, Any] = {}
# Scripts loaded as __mp_main__, by their source (path, digest, argv); a few at most.
_main_modules: Dict[Tuple[Any, ...], types.ModuleType] = {}
_MAIN_MODULES_KEPT = 8
#: The script being loaded as ``__mp_main__`` here (a worker), else None: Pilot.start
#: and Pilot.connect refuse to run then (the script's top level would start pilots
#: from every worker, each loading the script again).
loading_main: Optional[str] = None


def _load_preloaded(data: bytes) -> Any:
    fn = _preloaded.get(data)
    if fn is None:
        fn = pickle.loads(data)
        if len(_preloaded) >= 256:
            _preloaded.clear()
        _preloaded[data] = fn
    return fn


def _load_main(source: Tuple[Any, ...]) -> types.ModuleType:
    """Runs the client's script (or ``-m`` module) as ``__mp_main__``, with its argv."""
    import runpy

    global loading_main
    kind, where = source[0], source[1]
    argv = source[3] if len(source) > 3 else None
    module = types.ModuleType("__mp_main__")
    sys.modules["__mp_main__"] = module
    if argv:
        # Its top level may read its arguments (argparse): as the driver got them.
        sys.argv = list(argv)
    loading_main = where
    try:
        if kind == "module":
            code = runpy.run_module(where, run_name="__mp_main__", alter_sys=True)
        else:
            directory = os.path.dirname(where)
            if directory not in sys.path:
                sys.path.insert(0, directory)
            code = runpy.run_path(where, run_name="__mp_main__")
    except SakerError:
        raise  # its own hint (a pilot opened at the top level)
    except (Exception, SystemExit) as exc:
        raise SakerError(
            f"the worker could not load {where} as __mp_main__ (it runs the script's top "
            f"level to find the functions and classes sent to it): {one_line(exc)}; keep "
            'the script\'s own work under `if __name__ == "__main__":`'
        ) from exc
    finally:
        loading_main = None
    module.__dict__.update(code)
    if len(_main_modules) >= _MAIN_MODULES_KEPT:
        _main_modules.pop(next(iter(_main_modules)))
    _main_modules[source] = module
    return module


def _main_attribute(source: Tuple[Any, ...], qualname: str) -> Any:
    """Loads the client's script as ``__mp_main__`` (once) and finds ``qualname``."""
    module = _main_modules.get(source)
    if module is None:
        module = _load_main(source)
    # What return values of its classes pickle as ("__mp_main__.X"), and what pickles
    # of other clients' __main__ objects name ("__main__.X").
    sys.modules["__mp_main__"] = module
    sys.modules["__main__"] = module
    obj: Any = module
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SakerError(
                f"the worker ran {source[1]} as __mp_main__ and found no {qualname} "
                'there: what is defined under `if __name__ == "__main__":` does not exist '
                "in workers; define it at the top level of the script"
            ) from None
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
        output = pickle.dumps(value, protocol=_PROTOCOL)
    except Exception as first:
        output = b""
        if _cloudpickle is not None:
            try:
                output = _cloud_dumps(value)
            except Exception:
                pass
        if not output:
            error: BaseException = TypeError(f"the return value could not be pickled: {one_line(first)}")
            return False, dumps_exception(error), one_line(error)
    if len(output) > MAX_PAYLOAD:
        error = ValueError(
            f"the return value ({type(value).__name__}) pickles to {_mib(len(output))}, over "
            f"the {MAX_PAYLOAD >> 20} MiB a call's answer may carry; ask for it by reference "
            "(pilot.options(ref=True).call(...) answers a Ref, read with pilot.get), or write "
            "large results to files (or data items: the writes= option, docs/data.md)"
        )
        return False, dumps_exception(error), one_line(error)
    return True, output, ""
