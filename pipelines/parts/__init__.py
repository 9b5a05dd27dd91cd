"""The parts :func:`ga_tfx.pipelines.pipeline.create_pipeline` composes, one function each.

:mod:`.data` reads, checks and transforms the data (the shipped digits or any CSV);
:mod:`.training` makes the Trainer (and the optional Tuner) from the options; :mod:`.evaluation`
scores the trained model (beside the trivial baseline of a generic ``--label`` model), blesses
it past the thresholds and pushes it.
"""
