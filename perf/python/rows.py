"""How a perf/python script hands saker-perf a row: one JSON object per line on
stdout, in the format perf/src/bench/python.rs reads."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional


def row(name: str, unit: str, saker_value: Any, baseline: Any, baseline_name: str,
        target: Optional[Dict[str, float]] = None) -> None:
    print(json.dumps({"row": name, "unit": unit, "saker": saker_value, "baseline": baseline,
                      "baseline_name": baseline_name, "target": target}), flush=True)


def samples(values: List[float], percentile: int) -> Dict[str, Any]:
    """Raw latency samples (µs); saker-perf takes their percentile with hdrhistogram."""
    return {"samples_us": values, "percentile": percentile}
