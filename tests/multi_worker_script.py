"""One Trainer run through the real ga-tfx run_fn, for tests/test_multi_worker.py.

``python -m tests.multi_worker_script OUT MODULE_FILE STRATEGY MICRO_BATCH ACCUM_STEPS UPDATES``
builds the artifacts and ``FnArgs`` as the Trainer's executor does (taxi testdata of the TFX
wheel, see tests/test_trainer_component.py), calls
:func:`ga_tfx.components.trainer.run_fn.train_and_export` and saves the trained model's weights to
``OUT/weights.npz``. Under ``strategy=multi_worker`` each worker
process runs it with its own ``TF_CONFIG``; the strategy is then created before any other
TensorFlow operation runs, as it must be.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

import os
import sys

import numpy as np

from ga_tfx.components.trainer import Executor, run_fn, user_module
from ga_tfx.components.trainer import settings as settings_lib
from tests.test_trainer_component import _artifacts, _exec_properties

# No BatchNormalization: it normalises each replica's share of a micro-batch on its own.
HYPERPARAMETERS = {"batchnorm": False}


def train(out, module_file, strategy, micro_batch_size, accum_steps, updates):
    """Trains through ``train_and_export``; returns the path of the saved weights."""
    inputs, outputs = _artifacts(out, HYPERPARAMETERS)
    props = _exec_properties(module_file, num_steps=updates, eval_steps=0,
                             accum_steps=accum_steps, micro_batch_size=micro_batch_size,
                             strategy=strategy, updates_per_epoch=1)
    settings = settings_lib.from_dict({name: props[name] for name in settings_lib.field_names()
                                       if props.get(name) is not None})
    fn_args = Executor()._GetFnArgs(inputs, outputs, props)
    plain = run_fn.train_and_export(fn_args, settings, user_module.load_build_model(props))
    path = os.path.join(out, "weights.npz")
    np.savez(path, *plain.get_weights())
    return path


if __name__ == "__main__":
    out_dir, module, strategy_name, micro, accum, steps = sys.argv[1:]
    print(train(out_dir, module, strategy_name, int(micro), int(accum), int(steps)), flush=True)
