"""Small helpers of the ga-tfx run_fn: strategy, data, model, logging and export."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras, tf

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
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
    ``"auto"``: mirrored when more than one GPU is visible, else none; ``"multi_worker"``:
    MultiWorkerMirroredStrategy over the cluster in ``TF_CONFIG`` (each worker's GPUs, else its
    CPU; a single local worker without ``TF_CONFIG``).

    ``"multi_worker"`` must be created before TensorFlow runs any operation in the process
    (collective ops are configured once, at start-up): keep this the first TensorFlow call.
    """
    if choice == "multi_worker":
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as error:
            if "program startup" not in str(error):
                raise
            raise RuntimeError(
                "strategy='multi_worker': MultiWorkerMirroredStrategy must be created before "
                "TensorFlow runs any operation in this process, but something already did "
                "(TensorFlow configures collective ops once, at start-up).") from error
    gpus = tf.config.list_logical_devices("GPU")
    if choice == "mirrored":
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if choice == "auto" and len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def is_chief(strategy=None):
    """Whether this process writes the Trainer's outputs.

    The task comes from the strategy's cluster resolver (MultiWorkerMirroredStrategy), else
    from ``TF_CONFIG``: the ``chief`` task, or worker 0 of a cluster without one (the
    convention of MultiWorkerMirroredStrategy and Keras). True outside a cluster.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task_type, task_id = resolver.task_type, resolver.task_id
    if not task_type:
        return True
    if task_type == "chief":
        return True
    return (task_type == "worker" and not task_id
            and "chief" not in resolver.cluster_spec().as_dict())


def worker_write_dir(path, strategy=None):
    """The directory this process writes ``path``'s content to.

    ``path`` itself on the chief (and outside a cluster). Every other worker gets a new local
    temporary directory (``<tmp>/ga_tfx_worker_*/<basename>``), outside the Trainer's outputs:
    under MultiWorkerMirroredStrategy all workers must still save models and checkpoints
    (saving reads distributed variables, which may run collective ops), as in the Keras
    multi-worker guide, but only the chief's copy is kept. Remove it with
    :func:`remove_worker_dir`.
    """
    if is_chief(strategy):
        return path
    return os.path.join(tempfile.mkdtemp(prefix="ga_tfx_worker_"),
                        os.path.basename(os.path.normpath(path)))


def remove_worker_dir(write_dir, path):
    """Removes what :func:`worker_write_dir` created for ``path`` (nothing on the chief)."""
    if write_dir != path:
        shutil.rmtree(os.path.dirname(write_dir), ignore_errors=True)


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
    examples of one batch of ``K * b``. The order is a function of ``shuffle_seed`` only
    (files are read in order), so ``.skip(n)`` resumes it after ``n`` micro-batches.

    Under ``"multi_worker"`` every worker reads all files in that same order and keeps its
    share of each global micro-batch (``AutoShardPolicy.DATA``): the union of the workers'
    shares is exactly the single-process micro-batch. Keras' default (``AUTO``) would shard
    by file when there are enough files, so the workers' micro-batches would mix different
    files' examples and the run would no longer equal one-process training. Other strategies
    ignore this option.
    """
    if shuffle:
        # The shuffle's seed pair is (global seed, shuffle_seed): whatever ran before in this
        # process (a user's set_random_seed, an earlier Trainer) must not change the order.
        tf.random.set_seed(settings.shuffle_seed)
    options = tfxio.TensorFlowDatasetOptions(
        batch_size=settings.micro_batch_size, label_key=settings.label_key, shuffle=shuffle,
        shuffle_seed=settings.shuffle_seed, num_epochs=None, sloppy_ordering=False)
    dataset = fn_args.data_accessor.tf_dataset_factory(files, options, schema)
    sharding = tf.data.Options()
    sharding.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    return dataset.with_options(sharding)


# ---------------------------------------------------------------------- model
def accumulation_model(build_model, hparams, settings, base_model_dir=None):
    """``build_model(hparams)`` (compiled), BN replaced if asked, warm-started from
    ``base_model_dir`` when given (see :func:`warm_start`), wrapped, compiled again.

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
    if base_model_dir:
        warm_start(model, base_model_dir)
    wrapped = ga_tfx.wrap_model(model, accum_steps=settings.accum_steps,
                                partial_window=settings.partial_window,
                                agc_clip_factor=settings.agc_clip_factor)
    wrapped.compile(**compile_args)
    return wrapped


def warm_start(model, base_model_dir):
    """Copies the weights of the SavedModel at ``base_model_dir`` into ``model``, by layer name.

    ``base_model_dir`` is a previous Trainer's serving model (``fn_args.base_model``). Every
    layer of ``model`` that has weights must exist in the base model with weights of the same
    shapes; otherwise ``ValueError`` names the layer. Returns the names of the layers copied.
    """
    base = keras.models.load_model(base_model_dir, compile=False)
    base_layers = {layer.name: layer for layer in base.layers}
    copied = []
    for layer in model.layers:
        if not layer.weights:
            continue
        source = base_layers.get(layer.name)
        shapes = [tuple(w.shape) for w in layer.weights]
        if source is None or [tuple(w.shape) for w in source.weights] != shapes:
            raise ValueError(
                f"Cannot warm-start layer {layer.name!r} (weights {shapes}) from base model "
                f"{base_model_dir}: it has " + (
                    "no layer of that name." if source is None else
                    f"weights {[tuple(w.shape) for w in source.weights]}."))
        layer.set_weights(source.get_weights())
        copied.append(layer.name)
    return copied


def resume_directory(model_run_dir, identity):
    """Where the checkpoints of one training live, shared by all attempts to run it.

    TFX gives every execution new output URIs (``<root>/<component>/model_run/<execution>``),
    so a re-run of a failed Trainer cannot find its predecessor's checkpoints in its own
    ``model_run_dir``. They live instead in ``<root>/<component>/.ga_tfx_resume/<digest>``,
    where ``digest`` is a hash of ``identity`` (a JSON-able description of the inputs, model
    code and settings): only a re-run of the same training resumes; any change starts over.
    """
    digest = hashlib.sha256(
        json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]
    component_dir = os.path.dirname(os.path.dirname(model_run_dir.rstrip("/")))
    return os.path.join(component_dir, ".ga_tfx_resume", digest)


class EpochCheckpoint(keras.callbacks.Callback):
    """Checkpoints the training state at the end of every epoch, for exact resumption.

    The checkpoint holds the model's weights, the optimizer (slots, ``iterations``, loss
    scale), the accumulation state and the number of epochs done; ``restore()`` loads the latest
    one (call it after building the model, before ``fit``) and returns that number, from which
    the caller skips the micro-batches already trained on. Keeps the two latest checkpoints.
    """

    def __init__(self, model, directory):
        super().__init__()
        self.epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="epochs_done")
        self._checkpoint = tf.train.Checkpoint(model=model, epochs_done=self.epochs_done)
        self._manager = tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=2)
        # Multi-worker: all workers restore the chief's checkpoints and all save (saving may
        # run collective ops), the non-chief ones to a local temporary directory.
        self._directory = directory
        self._write_dir = worker_write_dir(directory, model.distribute_strategy)
        self._write_manager = self._manager if self._write_dir == directory else (
            tf.train.CheckpointManager(self._checkpoint, self._write_dir, max_to_keep=1))

    def restore(self):
        """Epochs done by the latest checkpoint (0 without one)."""
        if self._manager.latest_checkpoint:
            # Optimizer slots do not exist yet: their values are restored when created.
            self._checkpoint.restore(self._manager.latest_checkpoint)
        return int(self.epochs_done.numpy())

    def on_epoch_end(self, epoch, logs=None):
        self.epochs_done.assign(epoch + 1)
        self._write_manager.save(checkpoint_number=epoch + 1)

    def on_train_end(self, logs=None):
        remove_worker_dir(self._write_dir, self._directory)


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
        # Multi-worker: only the chief logs to log_dir (see worker_write_dir).
        self._write_dir = worker_write_dir(self._log_dir, self.model.distribute_strategy)
        self._writer = tf.summary.create_file_writer(self._write_dir)

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
        remove_worker_dir(self._write_dir, self._log_dir)


# ---------------------------------------------------------------------- export
def export_serving_model(model, serving_model_dir, transform_output, schema, raw_label_key):
    """Saves ``model`` (a plain Keras model) with the penguin-style signatures.

    ``serving_default``: serialized raw tf.Examples (no label) -> transform -> model outputs.
    ``transform_features``: serialized raw tf.Examples -> transformed features (Evaluator).
    Without a transform graph both parse with ``schema`` and apply no transformation.

    Under ``"multi_worker"`` every worker must call this; only the chief writes
    ``serving_model_dir``, the others save to a temporary directory that is then removed.
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
    write_dir = worker_write_dir(serving_model_dir, model.distribute_strategy)
    try:
        model.save(write_dir, save_format="tf", signatures=signatures)
    finally:
        remove_worker_dir(write_dir, serving_model_dir)
