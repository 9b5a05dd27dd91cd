"""Trainer runs through the real ga-tfx run_fn, for tests/test_multi_worker.py.

``python -m tests.multi_worker_script OUT MODULE_FILE STRATEGY MICRO_BATCH ACCUM_STEPS WINDOWS
OPTIMIZERS`` builds the artifacts and ``FnArgs`` as the Trainer's executor does (taxi testdata
of the TFX wheel, see tests/test_trainer_component.py) and, for each optimizer of the
comma-separated ``OPTIMIZERS`` (names of ``tests.taxi.MODEL_MODULE``: ``sgd``,
``sgd_momentum``, ``adam``), calls :func:`ga_tfx.components.trainer.run_fn.train_and_export`
with outputs under ``OUT/<optimizer>`` and saves the trained model's weights to
``OUT/<optimizer>/weights.npz``. Under ``strategy=multi_worker`` each worker process runs it
with its own ``TF_CONFIG``; the strategy is created once, before any other TensorFlow
operation runs, as it must be, and serves every training of the process.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx.components.trainer import Executor, distribution, run_fn, user_module
from ga_tfx.components.trainer import settings as settings_lib

import functools
import os
import sys

import numpy as np

from tests.test_trainer_component import _artifacts, _exec_properties


def hyperparameters(optimizer):
    # No BatchNormalization: it normalises each replica's share of a micro-batch on its own.
    return {"batchnorm": False, "optimizer": optimizer}


def train(out, module_file, strategy, micro_batch_size, accum_steps, windows, optimizer):
    """Trains through ``train_and_export``; returns the path of the saved weights."""
    inputs, outputs = _artifacts(out, hyperparameters(optimizer))
    props = _exec_properties(
        module_file,
        num_steps=windows,
        eval_steps=0,
        accum_steps=accum_steps,
        micro_batch_size=micro_batch_size,
        strategy=strategy,
        windows_per_epoch=1,
    )
    settings = settings_lib.from_dict(
        {name: props[name] for name in settings_lib.field_names() if props.get(name) is not None}
    )
    fn_args = Executor()._GetFnArgs(inputs, outputs, props)
    plain = run_fn.train_and_export(fn_args, settings, user_module.load_build_model(props))
    path = os.path.join(out, "weights.npz")
    np.savez(path, *plain.get_weights())
    return path


if __name__ == "__main__":
    # One MultiWorkerMirroredStrategy per worker process (it can only be created at start-up):
    # every training of the process uses the first one. (Only here: not in the test process.)
    distribution.make_strategy = functools.lru_cache(maxsize=None)(distribution.make_strategy)
    out_dir, module, strategy_name, micro, accum, steps, optimizers = sys.argv[1:]
    for name in optimizers.split(","):
        print(
            train(
                os.path.join(out_dir, name),
                module,
                strategy_name,
                int(micro),
                int(accum),
                int(steps),
                name,
            ),
            flush=True,
        )
