"""The run record: a small JSON file the Trainer writes beside its model (standard library only).

``<model_run_dir>/ga_tfx_run.json`` (the ``ModelRun`` artifact), written by the chief once the
model is exported; the pipeline summary and tests read it with :func:`read` rather than parsing
TensorBoard logs. Fields:

- ``windows``: windows of the whole training, ``train_args.num_steps`` (an update each, unless
  skipped: ``skipped_windows``);
- ``windows_this_run``: windows this attempt trained (``windows`` minus the resumed ones);
- ``resumed_from_window``: the windows the latest checkpoint of an earlier attempt held
  (``None``: this attempt started from scratch);
- ``effective_batch_size``, ``micro_batch_size``, ``accum_steps``, ``replicas``;
- ``skipped_windows``: windows not applied (non-finite gradients), over the whole training;
- ``samples_per_second``: training samples per second of this attempt's train steps
  (host wall time, evaluation excluded; ``None`` when it trained nothing);
- ``accum_schedule_used``: the K the windows of this attempt had, ``[[from_window, K], ...]``
  at each change (0-based windows; a short last window of ``partial_window="apply"`` shows);
- ``micro_batch_split``: slices each micro-batch was trained as at the end (1; 2, 4, ... after
  out-of-memory recoveries: the micro-batch halved, K doubled, the same samples per update);
- ``micro_batch_choice``: with ``memory_budget``, the choice and why (micro-batch x K, the
  measured peak, the budget, the sizes over it); ``micro_batch_size``/``accum_steps`` are the
  chosen ones;
- ``noise_scale``: the gradient noise scale ``B_simple`` at the end of training, in samples
  (``log_noise_scale``; ``None`` when off or not estimated, see :mod:`ga_tfx.window`);
- ``final_metrics``: Keras' logs of the last epoch trained (``loss``, ``val_loss``, ...);
- ``stack``: the versions this attempt trained with, ``{"ga-tfx", "TFX", "TensorFlow", "Keras",
  "Python"}`` (:mod:`ga_tfx.components.stack`; on Kubeflow, the image's).

A record written before 0.3.0 names the first three ``updates``, ``updates_this_run`` and
``resumed_from_update`` (windows all the same); :func:`read` reads those too.
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

FILE_NAME = "ga_tfx_run.json"
# A record's keys before 0.3.0 -> today's (the same figures: windows).
OLD_KEYS = {
    "updates": "windows",
    "updates_this_run": "windows_this_run",
    "resumed_from_update": "resumed_from_window",
}


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What one Trainer execution did (see the module docstring for each field)."""

    windows: int
    windows_this_run: int
    resumed_from_window: Optional[int]
    effective_batch_size: int
    micro_batch_size: int
    accum_steps: int
    replicas: int
    skipped_windows: int
    samples_per_second: Optional[float]
    final_metrics: Dict[str, float]
    noise_scale: Optional[float] = None
    accum_schedule_used: Optional[List[List[int]]] = None
    micro_batch_split: int = 1
    micro_batch_choice: Optional[str] = None
    stack: Optional[Dict[str, str]] = None


def path(model_run_dir: str) -> str:
    return os.path.join(model_run_dir, FILE_NAME)


def write(model_run_dir: str, record: RunRecord) -> str:
    """Writes ``record`` as JSON into ``model_run_dir`` (a local path or a TFX file system
    URI); returns the file's path."""
    from tfx.dsl.io import fileio  # (GCS/S3 URIs under Kubeflow)

    target = path(model_run_dir)
    fileio.makedirs(model_run_dir)
    with fileio.open(target, "w") as f:
        f.write(json.dumps(dataclasses.asdict(record), indent=1, sort_keys=True))
    return target


def read(model_run_dir: str) -> Optional[RunRecord]:
    """The record in ``model_run_dir``; ``None`` when there is none (e.g. an older Trainer)."""
    from tfx.dsl.io import fileio

    target = path(model_run_dir)
    if not fileio.exists(target):
        return None
    with fileio.open(target, "r") as f:
        values: Dict[str, Any] = json.loads(f.read())
    values = {OLD_KEYS.get(k, k): v for k, v in values.items()}  # (a record before 0.3.0)
    fields = {field.name for field in dataclasses.fields(RunRecord)}
    return RunRecord(**{k: v for k, v in values.items() if k in fields})
