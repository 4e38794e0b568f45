"""Objects by reference: the file an object is stored as in a node's store.

One object is one file, written once and never modified (it is renamed into place
whole), so workers on the node map it and read its large buffers without a copy
(truncating a file in place would fault the processes that map it).
All integers are little-endian::

    offset 0   8 bytes   magic b"SAKEROB1"
           8   u32       header version (1)
          12   u32       N, the number of out-of-band buffers
          16   u64       P, the length of the pickle stream
          24   N x (u64 offset, u64 length)   each buffer, offsets from the file's start
    24 + 16N   P bytes   the pickle stream (protocol 5)
               then each buffer, starting at a 64-byte aligned offset (zeros between)

The stream is pickled with ``buffer_callback``: contiguous buffers of at least
``INLINE_LIMIT`` bytes that pickle offers out of band (numpy arrays, anything wrapped
in :class:`pickle.PickleBuffer`) are stored after it rather than in it; ``bytes`` and
``bytearray`` always pickle in band. Reading maps the file read-only and gives
``pickle.loads`` views of the mapping as the buffers: a numpy array comes back
read-only, its memory the mapping itself, which lives as long as such a view does.
A :class:`pickle.PickleBuffer` comes back as a read-only ``memoryview``.

Pickling uses the package's pickler (:mod:`saker.serialize`): cloudpickle's when it
is importable, else the standard one, ``__main__`` objects handled as for calls.
"""

from __future__ import annotations

import io
import itertools
import json
import mmap
import os
import pickle
import secrets
import struct
import sys
import threading
import weakref
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar, Union

from . import serialize
from .errors import SakerError
from .serialize import one_line

__all__ = ["ObjectError", "Ref", "write_object", "read_object", "encode_object", "decode_object"]

MAGIC = b"SAKEROB1"
VERSION = 1
ALIGN = 64
#: Smaller buffers stay in the stream: below a page, a view saves nothing.
INLINE_LIMIT = 4096
_HEADER = struct.Struct("<8sIIQ")
_SPAN = struct.Struct("<QQ")
_ZEROS = bytes(ALIGN)
# Python 3.13 can map without keeping a duplicate of the file descriptor open per
# mapping; before that each object read holds one fd until its last view goes.
_MAP_OPTIONS = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class ObjectError(SakerError):
    """An object could not be stored, or a stored object could not be read."""


def _align(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def _pickle(obj: Any, callback: Callable[[pickle.PickleBuffer], Any]) -> memoryview:
    """``obj`` pickled (protocol 5) with the package's pickler."""
    out = io.BytesIO()
    pickler_class = serialize._CloudPickler or serialize._MainPickler
    try:
        pickler_class(out, protocol=5, buffer_callback=callback).dump(obj)
    except SakerError:
        raise  # its own hint (a lambda without cloudpickle, a script read from stdin)
    except Exception as exc:
        raise ObjectError(f"cannot store the {type(obj).__name__} object: {one_line(exc)}") from exc
    return out.getbuffer()


def _encode(obj: Any) -> Tuple[bytes, memoryview, List[memoryview], List[int], int]:
    """``(header, stream, buffers, offsets, total size)`` of ``obj``'s file."""
    buffers: List[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: in band (pickle copies it)
            return True
        if raw.nbytes < INLINE_LIMIT:
            return True
        buffers.append(raw)
        return False  # false means out of band

    stream = _pickle(obj, out_of_band)
    offsets: List[int] = []
    end = _HEADER.size + _SPAN.size * len(buffers) + len(stream)
    for raw in buffers:
        offsets.append(_align(end))
        end = offsets[-1] + raw.nbytes
    header = _HEADER.pack(MAGIC, VERSION, len(buffers), len(stream))
    header += b"".join(_SPAN.pack(offset, raw.nbytes) for offset, raw in zip(offsets, buffers))
    return header, stream, buffers, offsets, end


def _chunks(header: bytes, stream: Any, buffers: Sequence[memoryview], offsets: Sequence[int]) -> List[Any]:
    """The file's bytes in order: header, stream, then padding and each buffer."""
    chunks: List[Any] = [header, stream]
    at = len(header) + len(stream)
    for offset, raw in zip(offsets, buffers):
        chunks += [_ZEROS[: offset - at], raw]
        at = offset + raw.nbytes
    return chunks


def encode_object(obj: Any) -> Tuple[bytes, List[memoryview], int]:
    """``obj`` in memory: ``(header_and_pickle, buffers, total_size)``.

    ``header_and_pickle`` is the start of the file up to its first buffer (padding
    included); each buffer follows at the offset its header gives, zeros between. The
    buffers are views of ``obj``'s own memory, not copies.
    """
    header, stream, buffers, offsets, total = _encode(obj)
    chunks = _chunks(header, stream, buffers, offsets)
    head = b"".join(chunks[:3])  # header, stream, padding before the first buffer
    return head, buffers, total


def object_chunks(obj: Any) -> Tuple[List[Any], int]:
    """``obj``'s file as the chunks to write in order (its buffers are views of
    ``obj``'s own memory), and the file's size."""
    header, stream, buffers, offsets, total = _encode(obj)
    return _chunks(header, stream, buffers, offsets), total


def write_object(obj: Any, path: Union[str, "os.PathLike[str]"]) -> int:
    """Stores ``obj`` at ``path`` and returns the file's size in bytes.

    The file is written under a temporary name in the same directory and renamed into
    place, so a reader finds the whole file or none. Not fsynced: a node's store is
    tmpfs, and an object there does not outlive the node.
    """
    return _write_encoded(_encode(obj), os.fspath(path))


def _write_encoded(encoded: Tuple[bytes, memoryview, List[memoryview], List[int], int], path: str) -> int:
    """:func:`write_object` of an object :func:`_encode` has pickled already."""
    header, stream, buffers, offsets, total = encoded
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise ObjectError(f"cannot write object {path}: {exc.strerror or one_line(exc)}") from exc
    try:
        try:
            # write() measured twice as fast as ftruncate + mmap into tmpfs (which
            # faults each page in); the buffers are written from views, not copied.
            for chunk in _chunks(header, stream, buffers, offsets):
                _write_all(fd, memoryview(chunk))
        finally:
            os.close(fd)
        os.rename(temporary, path)
    except BaseException as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ObjectError(f"cannot write object {path}: {exc.strerror or one_line(exc)}") from exc
        raise
    return total


def _write_all(fd: int, view: memoryview) -> None:
    done = 0
    while done < len(view):  # write() may write less (Linux: at most ~2 GiB a call)
        done += os.write(fd, view[done:])


def read_object(path: Union[str, "os.PathLike[str]"], private: bool = False) -> Any:
    """The object stored at ``path``; its large buffers are views of the file's mapping,
    read-only, or with ``private`` writable copy-on-write (a page is copied when first
    written; the file never changes).

    Raises :class:`ObjectError` when the file is missing or is not a whole object.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ObjectError(f"cannot read object {path}: {exc.strerror or one_line(exc)}") from exc
    try:
        if os.fstat(fd).st_size == 0:  # mmap refuses an empty file
            raise ObjectError(f"object {path} is empty (0 bytes), not a saker object")
        access = mmap.ACCESS_COPY if private else mmap.ACCESS_READ
        mapping = mmap.mmap(fd, 0, access=access, **_MAP_OPTIONS)
    except OSError as exc:
        raise ObjectError(f"cannot map object {path}: {exc.strerror or one_line(exc)}") from exc
    finally:
        os.close(fd)
    view = memoryview(mapping)
    try:
        return _decode(view, f"object {path}")
    finally:
        view.release()  # views sliced from it stay valid
        try:
            mapping.close()  # no out-of-band buffers: unmap now
        except BufferError:
            pass  # the object uses views of it: it unmaps with the last of them


def decode_object(data: Union[bytes, bytearray, memoryview]) -> Any:
    """The object in ``data`` (a whole file's bytes); buffers are views of ``data``."""
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return _decode(view, "object data")


def _decode(view: memoryview, where: str) -> Any:
    stream, buffers = _parse(view, where)
    try:
        return pickle.loads(stream, buffers=buffers)
    except Exception as exc:
        raise ObjectError(f"{where}: its pickle does not load: {one_line(exc)}") from exc
    finally:
        stream.release()
        del buffers  # a traceback keeping this frame must not keep the mapping


def _parse(view: memoryview, where: str) -> Tuple[memoryview, List[memoryview]]:
    """The pickle stream and the buffers of a file's bytes, every bound checked."""
    size = len(view)
    if size < _HEADER.size:
        raise ObjectError(f"{where} is truncated: {size} bytes, less than the {_HEADER.size}-byte header")
    magic, version, count, length = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise ObjectError(f"{where} is not a saker object: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise ObjectError(f"{where} has header version {version}, this client reads version {VERSION}")
    start = _HEADER.size + _SPAN.size * count
    if start > size:
        raise ObjectError(
            f"{where} is truncated: its table of {count} buffers ends at byte {start}, "
            f"past its end ({size} bytes)"
        )
    end = start + length
    if end > size:
        raise ObjectError(f"{where} is truncated: its pickle stream ends at byte {end}, past its end ({size} bytes)")
    spans = [_SPAN.unpack_from(view, _HEADER.size + _SPAN.size * i) for i in range(count)]
    for i, (offset, nbytes) in enumerate(spans):
        if offset < end or offset + nbytes > size:
            raise ObjectError(
                f"{where} is corrupt or truncated: buffer {i} (bytes {offset} to {offset + nbytes}) "
                f"lies outside its data (bytes {end} to {size})"
            )
    # Sliced only once all is checked: a view left in a traceback would pin the map.
    return view[start:end], [view[offset : offset + nbytes] for offset, nbytes in spans]


# -- references


T = TypeVar("T")

#: The data item an object is stored as in a node's scratch (the pilot's object_item).
ITEM_PREFIX = "obj-"
_collecting = threading.local()


class Ref(Generic[T]):
    """A handle on an object in the pilot's stores, made by :meth:`Pilot.put`.

    Passed as an argument of ``call``, ``map`` or ``submit`` (also inside lists,
    dicts or tuples), it travels as its id: the task is run where the object is, or the
    object fetched to it, and the function gets the object itself, its large buffers
    read from the node's store without a copy (a numpy array is a read-only view).
    """

    __slots__ = ("id", "size", "_pilot", "_paths", "__weakref__")

    def __init__(self, id: str, size: int, pilot: Any = None) -> None:
        self.id = id
        self.size = size
        self._pilot = pilot
        #: Where this client put it, if it did: the file, and where its node may have
        #: moved it (from memory to the scratch).
        self._paths: Tuple[str, ...] = ()
        owner = _owners.get(id)
        if owner is not None:
            owner[1] += 1
            weakref.finalize(self, _handle_gone, id)

    @property
    def item(self) -> str:
        """The data item the object is stored as (``reads=`` of a task using it)."""
        return ITEM_PREFIX + self.id

    def result(self) -> T:
        """The object, read from a store this client sees (as :meth:`Pilot.get`)."""
        pilot = self._pilot or (open_pilots[-1] if open_pilots else None)
        if pilot is None:
            raise ObjectError(f"{self!r}: no pilot is open in this process to read it through")
        return pilot.get(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> Tuple[Any, Tuple[str, int]]:
        refs = getattr(_collecting, "refs", None)
        if refs is not None:
            refs.append(self.id)
        return (_ref_argument, (self.id, self.size))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<saker.Ref {self.id} {self.size} B>"


#: Objects this process owns (it put them, or asked a call for them with ``ref=True``):
#: by id, the pilot to free them through and how many :class:`Ref` handles on each
#: are alive here. Ids of calls whose value has not come yet have none.
_owners: Dict[str, List[Any]] = {}


def own(id: str, pilot: Any) -> None:
    """This process owns object ``id`` (before its first :class:`Ref` is made): once
    every handle on it here is gone, ``pilot`` frees it (``Pilot.free``)."""
    _owners[id] = [pilot, 0]


def _handle_gone(id: str) -> None:
    """A :class:`Ref` on an owned object was collected. Runs inside the garbage
    collector, maybe while this thread holds a lock: it only notes the id, which
    the pilot sends at its next request (``Pilot._free_dropped``)."""
    owner = _owners.get(id)
    if owner is None:
        return
    owner[1] -= 1
    if owner[1] <= 0:
        del _owners[id]
        owner[0]._dropped.append(id)


def disown(ids: List[str]) -> None:
    """The objects ``ids`` are freed (by hand): their handles free nothing more."""
    for id in ids:
        _owners.pop(id, None)


def _ref_argument(id: str, size: int) -> Any:
    """A reference unpickled: the object itself on a worker, a :class:`Ref` elsewhere."""
    dirs = worker_dirs()
    if dirs and os.environ.get("SAKER_WORKER_KIND"):
        return read_object_in(dirs, ITEM_PREFIX + id)
    return Ref(id, size)


def worker_dirs() -> Tuple[str, ...]:
    """Where a task's node keeps objects: its object memory (``SAKER_OBJECTS``) if it
    has one, then its scratch directory (``SAKER_SCRATCH``)."""
    return tuple(d for d in (os.environ.get("SAKER_OBJECTS"), os.environ.get("SAKER_SCRATCH")) if d)


def read_object_in(dirs: Sequence[str], name: str, private: bool = False) -> Any:
    """The object ``name`` from the first of a node's ``dirs`` that holds it: its node
    moves objects from memory to the scratch (copied there before it leaves memory), so
    one not found in memory is looked for in the scratch."""
    missing: Optional[ObjectError] = None
    for directory in dirs:
        try:
            return read_object(os.path.join(directory, name), private)
        except ObjectError as exc:
            if not isinstance(exc.__cause__, FileNotFoundError):
                raise
            missing = missing or exc
    raise missing or ObjectError(f"object {name}: no store to read it from")


def write_object_in(obj: Any, dirs: Sequence[str], name: str) -> Tuple[str, int]:
    """Stores ``obj`` as ``name`` in the first of a node's ``dirs`` it fits in (an
    object memory that is full is passed over for the scratch); its path and size."""
    return _write_encoded_in(_encode(obj), dirs, name)


def _write_encoded_in(
    encoded: Tuple[bytes, memoryview, List[memoryview], List[int], int], dirs: Sequence[str], name: str
) -> Tuple[str, int]:
    for index, directory in enumerate(dirs):
        path = os.path.join(directory, name)
        try:
            return path, _write_encoded(encoded, path)
        except ObjectError:
            if index == len(dirs) - 1:
                raise
    raise ObjectError(f"object {name}: no store to write it in")


#: The pilots this process has open, oldest first (kept by :class:`saker.Pilot`): a
#: :class:`Ref` from a task's answer reads through the newest.
open_pilots: List[Any] = []


def store_result(name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Ref[Any]":
    """Runs on a worker for a call with ``ref=True``: ``fn``'s value is stored in the
    node's store as the data item ``name`` (the call's ``writes``), and its
    :class:`Ref` answered instead of the value."""
    value = fn(*args, **kwargs)
    _path, size = write_object_in(value, worker_dirs() or (os.environ["SAKER_SCRATCH"],), name)
    return Ref(name[len(ITEM_PREFIX):], size)


#: A call with an argument of at least this many bytes goes by reference when this
#: client sees a store: its file is written once and mapped by the worker, where
#: inline it would be pickled, sent as base64 through the root and its journal.
BY_REFERENCE_FROM = 256 << 10


def is_large(value: Any) -> bool:
    """Whether ``value`` is a buffer of at least :data:`BY_REFERENCE_FROM` bytes
    (bytes, bytearray, memoryview, a numpy array: anything with ``nbytes``)."""
    size = getattr(value, "nbytes", None)
    if size is None and isinstance(value, (bytes, bytearray)):
        size = len(value)
    return isinstance(size, int) and size >= BY_REFERENCE_FROM


def may_be_large(args: Tuple[Any, ...]) -> bool:
    """Whether an argument is of a type that may be large (not an int, a float, …)."""
    small = _SMALL
    for value in args:
        if type(value) not in small:
            return True
    return False


def large_arguments(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    """Whether a top-level argument :func:`is_large`: cheap, nothing pickled."""
    return any(is_large(value) for value in itertools.chain(args, kwargs.values()))


def value_of(value: Any, give: bool = True) -> Any:
    """Runs on a worker: the object itself (a put or get through a call), or nothing
    when ``give`` is false (only read there, so that its node holds a copy)."""
    return value if give else None


def call_stored(call: Tuple[Callable[..., Any], Tuple[Any, ...], Dict[str, Any]]) -> Any:
    """Runs on a worker: a call whose function and arguments were stored as one
    object (the worker got them mapped, buffers without a copy)."""
    fn, args, kwargs = call
    return fn(*args, **kwargs)


#: For a client that sees no node's store (see :class:`Returning`): how it reads a
#: value left on a node, by pilot id (``Stores.value_on_node`` of each open
#: :class:`saker.Pilot` connected to it; the last opened is used).
remote_readers: Dict[str, List[Callable[[str, int, int], Any]]] = {}


class Returning:
    """``fn`` as a call's function, for a client that sees the stores of the nodes
    ``seen``: on a worker of one of them, a value that pickles to at least
    :data:`BY_REFERENCE_FROM` bytes is stored in the node's store and comes back by
    reference, read by the client from there (its large buffers mapped, not copied)
    and its file removed. Other values come back inline, as without it.

    With ``anywhere`` (a client that sees no store, and has a saker binary), a value
    past what an answer carries inline (``serialize.MAX_PAYLOAD``) is stored on any
    node and comes back as where it is: the client reads it from that node's agent
    directly (``saker object get --node``) and has it freed."""

    __slots__ = ("seen", "fn", "anywhere")

    def __init__(self, seen: Tuple[int, ...], fn: Callable[..., Any], anywhere: bool = False) -> None:
        self.seen = seen
        self.fn = fn
        self.anywhere = anywhere

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self.fn(*args, **kwargs)
        if type(value) in _SMALL:
            return value
        node = os.environ.get("SAKER_NODE")
        dirs = worker_dirs()
        if not dirs or node is None or not node.isdigit():
            return value
        if self.anywhere:
            return _MaybeStored(value, tuple(os.path.abspath(d) for d in dirs), int(node))
        if int(node) not in self.seen:
            return value
        return _MaybeStored(value, tuple(os.path.abspath(d) for d in dirs))

    def __reduce__(self) -> Tuple[Any, Tuple[Tuple[int, ...], Callable[..., Any], bool]]:
        return (Returning, (self.seen, self.fn, self.anywhere))


# Values that are never large: returned as they are, at no cost.
_SMALL = frozenset((int, float, bool, type(None), complex))


class _MaybeStored:
    """A call's value on its worker: pickled as itself when small, else stored in the
    node's store and pickled as its path (decided once, when first pickled)."""

    __slots__ = ("value", "dirs", "node", "_reduced")

    def __init__(self, value: Any, dirs: Tuple[str, ...], node: Optional[int] = None) -> None:
        self.value = value
        self.dirs = dirs
        #: This worker's node, for a client that sees no store (``Returning.anywhere``).
        self.node = node
        self._reduced: Optional[Tuple[Any, Tuple[Any, ...]]] = None

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        if self._reduced is None:
            encoded = _encode(self.value)
            if self.node is not None:
                if encoded[4] <= serialize.MAX_PAYLOAD:
                    self._reduced = (_identity, (self.value,))
                else:
                    id = new_id()
                    _, size = _write_encoded_in(encoded, self.dirs, ITEM_PREFIX + id)
                    pilot = _pilot_of(self.dirs[-1])
                    self._reduced = (_value_on_node, (pilot, id, self.node, size))
            elif encoded[4] < BY_REFERENCE_FROM:
                self._reduced = (_identity, (self.value,))
            else:
                name = ITEM_PREFIX + new_id()
                path, size = _write_encoded_in(encoded, self.dirs, name)
                # The node may move it from memory to its scratch before it is read.
                self._reduced = (_stored_value, (path, size, self.dirs[-1]))
        return self._reduced


def _identity(value: Any) -> Any:
    return value


def _pilot_of(scratch: str) -> str:
    """The pilot id a node's mark in its ``scratch`` names."""
    try:
        with open(os.path.join(scratch, ".saker-node")) as mark:
            return str(json.load(mark)["pilot_id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ObjectError(f"cannot read the node's mark in {scratch}: {one_line(exc)}") from exc


def _value_on_node(pilot: str, id: str, node: int, size: int) -> Any:
    """A call's value left on node ``node`` as object ``id`` for a client that sees
    no store, unpickled by that client: read from the node directly, then freed."""
    readers = remote_readers.get(pilot)
    if not readers:
        raise ObjectError(
            f"the call's value ({size} bytes) is object {id} on node {node} of pilot {pilot}, "
            "and this process has no connection to that pilot to read it with"
        )
    return readers[-1](id, node, size)


def _stored_value(path: str, size: int, scratch: Optional[str] = None) -> Any:
    """A call's value stored on its worker's node, unpickled by its client (which sees
    that store): read from there (or from the node's ``scratch``, where the node moves
    objects when its memory runs short), and its file removed (a mapping of it lives
    on). Its buffers are writable, as a value returned inline would be: copy-on-write."""
    directory, name = os.path.split(path)
    dirs = [directory] + ([scratch] if scratch and scratch != directory else [])
    try:
        return read_object_in(dirs, name, private=True)
    except ObjectError as exc:
        raise ObjectError(
            f"the call's value ({size} bytes) was stored at {path}, and this process cannot read it "
            f"there: {exc}"
        ) from None
    finally:
        for place in dirs:
            try:
                os.unlink(os.path.join(place, name))
            except OSError:
                pass


def new_id() -> str:
    """A fresh object id: 128 random bits as 32 hex digits."""
    return secrets.token_hex(16)


def start_collecting() -> None:
    """Remembers the ids of the references pickled on this thread from now on."""
    _collecting.refs = []


def collected() -> List[str]:
    """The ids pickled since :func:`start_collecting`, each once; stops collecting."""
    refs = getattr(_collecting, "refs", None)
    _collecting.refs = None
    if not refs:
        return _NONE  # every call without refs: no list made
    return list(dict.fromkeys(refs))


_NONE: List[str] = []
