"""How a perf/python script hands saker-perf a row: one JSON object per line on
stdout, in the format perf/src/bench/python.rs reads."""

from __future__ import annotations

import json
import statistics
from typing import Any, Dict, List, Optional


def row(name: str, unit: str, saker_value: Any, baseline: Any, baseline_name: str,
        target: Optional[Dict[str, float]] = None) -> None:
    print(json.dumps({"row": name, "unit": unit, "saker": saker_value, "baseline": baseline,
                      "baseline_name": baseline_name, "target": target}), flush=True)


def samples(values: List[float], percentile: int) -> Dict[str, Any]:
    """Raw latency samples (µs); saker-perf takes their percentile with hdrhistogram."""
    return {"samples_us": values, "percentile": percentile}


def makespan_rows(name: str, instances: int, saker_runs: List[float], baseline_runs: List[float],
                  baseline_name: str) -> None:
    """Two rows from the makespans (s) of runs of N jobs on each side, medians:
    jobs per second and makespan."""
    saker = statistics.median(saker_runs)
    baseline = statistics.median(baseline_runs)
    row(f"{name}, jobs/s", "per_second", instances / saker, instances / baseline, baseline_name)
    row(f"{name}, makespan", "seconds", saker, baseline, baseline_name)
