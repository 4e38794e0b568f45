#!/usr/bin/env python3
"""Compare two junit XML reports of Parsl's test suite (scripts/parsl-suite.sh).

Every test that passed with HighThroughputExecutor must pass with SakerExecutor, except
the tests listed in exceptions.txt (one per line: the test id, whitespace, the reason;
lines starting with ``#`` are comments). Prints one summary line:

    parsl suite: HTEX N passed; Saker M passed; K listed exceptions

and, before it, every regression (exit status 1), every listed exception that passes
now (a note: remove it from the list), and tests that pass only with Saker.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET


def _test_id(case: ET.Element) -> str:
    classname = case.get("classname", "")
    for prefix in ("parsl.tests.",):
        if prefix in classname:
            classname = classname.split(prefix, 1)[1]
    return f"{classname}::{case.get('name', '')}"


def outcomes(path: str, details: dict[str, str] | None = None) -> dict[str, str]:
    """test id → passed | failed | error | skipped; ``details`` gets the failure texts."""
    result: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test = _test_id(case)
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = "failed" if child.tag == "failure" else child.tag
                if details is not None and child.tag != "skipped":
                    text = (child.get("message") or "") + "\n" + (child.text or "")
                    details[test] = details.get(test, "") + text.strip() + "\n"
        # a teardown error after a failure: keep the worst
        previous = result.get(test)
        if previous and previous != "passed":
            status = previous
        result[test] = status
    return result


def read_exceptions(path: str) -> dict[str, str]:
    listed: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) < 2 or not parts[1].strip():
                raise SystemExit(f"{path}:{number}: an exception needs a reason: {line!r}")
            listed[parts[0]] = parts[1].strip()
    return listed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--htex", required=True, help="junit XML of the HTEX run")
    parser.add_argument("--saker", required=True, help="junit XML of the Saker run")
    parser.add_argument("--exceptions", required=True, help="exceptions.txt")
    parser.add_argument("--min-htex", type=int, default=100,
                        help="fail when HTEX passes fewer tests (the baseline itself broke)")
    parser.add_argument("--detail-lines", type=int, default=25,
                        help="lines of each regression's failure text to print")
    args = parser.parse_args(argv)

    listed = read_exceptions(args.exceptions)
    try:
        htex = outcomes(args.htex)
    except (OSError, ET.ParseError) as e:
        print(f"parsl suite: no usable HTEX report ({e})")
        return 1
    details: dict[str, str] = {}
    try:
        saker = outcomes(args.saker, details)
    except (OSError, ET.ParseError) as e:
        print(f"parsl suite: no usable Saker report ({e})")
        return 1

    htex_passed = {t for t, s in htex.items() if s == "passed"}
    saker_passed = {t for t, s in saker.items() if s == "passed"}
    regressions = sorted(t for t in htex_passed - saker_passed if t not in listed)
    excused = sorted(t for t in htex_passed - saker_passed if t in listed)
    stale = sorted(t for t in listed if t in saker_passed)
    only_saker = sorted(saker_passed - htex_passed)

    for t in excused:
        print(f"listed exception: {t} ({saker.get(t, 'not run')}): {listed[t]}")
    for t in stale:
        print(f"note: listed exception passes now, remove it from the list: {t}")
    for t in only_saker:
        print(f"note: passes with Saker only: {t} (HTEX: {htex.get(t, 'not run')})")
    for t in regressions:
        print(f"REGRESSION: {t}: passed with HTEX, {saker.get(t, 'not run')} with Saker")
        lines = details.get(t, "").strip().splitlines()
        for line in lines[-args.detail_lines:]:
            print(f"    {line}")

    status = 0
    if regressions:
        status = 1
    if len(htex_passed) < args.min_htex:
        print(f"HTEX passed only {len(htex_passed)} tests (< {args.min_htex}): the baseline run is broken")
        status = 1
    print(f"parsl suite: HTEX {len(htex_passed)} passed; Saker {len(saker_passed)} passed; "
          f"{len(listed)} listed exceptions"
          + (f"; {len(regressions)} REGRESSIONS" if regressions else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
