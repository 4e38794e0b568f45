"""Parsl monitoring with SakerExecutor: the sqlite database records every task.

Needs sqlalchemy (parsl[monitoring]); skipped without it. Workers report through the
executor's default FilesystemRadio (<run_dir>/monitor-fs-radio).
"""

from __future__ import annotations

import pytest

parsl = pytest.importorskip("parsl")
sqlalchemy = pytest.importorskip("sqlalchemy")

from parsl.app.app import bash_app, python_app  # noqa: E402
from parsl.config import Config  # noqa: E402
from parsl.monitoring import MonitoringHub  # noqa: E402

from saker.parsl import SakerExecutor  # noqa: E402

N = 6


@python_app
def square(x):
    return x * x


@python_app
def boom():
    raise RuntimeError("monitored failure")


@bash_app
def hello():
    return "true"


def test_monitoring_database_records_every_task(tmp_path, saker_bin):
    db_url = f"sqlite:///{tmp_path}/monitoring.db"
    config = Config(
        executors=[SakerExecutor(label="saker", slots=2, saker_bin=saker_bin)],
        run_dir=str(tmp_path / "runinfo"),
        strategy="none",
        monitoring=MonitoringHub(logging_endpoint=db_url, resource_monitoring_interval=1),
    )
    with parsl.load(config):
        assert [f.result(timeout=60) for f in [square(i) for i in range(N)]] == [i * i for i in range(N)]
        with pytest.raises(RuntimeError):
            boom().result(timeout=60)
        assert hello().result(timeout=60) == 0

    tasks = N + 2
    from sqlalchemy import text

    engine = sqlalchemy.create_engine(db_url)
    with engine.begin() as db:
        def count(query):
            return db.execute(text(query)).first()[0]

        assert count("SELECT COUNT(*) FROM workflow") == 1
        assert count("SELECT COUNT(*) FROM workflow WHERE time_began IS NOT NULL "
                     "AND time_completed IS NOT NULL") == 1
        assert count("SELECT COUNT(*) FROM task") == tasks
        assert count("SELECT COUNT(*) FROM try") == tasks
        assert count("SELECT COUNT(*) FROM try WHERE task_executor = 'saker'") == tasks
        # the worker side's first/last messages arrived (through the radio): every try
        # has its running and returned times
        assert count("SELECT COUNT(*) FROM try WHERE task_try_time_running IS NULL") == 0
        assert count("SELECT COUNT(*) FROM try WHERE task_try_time_returned IS NULL") == 0
        assert count("SELECT COUNT(*) FROM status WHERE task_status_name = 'exec_done'") == N + 1
        assert count("SELECT COUNT(*) FROM status WHERE task_status_name = 'failed'") == 1
        # resource monitoring ran inside the workers
        assert count("SELECT COUNT(DISTINCT task_id) FROM resource") == tasks
