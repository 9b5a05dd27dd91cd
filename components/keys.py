"""Names shared by the components, their user modules and the pipelines (standard library only).

``custom_config`` keys, as TFX's own examples keep them: one constant each, read by
``trainer/run_fn.py``, ``trainer/executor.py``, ``tuner/tuner_fn.py`` and
``pipelines/parts/training.py``.
"""

# custom_config keys
GA_TFX = "ga_tfx"  # the Trainer's settings dict (stock-Trainer route, and the Tuner's)
GA_TFX_SEARCH = "ga_tfx_search"  # the Tuner's search space (AccumulationSearchSpace fields)
TUNER = "tuner"  # the Tuner's own options (TunerOptions fields)
MODEL_FN = "model_fn"  # dotted path of the module defining build_model(hparams)

# The component's extra execution property naming the model module (instead of module_file).
MODEL_FN_PROPERTY = MODEL_FN
# The alternative to accum_steps: accum_steps = EFFECTIVE_BATCH_SIZE / micro_batch_size.
EFFECTIVE_BATCH_SIZE = "effective_batch_size"
# The Trainer's length in windows as a plain int execution property, which a compiled job can
# take as a runtime parameter (``train_args`` is a proto: a RuntimeParameter could only hold its
# whole JSON); set, it is ``train_args.num_steps``.
TRAIN_WINDOWS_PROPERTY = "train_windows"
