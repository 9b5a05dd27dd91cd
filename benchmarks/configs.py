"""Benchmark declarations: the data, the conv net and the configurations.

Import-light (numpy only): the Keras 2 and Keras 3 processes both read it. Every throughput
and memory configuration trains the same conv net with BatchNormalization on the same synthetic
data with ``SGD(lr=0.01, momentum=0.9)``; they differ in the batch ``fit`` sees, in how the
gradients of ``K`` micro-batches are accumulated, in XLA, and in the process that measures
them. How a configuration is built is :mod:`benchmarks.builders`.
"""

from dataclasses import dataclass

import numpy as np

from benchmarks.frameworks import KERAS2, KERAS3

DATA_SEED = 0
MODEL_SEED = 1234
INPUT_SHAPE = (32, 32, 3)
CLASSES = 10
CONV_CHANNELS = (16, 32, 32)
# --model masked_seq: token sequences of SEQ_LEN padded with 0 (Embedding(mask_zero=True)), a
# GRU and a per-token Dense(CLASSES); each micro-batch's loss divides by its valid tokens.
MODELS = ("conv", "masked_seq")
SEQ_LEN = 32
VOCAB = 1000
EMBED_DIM = 32
GRU_UNITS = 64
LEARNING_RATE = 0.01
MOMENTUM = 0.9
# Config.execution_windows: all the windows of an epoch in one call of the train function, as
# the bound runs an epoch in one call.
EPOCH_WINDOWS = -1

# Measuring processes ("hosts"). The main process runs Keras 2; Keras 3 needs its own process,
# and its ga_tfx partner runs in a Keras 2 subprocess so that both sides of that pair pay the
# same per-process costs.
MAIN = "main"
KERAS3_HOST = "keras3"
KERAS2_SUB = "keras2_sub"
MIRRORED_HOST = "keras2_2cpu"  # a Keras 2 process with 2 logical CPU devices (2 replicas)
HOST_FRAMEWORK = {MAIN: KERAS2, KERAS3_HOST: KERAS3, KERAS2_SUB: KERAS2, MIRRORED_HOST: KERAS2}
HOST_LOGICAL_CPUS = {MIRRORED_HOST: 2}  # logical CPU devices per host (default 1)
HOST_LABEL = {
    MAIN: "main",
    KERAS3_HOST: "Keras 3 subprocess",
    KERAS2_SUB: "Keras 2 subprocess",
    MIRRORED_HOST: "Keras 2 subprocess, 2 logical CPUs",
}

# model.fit, the summed fwd+bwd graph (its micro-batches sliced from one tensor, or read from a
# tf.data iterator as fit and the loop read them), ga_tfx.TrainingLoop
KINDS = ("fit", "bound", "bound_data", "bound_fit_data", "loop")
BOUND_KINDS = ("bound", "bound_data", "bound_fit_data")
WRAPPERS = ("none", "ga_tfx", "anchor", "keras3_ga")
BN_LAYERS = ("keras", "ga_tfx", "anchor")


@dataclass(frozen=True)
class Config:
    """One measured configuration.

    Attributes:
      name: key in reports and on command lines.
      label: the report's row label.
      host: the process that measures it (``MAIN``, ``KERAS3_HOST`` or ``KERAS2_SUB``).
      kind: ``"fit"`` (``model.fit`` epochs), ``"bound"`` (one ``tf.function`` per epoch
        summing the gradients of all micro-batches: no optimizer, no host loop),
        ``"bound_data"`` (the same, micro-batches read from a ``tf.data`` iterator),
        ``"bound_fit_data"`` (the same, read from the iterator of the data handler that ``fit``
        builds for ``(x, y)``, made before the timed call as ``fit`` makes it) or ``"loop"``
        (``ga_tfx.TrainingLoop``, the custom-loop runner, ``run`` one epoch at a time).
      wrapper: ``"none"`` (plain Keras), ``"ga_tfx"`` (``ga_tfx.wrap_model``), ``"anchor"``
        (gradient-accumulator's ``GradientAccumulateModel``) or ``"keras3_ga"`` (Keras 3's
        optimizer ``gradient_accumulation_steps``).
      big_batch: ``fit`` at ``K·b`` instead of ``b``.
      jit: ``compile(jit_compile=True)`` (``tf.function(jit_compile=True)`` for the bound).
      bn: the BatchNormalization layer: Keras', ga_tfx's or the anchor's AccumBatchNormalization.
      execution_windows: ``compile(steps_per_execution=execution_windows·K)``: that many
        windows of ``K`` micro-batches per call of the train function (for plain Keras: that
        many ``K``-step executions); ``EPOCH_WINDOWS``: an epoch's micro-batches; 0:
        ``steps_per_execution`` unset (plain Keras: 1 step per call; ga_tfx: one window per
        call).
      replicas: replicas of a ``"loop"`` configuration (``MirroredStrategy`` over that many
        logical CPU devices of its host; 1: no strategy).
      noise_scale: ga_tfx with ``log_noise_scale=True`` (the gradient noise scale estimated
        every window).
    """

    name: str
    label: str
    host: str = MAIN
    kind: str = "fit"
    wrapper: str = "none"
    big_batch: bool = False
    jit: bool = False
    bn: str = "keras"
    execution_windows: int = 0
    replicas: int = 1
    noise_scale: bool = False

    def __post_init__(self):
        for field, value, allowed in (
            ("host", self.host, tuple(HOST_FRAMEWORK)),
            ("kind", self.kind, KINDS),
            ("wrapper", self.wrapper, WRAPPERS),
            ("bn", self.bn, BN_LAYERS),
        ):
            if value not in allowed:
                raise ValueError(f"Config {self.name!r}: {field}={value!r}; allowed: {allowed}")
        if self.replicas != 1 and (self.kind != "loop" or self.replicas > self.logical_cpus):
            raise ValueError(
                f"Config {self.name!r}: replicas={self.replicas}; allowed: 1, or up to the "
                f"host's {self.logical_cpus} logical CPUs for a 'loop' configuration"
            )

    @property
    def framework(self) -> str:
        """``"keras2"`` or ``"keras3"``: the Keras of the configuration's process."""
        return HOST_FRAMEWORK[self.host]

    @property
    def logical_cpus(self) -> int:
        """Logical CPU devices of the configuration's process."""
        return HOST_LOGICAL_CPUS.get(self.host, 1)

    def batch_size(self, b: int, k: int) -> int:
        """The ``batch_size`` that ``fit`` gets: ``K·b`` for big-batch training, else ``b``."""
        return b * k if self.big_batch else b

    def steps_per_execution(self, n: int, b: int, k: int) -> int:
        """The ``steps_per_execution`` that ``compile`` gets for an epoch of ``n`` samples (1:
        Keras' default, which ga_tfx reads as one window)."""
        if self.execution_windows == EPOCH_WINDOWS:
            return n // b
        return k * self.execution_windows if self.execution_windows else 1

    def updates_per_epoch(self, n: int, b: int, k: int) -> int:
        """Optimizer updates in one epoch of ``n`` samples (0 for the bound: no optimizer)."""
        if self.kind in BOUND_KINDS:
            return 0
        accumulates = self.wrapper != "none" or self.big_batch or self.kind == "loop"
        return n // (b * k) if accumulates else n // b


def _declare():
    rows = []
    for jit in (False, True):
        x, xla = ("_xla", ", XLA") if jit else ("", "")
        rows += [
            Config("plain_b" + x, f"plain Keras @ b{xla}", jit=jit),
            Config(
                "ga_tfx" + x,
                f"ga_tfx @ (b, K){xla} (defaults: calls paced, no callback watches batches)",
                wrapper="ga_tfx",
                jit=jit,
            ),
            Config("plain_Kb" + x, f"plain Keras @ K·b{xla}", big_batch=True, jit=jit),
            Config("anchor" + x, f"gradient-accumulator @ (b, K){xla}", wrapper="anchor", jit=jit),
            Config(
                "bound" + x,
                f"bound: fwd+bwd of all micro-batches in one graph{xla}",
                kind="bound",
                jit=jit,
            ),
            Config(
                "keras3_ga" + x,
                f"Keras 3 gradient_accumulation_steps @ (b, K){xla} [own process]",
                host=KERAS3_HOST,
                wrapper="keras3_ga",
                jit=jit,
            ),
            Config(
                "ga_tfx_sub" + x,
                f"ga_tfx @ (b, K){xla} [own process: Keras 3's partner]",
                host=KERAS2_SUB,
                wrapper="ga_tfx",
                jit=jit,
            ),
        ]
    rows += [
        Config(
            "bound_data",
            "bound, its micro-batches from a tf.data iterator (as fit and the loop get them)",
            kind="bound_data",
        ),
        Config(
            "bound_fit_data",
            "bound, its micro-batches from fit's own data pipeline for (x, y)",
            kind="bound_fit_data",
        ),
        Config("loop_1dev", "ga_tfx.TrainingLoop @ (b, K), 1 device", kind="loop"),
        Config(
            "loop_1dev_xla", "ga_tfx.TrainingLoop @ (b, K), 1 device, XLA", kind="loop", jit=True
        ),
        Config(
            "loop_2rep",
            "ga_tfx.TrainingLoop @ (b, K), MirroredStrategy 2 replicas (2 logical CPUs) "
            "[own process]",
            kind="loop",
            host=MIRRORED_HOST,
            replicas=2,
        ),
        Config("keras3_plain_b", "Keras 3 plain @ b [own process; context]", host=KERAS3_HOST),
        Config("plain_b_spe", "plain Keras @ b, steps_per_execution=K", execution_windows=1),
        Config(
            "plain_b_spe_epoch",
            "plain Keras @ b, steps_per_execution = an epoch's micro-batches",
            execution_windows=EPOCH_WINDOWS,
        ),
        Config(
            "ga_tfx_spe",
            "ga_tfx @ (b, K), steps_per_execution=K: one window per call, not paced",
            wrapper="ga_tfx",
            execution_windows=1,
        ),
        Config(
            "ga_tfx_spe_epoch",
            "ga_tfx @ (b, K), steps_per_execution = an epoch's micro-batches",
            wrapper="ga_tfx",
            execution_windows=EPOCH_WINDOWS,
        ),
        Config(
            "ga_tfx_noise",
            "ga_tfx @ (b, K), log_noise_scale=True (calls paced)",
            wrapper="ga_tfx",
            noise_scale=True,
        ),
        Config(
            "ga_tfx_accumbn",
            "ga_tfx @ (b, K) + ga_tfx AccumBatchNormalization",
            wrapper="ga_tfx",
            bn="ga_tfx",
        ),
        Config(
            "anchor_accumbn",
            "gradient-accumulator @ (b, K) + its AccumBatchNormalization",
            wrapper="anchor",
            bn="anchor",
        ),
    ]
    return {c.name: c for c in rows}


CONFIGS = _declare()
BASELINE = "plain_b"  # every in-round ratio "vs plain" is against this configuration
# Measured unless --configs says otherwise: all but the two AccumBatchNormalization variants.
DEFAULT_CONFIGS = tuple(
    name for name in CONFIGS if name not in ("ga_tfx_accumbn", "anchor_accumbn")
)

# Configurations measured back to back in every round (their order alternating), so that their
# ratio is taken between two neighbouring epochs: each cross-process pair.
ADJACENT = (
    ("keras3_ga", "ga_tfx_sub"),
    ("keras3_ga_xla", "ga_tfx_sub_xla"),
    ("loop_2rep", "loop_1dev"),
    ("ga_tfx_noise", "ga_tfx"),
)

# The comparisons the report leads with: (numerator, denominator, what it answers).
PAIRS = (
    (
        "ga_tfx",
        "bound_fit_data",
        "ga_tfx (calls paced: the default when no callback watches batches) vs the bound fed by "
        "fit's data pipeline (goal ≥ 0.97)",
    ),
    (
        "ga_tfx_spe",
        "bound_fit_data",
        "ga_tfx, one window per call (steps_per_execution=K, or a callback that watches "
        "batches), vs the bound fed by fit's data pipeline (goal ≥ 0.97)",
    ),
    (
        "ga_tfx_spe_epoch",
        "bound_fit_data",
        "ga_tfx, steps_per_execution = an epoch, vs the bound fed by fit's data pipeline "
        "(goal ≥ 0.97)",
    ),
    ("ga_tfx", "bound", "ga_tfx vs the bound, micro-batches sliced from a tensor (no input)"),
    (
        "ga_tfx_spe_epoch",
        "bound",
        "ga_tfx, steps_per_execution = an epoch, vs the bound, micro-batches sliced (no input)",
    ),
    (
        "plain_b_spe_epoch",
        "bound",
        "plain Keras @ b, steps_per_execution = an epoch, vs the bound, micro-batches sliced",
    ),
    ("ga_tfx", "plain_b", "ga_tfx vs plain Keras @ b"),
    ("ga_tfx", "anchor", "ga_tfx vs gradient-accumulator (goal > 1)"),
    ("ga_tfx_sub", "keras3_ga", "ga_tfx vs Keras 3 built-in, both in own processes (goal > 1)"),
    ("ga_tfx", "plain_Kb", "ga_tfx vs plain Keras @ K·b"),
    ("bound", "plain_b", "bound vs plain Keras @ b"),
    ("ga_tfx", "bound_data", "ga_tfx vs the bound with micro-batches from a tf.data iterator"),
    ("bound_data", "bound", "the bound: tf.data iterator vs sliced tensor"),
    ("bound_fit_data", "bound", "the bound: fit's data pipeline vs sliced tensor"),
    ("ga_tfx_spe", "plain_b_spe", "ga_tfx vs plain Keras @ b, both steps_per_execution=K"),
    (
        "ga_tfx_spe_epoch",
        "plain_b_spe_epoch",
        "ga_tfx vs plain Keras @ b, both steps_per_execution = an epoch",
    ),
    ("ga_tfx", "ga_tfx_spe", "ga_tfx: paced calls (the default) vs one window per call"),
    (
        "ga_tfx_noise",
        "ga_tfx",
        "ga_tfx: the noise scale measured every window vs off (goal ≥ 0.97)",
    ),
    ("ga_tfx_spe_epoch", "ga_tfx", "ga_tfx: steps_per_execution = an epoch vs paced calls"),
    ("ga_tfx_xla", "ga_tfx", "ga_tfx: XLA vs not"),
    ("plain_b_xla", "plain_b", "plain Keras @ b: XLA vs not"),
    ("plain_Kb_xla", "plain_Kb", "plain Keras @ K·b: XLA vs not"),
    ("anchor_xla", "anchor", "gradient-accumulator: XLA vs not"),
    ("bound_xla", "bound", "bound: XLA vs not"),
    ("keras3_ga_xla", "keras3_ga", "Keras 3 built-in: XLA vs not"),
    ("ga_tfx_xla", "bound_xla", "ga_tfx vs the bound, both XLA"),
    ("ga_tfx_sub_xla", "keras3_ga_xla", "ga_tfx vs Keras 3 built-in, both XLA, own processes"),
    ("loop_1dev", "ga_tfx", "TrainingLoop (1 device) vs ga_tfx fit"),
    ("loop_1dev", "bound", "TrainingLoop (1 device) vs the bound"),
    ("loop_2rep", "loop_1dev", "TrainingLoop: 2 replicas vs 1 device (same 2 cores)"),
    ("loop_1dev_xla", "loop_1dev", "TrainingLoop: XLA vs not"),
    ("loop_1dev_xla", "bound_xla", "TrainingLoop vs the bound, both XLA"),
    ("keras3_ga", "keras3_plain_b", "Keras 3: built-in accumulation vs plain @ b"),
    ("ga_tfx_sub", "ga_tfx", "ga_tfx: own process vs main process (process effect)"),
)


def make_data(n: int, seed: int = DATA_SEED, model: str = "conv"):
    """``n`` synthetic samples. ``"conv"``: x float32 ``(n, 32, 32, 3)`` ~ N(0, 1), y int64 in
    [0, 10). ``"masked_seq"``: x int32 ``(n, SEQ_LEN)`` token ids in [1, VOCAB) for the first
    ``length ~ U{1..SEQ_LEN}`` positions of each row, 0 (padding, masked) after; y int64
    ``(n, SEQ_LEN)`` in [0, 10) per token."""
    rng = np.random.default_rng(seed)
    if model == "masked_seq":
        lengths = rng.integers(1, SEQ_LEN + 1, size=(n, 1))
        tokens = rng.integers(1, VOCAB, size=(n, SEQ_LEN))
        x = np.where(np.arange(SEQ_LEN) < lengths, tokens, 0).astype("int32")
        y = rng.integers(0, CLASSES, size=(n, SEQ_LEN)).astype("int64")
        return x, y
    x = rng.normal(size=(n,) + INPUT_SHAPE).astype("float32")
    y = rng.integers(0, CLASSES, size=n).astype("int64")
    return x, y


def conv_net(keras, bn=True, bn_factory=None, seed=MODEL_SEED, name="convnet", first_layer=None):
    """Conv2D(-BN)-ReLU x3 (max-pooling between), global average pooling, Dense(10) logits.

    ``keras`` is the Keras module to build with (2 or 3); ``bn_factory(name)`` makes the BN
    layers (Keras' BatchNormalization by default); ``first_layer`` (a layer) is applied to the
    input first, e.g. the XLA probe's.
    """
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(INPUT_SHAPE, name="image")
    h = first_layer(inputs) if first_layer is not None else inputs
    for i, channels in enumerate(CONV_CHANNELS):
        h = keras.layers.Conv2D(channels, 3, padding="same", use_bias=not bn, name=f"conv{i}")(h)
        if bn:
            layer = (
                bn_factory(f"bn{i}")
                if bn_factory
                else keras.layers.BatchNormalization(name=f"bn{i}")
            )
            h = layer(h)
        h = keras.layers.ReLU(name=f"relu{i}")(h)
        if i < len(CONV_CHANNELS) - 1:
            h = keras.layers.MaxPool2D(name=f"pool{i}")(h)
    h = keras.layers.GlobalAveragePooling2D(name="gap")(h)
    outputs = keras.layers.Dense(CLASSES, name="logits")(h)
    return keras.Model(inputs, outputs, name=name)


def masked_seq_net(keras, seed=MODEL_SEED, name="masked_seq", first_layer=None):
    """Embedding(VOCAB, EMBED_DIM, mask_zero=True), GRU(GRU_UNITS, return_sequences=True),
    Dense(10) logits per token: the mask of the padding reaches the loss, which divides by the
    valid tokens. ``first_layer`` is applied to the embeddings."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((SEQ_LEN,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(VOCAB, EMBED_DIM, mask_zero=True, name="embed")(inputs)
    h = first_layer(h) if first_layer is not None else h
    h = keras.layers.GRU(GRU_UNITS, return_sequences=True, name="gru")(h)
    outputs = keras.layers.Dense(CLASSES, name="logits")(h)
    return keras.Model(inputs, outputs, name=name)


def model_net(keras, model="conv", **kwargs):
    """The benchmark's network ``model`` (one of :data:`MODELS`); ``kwargs`` go to
    :func:`conv_net` (``bn_factory``, ``first_layer``) or :func:`masked_seq_net`
    (``first_layer``)."""
    if model == "masked_seq":
        if kwargs.pop("bn_factory", None) is not None:
            raise ValueError("masked_seq_net has no BatchNormalization to replace")
        return masked_seq_net(keras, **kwargs)
    return conv_net(keras, **kwargs)


def loss_fn(keras):
    """Mean sparse categorical cross-entropy on logits."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
