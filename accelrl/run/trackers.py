"""Experiment trackers through TorchRL's loggers (``torchrl.record.loggers``): W&B and MLflow.

CSV files and TensorBoard are written by ``accelrl.run.logger.RunLogger`` itself, because a resumed
run must drop what the killed run logged after its checkpoint (CSV rows are cut, TensorBoard
events hidden with ``purge_step``), which TorchRL's CSV and TensorBoard loggers cannot do.
Trackers get the metrics and evaluation rows at x = emulator frames.

A run keeps its tracker run ids in ``RUN_DIR/trackers.json``: ``--resume`` and a SLURM requeue
(same run folder) log into the same W&B run and the same MLflow run. Steps that the killed run
logged after its checkpoint are logged again by the resumed one (W&B and MLflow keep both).
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from pathlib import Path
from typing import Any

from accelrl.run.record import flatten

TRACKERS = ("wandb", "mlflow")
# Modules each tracker imports -> the pip package that provides them. MLflow's default store
# here is SQLite (its file store is deprecated in MLflow 3), which needs SQLAlchemy and Alembic
# (full ``mlflow`` brings them; ``mlflow-skinny`` does not).
PACKAGES = {
    "wandb": {"wandb": "wandb"},
    "mlflow": {"mlflow": "mlflow", "sqlalchemy": "sqlalchemy", "alembic": "alembic"},
}


def missing_packages(names: tuple[str, ...]) -> list[str]:
    """The pip packages that ``names`` need and that are not installed."""
    return [
        package
        for name in names
        for module, package in PACKAGES[name].items()
        if importlib.util.find_spec(module) is None
    ]


class Trackers:
    """The run's open trackers; ``log`` sends scalars to all of them."""

    def __init__(self, run_dir: Path, names: tuple[str, ...], project: str, config: dict) -> None:
        self.run_dir = run_dir
        path = run_dir / "trackers.json"
        ids: dict[str, str] = json.loads(path.read_text()) if path.is_file() else {}
        self.loggers: dict[str, Any] = {}
        for name in names:
            if name == "wandb":
                self.loggers[name] = self._wandb(ids, project, config)
            elif name == "mlflow":
                self.loggers[name] = self._mlflow(ids, project, config)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(ids, indent=2))
        os.replace(tmp, path)

    def _wandb(self, ids: dict[str, str], project: str, config: dict):
        from torchrl.record.loggers.wandb import WandbLogger

        ids.setdefault("wandb", uuid.uuid4().hex[:12])
        # resume="allow" (TorchRL's default): the same id continues the same W&B run.
        # WANDB_MODE=offline logs to RUN_DIR/wandb without network (wandb sync uploads it).
        return WandbLogger(
            exp_name=self.run_dir.name,
            save_dir=str(self.run_dir),
            id=ids["wandb"],
            project=project,
            config=config,
            log_env_packages=False,
        )

    def _mlflow(self, ids: dict[str, str], project: str, config: dict):
        import mlflow
        from torchrl.record.loggers.mlflow import MLFlowLogger

        class ResumableMLFlowLogger(MLFlowLogger):
            """TorchRL's MLFlowLogger starts a new run each time; this one reopens ``run_id``."""

            def _create_experiment(self):
                experiment = mlflow.get_experiment_by_name(self._mlflow_kwargs["name"])
                self.id = (
                    mlflow.create_experiment(**self._mlflow_kwargs)
                    if experiment is None
                    else experiment.experiment_id
                )
                return mlflow.start_run(
                    run_id=ids.get("mlflow"),
                    experiment_id=None if ids.get("mlflow") else self.id,
                    run_name=run_name,
                )

        run_name = self.run_dir.name
        default = "sqlite:///" + str((self.run_dir.parent / "mlflow.db").resolve())
        uri = os.environ.get("MLFLOW_TRACKING_URI") or default
        logger = ResumableMLFlowLogger(exp_name=project, tracking_uri=uri)
        ids["mlflow"] = logger.experiment.info.run_id
        if "config_logged" not in ids:
            params = list(flatten(config).items())
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params a call
                mlflow.log_params(dict(params[i : i + 100]))
            ids["config_logged"] = "1"
        return logger

    def log(self, values: dict[str, float], frames: int) -> None:
        for logger in self.loggers.values():
            for key, value in values.items():
                logger.log_scalar(key, value, step=frames)

    def close(self) -> None:
        for name, logger in self.loggers.items():
            if name == "wandb":
                logger.experiment.finish()
            elif name == "mlflow":
                import mlflow

                mlflow.end_run()
        self.loggers = {}
