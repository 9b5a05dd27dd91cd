"""Runs the digits pipeline on this machine (LocalDagRunner, Beam DirectRunner) and sums it up.

Everything is checked before anything runs: the data directory (see
:func:`ga_tfx.pipelines.digits.check_csv_dir`) and the options. The summary is read back from ML
Metadata, from the artifacts of the latest run (cached ones included).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components import stack as stack_lib
from ga_tfx.components.trainer import run_record
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.pipelines import beam, data_check, digits, user_code
from ga_tfx.pipelines import blessing as blessing_lib
from ga_tfx.pipelines import pipeline as pipeline_lib
from ga_tfx.pipelines.tabular import data_plan

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Optional

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx import v1 as tfx
from tfx.utils import io_utils


def beam_args(direct_num_workers: int = 1) -> List[str]:
    """DirectRunner flags: in-memory for 1 worker, multi-processing for more (0: one per core).

    For more than one machine, pass e.g. ``--runner=FlinkRunner --flink_master=host:8081
    --environment_type=EXTERNAL --environment_config=localhost:50000`` or
    ``--runner=SparkRunner --spark_master_url=spark://host:7077`` instead.
    """
    return beam.in_process_args(direct_num_workers)


@dataclasses.dataclass
class RunSummary:
    """What a finished run produced (read from ML Metadata)."""

    effective_batch_size: Optional[int]
    windows: Optional[int]  # the Trainer's length (its run record's "windows" key)
    hyperparameters: Dict[str, Any]
    metrics: Dict[str, float]
    blessed: bool
    pushed_model: Optional[str]
    serving_model: Optional[str]
    cached_components: List[str]
    # The windows of the checkpoint the Trainer resumed from (the run record's
    # "resumed_from_window"; None: not resumed).
    resumed_after_window: Optional[int] = None
    baseline_metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
    blessed_text: str = ""  # why blessed (or "no")
    not_pushed_reason: str = ""  # one line when nothing was pushed
    plan: Optional[data_plan.DataPlan] = None  # the data plan of a --label run
    # From the Trainer's run record: the windows' K at each change, and B_simple at the end.
    accum_schedule_used: Optional[List[List[int]]] = None
    noise_scale: Optional[float] = None
    micro_batch_choice: Optional[str] = None  # with --memory-budget: the choice and why
    stack: Optional[Dict[str, str]] = None  # what the Trainer ran on (its run record)

    def lines(self):
        tuned = ", ".join(f"{k}={v}" for k, v in sorted(self.hyperparameters.items()))
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(self.metrics.items()))
        lines = [
            f"effective batch size: {self.effective_batch_size}",
            f"windows:              {self.windows}",
            _resumed_line(self.resumed_after_window),
            f"tuned:                {tuned or 'no (Tuner off)'}",
        ]
        if self.accum_schedule_used and len(self.accum_schedule_used) > 1:
            used = ", ".join(f"K={k} from window {w}" for w, k in self.accum_schedule_used)
            lines.append(f"accum_steps used:     {used}")
        if self.micro_batch_choice:
            lines.append(f"memory budget:        {self.micro_batch_choice}")
        if self.noise_scale is not None:
            lines.append(
                f"noise scale B_simple: {self.noise_scale:.4g} samples at the end of training"
            )
        if self.plan is not None and "DataPlanCheck" in self.cached_components:
            lines += ["data (cached):"] + ["  " + line for line in self.plan.summary_lines()]
        lines.append(f"evaluation (eval split): {metrics}")
        if self.baseline_metrics:
            shown = ", ".join(f"{k}={v:.4g}" for k, v in sorted(self.baseline_metrics.items()))
            lines.append(
                f"baseline (eval split):   {shown}"
                + (f" ({self.plan.baseline_name})" if self.plan is not None else "")
            )
        lines += [
            f"blessed:              {self.blessed_text or ('yes' if self.blessed else 'no')}",
            f"pushed model:         {self.pushed_model or self.not_pushed_reason or 'not pushed'}",
            f"cached components:    {', '.join(self.cached_components) or 'none'}",
        ]
        if self.stack:
            lines.append(f"trained on:           {stack_lib.line(self.stack)}")
        return lines


def run(
    pipeline_name: str,
    pipeline_root: str,
    data_root: str,
    serving_model_dir: str,
    options: pipeline_lib.TrainingOptions,
    *,
    metadata_path: Optional[str] = None,
    enable_cache: bool = True,
    direct_num_workers: int = 1,
    on_checked: Optional[Callable[[], Any]] = None,
) -> RunSummary:
    """Checks the data, runs the pipeline with ``LocalDagRunner``, returns its summary.

    ``metadata_path`` (default ``<pipeline_root>/metadata.db``) is the SQLite ML Metadata
    store; re-running with the same store reuses cached outputs and resumes a failed Trainer.
    Raises ``ValueError`` for bad data before any component runs (and before ``on_checked``
    is called); a failing component raises (its error is TFX's), and nothing is pushed.
    """
    rows = user_code.for_options(options.csv).check_data(data_root)
    data_check.warn_before_run(rows, options)
    # CsvExampleGen's hash split puts about 2/3 of the rows in train: the length of a --label run
    # follows from it (TrainingOptions.windows_plan).
    train_rows = round(rows * digits.TRAIN_FRACTION) if options.csv.label else None
    metadata_path = metadata_path or os.path.join(pipeline_root, "metadata.db")
    config = metadata_store_pb2.ConnectionConfig()  # (TFX's helper creates the directory)
    config.sqlite.filename_uri = metadata_path
    config.sqlite.connection_mode = (
        metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    )
    pipeline = pipeline_lib.create_pipeline(  # checks the options: nothing is written before
        pipeline_name,
        pipeline_root,
        os.path.abspath(data_root),
        serving_model_dir,
        options,
        metadata_connection_config=config,
        enable_cache=enable_cache,
        beam_pipeline_args=beam_args(direct_num_workers),
        train_rows=train_rows,
    )
    if on_checked is not None:  # e.g. the console moving its log into the output directory
        on_checked()
    os.makedirs(os.path.dirname(os.path.abspath(metadata_path)), exist_ok=True)
    with run_temp_dir(pipeline_root):
        tfx.orchestration.LocalDagRunner().run(pipeline)
    return summarize(config)


@contextlib.contextmanager
def run_temp_dir(pipeline_root: str):
    """The run's temporary files in ``<pipeline_root>/.tmp-<pid>`` (this process's
    ``tempfile`` folder and its children's ``TMPDIR``), removed when the run ends, however it
    ends: TFX makes temporary folders it never removes (the user module's wheel build and its
    install, Beam's ephemeral package where no flag prevents it)."""
    folder = os.path.join(os.path.abspath(pipeline_root), f".tmp-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = folder
    try:
        yield folder
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
        shutil.rmtree(folder, ignore_errors=True)


def summarize(connection_config) -> RunSummary:
    """The summary of the latest pipeline run recorded in the store."""
    store = metadata_store.MetadataStore(connection_config)
    runs = store.get_contexts_by_type("pipeline_run")
    if not runs:
        raise RuntimeError("No pipeline run is recorded in the metadata store.")
    latest = max(runs, key=lambda context: (context.create_time_since_epoch, context.id))
    executions = store.get_executions_by_context(latest.id)
    node_type = store.get_context_type("node").id
    cached = sorted(
        context.name.split(".")[-1]
        for e in executions
        if e.last_known_state == e.CACHED
        for context in store.get_contexts_by_execution(e.id)
        if context.type_id == node_type
    )
    events = store.get_events_by_execution_ids([e.id for e in executions])
    artifacts = store.get_artifacts_by_id(
        [event.artifact_id for event in events if event.type == event.OUTPUT]
    )
    type_names = {
        t.id: t.name
        for t in store.get_artifact_types_by_id(
            sorted({artifact.type_id for artifact in artifacts})
        )
    }
    outputs = {type_names[artifact.type_id]: artifact for artifact in artifacts}
    plan = _plan(a for a in artifacts if type_names[a.type_id] == "Schema")

    record = run_record.read(outputs["ModelRun"].uri) if "ModelRun" in outputs else None
    blessing = outputs.get("ModelBlessing")
    pushed = outputs.get("PushedModel")
    blessed = bool(blessing and blessing.custom_properties["blessed"].int_value)
    pushed_model = (
        pushed.custom_properties["pushed_destination"].string_value
        if pushed and pushed.custom_properties["pushed"].int_value
        else None
    )
    evaluation = (
        blessing_lib.read(
            outputs["ModelEvaluation"].uri,
            validated=bool(blessing and "blessed" in blessing.custom_properties),
        )
        if "ModelEvaluation" in outputs
        else None
    )
    verdict = blessing_lib.verdict(
        evaluation,
        blessed,
        pushed_model is not None,
        baseline_name=plan.baseline_name if plan is not None else "",
        key_metric=_key_metric(plan),
    )
    return RunSummary(
        effective_batch_size=record and record.effective_batch_size,
        windows=record and record.windows,
        resumed_after_window=record and record.resumed_from_window,
        accum_schedule_used=record and record.accum_schedule_used,
        noise_scale=record and record.noise_scale,
        micro_batch_choice=record and record.micro_batch_choice,
        stack=record and record.stack,
        hyperparameters=_hyperparameters(outputs.get("HyperParameters")),
        metrics=evaluation.metrics if evaluation is not None else {},
        baseline_metrics=evaluation.baseline_metrics if evaluation is not None else {},
        blessed=blessed,
        blessed_text=verdict["blessed"],
        not_pushed_reason=verdict["pushed"],
        plan=plan,
        pushed_model=pushed_model,
        serving_model=(
            os.path.join(outputs["Model"].uri, "Format-Serving") if "Model" in outputs else None
        ),
        cached_components=cached,
    )


def _resumed_line(window):
    return "resumed: no" if window is None else f"resumed: after window {window}"


def _hyperparameters(artifact):
    if artifact is None:
        return {}
    path = os.path.join(artifact.uri, "best_hyperparameters.txt")
    return settings_lib.hyperparameter_values(json.loads(io_utils.read_string_file(path)))


def _plan(schema_artifacts) -> Optional[data_plan.DataPlan]:
    """The data plan carried by one of the run's schemas (DataPlanCheck's), if any."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    for artifact in schema_artifacts:
        path = os.path.join(artifact.uri, data_check.SCHEMA_FILE_NAME)
        if os.path.exists(path):
            plan = data_plan.plan_from_schema(io_utils.parse_pbtxt_file(path, schema_pb2.Schema()))
            if plan is not None:
                return plan
    return None


def _key_metric(plan) -> str:
    """The metric the blessing compares with the baseline."""
    if plan is not None and plan.task == "regression":
        return "root_mean_squared_error"
    return "sparse_categorical_accuracy"
