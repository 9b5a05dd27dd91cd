"""Every private TFX name ga-tfx uses, checked when this module is imported.

TFX has no public hook for what ga-tfx changes in two executors: the Trainer's
(``components/trainer/executor.py``: ``GenericExecutor._GetFnArgs`` builds the ``fn_args`` a
``run_fn`` gets, ``BaseExecutor._log_startup`` logs the inputs as TFX's own ``Do`` does) and
Transform's (``pipelines/tabular/planned_transform.py``: ``Executor._GetPreprocessingFn``, where
the data plan joins ``preprocessing_fn``'s ``custom_config``). Those modules import this one
first; a TFX release without one of the names below fails here, naming it
(:func:`ga_tfx._private_hooks.check_hooks`). ``tests/test_private_hooks.py`` checks that no
private TFX name is used that is not listed here. The library (``ga_tfx/``) never imports it.
"""

from ga_tfx._private_hooks import Hook, check_hooks

from typing import Tuple

from tfx import version as tfx_version

# TFX major.minor releases the ga-tfx test suite passed on.
TESTED_VERSIONS: Tuple[str, ...] = ("1.16", "1.21")

REQUIRED: Tuple[Hook, ...] = (
    ("tfx.components.trainer.executor", "GenericExecutor", "_GetFnArgs"),
    ("tfx.dsl.components.base.base_executor", "BaseExecutor", "_log_startup"),
    ("tfx.components.transform.executor", "Executor", "_GetPreprocessingFn"),
)

check_hooks("TFX", tfx_version.__version__, TESTED_VERSIONS, REQUIRED)
