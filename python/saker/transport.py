"""The byte pipe under a connection to a pilot: one socket to the pilot's root, over
the pilot directory's local socket on the root's host, else over TCP with mutual TLS,
carrying the client protocol's JSON lines (docs/protocol.md).

A :class:`Transport` connects and says hello (agreeing on a protocol version) when it
is made, then sends bytes and turns the bytes it receives into messages; after a loss
it re-attaches to whichever root serves the directory then. It knows nothing of
requests, answers or futures, and never fails one: that is the bookkeeping of
``client.Connection``, which drives it. It imports nothing of the package but its
errors. Start with :class:`Transport`, then :meth:`~Transport.send`,
:meth:`~Transport.receive` and :meth:`~Transport.reconnect`.

**The seam.** The connection uses a transport through these alone: ``send`` (holding
``send_lock``), ``receive`` (on its reader thread), ``flush_needed`` and the
``on_flush_needed`` callback it gives (both below), ``shutdown`` (wakes whoever is
blocked on the socket) and ``close``, ``reconnect`` after a loss, and what the hello
said (``protocol``, ``pilot_id``, ``server``). The transport calls back only
``on_flush_needed`` and the ``resume`` given to ``reconnect``. Sending and receiving
fail with ``OSError`` (``ssl.SSLError`` is one); whether that is a loss to re-attach
after is the connection's call.

**Threads.** One thread receives (the connection's reader) while others send, one at
a time: every sender holds ``send_lock``, and so does re-attaching, which swaps the
socket. TLS runs over ``ssl.MemoryBIO`` objects, under a lock held only for
in-memory work, so neither side ever blocks the other on socket I/O (an
``SSLSocket`` cannot be read and written from two threads at once). Reading may leave
TLS bytes to send (a key update, say): then ``flush_needed`` is set and
``on_flush_needed`` called, and the next ``send``, of no bytes if need be, sends them.
Over the local socket there is no TLS (the directory admits only its owner): lines go
as they are.

**Re-attaching.** A standby root that took over (``saker pilot --standby``) rewrote
``client.json``. ``reconnect`` tries every 50 ms to 1 s, for as long as it is given:
read ``client.json``, connect, hello with the protocol agreed at first (the pilot id
must not change: another pilot in the directory ends the attempts at once), then,
still under ``send_lock``, let the caller's ``resume`` send what must go first on the
new socket, before any other sender can.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .errors import PilotNotFound, ProtocolError, SakerError, error_of

__all__ = ["PROTOCOL", "GaveUp", "Transport", "read_endpoint"]

PROTOCOL = 2
# Oldest protocol this client still speaks (command tasks only, no `output`).
_OLDEST_PROTOCOL = 1
# Each pilot certificate names its role; only the root serves the client socket, so
# the ordinary hostname check verifies that the server is the pilot's root.
SERVER_NAME = "root.saker.pilot"
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH.
_HOSTNAME_MISMATCH = 62
ALPN = "saker/1"

# Re-attaching: attempts this far apart at first (seconds), doubling up to the most.
_RECONNECT_FIRST = 0.05
_RECONNECT_MOST = 1.0

_monotonic = time.monotonic
_loads = json.loads
_dumps = json.dumps


def read_endpoint(directory: Path) -> Dict[str, Any]:
    """The pilot's ``client.json``, or PilotNotFound saying what is missing."""
    if not directory.is_dir():
        raise PilotNotFound(f"{directory} is not a pilot directory: no such directory")
    path = directory / "client.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        if (directory / "saker-pilot.json").exists() or (directory / "journal").exists():
            raise PilotNotFound(
                f"no pilot is serving clients from {directory}: it has no client.json "
                "(the pilot has stopped, or has not started listening yet)"
            ) from None
        raise PilotNotFound(
            f"{directory} is not a pilot directory: it has no client.json "
            "(start one with `saker pilot --dir DIR` or saker.Pilot.start)"
        ) from None
    except OSError as exc:
        raise PilotNotFound(f"cannot read {path}: {exc}") from None
    try:
        endpoint = json.loads(text)
        str(endpoint["addr"]).rsplit(":", 1)[1]
    except (ValueError, KeyError, IndexError, TypeError):
        raise PilotNotFound(f"{path} is not a valid client.json") from None
    if not isinstance(endpoint, dict):
        raise PilotNotFound(f"{path} is not a valid client.json")
    return endpoint


class GaveUp(SakerError):
    """Re-attaching cannot succeed: another pilot took the directory, or no root
    answered in time."""


def _nothing() -> None:
    pass


class Transport:
    """A socket to the pilot's root, connected and past the hello once made.

    ``on_flush_needed`` is called (on the receiving thread) when reading left TLS
    bytes to send; a thread that both receives and sends calls :meth:`flush` instead.
    """

    def __init__(self, directory: Path, *, timeout: float, client: str = "",
                 on_flush_needed: Callable[[], None] = _nothing) -> None:
        self.directory = directory
        self._timeout = timeout
        self._client = client or f"saker-python (python {sys.version.split()[0]}, pid {os.getpid()})"
        self._on_flush_needed = on_flush_needed
        endpoint = read_endpoint(directory)
        self._endpoint = endpoint
        self.addr: str = str(endpoint["addr"])
        self.pilot_id: str = str(endpoint.get("pilot_id", ""))
        self.server = ""
        self.protocol = 0
        #: Held by whoever sends, and while re-attaching (which swaps the socket).
        self.send_lock = threading.Lock()
        #: Set when reading left TLS bytes to send; the next send() sends them.
        self.flush_needed = False
        self._ssl_lock = threading.Lock()
        self._partial: List[bytes] = []

        spoken = endpoint.get("protocols") or [endpoint.get("protocol", PROTOCOL)]
        candidates = sorted(
            {int(v) for v in spoken if isinstance(v, int) and _OLDEST_PROTOCOL <= v <= PROTOCOL} or {PROTOCOL},
            reverse=True,
        )
        last: Optional[BaseException] = None
        for protocol in candidates:
            try:
                self._open(timeout)
                hello = self._hello(protocol)
            except PilotNotFound:
                raise
            except SakerError as exc:
                self._sock.close()
                last = exc
                if getattr(exc, "kind", None) == "protocol_mismatch":
                    continue
                raise
            break
        else:
            raise PilotNotFound(f"the pilot in {self.directory} speaks no protocol this client knows: {last}")
        self.protocol = int(hello.get("protocol", protocol))
        self.pilot_id = str(hello.get("pilot_id", self.pilot_id))
        self.server = str(hello.get("server", ""))
        self._sock.settimeout(None)

    @property
    def encrypted(self) -> bool:
        """Whether this socket runs TLS (TCP), rather than being the local socket."""
        return self._tls is not None

    # -- opening

    def _open(self, timeout: float) -> None:
        self._tls: Optional[ssl.SSLObject] = None
        self._partial = []
        if self._open_local(timeout):
            return
        directory = self.directory
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            context.load_verify_locations(str(directory / "ca.pem"))
            context.load_cert_chain(str(directory / "client.pem"), str(directory / "client.key"))
        except (OSError, ssl.SSLError) as exc:
            raise PilotNotFound(f"cannot load the client credentials of {directory}: {exc}") from None
        context.set_alpn_protocols([ALPN])
        host, _, port = self.addr.rpartition(":")
        host = host.strip("[]")
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        except ConnectionRefusedError:
            raise PilotNotFound(
                f"the pilot of {directory} refused the connection at {self.addr}: it has "
                "probably stopped (its client.json is stale)"
            ) from None
        except (OSError, ValueError) as exc:
            raise PilotNotFound(f"cannot reach the pilot of {directory} at {self.addr}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=SERVER_NAME)
        self._partial = []
        try:
            while True:
                try:
                    self._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self.flush()
                    data = sock.recv(65536)
                    if not data:
                        raise PilotNotFound(f"the pilot at {self.addr} closed the connection during the TLS handshake")
                    self._incoming.write(data)
            self.flush()
        except ssl.SSLError as exc:
            sock.close()
            hint = ""
            if getattr(exc, "verify_code", None) == _HOSTNAME_MISMATCH:
                hint = (
                    " (the pilot's certificate carries no root role: it was started by an older "
                    "saker; resume it with this one, which renews its credentials)"
                )
            raise PilotNotFound(f"TLS with the pilot of {directory} at {self.addr} failed: {exc}{hint}") from None
        except OSError as exc:
            sock.close()
            raise PilotNotFound(f"cannot talk to the pilot of {directory} at {self.addr}: {exc}") from None

    def _open_local(self, timeout: float) -> bool:
        """Connects to the local socket when this is the root's host; False if not."""
        name = self._endpoint.get("socket")
        if not isinstance(name, str) or self._endpoint.get("host") != socket.gethostname():
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.directory / name))
        except (OSError, ValueError):
            # Stale, or a path too long for a socket address: TCP and TLS instead.
            sock.close()
            return False
        self._sock = sock
        return True

    def _hello(self, protocol: int) -> Dict[str, Any]:
        line = _dumps({"hello": {"protocol": protocol, "client": self._client}}) + "\n"
        try:
            self.send(line.encode())
            while True:
                messages = self.receive()
                if messages:
                    break
        except (OSError, ssl.SSLError) as exc:
            self._sock.close()
            raise PilotNotFound(f"the pilot at {self.addr} did not answer the hello: {exc}") from None
        answer = messages[0]
        if len(messages) > 1:
            raise ProtocolError(f"unexpected messages after the hello answer: {messages[1:]!r}")
        if "error" in answer:
            raise error_of(answer["error"])
        ok = answer.get("ok")
        if not isinstance(ok, dict):
            raise ProtocolError(f"unexpected hello answer: {answer!r}")
        return ok

    # -- sending (under send_lock) and receiving (one thread)

    def send(self, data: bytes) -> None:
        """Sends ``data`` and any TLS bytes waiting to go; hold ``send_lock`` (or be
        the only thread using this transport)."""
        if self._tls is None:
            if data:
                self._sock.sendall(data)
            return
        with self._ssl_lock:
            if data:
                self._tls.write(data)
            self.flush_needed = False
            encrypted = self._outgoing.read()
        if encrypted:
            self._sock.sendall(encrypted)

    def flush(self) -> None:
        """Sends the TLS bytes waiting to go, without the locks: for the TLS handshake,
        and for a thread that is the only one using this transport."""
        if self._tls is None:
            return
        data = self._outgoing.read()
        if data:
            self._sock.sendall(data)

    def receive(self, size: int = 65536) -> List[Any]:
        """Waits for up to ``size`` bytes: the messages of the lines they complete
        (maybe none). End of file raises ``ConnectionResetError``."""
        data = self._sock.recv(size)
        if not data:
            raise ConnectionResetError("the pilot closed the connection")
        return self._decrypt_and_parse(data)

    def _decrypt_and_parse(self, data: bytes) -> List[Any]:
        chunks: List[bytes] = []
        tls = self._tls
        if tls is None:
            chunks.append(data)
        else:
            self._decrypt(tls, data, chunks)
        if not chunks:
            return []
        return self._parse(chunks)

    def _decrypt(self, tls: ssl.SSLObject, data: bytes, chunks: List[bytes]) -> None:
        with self._ssl_lock:
            self._incoming.write(data)
            try:
                while True:
                    chunk = tls.read(1 << 20)
                    if not chunk:
                        raise ConnectionResetError("the pilot closed the connection")
                    chunks.append(chunk)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                raise ConnectionResetError("the pilot closed the connection") from None
            if self._outgoing.pending:
                self.flush_needed = True
        if self.flush_needed:
            self._on_flush_needed()

    def _parse(self, chunks: List[bytes]) -> List[Any]:
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if data.rfind(b"\n") < 0:
            self._partial.append(data)
            return []
        head, _, rest = data.rpartition(b"\n")
        if self._partial:
            self._partial.append(head)
            head = b"".join(self._partial)
            self._partial = []
        if rest:
            self._partial.append(rest)
        lines = [line for line in head.split(b"\n") if line.strip()]
        if not lines:
            return []
        try:
            messages: List[Any] = _loads(b"[" + b",".join(lines) + b"]")
            return messages
        except ValueError:
            messages = []
            for line in lines:
                try:
                    messages.append(_loads(line))
                except ValueError:
                    sys.stderr.write(f"saker: ignoring a malformed line from the pilot: {line[:200]!r}\n")
            return messages

    # -- ending

    def shutdown(self) -> None:
        """Shuts the socket down both ways: wakes a thread blocked receiving or sending."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    # -- re-attaching (see the module docstring)

    def reconnect(self, within: float, stop: threading.Event, resume: Callable[[], bool]) -> bool:
        """Re-attaches to the pilot's root as it is now, trying for ``within`` seconds
        (on the receiving thread, after :meth:`close`).

        ``resume`` runs under ``send_lock`` once a root of this pilot answered the
        hello, to send what must go first; it returns False when its side closed
        meanwhile. True once attached; False when ``stop`` was set or ``resume`` said
        closed. Raises :class:`GaveUp` when another pilot answers or none in time.
        """
        deadline = _monotonic() + within
        delay = _RECONNECT_FIRST
        last: Optional[BaseException] = None
        while True:
            if stop.is_set():
                return False
            try:
                return self._attach(deadline, resume)
            except GaveUp:
                raise
            except (SakerError, OSError, ssl.SSLError, ValueError) as exc:
                last = exc
            remaining = deadline - _monotonic()
            if remaining <= 0:
                break
            stop.wait(min(delay, remaining))
            delay = min(delay * 2, _RECONNECT_MOST)
        raise GaveUp(f"no root of the pilot in {self.directory} answered within {within:g} s (last attempt: {last})")

    def _attach(self, deadline: float, resume: Callable[[], bool]) -> bool:
        """One attempt at a connection to the pilot's root as it is now; False when
        ``resume`` says its side closed meanwhile."""
        # Missing for a moment, too: a standby that takes over removes the dead root's
        # before it writes its own, so that is no sign of a pilot that stopped.
        endpoint = read_endpoint(self.directory)
        timeout = max(1.0, min(self._timeout, deadline - _monotonic()))
        with self.send_lock:
            self._endpoint = endpoint
            self.addr = str(endpoint["addr"])
            self._open(timeout)
            try:
                hello = self._hello(self.protocol)
                pilot_id = str(hello.get("pilot_id", ""))
                if self.pilot_id and pilot_id and pilot_id != self.pilot_id:
                    raise GaveUp(f"{self.directory} now holds another pilot ({pilot_id}, not {self.pilot_id})")
                self._sock.settimeout(None)
                self.server = str(hello.get("server", self.server))
                if not resume():
                    self._sock.close()
                    return False
            except BaseException:
                try:
                    self._sock.close()
                except OSError:
                    pass
                raise
        return True
