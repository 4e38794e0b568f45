"""Leader side of a Parsl MPI app on Saker: runs the app's function once.

:class:`saker.parsl.SakerExecutor` submits a Parsl task whose resource specification
asks for MPI (``num_nodes``, ``num_ranks``, ``ranks_per_node``) as a Saker HPC job of
``mpi="pmi"``, ``launcher="script"``: its command, this module, runs once on the
job's first node (``python -m saker._parsl_mpi CHUNK...``, the task's
``pack_apply_message`` buffer in base64 chunks). It sets the variables Parsl's MPI
apps read, as HighThroughputExecutor's MPI mode does (``PARSL_MPI_PREFIX``,
``PARSL_NUM_NODES``, ``PARSL_NUM_RANKS``, ``PARSL_RANKS_PER_NODE``,
``PARSL_MPI_NODELIST``), with a prefix that is ``saker mpiexec``: the ranks the app
starts through it are started by Saker's agents on the job's nodes and served PMI,
with no mpiexec. Then it calls the function (:func:`saker._parsl_payload.run`).

Its standard output carries the answer alone: the function's own prints go to
standard error. The answer is a line ``ok`` or ``raised MESSAGE``, then the
serialized result (or ``RemoteExceptionWrapper``) in base64, which the executor
decodes as it decodes a worker's answer.
"""

from __future__ import annotations

import base64
import os
import sys

#: Variables the executor sets for the runner (the layout the app asked for).
RANKS_VAR = "SAKER_PARSL_RANKS"
PER_NODE_VAR = "SAKER_PARSL_RANKS_PER_NODE"
OPTIONS_VAR = "SAKER_PARSL_LAUNCHER_OPTIONS"

#: Characters of base64 per command-line word: under Linux's 128 KiB per argument.
CHUNK = 100_000


def chunks(buffer: bytes) -> list:
    """The buffer as the runner's arguments."""
    text = base64.b64encode(buffer).decode("ascii")
    return [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]


def parsl_variables(environ: dict) -> dict:
    """What Parsl's MPI apps read, from the job's layout and ``saker mpiexec``."""
    ranks = environ[RANKS_VAR]
    per_node = environ[PER_NODE_VAR]
    nodes = environ.get("SAKER_NODES", "").split(",")
    used = -(-int(ranks) // int(per_node))
    prefix = f"{environ['SAKER_MPIEXEC']} -n {ranks} -ppn {per_node}"
    options = environ.get(OPTIONS_VAR, "").strip()
    if options:
        prefix = f"{prefix} {options}"
    return {
        "PARSL_MPI_PREFIX": prefix,
        "PARSL_MPIEXEC_PREFIX": prefix,
        "PARSL_NUM_NODES": str(used),
        "PARSL_NUM_RANKS": ranks,
        "PARSL_RANKS_PER_NODE": per_node,
        "PARSL_MPI_NODELIST": ",".join(nodes[:used]),
    }


def answer(ok: bool, data: bytes, message: str) -> bytes:
    head = "ok" if ok else f"raised {message}"
    return head.encode() + b"\n" + base64.b64encode(data) + b"\n"


def read_answer(stdout: str) -> tuple:
    """``(ok, data, message)`` of a runner's standard output."""
    head, _, body = stdout.partition("\n")
    if head != "ok" and not head.startswith("raised "):
        raise ValueError(f"not a runner's answer: {stdout[:200]!r}")
    data = base64.b64decode(body.strip(), validate=True)
    return head == "ok", data, head[len("raised "):] if head != "ok" else ""


def main(argv: list) -> int:
    buffer = base64.b64decode("".join(argv), validate=True)
    os.environ.update(parsl_variables(os.environ))
    # The answer alone on the original standard output: the function's prints (and
    # those of the programs it starts) go to standard error.
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    from saker._parsl_payload import run

    ok, data, message = run(buffer)
    sys.stdout.flush()
    with os.fdopen(answer_fd, "wb") as out:
        out.write(answer(ok, data, message))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
