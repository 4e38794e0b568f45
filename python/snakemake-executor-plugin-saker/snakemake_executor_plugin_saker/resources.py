"""Snakemake job resources → Saker task options (docs/snakemake.md, "Resource mapping").

Everything here is checked before a job is queued: a request Saker cannot honour is
refused with a message naming the resource, instead of failing (or silently running
without its limit) on the pilot.
"""

from __future__ import annotations

import math
import shlex
from typing import Any, Callable, Dict, Iterable, List, Mapping, Tuple

#: Snakemake's own bookkeeping, or resources with no meaning on a pilot (a task's
#: temporary directory is the node's; disk is not a resource Saker tracks).
IGNORED = frozenset({
    "_cores", "_nodes", "_job_count", "disk_mb", "disk_mib", "disk", "tmpdir", "mem", "mem_gb",
})
#: Names mapped below.
MAPPED = frozenset({
    "mem_mb", "mem_mib", "gpu", "gpus", "runtime", "nodes", "tasks", "mpi", "cpus_per_task",
    "saker_extra",
})


class ResourceError(ValueError):
    """A job's resources that Saker cannot honour; the message says which and why."""


def _whole(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool):
        raise ResourceError(f"resource {name}={value!r} must be a whole number")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int):
        raise ResourceError(f"resource {name}={value!r} must be a whole number")
    if value < minimum:
        raise ResourceError(f"resource {name}={value} must be at least {minimum}")
    return value


# --------------------------------------------------------------------- saker_extra

def _int_option(key: str) -> Callable[[str, Dict[str, Any]], None]:
    def apply(text: str, options: Dict[str, Any]) -> None:
        try:
            options[key] = int(text)
        except ValueError:
            raise ResourceError(f"saker_extra: --{key.replace('_', '-')} takes a whole number, not {text!r}") from None
    return apply


def _pair(flag: str, text: str) -> Tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ResourceError(f"saker_extra: {flag} takes NAME=VALUE, not {text!r}")
    return key, value


def _resource(text: str, options: Dict[str, Any]) -> None:
    name, amount = _pair("--resource", text)
    try:
        options.setdefault("resources", {})[name] = int(amount)
    except ValueError:
        raise ResourceError(f"saker_extra: --resource {name} takes a whole amount, not {amount!r}") from None


def _env(text: str, options: Dict[str, Any]) -> None:
    key, value = _pair("--env", text)
    options.setdefault("env", {})[key] = value


def _tag(text: str, options: Dict[str, Any]) -> None:
    options.setdefault("tags", []).append(text)


def _set(key: str, value: Any) -> Callable[[Dict[str, Any]], None]:
    return lambda options: options.__setitem__(key, value)


# `saker submit`'s spelling of the options a Snakemake job may add; the rest of that
# command's options (arrays, dependencies, schedules, --cwd) are Snakemake's business.
_VALUED: Dict[str, Callable[[str, Dict[str, Any]], None]] = {
    "--priority": _int_option("priority"),
    "--retries": _int_option("retries"),
    "--max-replays": _int_option("max_replays"),
    "--node": _int_option("node"),
    "--ranks-per-node": _int_option("ranks_per_node"),
    "--cores-per-rank": _int_option("cores_per_rank"),
    "--time-limit": lambda text, options: options.__setitem__("time_limit", text),
    "--resource": _resource,
    "--env": _env,
    "--tag": _tag,
    "--mpi": lambda text, options: options.__setitem__("mpi", text),
}
_FLAGS: Dict[str, Callable[[Dict[str, Any]], None]] = {
    "--idempotent": _set("idempotent", True),
    "--exclusive": _set("exclusive", True),
}


def parse_extra(text: Any) -> Dict[str, Any]:
    """Saker options from a ``saker_extra`` string in ``saker submit``'s spelling."""
    if not isinstance(text, str):
        raise ResourceError(f"resource saker_extra must be a string of saker submit options, not {text!r}")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ResourceError(f"saker_extra {text!r}: {exc}") from None
    options: Dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        flag, sep, inline = word.partition("=")
        if flag in _FLAGS and not sep:
            _FLAGS[flag](options)
        elif flag in _VALUED:
            if sep:
                value = inline
            else:
                i += 1
                if i == len(words):
                    raise ResourceError(f"saker_extra: {flag} needs a value")
                value = words[i]
            _VALUED[flag](value, options)
        else:
            known = ", ".join(sorted(list(_VALUED) + list(_FLAGS)))
            raise ResourceError(f"saker_extra: {word!r} is not an option a Snakemake job may set (known: {known})")
        i += 1
    return options


# ------------------------------------------------------------------------- mapping

def saker_options(
    threads: int,
    resources: Mapping[str, Any],
    *,
    ignored: Iterable[str] = (),
) -> Tuple[Dict[str, Any], bool]:
    """(Saker task options, whether it is an HPC job) for a job's threads and resources.

    ``ignored``: further names left to Snakemake (global ``--resources``, or what the
    user listed). Requests no node of the pilot can hold are the pilot's to refuse:
    it knows its nodes (and an elastic pilot's future ones) and refuses them at
    submission, before they are queued.
    """
    leave = IGNORED.union(ignored)
    unknown = sorted(name for name in resources if name not in MAPPED and name not in leave)
    if unknown:
        raise ResourceError(
            f"resource(s) {', '.join(unknown)} have no Saker meaning: for a limit Snakemake itself "
            "keeps, declare it with --resources NAME=N; to leave it to Snakemake anyway, list it in "
            "--saker-ignore-resources; for a resource the pilot's nodes offer, use "
            "saker_extra=\"--resource NAME=N\""
        )
    options: Dict[str, Any] = {}
    cores = _whole("threads", threads, 1)
    if "cpus_per_task" in resources:
        cores = max(cores, _whole("cpus_per_task", resources["cpus_per_task"], 1))

    if "mem_mib" in resources:
        memory = _whole("mem_mib", resources["mem_mib"])
    elif "mem_mb" in resources:
        # MB (10^6 bytes) to whole MiB, rounding up so the task never gets less.
        memory = math.ceil(_whole("mem_mb", resources["mem_mb"]) * 1_000_000 / 1_048_576)
    else:
        memory = 0
    if memory:
        options["memory_mib"] = memory

    gpus = [_whole(name, resources[name]) for name in ("gpu", "gpus") if name in resources]
    if len(set(gpus)) > 1:
        raise ResourceError(f"resources gpu={resources['gpu']} and gpus={resources['gpus']} disagree")
    if gpus and gpus[0]:
        options["gpus"] = gpus[0]

    if "runtime" in resources:
        minutes = _whole("runtime", resources["runtime"])
        if minutes:
            options["time_limit"] = minutes * 60

    nodes = _whole("nodes", resources.get("nodes", 1), 1)
    tasks = _whole("tasks", resources.get("tasks", 1), 1)
    mpi = resources.get("mpi")
    hpc = mpi is not None and mpi != ""
    if not hpc and (nodes > 1 or tasks > 1):
        raise ResourceError(
            f"nodes={nodes}, tasks={tasks} without the mpi resource: a multi-node or multi-rank job "
            "needs mpi= set (the launcher its shell command calls, e.g. mpi=\"mpirun\")"
        )

    extra = parse_extra(resources["saker_extra"]) if "saker_extra" in resources else {}
    if hpc:
        # Saker holds `nodes` nodes with `tasks` ranks for the job; the Snakemake job
        # runs once on the leader and its shell starts the ranks with the launcher.
        options["nodes"] = nodes
        options["ranks"] = max(tasks, nodes)
        options["cores_per_rank"] = extra.pop("cores_per_rank", cores)
        options["mpi"] = "none"
        if extra.pop("mpi", "none") != "none":
            raise ResourceError("saker_extra: --mpi is set by the plugin (the rule's mpi resource is its launcher)")
    else:
        options["cores"] = cores
        for name in ("ranks_per_node", "cores_per_rank", "exclusive", "mpi"):
            if name in extra:
                raise ResourceError(f"saker_extra: {name.replace('_', '-')} needs an MPI job (the mpi resource)")
    options.update(extra)

    return options, hpc


def describe(options: Mapping[str, Any]) -> List[str]:
    """Short ``key=value`` words for the log line of a submitted job."""
    return [f"{key}={value}" for key, value in options.items() if key not in ("env", "cwd", "shell", "tags")]
