"""saker.transport.Transport on its own, against a fake root on the local socket: the
JSON lines it parses, and re-attaching to whichever root serves client.json."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest

from saker.transport import GaveUp, Transport

PILOT_ID = "1" * 32


class FakeRoot:
    """Serves one client on ``directory/name`` (written into client.json): answers
    its hello as pilot ``pilot_id``, then sends each of ``chunks`` once the client sent
    one more line, and records its lines."""

    def __init__(self, directory: Path, name: str, pilot_id: str = PILOT_ID, chunks: Sequence[bytes] = ()) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(directory / name))
        self.server.listen(1)
        self.server.settimeout(10)
        self.pilot_id = pilot_id
        self.chunks = chunks
        self.lines: List[Dict[str, Any]] = []
        self.conn: Optional[socket.socket] = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        (directory / "client.json").write_text(json.dumps({
            "addr": "127.0.0.1:1", "protocol": 2, "pilot_id": PILOT_ID, "socket": name,
            "host": socket.gethostname(),
        }))

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        self.conn = conn
        reader = conn.makefile("rb")
        hello = json.loads(reader.readline())
        self.lines.append(hello)
        answer = {"ok": {"protocol": hello["hello"]["protocol"], "pilot_id": self.pilot_id, "server": "fake"}}
        conn.sendall(json.dumps(answer).encode() + b"\n")
        for chunk in self.chunks:
            self.lines.append(json.loads(reader.readline()))
            conn.sendall(chunk)
        for line in reader:
            self.lines.append(json.loads(line))

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.shutdown(socket.SHUT_RDWR)
            self.conn.close()
        self.server.close()
        self.thread.join(10)


def test_hello_then_messages_of_lines_split_across_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chunks = [b'{"a": 1}\n{"b"', b': 2}\n\nnot json\n{"c": ', b"3}\n"]
    root = FakeRoot(tmp_path, "one.sock", chunks=chunks)
    transport = Transport(tmp_path, timeout=10, client="test")
    try:
        assert not transport.encrypted
        assert (transport.protocol, transport.pilot_id, transport.server) == (2, PILOT_ID, "fake")
        messages: List[Any] = []
        for _ in chunks:  # one read or more per chunk: lines end in later reads
            transport.send(b'{"id": 1, "status": {}}\n')
            messages.extend(transport.receive())
        while len(messages) < 3:
            messages.extend(transport.receive())
        assert messages == [{"a": 1}, {"b": 2}, {"c": 3}]
        assert "ignoring a malformed line from the pilot: b'not json'" in capsys.readouterr().err
    finally:
        transport.close()
        root.stop()
    assert root.lines == [{"hello": {"protocol": 2, "client": "test"}}] + [{"id": 1, "status": {}}] * 3


def test_reconnect_attaches_to_the_new_root_and_resumes_first(tmp_path: Path) -> None:
    old = FakeRoot(tmp_path, "old.sock")
    transport = Transport(tmp_path, timeout=10, client="test")
    old.stop()
    with pytest.raises(OSError):
        transport.receive()
    transport.close()
    new = FakeRoot(tmp_path, "new.sock")  # a standby took over: a new client.json
    held: List[bool] = []

    def resume() -> bool:
        held.append(transport.send_lock.locked())
        transport.send(b'{"id": 9, "results": {"from": 5, "follow": true}}\n')
        return True

    assert transport.reconnect(10, threading.Event(), resume)
    transport.send(b'{"id": 10, "status": {}}\n')
    transport.close()
    new.thread.join(10)
    assert held == [True], "resume runs under send_lock, before any other sender"
    assert new.lines == [
        {"hello": {"protocol": 2, "client": "test"}},
        {"id": 9, "results": {"from": 5, "follow": True}},
        {"id": 10, "status": {}},
    ]


def test_reconnect_gives_up_at_once_when_another_pilot_answers(tmp_path: Path) -> None:
    old = FakeRoot(tmp_path, "old.sock")
    transport = Transport(tmp_path, timeout=10)
    old.stop()
    transport.close()
    other = FakeRoot(tmp_path, "other.sock", pilot_id="2" * 32)
    with pytest.raises(GaveUp, match=f"now holds another pilot \\({'2' * 32}, not {PILOT_ID}\\)"):
        transport.reconnect(60, threading.Event(), lambda: pytest.fail("resumed on another pilot"))
    other.stop()


def test_reconnect_gives_up_when_no_root_answers_in_time(tmp_path: Path) -> None:
    old = FakeRoot(tmp_path, "old.sock")
    transport = Transport(tmp_path, timeout=10)
    old.stop()
    transport.close()
    (tmp_path / "client.json").unlink()  # as while a standby takes over
    with pytest.raises(GaveUp, match="no root of the pilot in .* answered within 0.2 s .*no client.json"):
        transport.reconnect(0.2, threading.Event(), lambda: True)


def test_reconnect_stops_when_told(tmp_path: Path) -> None:
    old = FakeRoot(tmp_path, "old.sock")
    transport = Transport(tmp_path, timeout=10)
    old.stop()
    transport.close()
    stop = threading.Event()
    stop.set()
    assert not transport.reconnect(60, stop, lambda: pytest.fail("resumed after stop"))
