"""Compatibility layers for users migrating to ga-tfx from other libraries.

* :mod:`ga_tfx.compat.gradient_accumulator`: the public API of the ``gradient-accumulator``
  package (0.5.2): its names, signatures and argument meanings, running on the exact ga-tfx
  engine. Migrating is one line::

      import ga_tfx.compat.gradient_accumulator as gradient_accumulator
      from ga_tfx.compat.gradient_accumulator import GradientAccumulateModel

  docs/migrating.md's table lists every name and argument, what
  it does in the package, what it does here, and why they differ where they do.

This package imports only the standard library; TensorFlow loads with the compat module.
"""
