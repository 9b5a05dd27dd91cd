"""Is ``jit_compile=True`` honoured? A probe that XLA must refuse.

The probe model is the configuration's own, with a first layer that calls ``tf.numpy_function``
(identity), an op XLA cannot compile. Trained without XLA it must train (the control); trained
with ``jit_compile=True`` it must fail if, and only if, the step is really compiled with XLA.
"""

import dataclasses

from benchmarks import builders, frameworks
from benchmarks.configs import DATA_SEED, Config, make_data
from benchmarks.errors import error_text


def _numpy_identity_layer(keras, tf):
    class NumpyIdentity(keras.layers.Layer):
        """Identity through ``tf.numpy_function`` (runs in Python: XLA cannot compile it)."""

        def call(self, inputs):
            out = tf.numpy_function(lambda a: a, [inputs], inputs.dtype, stateful=False)
            return tf.ensure_shape(out, inputs.shape)

        def compute_output_shape(self, input_shape):
            return input_shape

    return NumpyIdentity(name="xla_probe_numpy_identity")


def refused_by_xla(error: BaseException) -> bool:
    """True when ``error`` is XLA refusing the probe's op: its text names both XLA and the
    ``PyFunc`` op that ``tf.numpy_function`` creates (any other failure is not evidence)."""
    text = str(error)
    return "XLA" in text and "PyFunc" in text


def check(cfg: Config, b: int, k: int) -> dict:
    """``{"honoured": True | False | None, "control": error or None, "jit": error or None}``.

    ``honoured`` is True when the probe model trains without XLA and fails with it because XLA
    refuses the probe's op; False when it trains with ``jit_compile=True`` too; None (nothing
    learnt) when the control fails or the XLA run fails for another reason.
    """
    keras, tf = frameworks.load(cfg.framework)
    x, y = builders.as_tensors(tf, *make_data(k * b, seed=DATA_SEED + 5))
    errors, refused = {}, False
    for jit in (False, True):
        probe_cfg = dataclasses.replace(cfg, jit=jit)
        try:
            builders.build(
                probe_cfg, b, k, x, y, first_layer=_numpy_identity_layer(keras, tf)
            ).run_epoch()
            errors[jit] = None
        except Exception as error:
            errors[jit] = error_text(error)
            refused = jit and refused_by_xla(error)
    if errors[False] or (errors[True] and not refused):
        honoured = None
    else:
        honoured = errors[True] is not None
    return {"honoured": honoured, "control": errors[False], "jit": errors[True]}


def worker_xla_probe(args, result):
    """Subprocess worker: :func:`check` for every configuration in ``args.configs`` (all of one
    framework); ``result["probes"]`` maps name -> verdict."""
    from benchmarks.configs import CONFIGS

    result["probes"] = {}
    for name in args.configs.split(","):
        result["probes"][name] = verdict = check(CONFIGS[name], args.micro_batch, args.accum_steps)
        print(f"  xla probe {name}: honoured={verdict['honoured']}", flush=True)
