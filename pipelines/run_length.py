"""How long a pipeline run trains: its windows, and its windows per epoch (evaluations).

:func:`windows_plan` is :meth:`ga_tfx.pipelines.options.TrainingOptions.windows_plan`: the
Trainer's ``train_args.num_steps`` and ``windows_per_epoch``, both in windows (an update each,
unless skipped), from the options and, for ``--label`` data, the training rows.
"""

from ga_tfx._schema import SettingError
from ga_tfx.components.trainer.settings import check_windows_per_epoch

from typing import Any, Optional, Tuple

# The shipped digits' training length, and the least a --label run trains (in windows: an
# update each, unless skipped).
DIGITS_TRAIN_WINDOWS, DIGITS_WINDOWS_PER_EPOCH = 60, 20
MIN_TRAIN_WINDOWS = 1000


def windows_plan(options: Any, train_rows: Optional[int] = None) -> Tuple[int, int]:
    """See :meth:`ga_tfx.pipelines.options.TrainingOptions.windows_plan`."""
    run = options.accumulation
    if options.csv.label is None:
        windows = run.train_windows or DIGITS_TRAIN_WINDOWS
        per_epoch = run.windows_per_epoch or DIGITS_WINDOWS_PER_EPOCH
        return windows, check_windows_per_epoch(windows, per_epoch)
    if run.train_windows is not None:
        return run.train_windows, check_windows_per_epoch(run.train_windows, run.windows_per_epoch)
    if not train_rows:
        raise SettingError(
            "train_windows (--train-windows N) is needed here: for --label data it is "
            "derived from the number of training rows, which only `ga-tfx run` counts "
            f"(got train_rows={train_rows!r})."
        )
    first_k = run.schedule.first_accum_steps  # the run's first K, its schedule's
    per_pass = -(-train_rows // (first_k * run.micro_batch_size))
    wanted = max(run.epochs * per_pass, MIN_TRAIN_WINDOWS)
    per_epoch = run.windows_per_epoch or max(per_pass, -(-MIN_TRAIN_WINDOWS // run.epochs))
    return -(-wanted // per_epoch) * per_epoch, per_epoch
