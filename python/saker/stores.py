"""The stores of a pilot's nodes as a client sees them: where it may put objects by
reference and read them back.

A node's store is its scratch directory (the pilot's ``stores`` request names it),
and its object memory when it has one (``--object-memory``: a directory in
``/dev/shm`` that the node's mark names). This client *sees* a store when it can read
the node's mark in the scratch (``.saker-node``, naming this pilot and node) and write
in it: the client runs on that node, or the directory is on a filesystem both see. A
put writes the object's file whole (:func:`saker.objects.write_object`) in the memory,
or in the scratch if there is none or it is full, then tells the pilot, which records
it as a data item held by that node (``put_object``): tasks that read it run there, or
fetch it. A get reads the file from any store this client sees that holds it, in
memory first (the node moves objects from memory to its scratch when memory runs
short).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .errors import SakerError
from .objects import (
    ITEM_PREFIX,
    ObjectError,
    Ref,
    decode_object,
    new_id,
    object_chunks,
    own,
    read_object_in,
    write_object_in,
)

__all__ = ["Stores", "NotSeen"]

_MARK = ".saker-node"
# Nodes join and leave: the list is asked again when older than this (seconds).
_FRESH_FOR = 2.0


class NotSeen(ObjectError):
    """No store this client sees can take or give the object (``put`` and ``get``
    then go through a call: see :meth:`saker.Pilot.put`)."""


class Stores:
    """The stores of one connection's pilot; thread-safe."""

    def __init__(self, connection: Any, pilot_id: str,
                 find_binary: Callable[[], Optional[str]] = lambda: None) -> None:
        self._connection = connection
        self._pilot_id = pilot_id
        self._find_binary = find_binary
        self._binary: Optional[str] = None
        self._binary_looked = False
        self._lock = threading.Lock()
        #: ``(node, dirs)``: memory (if any) then scratch.
        self._seen: List[Tuple[int, Tuple[str, ...]]] = []
        #: How many stores the pilot listed when last asked (seen or not).
        self._listed = 0
        self._asked = -1e9
        self._next = 0
        #: A list of stores asked for and not answered yet (visible_nodes).
        self._asking = False

    def seen(self, refresh: bool = False, timeout: Optional[float] = 30.0) -> List[Tuple[int, str]]:
        """``(node, scratch directory)`` of each store this client sees, by node (see
        :meth:`dirs_seen`)."""
        return [(node, dirs[-1]) for node, dirs in self.dirs_seen(refresh, timeout)]

    def dirs_seen(self, refresh: bool = False, timeout: Optional[float] = 30.0) -> List[Tuple[int, Tuple[str, ...]]]:
        """``(node, dirs)`` of each store this client sees, by node: its object memory
        if it has one, then its scratch directory. While the
        pilot has no live node yet (just started), waits for one up to ``timeout``.
        On the thread that reads answers (a future's done-callback) it never waits: the
        last list, asked again in the background when stale (:meth:`visible_nodes`)."""
        if self._connection.on_reader_thread():
            self.visible_nodes()
            with self._lock:
                return list(self._seen)
        with self._lock:
            # Asked again when stale, and at once while the pilot had no node at all;
            # a client that sees none of the nodes there are asks only when stale.
            if refresh or self._listed == 0 or time.monotonic() - self._asked > _FRESH_FOR:
                deadline = None if timeout is None else time.monotonic() + timeout
                delay = 0.01
                while True:
                    stores = self._ask(timeout)
                    if stores or (deadline is not None and time.monotonic() >= deadline):
                        break
                    time.sleep(delay)
                    delay = min(delay * 2, 0.25)
                self._listed = len(stores)
                self._seen = self._visible(stores)
                self._asked = time.monotonic()
            return list(self._seen)

    def binary(self) -> Optional[str]:
        """The ``saker`` binary for puts and gets on nodes this client does not see
        (:meth:`put_remote`), or None; looked for once."""
        if not self._binary_looked:
            self._binary = self._find_binary()
            self._binary_looked = True
        return self._binary

    def sees_none(self) -> bool:
        """Whether the pilot listed nodes and this client sees none of their stores
        (as last asked; never waits)."""
        with self._lock:
            return self._listed > 0 and not self._seen

    def visible_nodes(self) -> Tuple[int, ...]:
        """The nodes whose stores this client sees, without waiting: the last list;
        when stale, it is asked for again and the answer kept when it comes. (A call
        made from a future's done-callback runs on the thread that reads answers:
        waiting for one there would wait for ever.)"""
        ask = False
        with self._lock:
            if time.monotonic() - self._asked > _FRESH_FOR and not self._asking:
                self._asking = ask = True
            seen = tuple(node for node, _ in self._seen)
        if ask:
            try:
                self._connection.request("stores", {}).add_done_callback(self._answered)
            except SakerError:
                with self._lock:
                    self._asking = False
        return seen

    def _answered(self, answer: Any) -> None:
        """The pilot's list of stores came (see :meth:`visible_nodes`)."""
        try:
            stores = _listed_stores(answer.result())
        except Exception:  # noqa: BLE001 (asked again when next stale)
            stores = None
        visible = self._visible(stores) if stores is not None else None
        with self._lock:
            self._asking = False
            self._asked = time.monotonic()
            if stores is not None and visible is not None:
                self._listed = len(stores)
                self._seen = visible

    def _ask(self, timeout: Optional[float]) -> List[Tuple[int, str]]:
        """Every live node's store, as the pilot lists them."""
        try:
            answer = self._connection.request("stores", {}).result(timeout)
        except SakerError as exc:
            if getattr(exc, "kind", None) == "unknown_request":
                raise ObjectError("this pilot has no object stores (it predates them): upgrade saker") from None
            raise
        return _listed_stores(answer)

    def _visible(self, stores: List[Tuple[int, str]]) -> List[Tuple[int, Tuple[str, ...]]]:
        seen = []
        for node, directory in stores:
            dirs = self._sees(node, directory)
            if dirs:
                seen.append((node, dirs))
        return seen

    def _sees(self, node: int, directory: str) -> Tuple[str, ...]:
        """The node's directories if this client sees its store (none if not)."""
        try:
            with open(os.path.join(directory, _MARK)) as mark:
                said = json.load(mark)
        except (OSError, ValueError):
            return ()
        if not (
            isinstance(said, dict)
            and said.get("pilot_id") == self._pilot_id
            and said.get("node") == node
            and os.access(directory, os.W_OK)
        ):
            return ()
        memory = said.get("objects")
        if isinstance(memory, str) and os.path.isdir(memory) and os.access(memory, os.W_OK):
            return (memory, directory)
        return (directory,)

    def put(self, obj: Any, pilot: Any, timeout: Optional[float] = 30.0) -> Ref[Any]:
        """Stores ``obj`` in a store this client sees (in turn, to spread them)."""
        for refresh in (False, True):
            stores = self.dirs_seen(refresh, timeout)
            if not stores:
                continue
            with self._lock:
                node, dirs = stores[self._next % len(stores)]
                self._next += 1
            id = new_id()
            path, size = write_object_in(obj, dirs, ITEM_PREFIX + id)
            # Where it is, and where its node may move it (from memory to the scratch).
            paths = tuple(dict.fromkeys((path, os.path.join(dirs[-1], ITEM_PREFIX + id))))
            told = self._connection.request("put_object", {"object": id, "node": node, "bytes": size})
            if self._connection.on_reader_thread():
                # Not waited for (the answer would come on this very thread): the
                # pilot handles a connection's requests in order, so a call sent after
                # this finds the object recorded; if it is refused, such a call fails
                # naming the object, and its file goes now.
                told.add_done_callback(lambda answer: _refused(answer, paths))
                return self._made(id, size, pilot, paths)
            try:
                told.result(timeout)
            except BaseException as exc:
                for place in paths:
                    _remove(place)
                if getattr(exc, "kind", None) == "unknown_node" and not refresh:
                    continue  # the node left since the list was asked: another one
                raise
            return self._made(id, size, pilot, paths)
        raise NotSeen(
            "no node's store of this pilot is visible from here: put() writes objects in "
            "the scratch directory of a node this client runs on (or one on a filesystem "
            "both see); run the driver on a node of the pilot"
        )

    @staticmethod
    def _made(id: str, size: int, pilot: Any, paths: Tuple[str, ...]) -> Ref[Any]:
        if hasattr(pilot, "_dropped"):
            own(id, pilot)
        ref: Ref[Any] = Ref(id, size, pilot)
        ref._paths = paths
        return ref

    def get(self, ref: Ref[Any], timeout: Optional[float] = 30.0) -> Any:
        """The object ``ref`` names, read from a store this client sees."""
        name = ITEM_PREFIX + ref.id
        for refresh in (False, True):
            for _node, dirs in self.dirs_seen(refresh, timeout):
                if any(os.path.exists(os.path.join(directory, name)) for directory in dirs):
                    return read_object_in(dirs, name)
        raise NotSeen(
            f"object {ref.id} is in no store visible from here (it is on a node whose "
            "scratch this client does not see)"
        )

    def put_anywhere(self, obj: Any, pilot: Any, timeout: Optional[float] = 30.0) -> Ref[Any]:
        """:meth:`put` in a store this client sees, else :meth:`put_remote`."""
        if self.dirs_seen(False, timeout):
            return self.put(obj, pilot, timeout)
        return self.put_remote(obj, pilot, timeout)

    def put_remote(self, obj: Any, pilot: Any, timeout: Optional[float] = 30.0) -> Ref[Any]:
        """Stores ``obj`` in the store of a node this client does not see: ``saker
        object put`` sends its bytes to the node's agent directly (a data connection
        with the pilot's client certificate), never through the pilot's root."""
        chunks, size = object_chunks(obj)
        process = self._command(["put", "-"], stdin=subprocess.PIPE)
        assert process.stdin is not None
        try:
            for chunk in chunks:
                process.stdin.write(chunk)
        except BrokenPipeError:
            pass  # it failed: its message says why
        out, err = _finish(process, timeout)  # closes its standard input
        if process.returncode != 0:
            raise ObjectError(f"cannot put the object on a node: {_said(err)}")
        id = out.decode("ascii", "replace").strip()
        if hasattr(pilot, "_dropped"):
            own(id, pilot)
        return Ref(id, size, pilot)

    def get_remote(self, ref: Ref[Any], timeout: Optional[float] = 30.0, args: Sequence[str] = ()) -> Any:
        """The object ``ref`` names, read from the nodes that hold it by ``saker object
        get`` (data connections, as :meth:`put_remote`); its buffers are writable."""
        process = self._command(["get", ref.id, *args], stdout=subprocess.PIPE)
        assert process.stdout is not None
        data = bytearray(max(ref.size, 0))
        view = memoryview(data)
        got = 0
        while got < len(data):
            n = process.stdout.readinto(view[got:])
            if not n:
                break
            got += n
        rest = process.stdout.read()
        view.release()
        _, err = _finish(process, timeout)
        if process.returncode != 0:
            raise ObjectError(f"cannot get object {ref.id}: {_said(err)}")
        if rest:
            data += rest
        elif got < len(data):
            raise ObjectError(f"object {ref.id} came short: {got} of {len(data)} bytes")
        return decode_object(data)

    def value_on_node(self, id: str, node: int, size: int) -> Any:
        """A call's value a worker left on ``node`` as object ``id`` (``size`` bytes)
        for this client, which sees no store: read from the node's agent directly,
        then recorded and freed, so that the node removes it. Runs where the answer
        is unpickled (the connection's reader thread): nothing here waits for the
        pilot."""
        try:
            return self.get_remote(Ref(id, size), timeout=None, args=["--node", str(node)])
        finally:
            self._connection.request("put_object", {"object": id, "node": node, "bytes": size})
            self._connection.request("free_objects", {"objects": [id]})

    def _command(self, args: List[str], **pipes: Any) -> "subprocess.Popen[bytes]":
        binary = self.binary()
        if binary is None:
            raise NotSeen("no saker binary to reach the nodes' stores from here")
        directory = os.fspath(self._connection.directory)
        command = [binary, "object", "--dir", directory] + args
        pipes.setdefault("stdout", subprocess.PIPE)
        return subprocess.Popen(command, stderr=subprocess.PIPE, **pipes)


def _finish(process: "subprocess.Popen[bytes]", timeout: Optional[float]) -> Tuple[bytes, bytes]:
    """Waits for a ``saker object`` command; killed past ``timeout``."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise ObjectError(f"saker object did not finish within {timeout} s") from None
    return out or b"", err or b""


def _said(err: bytes) -> str:
    text = err.decode("utf-8", "replace").strip()
    return text.removeprefix("saker: error: ") or "no reason given"


def _listed_stores(answer: Any) -> List[Tuple[int, str]]:
    """``(node, scratch directory)`` of each store in the pilot's ``stores`` answer."""
    return [(int(store["node"]), str(store["scratch"])) for store in answer.get("stores", [])]


def _refused(answer: Any, paths: Tuple[str, ...]) -> None:
    """A ``put_object`` not waited for was answered: if refused, the file goes."""
    if answer.exception() is not None:
        for path in paths:
            _remove(path)


def discard(ref: Ref[Any], pilot: Any) -> None:
    """Lets go of an object this client put for one call alone, once the call ended:
    its file removed wherever its node moved it (the pilot still lists it); one on a
    node this client does not see (no file here) is freed there."""
    if not ref._paths:
        pilot.free(ref)
    for path in ref._paths:
        _remove(path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
