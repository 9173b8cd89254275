"""MLflow tracking of a run (``logger=mlflow``): its parameters and every LogReport entry.

``MLflowReport`` runs on rank 0 only. When training starts it opens the MLflow run
of this run directory, or creates it: the experiment ``experiment`` (default: the
recipe's ``name``), the run named after the run directory, and as parameters the
resolved config, flattened (``optimizer.lr``, ``trainer.stop``, ...). Then each new
entry of the LogReport ``log_report`` is logged as metrics at its iteration.

Tracking store: ``tracking_uri``, or by default ``<run dir>/mlruns`` (MLflow's local
file store, no server; MLflow 3 keeps it in maintenance mode and asks for
``MLFLOW_ALLOW_FILE_STORE=true``, which this sets for that store only when unset).

Resume: ``<run dir>/mlflow_run.json`` names the run and the last step logged; a
resumed job continues that run and skips entries up to that step (those restored
from the checkpoint, and those a killed job logged after its last checkpoint: a
resume is exact, so they are the same values). Needs the ``mlflow`` package
(``pip install 'mnframe[mlflow]'``), imported when training starts.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import time
from typing import Any, Dict, Iterator, Tuple

from chainer.training import extension

from mnframe.runtime.fs import atomic_write_text

STATE_FILE = "mlflow_run.json"
NOT_METRICS = ("epoch", "iteration")
PARAM_VALUE_MAX = 500  # MLflow's smallest limit across versions
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
_BAD_NAME = re.compile(r"[^\w\-. /]")


def flatten(config: Any, prefix: str = "") -> Iterator[Tuple[str, str]]:
    """``(dotted.key, value as text)`` of a nested mapping; lists stay one value (JSON)."""
    if isinstance(config, dict):
        for key, value in config.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        text = config if isinstance(config, str) else json.dumps(config, default=str)
        yield _name(prefix), text[:PARAM_VALUE_MAX]


def _name(key: str) -> str:
    return _BAD_NAME.sub("_", key)


def file_store(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri


class MLflowReport(extension.Extension):
    """Log the run's parameters once and each LogReport entry as metrics (rank 0)."""

    trigger = (1, "iteration")
    priority = extension.PRIORITY_READER

    def __init__(self, log_report="log_report", tracking_uri=None, experiment="mnframe", run_name=None, params=None):
        self._log_report = log_report
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self._params: Dict[str, Any] = params or {}
        self._client = None
        self.run_id = None
        self._last_step = -1
        self._written = 0
        self._state_path = None

    def initialize(self, trainer):
        from mlflow.tracking import MlflowClient

        if self.tracking_uri is None:
            self.tracking_uri = "file:" + os.path.abspath(os.path.join(trainer.out, "mlruns"))
        if file_store(self.tracking_uri):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        self._state_path = os.path.join(trainer.out, STATE_FILE)
        state = self._read_state()
        if state and state.get("tracking_uri") == self.tracking_uri and self._exists(state.get("run_id")):
            self.run_id, self._last_step = state["run_id"], int(state.get("last_step", -1))
            self._client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = self._create_run(trainer)
            self._last_step = -1
            self._save_state()
        self._written = len(trainer.get_extension(self._log_report).log)  # restored by a resume

    def _read_state(self):
        try:
            with open(self._state_path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def _exists(self, run_id) -> bool:
        if not run_id:
            return False
        try:
            self._client.get_run(run_id)
            return True
        except Exception:  # deleted, or another store
            return False

    def _create_run(self, trainer) -> str:
        from mlflow.entities import Param

        found = self._client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found else self._client.create_experiment(self.experiment)
        name = self.run_name or os.path.basename(os.path.abspath(trainer.out))
        run_id = self._client.create_run(experiment_id, run_name=name).info.run_id
        params = [Param(k, v) for k, v in flatten(self._params)]
        for i in range(0, len(params), PARAMS_PER_BATCH):
            self._client.log_batch(run_id, params=params[i : i + PARAMS_PER_BATCH])
        return run_id

    def _save_state(self):
        state = {"tracking_uri": self.tracking_uri, "run_id": self.run_id, "last_step": self._last_step}
        atomic_write_text(self._state_path, json.dumps(state), fsync=False)

    def __call__(self, trainer):
        from mlflow.entities import Metric

        if self._client is None:
            self.initialize(trainer)
        log = trainer.get_extension(self._log_report).log
        new = log[self._written :]
        if not new:
            return
        self._written = len(log)
        now = int(time.time() * 1000)
        metrics, last = [], self._last_step
        for entry in new:
            step = int(entry.get("iteration", trainer.updater.iteration))
            if step <= self._last_step:
                continue  # logged before this job resumed
            for key, value in entry.items():
                if key not in NOT_METRICS and isinstance(value, numbers.Real):
                    metrics.append(Metric(_name(key), float(value), now, step))
            last = max(last, step)
        for i in range(0, len(metrics), METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[i : i + METRICS_PER_BATCH])
        if last != self._last_step:
            self._last_step = last
            self._save_state()

    def finalize(self):
        if self._client is not None and self.run_id is not None:
            self._client.set_terminated(self.run_id)
            self._client = None
