"""Objects by reference on real pilots: put, get, and refs as call arguments."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Iterator, List

import pytest

import pickle

import saker
from saker import objects
from saker.objects import ObjectError, Ref, read_object, write_object

import remote_funcs
from conftest import wait_for


def test_refs_pickled_while_collecting_are_named_once_each_in_order() -> None:
    first, second = Ref("a" * 32, 1), Ref("b" * 32, 2)
    objects.start_collecting()
    pickle.dumps(([second, first], {"again": second}))
    assert objects.collected() == ["b" * 32, "a" * 32]
    assert objects.collected() == []
    pickle.dumps(first)  # no longer collecting
    assert objects.collected() == []


def test_a_ref_unpickles_as_its_object_on_a_worker_and_as_a_ref_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = Ref("c" * 32, 0)
    write_object({"k": 1}, tmp_path / ref.item)
    data = pickle.dumps([ref])
    monkeypatch.delenv("SAKER_WORKER_KIND", raising=False)
    assert pickle.loads(data) == [ref]
    monkeypatch.setenv("SAKER_SCRATCH", str(tmp_path))
    monkeypatch.setenv("SAKER_WORKER_KIND", "python")
    assert pickle.loads(data) == [{"k": 1}]


def test_put_then_get_returns_the_object_from_the_nodes_store(pilot: saker.Pilot) -> None:
    value = {"name": "sample", "data": list(range(1000))}
    ref = pilot.put(value)
    assert isinstance(ref, Ref) and len(ref.id) == 32 and ref.size > 0
    assert pilot.get(ref) == value
    assert ref.result() == value
    # The object is a file in a node's scratch, which the pilot counts as an item.
    [(node, scratch)] = pilot._object_stores().seen()
    assert read_object(os.path.join(scratch, ref.item)) == value
    assert pilot.status()["items"] >= 1


def test_a_ref_reaches_the_function_as_its_object_also_inside_lists_and_dicts(pilot: saker.Pilot) -> None:
    blob = b"x" * 100_000
    ref = pilot.put(blob)
    assert pilot.call(remote_funcs.described, ref).result(60) == {"type": "bytes", "len": 100_000}
    assert pilot.call(remote_funcs.total, [ref, ref, b"yz"]).result(60) == 200_002
    assert pilot.call(remote_funcs.total, {"a": ref}).result(60) == 100_000
    assert list(pilot.map(remote_funcs.total, [[ref], [ref, ref]])) == [100_000, 200_000]
    with pilot.executor() as executor:
        assert executor.submit(remote_funcs.total, (ref,)).result(60) == 100_000


def test_a_numpy_array_arrives_as_a_read_only_view_of_the_store(pilot: saker.Pilot) -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.arange(4 << 20, dtype=numpy.int64)  # 32 MiB
    ref = pilot.put(array)
    got = pilot.call(remote_funcs.described, ref).result(60)
    assert got == {
        "type": "ndarray",
        "len": 4 << 20,
        "mapped": True,
        "writeable": False,
        "sum": int(array.sum()),
    }
    back = pilot.get(ref)
    assert not back.flags.writeable and numpy.array_equal(back, array)


def test_a_ref_no_store_holds_is_refused_by_name(pilot: saker.Pilot) -> None:
    with pytest.raises(ObjectError, match="0" * 31 + "1"):
        pilot.get(Ref("0" * 31 + "1", 10))


def _on_no_node(pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch, binary: bool) -> saker.stores.Stores:
    """As on a login node: this client sees no node's store (and, unless ``binary``,
    has no saker binary to reach one with)."""
    stores = pilot._object_stores()
    fresh = saker.stores.Stores(pilot._require_connection(), pilot.pilot_id, stores.binary)
    monkeypatch.setattr(fresh, "_sees", lambda node, directory: ())
    if not binary:
        monkeypatch.setattr(fresh, "binary", lambda: None)
    monkeypatch.setattr(pilot, "_stores", fresh)
    return fresh


def test_a_client_on_no_node_puts_and_gets_objects_on_the_nodes_directly(
    pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch
) -> None:
    numpy = pytest.importorskip("numpy")
    stores = _on_no_node(pilot, monkeypatch, binary=True)
    with pytest.raises(saker.stores.NotSeen, match="no node's store of this pilot is visible"):
        stores.put(b"data", pilot)
    # Past the 16 MiB a call carries inline, and none of it through the root.
    array = numpy.arange(3 << 20, dtype=numpy.float64)  # 24 MiB
    ref = pilot.put(array)
    assert isinstance(ref, Ref) and ref.size > array.nbytes
    got = pilot.call(remote_funcs.described, ref).result(60)
    assert got["mapped"] is True and got["sum"] == float(array.sum())
    back = pilot.get(ref)
    assert back.flags.writeable and numpy.array_equal(back, array)
    small = pilot.put(b"x" * 300_000)
    assert pilot.get(small) == b"x" * 300_000
    # A call's argument past 16 MiB goes the same way, by reference; so does a value
    # past 16 MiB asked for by reference.
    assert pilot.call(remote_funcs.described, b"z" * (20 << 20)).result(60)["len"] == 20 << 20
    made = pilot.options(ref=True).call(remote_funcs.filled, 3, 20 << 20).result(60)
    assert pilot.get(made) == b"\x03" * (20 << 20)
    # A value past 16 MiB comes back by itself, read from its node, then freed there.
    held = pilot.status()["items"]
    assert pilot.call(remote_funcs.filled, 4, 20 << 20).result(60) == b"\x04" * (20 << 20)
    assert [len(v) for v in pilot.map(remote_funcs.filled, [5, 6], [1, 17 << 20])] == [1, 17 << 20]
    wait_for(lambda: pilot.status()["items"] == held, what="the values' objects freed")
    assert pilot.status()["data_root_bytes"] == 0
    pilot.free(ref)
    with pytest.raises(ObjectError, match=f"no live node holds object {ref.id}"):
        pilot.get(ref)


def test_a_client_on_no_node_without_a_binary_puts_and_gets_through_calls(
    pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch
) -> None:
    _on_no_node(pilot, monkeypatch, binary=False)
    ref = pilot.put(b"x" * 300_000)
    assert isinstance(ref, Ref) and ref.size > 300_000
    assert pilot.call(remote_funcs.described, ref).result(60) == {"type": "bytes", "len": 300_000}
    assert pilot.get(ref) == b"x" * 300_000
    # Past what a call carries inline: refused, saying why and what else to do.
    with pytest.raises(ObjectError, match="inline through the pilot to a node, at most 16 MiB"):
        pilot.put(b"y" * (17 << 20))


def test_a_call_with_ref_answers_a_ref_to_its_value_which_later_calls_read(pilot: saker.Pilot) -> None:
    by_ref = pilot.options(ref=True)
    ref = by_ref.call(remote_funcs.filled, 7, 200_000).result(60)
    assert isinstance(ref, Ref) and ref.size > 200_000
    assert pilot.get(ref) == bytes([7]) * 200_000
    assert ref.result() == bytes([7]) * 200_000
    # Chained: the next call reads it where it was written.
    assert pilot.call(remote_funcs.described, ref).result(60) == {"type": "bytes", "len": 200_000}
    refs = list(by_ref.map(remote_funcs.filled, [1, 2], [10, 20]))
    assert [pilot.get(r) for r in refs] == [b"\x01" * 10, b"\x02" * 20]
    with pytest.raises(ValueError, match="chunksize=1"):
        by_ref.map(remote_funcs.filled, [1], [1], chunksize=2)
    with pytest.raises(TypeError, match="ref applies to calls"):
        by_ref.submit("true")


def test_a_large_argument_goes_by_reference_without_asking(pilot: saker.Pilot) -> None:
    [(_, scratch)] = pilot._object_stores().seen()
    kept = {n[4:] for n in os.listdir(scratch) if n.startswith("obj-")}
    # Over the 16 MiB a call may carry inline: it is stored and mapped instead.
    big = b"z" * (20 << 20)
    assert pilot.call(remote_funcs.described, big).result(60) == {"type": "bytes", "len": 20 << 20}
    numpy = pytest.importorskip("numpy")
    array = numpy.ones(1 << 17)  # 1 MiB
    got = pilot.call(remote_funcs.described, array).result(60)
    assert got["mapped"] is True and got["sum"] == 1 << 17
    # map's calls too, each its own object; small ones stay inline.
    described = list(pilot.map(remote_funcs.described, [big, b"s"]))
    assert [d["len"] for d in described] == [20 << 20, 1]
    # Each such call's object is its own: removed from the store once the call ended.
    [(_, scratch)] = pilot._object_stores().seen()
    wait_for(lambda: not [n for n in os.listdir(scratch) if n.startswith("obj-") and n[4:] not in kept],
             what="the stored calls' files removed")
    # A ref beside a large argument still reaches the function as its object.
    ref = pilot.put(b"r" * 10)
    assert pilot.call(remote_funcs.total_beside, [ref], array).result(60) == 10


def test_a_client_that_sees_no_store_still_sends_calls_inline_and_refuses_huge_ones(
    pilot: saker.Pilot, monkeypatch: pytest.MonkeyPatch
) -> None:
    _on_no_node(pilot, monkeypatch, binary=False)
    assert pilot.call(remote_funcs.total, [b"a" * (1 << 20)]).result(60) == 1 << 20
    assert pilot.call(remote_funcs.described, b"a" * (1 << 20)).result(60)["len"] == 1 << 20
    with pytest.raises(saker.SakerError, match="over the 16 MiB"):
        pilot.call(remote_funcs.described, b"z" * (20 << 20))
    # Nor does a large value come back by reference: over 16 MiB it cannot come back.
    assert pilot.call(remote_funcs.filled, 1, 1 << 20).result(60) == b"\x01" * (1 << 20)
    with pytest.raises(ValueError, match="over the 16 MiB a call's answer may carry"):
        pilot.call(remote_funcs.filled, 1, 20 << 20).result(60)


def _objects_in(pilot: saker.Pilot) -> set:
    return {
        name
        for _, scratch in pilot._object_stores().seen()
        for name in os.listdir(scratch)
        if name.startswith("obj-")
    }


def test_a_large_value_comes_back_by_reference_writable_and_its_file_goes(pilot: saker.Pilot) -> None:
    numpy = pytest.importorskip("numpy")
    kept = _objects_in(pilot)
    # Over the 16 MiB an answer carries inline: stored on the node, read from there.
    assert pilot.call(remote_funcs.filled, 7, 20 << 20).result(60) == b"\x07" * (20 << 20)
    got = pilot.call(remote_funcs.array_of, 2.5, 1 << 20).result(60)
    array = got["array"]
    assert array.shape == (1 << 20,) and float(array.sum()) == 2.5 * (1 << 20)
    array[0] = 0.0  # writable, as a value returned inline is
    assert float(array[0]) == 0.0
    # So are map's values; small values come back inline as ever.
    values = list(pilot.map(remote_funcs.filled, [1, 2], [300_000, 10]))
    assert values == [b"\x01" * 300_000, b"\x02" * 10]
    assert pilot.call(remote_funcs.add, 2, 3).result(60) == 5
    # Each stored value's file is removed once its client has read it. (Objects of
    # earlier tests in this module may go meanwhile: their frees are asynchronous.)
    assert _objects_in(pilot) - kept == set()


def test_a_stored_value_that_cannot_be_read_fails_its_call_by_name(tmp_path: Path) -> None:
    gone = str(tmp_path / "obj-gone")
    with pytest.raises(ObjectError, match="was stored at .*obj-gone, and this process cannot read it"):
        objects._stored_value(gone, 10)


@pytest.fixture(scope="module")
def two_agents(saker_bin: str) -> Iterator[saker.Pilot]:
    with saker.Pilot.start(agents=2, slots=2, saker_bin=saker_bin) as p:
        yield p


def test_get_of_an_object_on_a_node_this_client_does_not_see_fetches_it_to_one_it_does(
    two_agents: saker.Pilot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As with node-local scratch: this client sees node 0's store, not node 1's.
    pilot = two_agents
    stores = saker.stores.Stores(pilot._require_connection(), pilot.pilot_id)
    sees = stores._sees
    monkeypatch.setattr(stores, "_sees", lambda node, directory: sees(node, directory) if node == 0 else ())
    monkeypatch.setattr(pilot, "_stores", stores)
    ref = pilot.options(node=1, ref=True).call(remote_funcs.filled, 5, 3 << 20).result(60)
    before = pilot.status()["data_root_bytes"]
    assert pilot.get(ref) == b"\x05" * (3 << 20)
    assert pilot.status()["data_root_bytes"] == before  # node to node, not through the root
    with pytest.raises(ObjectError, match="no node could give it"):
        pilot.get(Ref("0" * 31 + "2", 10))


def test_calls_on_any_node_read_an_object_put_on_one(two_agents: saker.Pilot) -> None:
    pilot = two_agents
    # Both agents join in their own time: wait until both stores are listed.
    wait_for(lambda: len(pilot._object_stores().seen(refresh=True)) == 2, what="both stores")
    refs = [pilot.put(bytes([n]) * 50_000) for n in range(4)]
    # The puts are spread over both nodes' stores.
    holders = {
        node
        for ref in refs
        for node, scratch in pilot._object_stores().seen()
        if Path(scratch, ref.item).exists()
    }
    assert holders == {0, 1}
    # Each call runs where its object is, or has it fetched: all read it whole.
    futures = [pilot.call(remote_funcs.described, ref) for ref in refs for _ in range(3)]
    assert [f.result(60) for f in futures] == [{"type": "bytes", "len": 50_000}] * 12


def test_a_ref_beside_a_large_argument_is_fetched_where_the_call_runs(two_agents: saker.Pilot) -> None:
    pilot = two_agents
    wait_for(lambda: len(pilot._object_stores().seen(refresh=True)) == 2, what="both stores")
    # Puts go to the two stores in turn: the stored call lands beside or away from
    # the ref, and runs where it landed; either way the ref must reach it.
    for n in range(4):
        ref = pilot.put(bytes([n]) * 100)
        assert pilot.call(remote_funcs.total_beside, [ref], b"L" * (1 << 20)).result(60) == 100


def test_large_values_from_either_node_come_back_by_reference(two_agents: saker.Pilot) -> None:
    pilot = two_agents
    wait_for(lambda: len(pilot._object_stores().seen(refresh=True)) == 2, what="both stores")
    kept = _objects_in(pilot)
    results = [pilot.call(remote_funcs.array_of, float(n), 100_000) for n in range(8)]
    values = [f.result(60) for f in results]
    assert [float(v["array"][0]) for v in values] == [float(n) for n in range(8)]
    assert {v["node"] for v in values} == {"0", "1"}, "both nodes answered"
    # (Objects of earlier tests may be freed meanwhile: none is new.)
    assert _objects_in(pilot) <= kept


def test_an_object_no_node_can_give_fails_its_reader_with_object_lost(two_agents: saker.Pilot) -> None:
    pilot = two_agents
    wait_for(lambda: len(pilot._object_stores().seen(refresh=True)) == 2, what="both stores")
    ref = pilot.put(b"gone" * 1000)
    [scratch] = [scratch for _, scratch in pilot._object_stores().seen() if Path(scratch, ref.item).exists()]
    os.unlink(os.path.join(scratch, ref.item))  # its only copy is lost
    # Wherever the call runs, the object cannot be had: the call fails, naming it.
    with pytest.raises(saker.ObjectLost) as info:
        pilot.call(remote_funcs.described, ref).result(60)
    assert info.value.object == ref.id
    assert "no live node holds it" in info.value.reason, info.value.reason
    assert isinstance(info.value, saker.TaskLost)


def _agent_pid(directory: Path, node: int) -> int:
    """The pid of the agent of ``node`` a local pilot in ``directory`` started (not a
    task it is forking, which shows its command line until it execs)."""
    pattern = f"agent --dir {directory} --node {node} "
    matching = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        if pattern in cmdline:
            matching[int(entry)] = int(stat[stat.rindex(")") + 1:].split()[1])
    [pid] = [pid for pid, parent in matching.items() if parent not in matching]
    return pid


def test_a_value_by_ref_whose_only_holder_dies_is_made_again_by_its_call(saker_bin: str, tmp_path: Path) -> None:
    """The node holding a call's value (``ref=True``) dies with its disk: a later call
    reading it gets the right value, the function having run once more."""
    log = tmp_path / "runs"
    with saker.Pilot.start(agents=2, slots=2, saker_bin=saker_bin) as pilot:
        wait_for(lambda: len(pilot._object_stores().seen(refresh=True)) == 2, what="both stores")
        ref = pilot.options(ref=True).call(remote_funcs.logged_range, str(log), 100_000).result(60)
        [(node, scratch)] = [(n, s) for n, s in pilot._object_stores().seen() if Path(s, ref.item).exists()]
        os.kill(_agent_pid(pilot.dir, node), signal.SIGKILL)
        os.unlink(Path(scratch, ref.item))  # its disk goes with it
        assert pilot.call(sum, ref).result(60) == sum(range(100_000))
        assert log.read_text().count("ran") == 2


def test_objects_are_freed_when_their_last_handle_goes_or_by_hand(two_agents: saker.Pilot) -> None:
    """An object put, or made by a call with ``ref=True``, is removed from its node
    once every handle on it here is garbage (at the client's next request); ``free``
    frees one at once; a call that reads a freed object fails with ObjectLost."""
    import gc

    pilot = two_agents
    stores = pilot._object_stores().seen(refresh=True)
    kept = pilot.put(b"kept" * 1000)
    dropped = pilot.put(b"dropped" * 1000)
    made = pilot.options(ref=True).call(remote_funcs.identity, b"made" * 1000).result(60)
    copy = pickle.loads(pickle.dumps(made))  # a second handle on it

    def files(ref: Ref) -> List[Path]:
        return [Path(s, ref.item) for _, s in stores if Path(s, ref.item).exists()]

    dropped_files, made_files = files(dropped), files(made)
    assert dropped_files and made_files and files(kept)
    del dropped, made
    gc.collect()
    pilot.call(remote_funcs.identity, 1).result(60)  # the next request frees it
    wait_for(lambda: not any(p.exists() for p in dropped_files), what="the dropped object gone")
    assert all(p.exists() for p in made_files), "a handle is left on it"
    assert pilot.call(len, copy).result(60) == 4000
    del copy
    gc.collect()
    kept_files = files(kept)
    pilot.free(kept)
    wait_for(lambda: not any(p.exists() for p in made_files + kept_files), what="both gone")
    with pytest.raises(saker.ObjectLost):
        pilot.call(len, kept).result(60)
