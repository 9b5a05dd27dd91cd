"""ga-tfx Trainer: ``GradientAccumulationTrainer`` and its ``run_fn``."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

from ga_tfx.components.trainer.component import (GradientAccumulationTrainer,
                                          GradientAccumulationTrainerSpec)
from ga_tfx.components.trainer.executor import Executor
from ga_tfx.components.trainer.settings import AccumulationSettings

__all__ = ["AccumulationSettings", "Executor", "GradientAccumulationTrainer",
           "GradientAccumulationTrainerSpec"]
