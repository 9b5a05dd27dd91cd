"""The ``fit`` calls of a Trainer run: which windows each trains, from which micro-batch of the
data, with which callbacks (step 5 of :func:`ga_tfx.components.trainer.run_fn.train_and_export`).

A run resumed after window ``done`` trains windows ``done+1 .. total`` (:func:`fit_plan`),
its data skipping the micro-batches those windows consumed (:func:`data_position`), so it
ends with the weights of an uninterrupted run.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras
from ga_tfx.components.trainer import data
from ga_tfx.schedules import AdaptiveSchedule


def callbacks_of(model_run_dir, logger, checkpoint):
    """The callbacks of every ``fit`` of the Trainer (with an adaptive K, :func:`fit_windows` adds
    :class:`StopAfterWindows`): Keras' TensorBoard logs in ``model_run_dir`` at epoch ends, the
    ``ga_tfx/`` scalars and progress line (``logger``, a
    :class:`~ga_tfx.components.trainer.run_log.AccumulationLogger`) and the checkpoints
    (``checkpoint``, an :class:`~ga_tfx.components.trainer.checkpoints.UpdateCheckpoint`). None
    of them stops fit's pacing (:mod:`ga_tfx.engine.pacing`): a call of the train function runs
    several windows."""
    return [
        keras.callbacks.TensorBoard(log_dir=model_run_dir, update_freq="epoch"),
        logger,
        checkpoint,
    ]


def fit_windows(
    model, fn_args, settings, schema, evaluation, checkpoint, total_windows, per_epoch, callbacks
):
    """The ``fit`` calls of windows ``checkpoint.windows_done + 1 .. total_windows``
    (:func:`fit_plan`); returns the last epoch's logs."""
    metrics = {}
    schedule = settings.schedule
    plan = fit_plan(checkpoint.windows_done, total_windows, per_epoch, schedule.varies)
    adaptive = isinstance(schedule, AdaptiveSchedule)
    for initial_epoch, epochs, windows, skip in plan:
        history = model.fit(
            # A fresh dataset per fit, from the same seed: the order resumes too.
            data.micro_batches(
                fn_args, fn_args.train_files, settings, schema, settings.shuffle
            ).skip(data_position(checkpoint, settings, skip)),
            initial_epoch=initial_epoch,
            epochs=epochs,
            # Adaptive K: as many as the windows may take; StopAfterWindows ends the fit.
            steps_per_epoch=schedule.micro_batches(skip, skip + windows),
            validation_data=evaluation if fn_args.eval_steps else None,
            validation_steps=fn_args.eval_steps or None,
            verbose=2,
            callbacks=callbacks + ([StopAfterWindows(windows)] if adaptive else []),
        )
        metrics = {k: float(v[-1]) for k, v in history.history.items() if v}
    return metrics


def data_position(checkpoint, settings, windows):
    """Micro-batches the first ``windows`` windows consumed: from the schedule, or (adaptive K,
    chosen as the training went) the sum of their K (``checkpoint.micro_batches_done``: the
    window core's count, restored with the checkpoint)."""
    if not isinstance(settings.schedule, AdaptiveSchedule):
        return settings.schedule.micro_batches(0, windows)
    if checkpoint.windows_done != windows:
        raise RuntimeError(f"{checkpoint.windows_done} windows trained, the plan expects {windows}")
    return checkpoint.micro_batches_done


class StopAfterWindows(keras.callbacks.Callback):
    """Ends a ``fit`` after its ``windows`` windows (an adaptive K is known only as the
    training goes, so ``steps_per_epoch`` is an upper bound): Keras then evaluates and ends
    the epoch as at its last step."""

    def __init__(self, windows):
        super().__init__()
        self._left = windows

    def on_window_end(self, event):
        self._left -= 1
        if self._left <= 0:
            self.model.stop_training = True


def fit_plan(done, total_windows, per_epoch, one_fit_per_epoch=False):
    """The ``fit`` calls that train windows ``done+1 .. total_windows``: tuples (initial_epoch,
    epochs, windows per epoch, windows to skip in the data).

    Epochs have ``per_epoch`` windows (evaluation at each epoch end). A resume mid-epoch first
    finishes that epoch with a shorter ``fit``, so evaluations stay where the uninterrupted
    run has them. With ``one_fit_per_epoch`` (an ``accum_schedule``: an epoch's micro-batches
    depend on its windows' K) every epoch is its own ``fit``.
    """
    epoch, into = divmod(done, per_epoch)
    plan = []
    if into:
        plan.append((epoch, epoch + 1, per_epoch - into, done))
        epoch += 1
    last = total_windows // per_epoch
    if one_fit_per_epoch:
        plan += [(e, e + 1, per_epoch, e * per_epoch) for e in range(epoch, last)]
    elif epoch < last:
        plan.append((epoch, last, per_epoch, epoch * per_epoch))
    return plan
