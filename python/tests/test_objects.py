"""saker.objects on its own: the file format of objects by reference, read back from
a mapping without a copy, and refused whole when it is not a whole object."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

from saker import serialize
from saker.objects import ALIGN, MAGIC, ObjectError, decode_object, encode_object, read_object, write_object

HEADER = struct.Struct("<8sIIQ")
SPAN = struct.Struct("<QQ")


def spans(path: Path) -> Tuple[int, List[Tuple[int, int]]]:
    """The pickle stream's length and the (offset, length) of each buffer, from the header."""
    data = path.read_bytes()
    _, _, count, length = HEADER.unpack_from(data)
    return length, [SPAN.unpack_from(data, HEADER.size + SPAN.size * i) for i in range(count)]


def round_trip(obj: Any, path: Path) -> Any:
    size = write_object(obj, path)
    assert size == path.stat().st_size
    return read_object(path)


def mappings_of(path: Path) -> List[Tuple[int, int]]:
    """The address ranges where this process maps ``path``."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip() == str(path):
                start, end = fields[0].split("-")
                ranges.append((int(start, 16), int(end, 16)))
    return ranges


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.fixture
def shm_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory in /dev/shm (a node store's tmpfs) when there is one, else tmp_path."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="saker-objects-test-", dir="/dev/shm"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


PLAIN = [
    None,
    {"a": 1, "b": [1.5, "x", None], "c": {"nested": (1, 2)}},
    [1, 2, 3, "four", b"five"],
    "text with unicode: \u00e9\u00e8\u4e2d",
    b"some bytes",
    b"",
    {"empty": [], "set": {1, 2}, "big int": 1 << 100},
]


@pytest.mark.parametrize("obj", PLAIN, ids=lambda obj: type(obj).__name__)
def test_plain_objects_round_trip_with_no_out_of_band_buffers(obj: Any, tmp_path: Path) -> None:
    path = tmp_path / "obj"
    assert round_trip(obj, path) == obj
    assert spans(path)[1] == []
    head, buffers, total = encode_object(obj)
    assert buffers == [] and total == len(head) == path.stat().st_size
    assert decode_object(head) == obj


def test_bytearray_round_trips(tmp_path: Path) -> None:
    value = bytearray(os.urandom(100_000))
    back = round_trip(value, tmp_path / "obj")
    assert type(back) is bytearray and back == value


def test_large_bytes_round_trip(tmp_path: Path) -> None:
    value = os.urandom(8 << 20)
    assert round_trip({"payload": value}, tmp_path / "obj") == {"payload": value}


def test_pickle_buffer_goes_out_of_band_and_reads_back_as_a_read_only_view(tmp_path: Path) -> None:
    value = os.urandom(1 << 20)
    path = tmp_path / "obj"
    back = round_trip(pickle.PickleBuffer(value), path)
    assert isinstance(back, memoryview) and back.readonly and back.tobytes() == value
    assert [length for _, length in spans(path)[1]] == [len(value)]


def test_encoded_pieces_are_the_file_and_decode_to_the_object(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    obj = {"a": np.arange(10_000, dtype=np.int32), "b": np.ones((100, 100)), "name": "x"}
    path = tmp_path / "obj"
    write_object(obj, path)
    head, buffers, total = encode_object(obj)
    _, table = spans(path)
    data = bytearray(total)
    data[: len(head)] = head
    for (offset, length), buffer in zip(table, buffers):
        data[offset : offset + length] = buffer
    assert bytes(data) == path.read_bytes()
    back = decode_object(bytes(data))
    assert np.array_equal(back["a"], obj["a"]) and np.array_equal(back["b"], obj["b"])
    assert back["name"] == "x" and not back["a"].flags.writeable


DTYPES = ["int8", "uint16", "int32", "int64", "float32", "float64", "complex128", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_arrays_round_trip(dtype: str, tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    base = (np.arange(300 * 200) % 7).astype(dtype).reshape(300, 200)
    arrays = {
        "c": base,
        "fortran": np.asfortranarray(base),
        "slice": base[::3, 1::2],  # not contiguous: pickled in band
        "small": base[:2, :2].copy(),
        "empty": np.zeros((0, 4), dtype=dtype),
    }
    back = round_trip(arrays, tmp_path / "obj")
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape, name
        assert np.array_equal(back[name], array), name
    assert back["fortran"].flags.f_contiguous and not back["fortran"].flags.c_contiguous
    assert not back["c"].flags.writeable and not back["fortran"].flags.writeable
    assert len(spans(tmp_path / "obj")[1]) == 2  # the C and Fortran arrays


def test_numpy_arrays_round_trip_with_the_standard_pickler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(serialize, "_CloudPickler", None)
    array = np.arange(100_000, dtype=np.float64).reshape(1000, 100)
    back = round_trip([array, array.T, array[::2]], tmp_path / "obj")
    assert all(np.array_equal(a, b) for a, b in zip(back, [array, array.T, array[::2]]))
    assert len(spans(tmp_path / "obj")[1]) == 2


def test_buffers_are_64_byte_aligned(tmp_path: Path) -> None:
    # Odd sizes, so that each buffer ends off a 64-byte boundary.
    values = [bytes([i]) * (5000 + i) for i in range(1, 6)]
    path = tmp_path / "obj"
    back = round_trip([pickle.PickleBuffer(value) for value in values] + ["after"], path)
    length, table = spans(path)
    assert len(table) == 5
    end = HEADER.size + SPAN.size * len(table) + length
    for offset, nbytes in table:
        assert offset % ALIGN == 0 and end <= offset < end + ALIGN
        end = offset + nbytes
    assert end == path.stat().st_size
    assert [view.tobytes() for view in back[:5]] == values and back[5] == "after"


def test_numpy_arrays_read_back_aligned(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    arrays = [np.full(5000 + i, i, dtype=np.int8) for i in range(1, 6)]
    back = round_trip(arrays, tmp_path / "obj")
    assert [array.ctypes.data % ALIGN for array in back] == [0] * 5
    assert all(np.array_equal(a, b) for a, b in zip(back, arrays))


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_read_array_is_a_read_only_view_of_the_mapping(shm_dir: Path) -> None:
    np = pytest.importorskip("numpy")
    size = 32 << 20
    path = shm_dir / "big"
    array = np.arange(size // 8, dtype=np.int64).reshape(-1, 1024)
    write_object(array, path)
    expected = int(array.sum())
    del array
    before = rss_bytes()
    back = read_object(path)
    grown = rss_bytes() - before
    assert grown < size // 8, f"reading mapped {grown} bytes in, expected a lazy mapping"
    assert not back.flags.writeable
    with pytest.raises(ValueError):
        back[0, 0] = 1
    # Its memory is the file's mapping ...
    (start, end), = mappings_of(path)
    assert start <= back.ctypes.data and back.ctypes.data + back.nbytes <= end
    # ... which its base chain keeps alive.
    base = back
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview) and type(base.obj).__name__ == "mmap"
    assert int(back.sum()) == expected  # touches every page


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_mapping_lives_as_long_as_the_arrays_using_it(shm_dir: Path) -> None:
    np = pytest.importorskip("numpy")
    path = shm_dir / "obj"
    write_object({"a": np.ones(1 << 20), "b": np.zeros(1 << 20), "c": "text"}, path)
    back = read_object(path)
    a = back["a"]
    del back
    assert len(mappings_of(path)) == 1
    assert a.sum() == 1 << 20
    del a
    assert mappings_of(path) == []
    write_object({"small": 1}, path)
    assert read_object(path) == {"small": 1}
    assert mappings_of(path) == []  # no out-of-band buffer: unmapped at once


def write_bad(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_empty_file_is_refused(tmp_path: Path) -> None:
    path = write_bad(tmp_path / "empty", b"")
    with pytest.raises(ObjectError, match=f"{re.escape(str(path))} is empty"):
        read_object(path)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ObjectError, match="cannot read object .*missing: No such file"):
        read_object(tmp_path / "missing")


def test_wrong_magic_is_refused(tmp_path: Path) -> None:
    good = encode_object("x")[0]
    path = write_bad(tmp_path / "obj", b"NOTSAKER" + good[8:])
    with pytest.raises(ObjectError, match=f"{re.escape(str(path))} is not a saker object: magic b'NOTSAKER'"):
        read_object(path)


def test_unknown_version_is_refused(tmp_path: Path) -> None:
    good = encode_object("x")[0]
    path = write_bad(tmp_path / "obj", good[:8] + struct.pack("<I", 2) + good[12:])
    with pytest.raises(ObjectError, match="header version 2, this client reads version 1"):
        read_object(path)


def test_truncated_file_is_refused_wherever_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "obj"
    write_object([pickle.PickleBuffer(os.urandom(80_000)), "tail"], path)
    data = path.read_bytes()
    length, ((offset, nbytes),) = spans(path)
    cuts = {
        "in the header": (10, "less than the 24-byte header"),
        "in the table": (HEADER.size + 4, "its table of 1 buffers ends at byte 40"),
        "in the stream": (HEADER.size + SPAN.size + length // 2, "its pickle stream ends"),
        "in the buffer": (offset + nbytes - 1, "buffer 0 .* lies outside its data"),
    }
    for where, (cut, message) in cuts.items():
        write_bad(path, data[:cut])
        with pytest.raises(ObjectError, match=f"{re.escape(str(path))} is (corrupt or )?truncated: .*{message}"):
            read_object(path)
        with pytest.raises(ObjectError, match=message):
            decode_object(data[:cut])


def test_offsets_past_the_end_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "obj"
    write_object(pickle.PickleBuffer(os.urandom(80_000)), path)
    data = bytearray(path.read_bytes())
    _, ((offset, nbytes),) = spans(path)
    for bad_offset, bad_length in [(len(data), 16), (offset, nbytes + 1), (1 << 63, 1 << 63), (0, 8)]:
        SPAN.pack_into(data, HEADER.size, bad_offset, bad_length)
        write_bad(path, bytes(data))
        with pytest.raises(ObjectError, match="buffer 0 .* lies outside its data"):
            read_object(path)
    # A count of buffers whose table would not fit.
    HEADER.pack_into(data, 0, MAGIC, 1, 0xFFFFFFFF, 10)
    with pytest.raises(ObjectError, match="table of 4294967295 buffers ends at byte"):
        decode_object(bytes(data))


def test_corrupt_pickle_stream_is_refused(tmp_path: Path) -> None:
    head = bytearray(encode_object({"key": "value"})[0])
    head[HEADER.size :] = b"\x80\x05garbage" + bytes(len(head) - HEADER.size - 9)
    path = write_bad(tmp_path / "obj", bytes(head))
    with pytest.raises(ObjectError, match=f"object {re.escape(str(path))}: its pickle does not load"):
        read_object(path)


def test_write_replaces_the_target_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "obj"
    write_object("first", path)
    write_object({"second": list(range(1000))}, path)
    assert os.listdir(tmp_path) == ["obj"]
    assert read_object(path) == {"second": list(range(1000))}


def test_object_that_does_not_pickle_leaves_nothing(tmp_path: Path) -> None:
    import threading

    with pytest.raises(ObjectError, match="cannot store the dict object: .*lock"):
        write_object({"lock": threading.Lock()}, tmp_path / "obj")
    assert os.listdir(tmp_path) == []


def test_unwritable_directory_raises_object_error(tmp_path: Path) -> None:
    with pytest.raises(ObjectError, match="cannot write object .*no-such-dir/obj"):
        write_object("x", tmp_path / "no-such-dir" / "obj")
