"""ga-tfx Tuner: ``ga_tfx.components.tuner.tuner_fn.tuner_fn`` for the stock
``tfx.components.Tuner``.

The function is not re-exported here: ``ga_tfx.components.tuner.tuner_fn`` stays the module (the
dotted path TFX imports is ``"ga_tfx.components.tuner.tuner_fn.tuner_fn"``).
"""
