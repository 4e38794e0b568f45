"""Parsl test-suite configuration for SakerExecutor (scripts/parsl-suite.sh).

Used as ``pytest <parsl/tests> --config python/parsl-suite/saker_config.py``: Parsl's
conftest loads ``fresh_config()`` once for the whole session. The executor starts an
embedded local pilot with ``$SAKER_BIN`` (one agent, ``$PARSL_SUITE_SLOTS`` slots, 4 by
default: HTEX's local config runs one worker per core, and several tests wait on
concurrent sleeping tasks).
"""

import os

from parsl.config import Config

from saker.parsl import SakerExecutor


def fresh_config():
    return Config(
        executors=[
            SakerExecutor(
                label="saker",
                agents=1,
                slots=int(os.environ.get("PARSL_SUITE_SLOTS", "4")),
                saker_bin=os.environ.get("SAKER_BIN"),
            )
        ],
        strategy="none",
    )
