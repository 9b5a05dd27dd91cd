"""Building a configuration into something that trains one timed epoch.

:func:`build` returns a slot: ``slot.run_epoch()`` trains one epoch over the slot's data and
returns its :class:`Timing` (wall-clock and CPU seconds of this process, peak tensor
memory). The caller must be
running the configuration's framework (:func:`benchmarks.frameworks.load`).
"""

import gc
from dataclasses import dataclass
from typing import Optional

from benchmarks import frameworks
from benchmarks.configs import BOUND_KINDS, LEARNING_RATE, MOMENTUM, Config, loss_fn, model_net
from benchmarks.memory import clocks, tensor_peak_mib, tensor_peak_start


@dataclass(frozen=True)
class Timing:
    """One epoch: ``wall`` = seconds of wall clock (``time.perf_counter``), ``cpu`` = CPU
    seconds of the whole process, all threads (``time.process_time``), ``tensor_peak_mib`` =
    the epoch's peak tensor memory above what was allocated before it (:mod:`benchmarks.memory`;
    None where the allocator keeps no statistics)."""

    wall: float
    cpu: float
    tensor_peak_mib: Optional[float] = None


def timed(tf, fn, timer=None):
    """Run ``fn()`` and return its Timing: wall and CPU seconds around the call, or those the
    ``timer`` callback took inside it (``timer.seconds``), and the tensor peak of the call."""
    gc.collect()
    memory = tensor_peak_start(tf)
    start = clocks()
    fn()
    end = clocks()
    wall, cpu = timer.seconds if timer is not None else (end[0] - start[0], end[1] - start[1])
    return Timing(wall, cpu, tensor_peak_mib(tf, memory))


def _epoch_timer_class(keras):
    class EpochTimer(keras.callbacks.Callback):
        """Wall and CPU seconds from epoch begin to epoch end (excludes fit's data set-up)."""

        def on_epoch_begin(self, epoch, logs=None):
            self.start = clocks()

        def on_epoch_end(self, epoch, logs=None):
            end = clocks()
            self.seconds = (end[0] - self.start[0], end[1] - self.start[1])

    return EpochTimer


class FitSlot:
    """``model.fit(x, y, batch_size, epochs=1, shuffle=False)`` per epoch, timed by a callback."""

    def __init__(self, keras, tf, model, x, y, batch_size):
        self.tf, self.model, self.x, self.y, self.batch_size = tf, model, x, y, batch_size
        self.timer = _epoch_timer_class(keras)()

    def run_epoch(self) -> Timing:
        fit = lambda: self.model.fit(
            self.x,
            self.y,
            batch_size=self.batch_size,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[self.timer],
        )
        return timed(self.tf, fit, self.timer)


class BoundSlot:
    """The bound: one ``tf.function`` call per epoch that sums the gradients of the mean loss of
    every micro-batch (training-mode forward and backward passes, BN included) in a graph loop.
    No optimizer, no host loop, no accumulation bookkeeping beyond the sum itself. One
    micro-batch is in flight at a time (``parallel_iterations=1``), so its memory is that of
    one micro-batch, as for accumulation.

    With ``jit``, XLA compiles each micro-batch's forward and backward pass (the loop and the
    sum stay in the TensorFlow graph). Compiling the whole loop with XLA was about 10x slower on
    these CPUs (XLA:CPU runs a while loop of convolutions slowly), so it would not be a bound.
    """

    def __init__(self, tf, model, loss, x, y, b, jit, feed="bound"):
        self.tf = tf
        n_micro = len(x) // b
        xs = tf.reshape(x, (n_micro, b) + tuple(x.shape[1:]))
        ys = tf.reshape(y, (n_micro, b) + tuple(y.shape[1:]))
        variables = model.trainable_variables
        # feed: "bound" slices each micro-batch from the tensor; "bound_data" reads it from a
        # tf.data iterator (one element per micro-batch, prefetched), made inside the timed
        # call; "bound_fit_data" from the iterator of the data handler fit builds for (x, y)
        # with batch_size=b, shuffle=False, made before the timed call as fit makes it before
        # its first epoch-begin callback.
        from_iterator = feed != "bound"
        if feed == "bound_data":
            dataset = tf.data.Dataset.from_tensor_slices((xs, ys)).prefetch(tf.data.AUTOTUNE)
            self._iterator = lambda: iter(dataset)
        elif feed == "bound_fit_data":
            self._iterator = lambda: _fit_data_iterator(model, x, y, b)

        @tf.function(jit_compile=jit)
        def forward_backward(x_micro, y_micro):
            with tf.GradientTape() as tape:
                value = loss(y_micro, model(x_micro, training=True))
            return tape.gradient(value, variables)

        @tf.function
        def epoch(iterator):
            total = [tf.zeros_like(v) for v in variables]
            for i in tf.range(n_micro):
                # One micro-batch at a time, as accumulation is for: the default (10 loop
                # iterations in flight) keeps several micro-batches' activations alive.
                tf.autograph.experimental.set_loop_options(parallel_iterations=1)
                x_micro, y_micro = next(iterator) if from_iterator else (xs[i], ys[i])
                total = [t + g for t, g in zip(total, forward_backward(x_micro, y_micro))]
            return total

        # The results are ready when the call returns (CPU execution is synchronous);
        # reading one makes sure.
        self._epoch = epoch
        self._feed = feed

    def run_epoch(self) -> Timing:
        if self._feed == "bound":
            return timed(self.tf, lambda: self._epoch(None)[0].numpy())
        if self._feed == "bound_data":
            return timed(self.tf, lambda: self._epoch(self._iterator())[0].numpy())
        iterator = self._iterator()
        return timed(self.tf, lambda: self._epoch(iterator)[0].numpy())

    def gradient_sums(self):
        """One epoch's gradient sums as NumPy arrays (micro-batches sliced from the tensor), in
        the order of the model's trainable variables: what the timed call computes."""
        return [t.numpy() for t in self._epoch(None)]


def _fit_data_iterator(model, x, y, b):
    """The iterator of one epoch of the data handler that Keras 2's ``fit(x, y, batch_size=b,
    shuffle=False)`` builds (tf-keras' own ``data_adapter``, not a copy of its pipeline)."""
    from tf_keras.src.engine import data_adapter

    handler = data_adapter.get_data_handler(
        x=x, y=y, batch_size=b, shuffle=False, epochs=1, model=model
    )
    for _, iterator in handler.enumerate_epochs():
        return iterator


class LoopSlot:
    """``ga_tfx.TrainingLoop`` over ``tf.data`` micro-batches of ``b`` (global: split across the
    replicas), ``run`` one more epoch per call; timed around the call (iterator set-up
    included). ``cfg.jit``: ``TrainingLoop(jit_compile=True)``."""

    def __init__(self, keras, tf, cfg, b, k, x, y, first_layer=None, model="conv"):
        import ga_tfx

        import contextlib

        self.tf = tf
        strategy = None
        if cfg.replicas > 1:
            devices = [f"/cpu:{i}" for i in range(cfg.replicas)]
            strategy = tf.distribute.MirroredStrategy(devices)
        with strategy.scope() if strategy else contextlib.nullcontext():
            net = model_net(keras, model, first_layer=first_layer)
            optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
        self.loop = ga_tfx.TrainingLoop(
            net,
            optimizer,
            loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
            dataset=tf.data.Dataset.from_tensor_slices((x, y)).batch(b),
            accum_steps=k,
            strategy=strategy,
            verbose=False,
            jit_compile=cfg.jit,
        )

    def run_epoch(self) -> Timing:
        # epochs count from the start of training: one more each call
        return timed(self.tf, lambda: self.loop.run(epochs=self.loop.epoch + 1))


def as_tensors(tf, x, y):
    """``(x, y)`` as tensors owned by TensorFlow's allocator (``tf.constant`` may alias numpy
    memory, or not, depending on its alignment), made once per process and shared by all its
    configurations: no epoch copies its data (``fit`` slices the tensors into batches)."""
    return tf.add(tf.constant(x), tf.zeros([], x.dtype)), tf.add(tf.constant(y), 0)


def set_logical_cpus(tf, count: int) -> None:
    """Split the CPU into ``count`` logical devices (before TensorFlow's runtime starts)."""
    if count > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count
        )


def build_model(cfg: Config, b: int, k: int, n: int, first_layer=None, model="conv"):
    """The (uncompiled for the bound, else compiled) Keras model of ``cfg`` for epochs of ``n``
    samples; ``model``: the network (:data:`benchmarks.configs.MODELS`)."""
    keras, _ = frameworks.load(cfg.framework)
    bn_factory = None
    if cfg.bn == "ga_tfx":
        import ga_tfx

        # No K of its own: the ga_tfx wrapper's windows (this configuration's wrapper).
        bn_factory = lambda n: ga_tfx.AccumBatchNormalization(name=n)  # noqa: E731
    elif cfg.bn == "anchor":
        from benchmarks import anchor

        bn_factory = lambda n: anchor.require("AccumBatchNormalization")(  # noqa: E731
            accum_steps=k, name=n
        )
    base = model_net(keras, model, bn_factory=bn_factory, first_layer=first_layer)
    if cfg.kind in BOUND_KINDS:
        return base
    optimizer_kwargs = {}
    if cfg.wrapper == "ga_tfx":
        import ga_tfx

        model = ga_tfx.wrap_model(base, accum_steps=k, log_noise_scale=cfg.noise_scale)
    elif cfg.wrapper == "anchor":
        from benchmarks import anchor

        model = anchor.require("GradientAccumulateModel")(
            accum_steps=k, inputs=base.input, outputs=base.output
        )
    else:
        model = base
        if cfg.wrapper == "keras3_ga":
            optimizer_kwargs["gradient_accumulation_steps"] = k
    model.compile(
        optimizer=keras.optimizers.SGD(
            learning_rate=LEARNING_RATE, momentum=MOMENTUM, **optimizer_kwargs
        ),
        loss=loss_fn(keras),
        jit_compile=cfg.jit,
        steps_per_execution=cfg.steps_per_execution(n, b, k),
    )
    return model


def build(cfg: Config, b: int, k: int, x, y, first_layer=None, model="conv"):
    """A slot training ``cfg`` on ``(x, y)`` (tensors, see :func:`as_tensors`; ``len(x)`` a
    multiple of ``K·b``) at micro-batch ``b`` and ``K`` accumulation steps; not yet run.
    ``model``: the network, ``"conv"`` (conv+BN) or ``"masked_seq"`` (a masked GRU tagger)."""
    keras, tf = frameworks.load(cfg.framework)
    if cfg.kind == "loop":
        return LoopSlot(keras, tf, cfg, b, k, x, y, first_layer=first_layer, model=model)
    model = build_model(cfg, b, k, len(x), first_layer=first_layer, model=model)
    if cfg.kind in BOUND_KINDS:
        return BoundSlot(tf, model, loss_fn(keras), x, y, b, cfg.jit, feed=cfg.kind)
    return FitSlot(keras, tf, model, x, y, cfg.batch_size(b, k))
