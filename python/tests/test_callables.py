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
    import functools, json, os, sys
    if os.environ["CLOUDPICKLE"] == "without":
        sys.modules["cloudpickle"] = None  # import cloudpickle now fails (workers too)
    import saker
    from saker import serialize

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

    def power(base, exponent):
        return base ** exponent

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
        }

    def local(fn, args, kwargs):
        value = fn(*args, **kwargs)
        return [type(value).__name__, value.norm1()] if isinstance(value, Point) else value

    if __name__ == "__main__":
        cloud = serialize._cloudpickle is not None
        answers = {}
        with saker.Pilot.start(slots=2, saker_bin=sys.argv[1]) as pilot:
            for name, (fn, args, kwargs) in calls().items():
                remote = pilot.call(fn, *args, **kwargs).result(timeout=60)
                if isinstance(remote, Point):  # the worker's class, aliased here
                    remote = [type(remote).__name__, remote.norm1()]
                answers[name] = {"remote": remote, "local": local(fn, args, kwargs)}
            mapped = list(pilot.map(Adder(10).add, range(5)))
            answers["map of a bound method"] = {"remote": mapped, "local": [10 + i for i in range(5)]}
            with pilot.executor() as executor:
                remote = executor.submit(functools.partial(power, exponent=3), 4).result(timeout=60)
            answers["executor partial"] = {"remote": remote, "local": 64}
            refused = {}
            for name, fn in {"lambda": lambda x: x, "closure": (lambda k: lambda x: x + k)(1)}.items():
                try:
                    refused[name] = {"value": pilot.call(fn, 1).result(timeout=60)}
                except saker.SakerError as error:
                    refused[name] = {"error": str(error)}
        print(json.dumps({"cloudpickle": cloud, "answers": answers, "refused": refused}))
    """
)


def run_script(saker_bin: str, tmp_path: Path, mode: str) -> Dict[str, Any]:
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), CLOUDPICKLE=mode)
    done = subprocess.run(
        [sys.executable, str(script), os.path.abspath(saker_bin)],
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
    refused = out["refused"]
    if mode == "with":
        assert refused == {"lambda": {"value": 1}, "closure": {"value": 2}}
    else:
        for name in ("lambda", "closure"):
            assert "install cloudpickle" in refused[name]["error"], refused[name]


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
