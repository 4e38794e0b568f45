"""Every callable ProcessPoolExecutor accepts gives the same answer through a pilot,
with cloudpickle and without it; what cannot travel is refused before it is sent.

The callables live in a real script's ``__main__`` (where users define them), run as
its own process against a real pilot. Without cloudpickle, ``__main__`` functions
and classes travel by reference to the script; a bound method once travelled
without its ``self`` and returned a wrong answer silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import functools, json, os, sys, typing
    if os.environ["CLOUDPICKLE"] == "without":
        sys.modules["cloudpickle"] = None  # import cloudpickle now fails (workers too)
    import saker
    from saker import serialize

    # Read at the top level, as argparse would: workers must see the driver's argv.
    SCALE = int(sys.argv[2])

    class Adder:
        def __init__(self, base):
            self.base = base
        def add(self, x):
            return self.base + x
        def __call__(self, x):
            return self.base * x
        @staticmethod
        def twice(x):
            return 2 * x
        @classmethod
        def named(cls, x):
            return f"{cls.__name__}:{x}"

    class Point:
        def __init__(self, x, y=0):
            self.x, self.y = x, y
        def norm1(self):
            return abs(self.x) + abs(self.y)

    class Outer:
        class Inner:
            def __init__(self, k):
                self.k = k
            def __call__(self, x):
                return self.k - x

    UserId = typing.NewType("UserId", int)

    def power(base, exponent):
        return base ** exponent

    @functools.lru_cache(maxsize=None)
    def cached_square(x):
        return x * x

    def scaled(x):
        return SCALE * x

    def new_user(x):
        return UserId(x)

    def describe(point):
        return (type(point).__name__, point.norm1())

    def calls():
        adder = Adder(100)
        return {
            "bound method": (adder.add, (5,), {}),
            "callable object": (adder, (3,), {}),
            "staticmethod": (Adder.twice, (21,), {}),
            "classmethod": (Adder.named, ("x",), {}),
            "partial": (functools.partial(power, 2), (10,), {}),
            "partial of a bound method": (functools.partial(adder.add, x=1), (), {}),
            "main function": (power, (3, 3), {}),
            "main class": (Point, (3, 4), {}),
            "instance argument": (describe, (Point(-2, 5),), {}),
            "builtin": (max, ([4, 9, 2],), {}),
            "method of a builtin": ("a-b-c".split, ("-",), {}),
            "lru_cache function": (cached_square, (12,), {}),
            "nested class instance": (Outer.Inner(50), (8,), {}),
            "nested class": (Outer.Inner, (3,), {}),
            "partial of a callable object": (functools.partial(Adder(7)), (6,), {}),
            "NewType argument": (functools.partial(typing.cast, UserId), (5,), {}),
            "script global from argv": (scaled, (5,), {}),
            "NewType function": (new_user, (9,), {}),
        }

    def make_locals():
        def local_function(x):
            return x

        class LocalClass:
            def __call__(self, x):
                return x

        return local_function, LocalClass()

    def local(fn, args, kwargs):
        return plain(fn(*args, **kwargs))

    def plain(value):
        if isinstance(value, Point) or type(value).__name__ == "Point":
            return [type(value).__name__, value.norm1()]
        if type(value).__name__ == "Inner":
            return ["Inner", value.k]
        return value

    if __name__ == "__main__":
        cloud = serialize._cloudpickle is not None
        answers = {}
        with saker.Pilot.start(slots=2, saker_bin=sys.argv[1]) as pilot:
            for name, (fn, args, kwargs) in calls().items():
                remote = pilot.call(fn, *args, **kwargs).result(timeout=60)
                # The worker's classes come back as the script's, aliased here.
                answers[name] = {"remote": plain(remote), "local": local(fn, args, kwargs)}
            mapped = list(pilot.map(Adder(10).add, range(5)))
            answers["map of a bound method"] = {"remote": mapped, "local": [10 + i for i in range(5)]}
            chunked = list(pilot.map(functools.partial(power, 2), range(7), chunksize=3))
            answers["map of a partial, chunked"] = {"remote": chunked, "local": [2 ** i for i in range(7)]}
            with pilot.executor() as executor:
                remote = executor.submit(functools.partial(power, exponent=3), 4).result(timeout=60)
                listed = list(executor.map(cached_square, [1, 2, 3]))
            answers["executor partial"] = {"remote": remote, "local": 64}
            answers["executor map of an lru_cache function"] = {"remote": listed, "local": [1, 4, 9]}

            def guarded(x):  # defined under the guard: workers loading the script lack it
                return x

            import threading
            local_function, local_object = make_locals()
            refused = {}
            for name, fn in {
                "lambda": lambda x: x,
                "closure": (lambda k: lambda x: x + k)(1),
                "local function": local_function,
                "local class instance": local_object,
                "holds a lock": functools.partial(power, threading.Lock()),
                "defined under the main guard": guarded,
            }.items():
                try:
                    refused[name] = {"value": pilot.call(fn, 1).result(timeout=60)}
                except saker.SakerError as error:
                    refused[name] = {"error": str(error)}
                except Exception as error:  # must not happen: refused before sending
                    refused[name] = {"raised": f"{type(error).__name__}: {error}"}
        print(json.dumps({"cloudpickle": cloud, "answers": answers, "refused": refused}))
    """
)


def run_script(saker_bin: str, tmp_path: Path, mode: str) -> Dict[str, Any]:
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), CLOUDPICKLE=mode)
    done = subprocess.run(
        [sys.executable, str(script), os.path.abspath(saker_bin), "3"],
        capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("mode", ["with", "without"])
def test_every_callable_gives_the_local_answer(saker_bin: str, tmp_path: Path, mode: str) -> None:
    if mode == "with":
        pytest.importorskip("cloudpickle")
    out = run_script(saker_bin, tmp_path, mode)
    assert out["cloudpickle"] == (mode == "with")
    answers = out["answers"]
    assert answers["bound method"]["remote"] == 105  # not "self was 5"
    for name, answer in answers.items():
        assert answer["remote"] == answer["local"], name
    assert answers["script global from argv"]["remote"] == 15  # SCALE = 3, from argv
    assert answers["lru_cache function"]["remote"] == 144
    refused = out["refused"]
    # Whatever cannot travel is refused before it is sent, saying what to do.
    assert "holds a lock" in refused and "error" in refused["holds a lock"], refused
    assert "must pickle" in refused["holds a lock"]["error"]
    if mode == "with":
        for name, value in {"lambda": 1, "closure": 2, "local function": 1, "local class instance": 1,
                            "defined under the main guard": 1}.items():
            assert refused[name] == {"value": value}, name
    else:
        for name in ("lambda", "closure", "local function", "local class instance"):
            error = refused[name]["error"]
            assert "install cloudpickle" in error and "define it at the top level" in error, refused[name]
        # Sent by reference, not found where the worker loaded the script: said so.
        error = refused["defined under the main guard"]["error"]
        assert 'if __name__ == "__main__":' in error and "guarded" in error, error


def test_a_script_from_stdin_is_refused_with_a_hint(saker_bin: str, tmp_path: Path) -> None:
    # Without cloudpickle a worker must load the script: one read from stdin cannot be.
    source = textwrap.dedent(
        f"""
        import sys
        sys.modules["cloudpickle"] = None
        import saker
        def square(x):
            return x * x
        with saker.Pilot.start(slots=1, saker_bin={os.path.abspath(saker_bin)!r}) as pilot:
            try:
                pilot.call(square, 3)
            except saker.SakerError as error:
                print("refused:", error)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    done = subprocess.run(
        [sys.executable, "-"], input=source, capture_output=True, text=True,
        env=env, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "standard input" in done.stdout, done.stdout


@pytest.mark.parametrize("mode", ["with", "without"])
def test_a_script_without_the_main_guard(saker_bin: str, tmp_path: Path, mode: str) -> None:
    # Without cloudpickle a worker runs the script to find `square`: its top level
    # opens a pilot, which must be refused there (each worker would start pilots that
    # run the script again), with the hint. With cloudpickle `square` goes by value.
    if mode == "with":
        pytest.importorskip("cloudpickle")
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent(
        """
        import os, sys
        if os.environ["CLOUDPICKLE"] == "without":
            sys.modules["cloudpickle"] = None
        import saker

        def square(x):
            return x * x

        with saker.Pilot.start(slots=1) as pilot:
            try:
                print("value:", pilot.call(square, 7).result(timeout=60))
            except saker.SakerError as error:
                print("refused:", error)
        """
    ))
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), CLOUDPICKLE=mode, SAKER_BIN=os.path.abspath(saker_bin))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    if mode == "with":
        assert "value: 49" in done.stdout, done.stdout
    else:
        assert "refused:" in done.stdout, done.stdout
        assert 'under `if __name__ == "__main__":`' in done.stdout, done.stdout
        assert "opens a pilot at its top level" in done.stdout, done.stdout


@pytest.mark.parametrize("mode", ["with", "without"])
def test_an_edited_script_is_not_run_stale_by_persistent_workers(saker_bin: str, tmp_path: Path, mode: str) -> None:
    # Two drivers in turn against one long-lived pilot (its workers persist), the
    # script edited in between: the second must get the edited function's answer.
    if mode == "with":
        pytest.importorskip("cloudpickle")
    import saker

    script = tmp_path / "driver.py"
    template = textwrap.dedent(
        """
        import os, sys
        if os.environ.get("CLOUDPICKLE") == "without":  # the driver (workers: the pilot's env)
            sys.modules["cloudpickle"] = None
        import saker

        def version():
            return (VERSION, os.getpid())

        VERSION = {version!r}

        if __name__ == "__main__":
            with saker.Pilot.connect(sys.argv[1]) as pilot:
                print(*pilot.call(version).result(timeout=60))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), CLOUDPICKLE=mode)
    with saker.Pilot.start(tmp_path / "pilot", slots=1, saker_bin=saker_bin) as pilot:
        answers = []
        for version in ("first", "second", "second"):
            script.write_text(template.format(version=version))
            done = subprocess.run([sys.executable, str(script), str(pilot.dir)], capture_output=True,
                                  text=True, env=env, timeout=120, cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            answers.append(done.stdout.split())
    assert [answer[0] for answer in answers] == ["first", "second", "second"]
    # One slot, one persistent worker served all three drivers.
    assert len({answer[1] for answer in answers}) == 1
