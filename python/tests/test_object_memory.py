"""Objects kept in the nodes' shared memory (``--object-memory``) on a real pilot: put
there, made there, fetched there, moved to the scratch past the bound, and read right
wherever they are."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List

import pytest

import saker
from saker.objects import Ref

import remote_funcs
from conftest import wait_for

numpy = pytest.importorskip("numpy")

BOUND = 6 << 20
ARRAY = 2 << 20  # bytes of each array: two fit in a node's memory, not three


@pytest.fixture(scope="module")
def pilot(saker_bin: str) -> Iterator[saker.Pilot]:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    with saker.Pilot.start(agents=2, slots=2, saker_bin=saker_bin, object_memory=BOUND) as p:
        wait_for(lambda: len(p._object_stores().dirs_seen(refresh=True)) == 2, what="both stores")
        yield p


def _where(pilot: saker.Pilot, ref: Ref) -> List[str]:
    """``memory`` or ``scratch`` for each copy of ``ref`` on the nodes."""
    found = []
    for _node, dirs in pilot._object_stores().dirs_seen():
        for kind, directory in zip(("memory", "scratch"), dirs):
            if Path(directory, ref.item).exists():
                found.append(kind)
    return found


def test_each_node_has_a_private_memory_in_dev_shm_beside_its_scratch(pilot: saker.Pilot) -> None:
    stores = pilot._object_stores().dirs_seen()
    assert sorted(node for node, _ in stores) == [0, 1]
    for node, dirs in stores:
        memory, scratch = dirs
        assert memory.startswith("/dev/shm/saker-") and memory.endswith(f"/node-{node}")
        assert os.stat(memory).st_mode & 0o777 == 0o700
        assert scratch != memory


def test_objects_past_the_bound_move_to_the_scratch_and_read_right(pilot: saker.Pilot) -> None:
    refs = [pilot.put(numpy.full(ARRAY // 8, n, dtype=numpy.float64)) for n in range(6)]
    assert all(_where(pilot, ref) in (["memory"], ["scratch"]) for ref in refs)

    # Three on each node, where two fit: one of each node's moves (the agent finds
    # puts when it looks, about every second), and the root hears of it.
    def moved() -> bool:
        status = pilot.status()
        return status["data_spills"] >= 2 and status["data_memory_bytes"] <= 2 * BOUND

    wait_for(moved, timeout=30, what="objects moved past the bound")
    status = pilot.status()
    assert status["data_memory_bound"] == 2 * BOUND
    assert status["data_spilled_bytes"] >= 2 * ARRAY
    places = [_where(pilot, ref) for ref in refs]
    assert places.count(["scratch"]) >= 2 and places.count(["memory"]) >= 2, places
    for node in status["nodes"]:
        assert node["memory_bytes"] <= BOUND and node["memory_bound"] == BOUND

    # Wherever each is now, calls and gets read every one whole.
    assert [float(x) for x in pilot.map(numpy.sum, refs)] == [n * ARRAY / 8 for n in range(6)]
    assert [float(pilot.get(ref)[-1]) for ref in refs] == [float(n) for n in range(6)]


def test_values_made_and_copies_fetched_land_in_memory(pilot: saker.Pilot) -> None:
    made = pilot.options(ref=True).call(remote_funcs.array_of, 7.0, 1000).result(60)
    assert _where(pilot, made) == ["memory"]
    # Read on the other node too: its copy is fetched into that node's memory.
    [holder] = [
        node for node, dirs in pilot._object_stores().dirs_seen() if Path(dirs[0], made.item).exists()
    ]
    other = 1 - holder
    value = pilot.options(node=other).call(remote_funcs.described, made).result(60)
    assert value["type"] == "dict"
    [(_, dirs)] = [(n, d) for n, d in pilot._object_stores().dirs_seen() if n == other]
    assert Path(dirs[0], made.item).exists(), "the fetched copy is in the reader's memory"
    assert pilot.get(made)["array"][0] == 7.0


def test_a_large_value_and_large_arguments_go_through_memory(pilot: saker.Pilot) -> None:
    array = numpy.arange(1 << 17, dtype=numpy.float64)  # 1 MiB: by reference
    value = pilot.call(remote_funcs.array_of, 3.0, 1 << 17).result(60)
    assert float(value["array"][5]) == 3.0
    assert float(pilot.call(numpy.sum, array).result(60)) == float(array.sum())
    # The call's stored arguments and the value's file are gone once read.
    for _node, dirs in pilot._object_stores().dirs_seen():
        for directory in dirs:
            leftovers = [name for name in os.listdir(directory) if name.startswith((".obj-", "obj-")) and name.endswith(".tmp")]
            assert leftovers == []


def test_the_memory_goes_where_object_memory_dir_says(saker_bin: str) -> None:
    import shutil
    import tempfile

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    where = tempfile.mkdtemp(prefix="saker-test-memory-", dir="/dev/shm")
    try:
        with saker.Pilot.start(slots=1, saker_bin=saker_bin, object_memory="4M", object_memory_dir=where) as p:
            ref = p.put(b"x" * 1000)
            [(node, dirs)] = p._object_stores().dirs_seen()
            assert dirs[0] == os.path.join(where, f"saker-{p.pilot_id}", f"node-{node}")
            assert Path(dirs[0], ref.item).is_file()
            assert p.get(ref) == b"x" * 1000
        # A clean stop leaves nothing there.
        assert os.listdir(where) == []
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_copies_fetched_past_the_bound_are_dropped_while_their_maker_holds_them(saker_bin: str) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    with saker.Pilot.start(agents=2, slots=2, saker_bin=saker_bin, object_memory=BOUND) as p:
        wait_for(lambda: len(p._object_stores().dirs_seen(refresh=True)) == 2, what="both stores")
        # Four arrays made on node 0, each read on node 1: where three fit, node 1
        # drops a fetched copy (node 0 holds them all) rather than move it to disk.
        made = [p.options(node=0, ref=True).call(numpy.full, ARRAY // 8, float(n)) for n in range(4)]
        refs = [future.result(60) for future in made]
        sums = [p.options(node=1).call(numpy.sum, ref).result(60) for ref in refs]
        assert [float(x) for x in sums] == [n * ARRAY / 8 for n in range(4)]

        def dropped() -> bool:
            return p.status()["data_drops"] >= 1

        wait_for(dropped, timeout=30, what="a fetched copy dropped")
        status = p.status()
        assert status["data_dropped_bytes"] >= ARRAY
        dirs = dict(p._object_stores().dirs_seen())
        on_one = [ref for ref in refs if any(Path(d, ref.item).exists() for d in dirs[1])]
        assert len(on_one) <= 3, "node 1 keeps what fits"
        assert not any(Path(dirs[1][1], ref.item).exists() for ref in refs), "none moved to disk"
        assert all(any(Path(d, ref.item).exists() for d in dirs[0]) for ref in refs), "node 0 holds all"
        # Every one still reads right on node 1, fetched again where it was dropped.
        again = [p.options(node=1).call(numpy.sum, ref).result(60) for ref in refs]
        assert [float(x) for x in again] == [n * ARRAY / 8 for n in range(4)]
