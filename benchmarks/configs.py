"""Benchmark data, the conv net and the throughput/memory configurations.

Every configuration trains the same conv net with BatchNormalization on the same synthetic data
with ``SGD(lr=0.01, momentum=0.9)``; they differ in the batch size ``fit`` sees and in how the
gradients of ``K`` micro-batches are accumulated.
"""

import ga_tfx  # first import: selects Keras 2 before TensorFlow is imported

import numpy as np  # noqa: E402

from ga_tfx import keras  # noqa: E402

# The anchor (gradient-accumulator 0.5.2, installed beside ga_tfx): only called, never copied.
# Imported after ga_tfx, so its `tf.keras` is tf-keras (Keras 2) as well.
try:
    import gradient_accumulator as anchor_pkg  # noqa: F401
    from gradient_accumulator import AccumBatchNormalization as AnchorAccumBN
    from gradient_accumulator import GradientAccumulateModel as AnchorModel
    from gradient_accumulator import GradientAccumulateOptimizer as AnchorOptimizer
    from gradient_accumulator.utils import replace_batchnorm_layers as anchor_replace_bn
    ANCHOR_IMPORT_ERROR = None
except Exception as error:  # reported, not hidden
    anchor_pkg = AnchorAccumBN = AnchorModel = AnchorOptimizer = anchor_replace_bn = None
    ANCHOR_IMPORT_ERROR = f"{type(error).__name__}: {error}"

DATA_SEED = 0
MODEL_SEED = 1234
INPUT_SHAPE = (32, 32, 3)
CLASSES = 10
CONV_CHANNELS = (16, 32, 32)

# name -> report label
CONFIGS = {
    "plain_b": "(a) plain Keras @ b",
    "ga_tfx": "(b) ga_tfx @ (b, K)",
    "plain_Kb": "(c) plain Keras @ K·b",
    "anchor": "(d) gradient-accumulator @ (b, K)",
    "plain_b_spe": "(a') plain Keras @ b, steps_per_execution=K",
    "ga_tfx_accumbn": "(b') ga_tfx @ (b, K) + ga_tfx AccumBatchNormalization",
    "anchor_accumbn": "(d') gradient-accumulator @ (b, K) + its AccumBatchNormalization",
}
MAIN_CONFIGS = ("plain_b", "ga_tfx", "plain_Kb", "anchor")


def config_batch_size(name: str, b: int, k: int) -> int:
    """The ``batch_size`` that ``fit`` gets: ``K·b`` for plain big-batch training, else ``b``."""
    return b * k if name == "plain_Kb" else b


def make_data(n: int, seed: int = DATA_SEED):
    """``n`` synthetic samples: x float32 ``(n, 32, 32, 3)`` ~ N(0, 1), y int64 in [0, 10)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n,) + INPUT_SHAPE).astype("float32")
    y = rng.integers(0, CLASSES, size=n).astype("int64")
    return x, y


def conv_net(bn=True, bn_factory=None, seed=MODEL_SEED, name="convnet"):
    """Conv2D(-BN)-ReLU x3 (max-pooling between), global average pooling, Dense(10) logits."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(INPUT_SHAPE, name="image")
    h = inputs
    for i, channels in enumerate(CONV_CHANNELS):
        h = keras.layers.Conv2D(channels, 3, padding="same", use_bias=not bn,
                                name=f"conv{i}")(h)
        if bn:
            layer = bn_factory(f"bn{i}") if bn_factory else keras.layers.BatchNormalization(
                name=f"bn{i}")
            h = layer(h)
        h = keras.layers.ReLU(name=f"relu{i}")(h)
        if i < len(CONV_CHANNELS) - 1:
            h = keras.layers.MaxPool2D(name=f"pool{i}")(h)
    h = keras.layers.GlobalAveragePooling2D(name="gap")(h)
    outputs = keras.layers.Dense(CLASSES, name="logits")(h)
    return keras.Model(inputs, outputs, name=name)


def small_net(seed=MODEL_SEED):
    """The conv net without BatchNormalization (biases on), for the correctness checks."""
    return conv_net(bn=False, seed=seed, name="convnet_nobn")


def loss_fn():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def build_config(name: str, k: int):
    """A compiled model for one throughput/memory configuration (``name`` in ``CONFIGS``)."""
    if name == "ga_tfx_accumbn":
        base = conv_net(bn_factory=lambda n: ga_tfx.AccumBatchNormalization(accum_steps=k, name=n))
    elif name == "anchor_accumbn":
        base = conv_net(bn_factory=lambda n: AnchorAccumBN(accum_steps=k, name=n))
    else:
        base = conv_net()
    compile_kwargs = {}
    if name in ("plain_b", "plain_Kb"):
        model = base
    elif name == "plain_b_spe":
        model = base
        compile_kwargs["steps_per_execution"] = k
    elif name in ("ga_tfx", "ga_tfx_accumbn"):
        model = ga_tfx.wrap_model(base, accum_steps=k)
    elif name in ("anchor", "anchor_accumbn"):
        if AnchorModel is None:
            raise ImportError(ANCHOR_IMPORT_ERROR)
        model = AnchorModel(accum_steps=k, inputs=base.input, outputs=base.output)
    else:
        raise ValueError(f"unknown configuration {name!r}; known: {sorted(CONFIGS)}")
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
                  loss=loss_fn(), **compile_kwargs)
    return model
