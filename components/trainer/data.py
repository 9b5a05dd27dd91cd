"""The Trainer's (and Tuner's) data: schema, transform output and endless micro-batches."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf

import tensorflow_transform as tft
from tensorflow_metadata.proto.v0 import schema_pb2 as tfmd_schema_pb2
from tfx.utils import io_utils
from tfx_bsl.public import tfxio


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
    (files are read in order), so ``.skip(n)`` resumes it after ``n`` micro-batches. The
    shuffle holds ``settings.shuffle_buffer`` examples (None: tfx_bsl's 10,000) and runs before
    the repeat: a buffer at least as large as the split draws every micro-batch from all of it;
    a smaller one leaves the files' order partly in place (a file sorted by its label feeds
    batches whose label drifts through each epoch).

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
    buffer = (
        {} if settings.shuffle_buffer is None else {"shuffle_buffer_size": settings.shuffle_buffer}
    )
    options = tfxio.TensorFlowDatasetOptions(
        batch_size=settings.micro_batch_size,
        label_key=settings.label_key,
        shuffle=shuffle,
        shuffle_seed=settings.shuffle_seed,
        num_epochs=None,
        sloppy_ordering=False,
        **buffer,
    )
    dataset = fn_args.data_accessor.tf_dataset_factory(files, options, schema)
    sharding = tf.data.Options()
    sharding.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(sharding)
