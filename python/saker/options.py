"""Task options as the Python client takes them, checked and named as in the
protocol's spec (docs/protocol.md) before anything is sent: a submit request is
accepted or refused whole, so a bad option caught here fails one call, not a batch."""

from __future__ import annotations

import datetime
import os
from typing import Any, Dict, List, Mapping, Tuple

_INT_OPTIONS = ("cores", "gpus", "memory_mib", "priority", "max_retries", "max_replays", "nodes",
                "ranks_per_node", "ranks", "cores_per_rank", "node")
#: Options naming jobs to wait for (docs/runtime-semantics.md, "Dependencies").
_DEPENDENCY_OPTIONS = ("after", "after_any")
#: How long a dependency's own submission may take to be answered.
_DEPENDENCY_TIMEOUT = 60.0


def timestamp(value: Any) -> str:
    """RFC 3339 UTC text for a datetime (naive ones are taken as UTC) or such text."""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raise TypeError(f"option not_before must be a datetime or RFC 3339 text, not {value!r}")


def job_ids(name: str, value: Any) -> List[Any]:
    """Job ids (or names) from ints, strings, futures, or a list of them."""
    items = value if isinstance(value, (list, tuple, set)) else [value]
    ids: List[Any] = []
    for item in items:
        if isinstance(item, bool):
            raise TypeError(f"option {name} takes job ids, names or futures, not {item!r}")
        if isinstance(item, (int, str)):
            ids.append(item)
            continue
        wait_job = getattr(item, "_wait_job", None)
        if wait_job is None:
            raise TypeError(f"option {name} takes job ids, names or futures, not {item!r}")
        job = wait_job(_DEPENDENCY_TIMEOUT)
        connection = getattr(item, "_connection", None)
        if connection is not None:
            # So that a dependent it fails can say how (DependencyFailed).
            connection.dependencies[job] = item
        ids.append(job)
    return ids
#: What starts an HPC job's ranks (docs/hpc-jobs.md).
_MPI_KINDS = ("none", "pmi", "openmpi", "mpich")
#: Who starts them.
_LAUNCHERS = ("agents", "srun", "script")
_COMMAND_OPTIONS = ("env", "cwd", "shell", "inline_output")


def normalize_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    """Checks task options and names them as in the protocol's spec.

    Checked here because a submit request is accepted or refused whole: a bad option
    caught now fails one call instead of a batch of them.
    """
    spec: Dict[str, Any] = {}
    for name, value in options.items():
        if name == "retries":
            name = "max_retries"
        if value is None and name not in ("cwd",):
            continue
        if name in _INT_OPTIONS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"option {name} must be an int, not {value!r}")
            if value < 0 and name != "priority":
                raise ValueError(f"option {name} must not be negative")
            if name in ("cores", "nodes", "ranks_per_node", "ranks", "cores_per_rank") and value < 1:
                raise ValueError(f"option {name} must be at least 1")
        elif name == "mpi":
            if value not in _MPI_KINDS:
                raise ValueError(f"option mpi must be one of {', '.join(_MPI_KINDS)}, not {value!r}")
        elif name == "launcher":
            if value not in _LAUNCHERS:
                raise ValueError(f"option launcher must be one of {', '.join(_LAUNCHERS)}, not {value!r}")
        elif name == "time_limit":
            if isinstance(value, datetime.timedelta):
                value = value.total_seconds()
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise TypeError(f"option time_limit must be seconds or a string like '5m', not {value!r}")
        elif name in ("tags", "reads", "writes"):
            # One string or several; reads and writes name data items (docs/data.md).
            if isinstance(value, str):
                value = [value]
            value = list(value)
            if not all(isinstance(tag, str) for tag in value):
                raise TypeError(f"option {name} must be strings")
        elif name in ("idempotent", "shell", "exclusive", "ref"):
            if not isinstance(value, bool):
                raise TypeError(f"option {name} must be a bool, not {value!r}")
        elif name == "resources":
            value = dict(value)
            for key, amount in value.items():
                if not isinstance(key, str) or isinstance(amount, bool) or not isinstance(amount, int):
                    raise TypeError("option resources must map names to ints")
        elif name == "env":
            value = {str(key): str(item) for key, item in dict(value).items()}
        elif name == "cwd":
            value = None if value is None else os.fspath(value)
        elif name in _DEPENDENCY_OPTIONS:
            value = job_ids(name, value)
        elif name == "name":
            if not isinstance(value, str):
                raise TypeError(f"option name must be a string, not {value!r}")
        elif name == "not_before":
            value = timestamp(value)
        elif name == "inline_output":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError(f"option inline_output must be a non-negative int, not {value!r}")
        else:
            raise TypeError(f"unknown task option {name!r}")
        spec[name] = value
    return spec


def split_options(options: Mapping[str, Any], command: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(spec fields, job fields) of normalized options; command options refused for functions."""
    spec = dict(options)
    job: Dict[str, Any] = {}
    # ref=True (a call's value stored by reference) is the client's, not the spec's.
    if spec.pop("ref", False) and command:
        raise TypeError("option ref applies to calls, not commands")
    if "inline_output" in spec:
        job["inline_output"] = spec.pop("inline_output")
    if not command:
        for name in _COMMAND_OPTIONS:
            if name in options:
                raise TypeError(f"option {name} applies to command tasks only")
    return spec, job
