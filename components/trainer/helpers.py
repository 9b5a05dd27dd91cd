"""Small helpers of the ga-tfx run_fn: strategy, data, model, logging and export."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras, tf

import contextlib
import time

import tensorflow_transform as tft
from tfx.components.util import udf_utils
from tfx.utils import import_utils, io_utils
from tfx_bsl.public import tfxio
from tensorflow_metadata.proto.v0 import schema_pb2 as tfmd_schema_pb2

MODEL_FN_NAMES = ("build_model", "build_keras_model")


# ---------------------------------------------------------------------- user module
def load_build_model(exec_properties=None, dotted_path=None):
    """The user's ``build_model(hparams)`` (or ``build_keras_model``).

    From the component's module file / packaged module path (``exec_properties``), or from a
    dotted ``"package.module.function"`` / ``"package.module"`` path (stock Trainer route).
    Raises ``ValueError`` when the module defines neither name.
    """
    errors = []
    for name in MODEL_FN_NAMES:
        try:
            if dotted_path is not None:
                module, _, attr = dotted_path.rpartition(".")
                if attr in MODEL_FN_NAMES:
                    return import_utils.import_func_from_module(module, attr)
                return import_utils.import_func_from_module(dotted_path, name)
            return udf_utils.get_fn(exec_properties, name)
        except (AttributeError, ImportError) as error:
            errors.append(f"{name}: {error}")
    where = dotted_path or exec_properties.get("module_file") or exec_properties.get(
        "module_path")
    raise ValueError(f"The model module {where!r} defines none of {MODEL_FN_NAMES} "
                     f"({'; '.join(errors)}).")


# ---------------------------------------------------------------------- distribution
def make_strategy(choice):
    """``"none"``: default strategy; ``"mirrored"``: all GPUs, else all logical CPUs;
    ``"auto"``: mirrored when more than one GPU is visible, else none."""
    gpus = tf.config.list_logical_devices("GPU")
    if choice == "mirrored":
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if choice == "auto" and len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


@contextlib.contextmanager
def mixed_precision_policy(name):
    """Keras' global dtype policy set to ``name`` inside the block, restored after."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


# ---------------------------------------------------------------------- data
def schema_and_transform(fn_args):
    """(schema of the training examples, TFTransformOutput or None)."""
    if fn_args.transform_graph_path:
        transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
        return transform_output.transformed_metadata.schema, transform_output
    if not fn_args.schema_path:
        raise ValueError("The trainer needs a transform_graph or a schema input.")
    schema = io_utils.parse_pbtxt_file(fn_args.schema_path, tfmd_schema_pb2.Schema())
    return schema, None


def micro_batches(fn_args, files, settings, schema, shuffle):
    """An endless dataset of (features, label) micro-batches of ``micro_batch_size``.

    The examples are repeated before batching, so every micro-batch is full and consecutive
    micro-batches are consecutive examples: ``K`` micro-batches of ``b`` hold exactly the
    examples of one batch of ``K * b``.
    """
    options = tfxio.TensorFlowDatasetOptions(
        batch_size=settings.micro_batch_size, label_key=settings.label_key, shuffle=shuffle,
        num_epochs=None, sloppy_ordering=False)
    return fn_args.data_accessor.tf_dataset_factory(files, options, schema)


# ---------------------------------------------------------------------- model
def accumulation_model(build_model, hparams, settings):
    """``build_model(hparams)`` (compiled), BN replaced if asked, wrapped, compiled again.

    The user's model must be compiled; its optimizer, losses and metrics compile the
    accumulation model (the original model is only a graph of layers afterwards).
    """
    model = build_model(hparams)
    if not isinstance(model, keras.Model) or model.optimizer is None:
        raise ValueError("build_model(hparams) must return a compiled tf.keras Model, got "
                         f"{model!r}.")
    compile_args = model._get_compile_args()  # tf-keras 2.16: what clone_and_build uses
    if settings.replace_batchnorm:
        model = ga_tfx.replace_batchnorm_layers(model, settings.accum_steps)
    wrapped = ga_tfx.wrap_model(model, accum_steps=settings.accum_steps,
                                partial_window=settings.partial_window,
                                agc_clip_factor=settings.agc_clip_factor)
    wrapped.compile(**compile_args)
    return wrapped


# ---------------------------------------------------------------------- logging
class AccumulationLogger(keras.callbacks.Callback):
    """TensorBoard scalars per optimizer update (one train-function call = one window).

    Under ``ga_tfx/``: ``effective_batch_size``, ``updates`` (``optimizer.iterations``),
    ``samples_per_second`` (wall time of the window, host side) and ``loss_per_update``
    (the mean loss of the window's samples, recovered from Keras' running epoch mean, which
    is weighted by samples: exact as all micro-batches are full).
    """

    def __init__(self, log_dir, settings):
        super().__init__()
        self._log_dir = log_dir
        self._micro = settings.micro_batch_size
        self._effective = settings.effective_batch_size
        self._writer = None

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(self._log_dir)

    def on_epoch_begin(self, epoch, logs=None):
        self._seen, self._loss_total, self._time = 0, 0.0, time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        seen = batch + 1  # micro-batches so far this epoch (batch is the window's last one)
        now, window = time.perf_counter(), seen - self._seen
        loss_total = float(logs["loss"]) * seen
        step = int(self.model.optimizer.iterations.numpy())
        with self._writer.as_default(step=step):
            tf.summary.scalar("ga_tfx/effective_batch_size", self._effective)
            tf.summary.scalar("ga_tfx/updates", step)
            tf.summary.scalar("ga_tfx/samples_per_second",
                              window * self._micro / max(now - self._time, 1e-9))
            tf.summary.scalar("ga_tfx/loss_per_update",
                              (loss_total - self._loss_total) / window)
        self._seen, self._loss_total, self._time = seen, loss_total, now

    def on_epoch_end(self, epoch, logs=None):
        self._writer.flush()  # a crash in a later epoch keeps this epoch's scalars

    def on_train_end(self, logs=None):
        self._writer.flush()
        self._writer.close()


# ---------------------------------------------------------------------- export
def export_serving_model(model, serving_model_dir, transform_output, schema, raw_label_key):
    """Saves ``model`` (a plain Keras model) with the penguin-style signatures.

    ``serving_default``: serialized raw tf.Examples (no label) -> transform -> model outputs.
    ``transform_features``: serialized raw tf.Examples -> transformed features (Evaluator).
    Without a transform graph both parse with ``schema`` and apply no transformation.
    """
    if transform_output is not None:
        model.tft_layer = transform_output.transform_features_layer()
        raw_spec = transform_output.raw_feature_spec()
        transform = model.tft_layer
    else:
        from tensorflow_transform.tf_metadata import schema_utils
        raw_spec = schema_utils.schema_as_feature_spec(schema).feature_spec
        transform = dict
    serving_spec = {k: v for k, v in raw_spec.items() if k != raw_label_key}
    examples = tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")

    @tf.function(input_signature=[examples])
    def serve_tf_examples_fn(serialized_tf_examples):
        features = transform(tf.io.parse_example(serialized_tf_examples, serving_spec))
        return model(features)

    @tf.function(input_signature=[examples])
    def transform_features_fn(serialized_tf_examples):
        return transform(tf.io.parse_example(serialized_tf_examples, raw_spec))

    signatures = {
        "serving_default": serve_tf_examples_fn.get_concrete_function(),
        "transform_features": transform_features_fn.get_concrete_function(),
    }
    # Keras SavedModel (keras_metadata.pb): also loadable by keras.models.load_model.
    model.save(serving_model_dir, save_format="tf", signatures=signatures)
