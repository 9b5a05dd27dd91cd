"""ga-tfx Trainer: ``GradientAccumulationTrainer`` and its ``run_fn``."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

from components.trainer.component import (GradientAccumulationTrainer,
                                          GradientAccumulationTrainerSpec)
from components.trainer.executor import Executor
from components.trainer.settings import AccumulationSettings

__all__ = ["AccumulationSettings", "Executor", "GradientAccumulationTrainer",
           "GradientAccumulationTrainerSpec"]
