"""A short check of ga-tfx's Keras 3 JAX front-end on one device: PASS / FAIL / SKIP / INFO lines.

    python -m benchmarks.device_check_jax [--quick] [--output benchmarks/DEVICE_JAX.md]
                                          [--commit SHA] [--only SECTION]

Needs only JAX (GPU or CPU), keras 3 (``KERAS_BACKEND=jax``, set here) and the project's
pure-Python files: no TensorFlow is imported (the ``imports`` line checks ``sys.modules`` at the
end, in this process and in each child). Made for the lent GPU machine (an H200 with JAX 0.11.2
and its CUDA 13 plugin, no TensorFlow, no keras, no package index), in under 8 minutes there;
``--quick``: tiny sizes on the CPU, about a minute (``tests/test_device_check_jax.py``).

Wheels to carry there (``.whl/``, git-ignored, the device README's recipe; 2.8 MiB in all):
keras 3.15.1, namex 0.1.0 and optree 0.20.0 (cp312, manylinux). keras' other needs (absl-py,
h5py, ml-dtypes, numpy, packaging, rich) and optree's typing-extensions are on that image
(``/work/.library/device/KINDS.md``, 2026-11-17); ``bash scripts/device_wheels.sh`` downloads
the three. The one call (``carry: [".whl"]``, ``timeout_s: 600``; SHA the commit measured)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \
    PYTHONUNBUFFERED=1 timeout 570 python3 -m benchmarks.device_check_jax --commit SHA \
      --output $OUT/DEVICE_JAX.md 2>&1 | tee $OUT/log.txt

Sections (one line per claim; exit status 1 when a line says FAIL):

1. **exactness**: ``wrap_model(model, K)`` at micro-batch ``b`` against plain Keras 3 ``fit`` at
   ``K·b`` (same start, data and order; SGD with momentum, two epochs): max |Δw| over every
   weight, moving statistics included, within ``TOLERANCE_FACTOR · u · (1 + movement)`` (u: the
   dtype's unit round-off, 2^-24 for float32; movement: how far big batch moved the weights).
   Float32 runs at ``jax.default_matmul_precision("highest")`` (a GPU's default float32 matmul is
   TensorFloat-32, u = 2^-11, for both sides alike). Two models: a conv net with
   ``ga_tfx.keras3.AccumBatchNormalization`` (its reference: a plain Keras 3 model whose
   BatchNormalization normalises each group of ``b`` rows with that group's statistics and
   moves its statistics with the whole batch's, which is what AccumBN promises: ghost batch
   norm, window statistics), and a small masked-token transformer (``Embedding(mask_zero=True)``,
   ``MultiHeadAttention``, per-token sparse cross-entropy: each micro-batch weighs by its valid
   tokens, issue 56). Keras 3's own ``gradient_accumulation_steps`` is measured beside each
   (INFO). ``mixed_bfloat16``: the JAX front-end takes it but no test holds it to a bound
   (docs/keras3.md lists no bfloat16 result on JAX), so it is a SKIP verdict with the distance
   measured as INFO against the float32 big batch and the Keras 2 tests' ``4 u x movement``.
2. **memory**: ``peak_bytes_in_use`` of ``jax.devices()[0].memory_stats()`` in a fresh process
   per run (JAX has no reset of its peak), for ga(b, K), plain(b) and plain(K·b); then, where
   the device reports its ``bytes_limit``, ga(b, K') and plain(K'·b) at a ``K'`` whose batch
   does not fit (chosen from the measured bytes per sample): plain must fail with the device's
   out-of-memory error where ga trains. A CPU has no memory statistics: "not available".
3. **speed**: samples per second of ga(b, K) against plain(b), Keras 3's built-in
   ``gradient_accumulation_steps=K`` and the bound (:mod:`benchmarks.keras3_bound`: compiled
   forward and backward of every micro-batch, summed), in one process, one epoch of each per
   round, the order reversed every other round, wall clock with the device synchronised; the
   paired ratios' median [quartiles].
4. **oom**: a real out-of-memory error recovered to the same weights needs the front-end's
   out-of-memory replay (``oom_recovery=True``), which the JAX front-end refuses today
   (docs/keras3.md, "What differs"): the line says so, checked by asking ``wrap_model``.

The report (``--output``, Markdown, and the same name with ``.json``) holds the device's name
(``jax.devices()``), the command, the commit (``--commit``, else ``git rev-parse``) and every line.
"""

import os

os.environ["KERAS_BACKEND"] = "jax"  # before keras is imported anywhere
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # peaks and OOM at real use

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

K = 4
UNIT_ROUNDOFF = {"float32": 2.0**-24, "mixed_bfloat16": 2.0**-8}
# float32: max |Δw| within TOLERANCE_FACTOR · u · (1 + movement). The window sums K means where
# big batch takes one mean of K·b terms (relative error ~u·log2(K·b) per entry), carried through
# a few dozen SGD-with-momentum updates of a net with normalisation; measured on the CPU
# (--quick): 6e-8 and 1.5e-7, where 2^-24 (1 + movement) is about 7e-8; 64 leaves room for the
# GPU's other reduction orders (cuDNN's convolution algorithms) and is still far below what a
# wrong weighting costs (the divisor by rows: 2e-2, issue 56).
TOLERANCE_FACTOR = 64.0
BF16_FACTOR = 4.0  # tests/test_mixed_precision.py's bound (Keras 2): 4 u x movement
SECTIONS = ("exactness", "memory", "speed", "oom")
MIB = 2.0**20


def _sizes(quick: bool) -> Dict[str, Dict]:
    if quick:
        return {
            "conv": dict(shape=(8, 8, 3), channels=(8, 16), b=8, n=128, epochs=2),
            "tokens": dict(T=12, vocab=20, width=16, heads=2, b=8, n=128, epochs=2),
            "memory": dict(shape=(16, 16, 3), channels=(8, 16), b=16, k=4),
            "speed": dict(shape=(16, 16, 3), channels=(8, 16), b=16, k=K, steps=16, rounds=3),
        }
    return {
        "conv": dict(shape=(32, 32, 3), channels=(32, 64, 128), b=64, n=4096, epochs=2),
        "tokens": dict(T=64, vocab=1000, width=128, heads=4, b=64, n=4096, epochs=2),
        "memory": dict(shape=(64, 64, 3), channels=(64, 128, 256), b=512, k=8),
        "speed": dict(shape=(32, 32, 3), channels=(32, 64, 128), b=256, k=K, steps=128, rounds=7),
    }


# ---------------------------------------------------------------------------------- models


def _seed(seed: int) -> None:
    """Seeds without ``keras.utils.set_random_seed``, which imports TensorFlow where it is
    installed (Keras' default seeds are drawn from Python's ``random``)."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)


def _ghost_bn_class():
    import keras

    class GhostBatchNormalization(keras.layers.BatchNormalization):
        """Plain Keras 3 BN at ``K·b`` with ghost batches: in training each group of ``group``
        rows is normalised with its own (biased) statistics; the moving statistics move with
        the whole batch's, as Keras' BatchNormalization moves them."""

        def __init__(self, group, **kwargs):
            super().__init__(**kwargs)
            self.group = group

        def call(self, inputs, training=None, mask=None):
            if not (training and self.trainable):
                return super().call(inputs, training=training, mask=mask)
            ops = keras.ops
            x = ops.cast(inputs, "float32")
            axes = tuple(range(len(x.shape) - 1))
            mean, variance = ops.moments(x, axes)
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m))
            groups = ops.reshape(x, (-1, self.group) + tuple(x.shape[1:]))
            g_mean, g_var = ops.moments(groups, tuple(range(1, len(groups.shape) - 1)), True)
            out = (groups - g_mean) * ops.rsqrt(g_var + self.epsilon)
            out = out * ops.cast(self.gamma, "float32") + ops.cast(self.beta, "float32")
            return ops.cast(ops.reshape(out, ops.shape(x)), self.compute_dtype)

    return GhostBatchNormalization


def conv_net(shape, channels, bn, classes=10, activation="tanh"):
    """Conv2D-BN-activation per entry of ``channels`` (max-pooling between), global average
    pooling, float32 logits; ``bn(name)`` makes each normalisation layer (tanh by default:
    smooth, so a half-precision rounding does not flip a ReLU's kink)."""
    import keras

    inputs = keras.Input(shape)
    h = inputs
    for i, c in enumerate(channels):
        h = keras.layers.Conv2D(c, 3, padding="same", use_bias=False, name=f"conv{i}")(h)
        h = bn(f"bn{i}")(h)
        h = keras.layers.Activation(activation, name=f"act{i}")(h)
        if i < len(channels) - 1:
            h = keras.layers.MaxPool2D(name=f"pool{i}")(h)
    h = keras.layers.GlobalAveragePooling2D(name="gap")(h)
    outputs = keras.layers.Dense(classes, dtype="float32", name="logits")(h)
    return keras.Model(inputs, outputs)


def token_model(T, vocab, width, heads, classes=None):
    """Embedding(mask_zero=True), self-attention (its mask from the embedding), LayerNorm and a
    tanh feed-forward layer; per-token float32 logits (the mask reaches the loss: checked by
    Keras 3's built-in accumulation landing far from big batch, :func:`exactness`)."""
    import keras

    inputs = keras.Input((T,), dtype="int32")
    h = keras.layers.Embedding(vocab, width, mask_zero=True, name="embed")(inputs)
    # No residual Add: on JAX, Keras 3 (3.15.1) loses the mask at the loss after
    # Add()([h, MultiHeadAttention(h, h)]) (plain fit and ga alike then average every token).
    h = keras.layers.MultiHeadAttention(heads, width // heads, name="attention")(h, h)
    h = keras.layers.LayerNormalization(name="norm")(h)
    h = keras.layers.Dense(2 * width, activation="tanh", name="ff")(h)
    outputs = keras.layers.Dense(classes or vocab, dtype="float32", name="logits")(h)
    return keras.Model(inputs, outputs)


def _loss():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _sgd(**extra):
    import keras

    return keras.optimizers.SGD(0.05, momentum=0.9, **extra)


def _images(n, shape, classes=10, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n,) + tuple(shape)).astype("float32")
    x += np.arange(n, dtype="float32").reshape((n,) + (1,) * len(shape)) % 3  # groups differ
    return x, rng.integers(0, classes, size=n).astype("int32")


def _tokens(n, T, vocab, b, seed=0):
    """Sequences padded with 0 whose valid lengths differ from micro-batch to micro-batch
    (micro-batch i of a window: long, short, middling, short), per-token targets."""
    import numpy as np

    rng = np.random.default_rng(seed)
    spans = [(3 * T // 4, T), (1, T // 6 + 1), (T // 2, 3 * T // 4), (1, T // 6 + 1)]
    lengths = np.array([rng.integers(*spans[(row // b) % len(spans)]) for row in range(n)])
    valid = np.arange(T)[None, :] < lengths[:, None]
    x = np.where(valid, rng.integers(1, vocab, size=(n, T)), 0).astype("int32")
    return x, rng.integers(0, vocab, size=(n, T)).astype("int32")


def _copy_weights(source, target):
    """Each layer's weights of ``source`` into the same layer of ``target`` (an
    AccumBatchNormalization keeps its three window sums after BN's four)."""
    for a, b in zip(source.layers, target.layers, strict=True):
        weights = a.get_weights()
        b.set_weights(weights + b.get_weights()[len(weights) :])


def _compared(reference, model):
    """max |Δw| over each layer's weights of ``reference`` (trainable and moving statistics)."""
    import numpy as np

    diff = 0.0
    for a, b in zip(reference.layers, model.layers, strict=True):
        for u, v in zip(a.get_weights(), b.get_weights()):  # AccumBN's sums left out
            diff = max(diff, float(np.max(np.abs(np.asarray(u, "float64") - v))))
    return diff


def _moved(reference, start):
    import numpy as np

    return max(float(np.max(np.abs(u - v))) for u, v in zip(reference.get_weights(), start))


# ------------------------------------------------------------------------------- exactness


def _exactness_case(name, make, ga_make, data, b, epochs, policy):
    """Big batch (float32, plain Keras 3 at K·b), ga(b, K) under ``policy`` and Keras 3's
    built-in at (b, K): ``(diff, builtin_diff, movement)``."""
    import ga_tfx.keras3 as ga3

    import keras

    x, y = data
    _seed(1)
    reference = make()
    start = reference.get_weights()
    reference.compile(optimizer=_sgd(), loss=_loss())
    reference.fit(x, y, batch_size=K * b, epochs=epochs, shuffle=False, verbose=0)
    movement = _moved(reference, start)

    def trained(builder, wrap, **extra):
        keras.mixed_precision.set_global_policy(policy if wrap else "float32")
        try:
            model = builder()
            _copy_weights(reference_start, model)
            if wrap:
                model = ga3.wrap_model(model, K)
            model.compile(optimizer=_sgd(**extra), loss=_loss())
            model.fit(x, y, batch_size=b, epochs=epochs, shuffle=False, verbose=0)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        return model

    reference_start = make()
    reference_start.set_weights(start)
    ours = trained(ga_make, True)
    builtin = None
    if policy == "float32":
        builtin = _compared(reference, trained(ga_make.plain, False, gradient_accumulation_steps=K))
    return _compared(reference, ours), builtin, movement


def exactness(quick: bool) -> List[str]:
    import ga_tfx.keras3 as ga3

    import jax
    import keras

    sizes = _sizes(quick)
    conv, tok = sizes["conv"], sizes["tokens"]
    Ghost = _ghost_bn_class()
    cases = []

    def conv_ga():
        return conv_net(
            conv["shape"], conv["channels"], lambda n: ga3.AccumBatchNormalization(name=n)
        )

    conv_ga.plain = lambda: conv_net(  # Keras 3's built-in: its own BN, per micro-batch
        conv["shape"], conv["channels"], lambda n: keras.layers.BatchNormalization(name=n)
    )
    cases.append(
        (
            f"conv net + AccumBatchNormalization {conv['channels']} on {conv['shape']}",
            lambda: conv_net(conv["shape"], conv["channels"], lambda n: Ghost(conv["b"], name=n)),
            conv_ga,
            _images(conv["n"], conv["shape"]),
            conv["b"],
            conv["epochs"],
        )
    )

    def tok_ga():
        return token_model(tok["T"], tok["vocab"], tok["width"], tok["heads"])

    tok_ga.plain = tok_ga
    cases.append(
        (
            f"masked-token transformer (T={tok['T']}, width {tok['width']}, mask_zero, "
            "per-token sparse CE)",
            tok_ga,
            tok_ga,
            _tokens(tok["n"], tok["T"], tok["vocab"], tok["b"]),
            tok["b"],
            tok["epochs"],
        )
    )
    lines = []
    for label, make, ga_make, data, b, epochs in cases:
        with jax.default_matmul_precision("highest"):
            diff, builtin, movement = _exactness_case(
                label, make, ga_make, data, b, epochs, "float32"
            )
        u = UNIT_ROUNDOFF["float32"]
        bound = TOLERANCE_FACTOR * u * (1.0 + movement)
        verdict = "PASS" if diff <= bound and movement > 1e-3 else "FAIL"
        masked = label.startswith("masked")
        if masked and not builtin > 100 * bound:  # the divisor case must be one
            verdict = "FAIL"
            label += " (the mask did not reach the loss: Keras 3's built-in is exact too)"
        lines.append(
            f"{verdict} exactness float32 {label}: K={K} x {b} vs plain Keras 3 at {K * b}: "
            f"max|dw| {diff:.3g} <= {bound:.3g} ({TOLERANCE_FACTOR:g} u (1 + movement "
            f"{movement:.3g}), u = 2^-24, matmul precision highest)"
        )
        lines.append(
            f"INFO exactness float32 {label}: Keras 3 gradient_accumulation_steps={K} at {b}: "
            f"max|dw| {builtin:.3g} from the same big batch"
            + (" (each micro-batch's mean weighed alike: the divisor case)" if masked else "")
        )
        diff16, _, _ = _exactness_case(label, make, ga_make, data, b, epochs, "mixed_bfloat16")
        bound16 = BF16_FACTOR * UNIT_ROUNDOFF["mixed_bfloat16"] * movement
        lines.append(
            f"SKIP exactness mixed_bfloat16 {label}: no verdict: the JAX front-end takes "
            "mixed_bfloat16 but no test holds it to a bound (docs/keras3.md)"
        )
        lines.append(
            f"INFO exactness mixed_bfloat16 {label}: max|dw| {diff16:.3g} from float32 big "
            f"batch (the Keras 2 tests' bound 4 u x movement: {bound16:.3g}, u = 2^-8; "
            f"{'within' if diff16 <= bound16 else 'outside'} it)"
        )
    return lines


# ---------------------------------------------------------------------------------- memory


def _is_oom(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}".lower()
    return "resource_exhausted" in text or "out of memory" in text or "resourceexhausted" in text


def _memory_child(kind: str, b: int, k: int, quick: bool) -> None:
    """In its own process: one epoch of ``kind`` (plain at batch ``b``, or ga at (b, k)) over
    ``k·b`` samples, then the device's memory statistics; prints one JSON line."""
    import jax
    import numpy as np

    size = _sizes(quick)["memory"]
    result: Dict = {"kind": kind, "b": b, "k": k}
    try:
        import ga_tfx.keras3 as ga3

        import keras

        _seed(1)
        bn = ga3.AccumBatchNormalization if kind == "ga" else keras.layers.BatchNormalization
        model = conv_net(size["shape"], size["channels"], lambda n: bn(name=n), activation="relu")
        if kind == "ga":
            model = ga3.wrap_model(model, k)
        model.compile(optimizer=_sgd(), loss=_loss())
        x, y = _images(k * b, size["shape"])
        model.fit(x, y, batch_size=b, epochs=1, shuffle=False, verbose=0)
        weights = jax.block_until_ready([v.value for v in model.trainable_variables])
        result["finite"] = bool(all(np.isfinite(np.asarray(w)).all() for w in weights))
        result["trained"] = True
    except Exception as error:  # noqa: BLE001  (an out-of-memory error is the finding)
        result.update(trained=False, oom=_is_oom(error), error=str(error).splitlines()[0][:300])
    stats = jax.devices()[0].memory_stats()
    result["peak"] = stats.get("peak_bytes_in_use") if stats else None
    result["limit"] = stats.get("bytes_limit") if stats else None
    result["tensorflow_imported"] = "tensorflow" in sys.modules
    print(json.dumps(result), flush=True)


def _run_memory_child(kind: str, b: int, k: int, quick: bool) -> Dict:
    argv = [sys.executable, "-m", "benchmarks.device_check_jax", "--memory-child", kind]
    argv += [str(b), str(k)] + (["--quick"] if quick else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    found = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not found:
        return {
            "kind": kind,
            "b": b,
            "k": k,
            "trained": False,
            "oom": False,
            "peak": None,
            "error": f"the child failed ({done.returncode}): {done.stderr[-300:]}",
        }
    return json.loads(found[-1])


def _label(run: Dict) -> str:
    return f"ga({run['b']}, {run['k']})" if run["kind"] == "ga" else f"plain({run['b']})"


def memory(quick: bool) -> Tuple[List[str], Dict]:
    size = _sizes(quick)["memory"]
    b, k = size["b"], size["k"]
    runs = [
        _run_memory_child("plain", b, k, quick),  # one epoch of k batches of b
        _run_memory_child("ga", b, k, quick),
        _run_memory_child("plain", k * b, 1, quick),
    ]
    record: Dict = {"runs": runs}
    lines = []
    failed = [r for r in runs if not r.get("trained")]
    if failed:
        return [f"FAIL memory: {_label(r)} did not train: {r.get('error')}" for r in failed], record
    if any(r.get("tensorflow_imported") for r in runs):
        lines.append("FAIL memory: a child imported TensorFlow")
    plain_b, ga, plain_kb = runs
    if ga["peak"] is None:
        lines.append(
            f"INFO memory: peak_bytes_in_use not available on this device (memory_stats() is "
            f"None); plain({b}), ga({b}, {k}) and plain({k * b}) trained in their own processes"
        )
        lines.append("SKIP memory beyond the device: needs the device's memory statistics")
        return lines, record
    # ga keeps the window's gradient sums (one copy of the trainable weights) beside plain(b)
    verdict = (
        "PASS" if ga["peak"] <= 1.10 * plain_b["peak"] and ga["peak"] < plain_kb["peak"] else "FAIL"
    )
    lines.append(
        f"{verdict} memory: peak_bytes_in_use ga({b}, {k}) {ga['peak'] / MIB:.1f} MiB, plain({b}) "
        f"{plain_b['peak'] / MIB:.1f} (ga / it {ga['peak'] / plain_b['peak']:.3f}, <= 1.10), "
        f"plain({k * b}) {plain_kb['peak'] / MIB:.1f} (ga / it {ga['peak'] / plain_kb['peak']:.3f})"
    )
    limit = ga.get("limit")
    per_sample = (plain_kb["peak"] - plain_b["peak"]) / ((k - 1) * b)
    if not limit or per_sample <= 0:
        lines.append("SKIP memory beyond the device: no bytes_limit or no growth per sample")
        return lines, record
    big_k = 2 ** math.ceil(math.log2(1.5 * limit / (per_sample * b)))
    sample_bytes = 4 * math.prod(size["shape"])
    if big_k * b * sample_bytes > 24 * 2**30 or quick:
        lines.append(
            f"SKIP memory beyond the device: K'={big_k} would need "
            f"{big_k * b * sample_bytes / 2**30:.1f} GiB of host data"
            + (" (--quick)" if quick else "")
        )
        return lines, record
    beyond = [
        _run_memory_child("ga", b, big_k, quick),
        _run_memory_child("plain", big_k * b, 1, quick),
    ]
    record.update(beyond=beyond, big_k=big_k, per_sample_bytes=per_sample, bytes_limit=limit)
    ga_big, plain_big = beyond
    ok = ga_big.get("trained") and ga_big.get("finite") and not plain_big.get("trained")
    ok = ok and plain_big.get("oom")
    lines.append(
        f"{'PASS' if ok else 'FAIL'} memory beyond the device: K'={big_k} "
        f"(~{per_sample / MIB:.2f} MiB per sample, limit {limit / 2**30:.1f} GiB): "
        f"ga({b}, {big_k}) "
        + (
            f"trained, peak {ga_big['peak'] / 2**30:.2f} GiB"
            if ga_big.get("trained")
            else f"failed: {ga_big.get('error')}"
        )
        + f"; plain({big_k * b}) "
        + (
            f"could not train: {plain_big.get('error')}"
            if not plain_big.get("trained")
            else f"trained too (peak {plain_big['peak'] / 2**30:.2f} GiB): K' too small"
        )
    )
    return lines, record


# ----------------------------------------------------------------------------------- speed


def speed(quick: bool) -> Tuple[List[str], Dict]:
    import ga_tfx.keras3 as ga3

    import jax
    import keras

    from benchmarks.keras3_bound import JaxBoundSlot
    from benchmarks.stats import paired_ratios, spread

    size = _sizes(quick)["speed"]
    b, k, steps, rounds = size["b"], size["k"], size["steps"], size["rounds"]
    n = b * steps
    x, y = _images(n, size["shape"])

    def model():
        _seed(1)
        bn = ga3.AccumBatchNormalization
        return conv_net(size["shape"], size["channels"], lambda n: bn(name=n), activation="relu")

    def plain():
        _seed(1)
        bn = keras.layers.BatchNormalization
        return conv_net(size["shape"], size["channels"], lambda n: bn(name=n), activation="relu")

    def fit_slot(m, batch):
        def run():
            m.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
            jax.block_until_ready([v.value for v in m.trainable_variables])

        return run

    ours = ga3.wrap_model(model(), k)
    ours.compile(optimizer=_sgd(), loss=_loss())
    base = plain()
    base.compile(optimizer=_sgd(), loss=_loss())
    builtin = plain()
    builtin.compile(optimizer=_sgd(gradient_accumulation_steps=k), loss=_loss())
    bound = JaxBoundSlot(keras, None, plain(), x, y, b)
    slots = {
        "ga": fit_slot(ours, b),
        "plain_b": fit_slot(base, b),
        "builtin": fit_slot(builtin, b),
        "bound": bound._run,  # its epoch without benchmarks.builders' TensorFlow timer
    }
    for run in slots.values():
        run()  # compiles
    seconds: Dict[str, List[float]] = {name: [] for name in slots}
    order = list(slots)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            slots[name]()
            seconds[name].append(time.perf_counter() - start)
    rates = {name: spread(n / s for s in ts) for name, ts in seconds.items()}
    lines = [
        f"INFO speed: samples/s (wall, median of {rounds} epochs of {n}; conv net + BN on "
        f"{size['shape']}, b={b}, K={k}): "
        + ", ".join(f"{name} {rates[name]['median']:.0f}" for name in slots)
    ]
    ratios = {}
    for den, what in (
        ("plain_b", f"plain Keras 3 at {b}"),
        ("builtin", f"Keras 3 gradient_accumulation_steps={k}"),
        ("bound", "the bound"),
    ):
        ratio = spread(paired_ratios(seconds["ga"], seconds[den]))
        ratios[den] = ratio
        lines.append(
            f"INFO speed: ga / {what}: {ratio['median']:.2f} [{ratio['q1']:.2f}, "
            f"{ratio['q3']:.2f}] (paired, {rounds} rounds)"
        )
    return lines, {"seconds": seconds, "rates": rates, "ratios": ratios, "samples": n}


# ------------------------------------------------------------------------------------- oom


def oom(quick: bool) -> List[str]:
    """The JAX front-end's out-of-memory replay, where it has one. ``oom_recovery=True`` is
    ``AccumulationConfig``'s default, so ``wrap_model`` taking it says nothing: the check reads
    whether the JAX step's modules handle the device's out-of-memory error at all."""
    from ga_tfx.keras3 import jax_model, jax_step

    import inspect

    source = inspect.getsource(jax_model) + inspect.getsource(jax_step)
    if not any(word in source for word in ("RESOURCE_EXHAUSTED", "oom_recovery", "out of memory")):
        return [
            "SKIP oom: not available on Keras 3 JAX yet (docs/keras3.md, 'What differs': no "
            "out-of-memory replay on Keras 3; ga_tfx/keras3/jax_model.py and jax_step.py catch "
            "no out-of-memory error, and oom_recovery=True, the default, is accepted there)"
        ]
    return [
        "SKIP oom: ga_tfx/keras3's JAX step now mentions out-of-memory errors, but this check's "
        "real out-of-memory run is not written yet: add it (benchmarks/device_check.py's oom "
        "section is the model: a child with a limited device, XLA_PYTHON_CLIENT_MEM_FRACTION)"
    ]


# ------------------------------------------------------------------------------------ main


def device_name() -> str:
    import jax

    device = jax.devices()[0]
    if device.platform == "cpu":
        return f"CPU: {platform.machine()}, {os.cpu_count()} cores (no GPU; jax {jax.__version__})"
    return f"{device.platform.upper()}: {device.device_kind} (jax {jax.__version__})"


def _commit(given: Optional[str]) -> str:
    if given:
        return given
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root
        )
        return done.stdout.strip() or "unknown (no git here; pass --commit)"
    except OSError:
        return "unknown (no git here; pass --commit)"


def _write(path: str, report: Dict) -> None:
    with open(path, "w") as f:
        f.write(
            "# ga-tfx on one device, Keras 3 on JAX\n\n"
            f"Made by `{report['command']}` at commit {report['commit']}, on "
            f"{report['device']}; keras {report['keras']}, jax {report['jax']}.\n\n```\n"
        )
        f.write("\n".join(report["lines"]) + "\n```\n")
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(report, f, indent=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, CPU (the test)")
    parser.add_argument(
        "--output", default="benchmarks/DEVICE_JAX.md", help="the report (and its .json)"
    )
    parser.add_argument("--commit", default=None, help="the commit measured (default: git)")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="these sections")
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        kind, b, k = args.memory_child
        _memory_child(kind, int(b), int(k), args.quick)
        return 0
    import jax
    import keras

    start = time.monotonic()
    command = "python -m benchmarks.device_check_jax" + (" --quick" if args.quick else "")
    report: Dict = {
        "command": command,
        "commit": _commit(args.commit),
        "device": device_name(),
        "devices": [str(d) for d in jax.devices()],
        "keras": keras.__version__,
        "jax": jax.__version__,
        "quick": args.quick,
        "lines": [],
        "sections": {},
    }
    lines: List[str] = report["lines"]

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    say(f"device: {report['device']}")
    for name in SECTIONS:
        if args.only and name not in args.only:
            continue
        began = time.monotonic()
        try:
            found = {"exactness": exactness, "memory": memory, "speed": speed, "oom": oom}[name](
                args.quick
            )
        except Exception as error:  # noqa: BLE001  (a section that breaks is a FAIL line)
            found = [f"FAIL {name}: {type(error).__name__}: {str(error).splitlines()[0][:300]}"]
        section_lines, record = found if isinstance(found, tuple) else (found, {})
        for line in section_lines:
            say(line)
        report["sections"][name] = dict(
            record, lines=section_lines, seconds=time.monotonic() - began
        )
    imported = "tensorflow" in sys.modules
    say(
        f"{'FAIL' if imported else 'PASS'} imports: TensorFlow "
        + ("was imported" if imported else "not imported (sys.modules)")
    )
    say(f"took {time.monotonic() - start:.0f} s")
    report["seconds"] = time.monotonic() - start
    if args.output:
        _write(args.output, report)
    return 1 if any(line.startswith("FAIL") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
