"""Gradient accumulation benchmarks: ga_tfx vs plain Keras 2 vs gradient-accumulator 0.5.2.

Run from the repository root (writes the Markdown report)::

    .venv/bin/python -m benchmarks --output benchmarks/REPORT.md

``benchmarks/GOAL.md`` is the same command on the goal's configurations alone, with longer
epochs and more rounds (its exact command is in its header).

Modules, one concern each:

* :mod:`benchmarks.configs`: data, the conv net, the configurations and how each is built.
* :mod:`benchmarks.runner`: the paired throughput runner (configurations interleaved round by
  round in one process).
* :mod:`benchmarks.memory`: peak memory of one configuration (run in a fresh process).
* :mod:`benchmarks.correctness`: weight-level correctness and BatchNormalization statistics.
* :mod:`benchmarks.workers`: launching and running the subprocess workers.
* :mod:`benchmarks.machine`: machine and source facts for the report.
* :mod:`benchmarks.report`: the Markdown report writer.
* :mod:`benchmarks.results`: the JSON results (``--json``): summary figures, one line per record.
* :mod:`benchmarks.__main__`: the command line.
* :mod:`benchmarks.keras3_front`: the Keras 3 front-end (``ga_tfx.keras3``) beside Keras 3's
  built-in accumulation, run with ``.venv-keras3/bin/python`` (``benchmarks/KERAS3.md``).

This package imports nothing at import time: modules that need TensorFlow import ``ga_tfx``
first (Keras 2). gradient-accumulator is only called, never copied.
"""
