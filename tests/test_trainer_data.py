"""The Trainer's data path (components/trainer/data.py): the shuffle buffer.

A CSV sorted by its label (ggplot2's diamonds is sorted by price within two blocks) keeps that
order through ExampleGen and Transform; tf.data's shuffle buffer (tfx_bsl's default: 10,000
examples) then shuffles only locally, so each epoch feeds batches whose label drifts from low to
high, and the last updates of an epoch pull the model towards the rows read last. A buffer of
the whole training split draws every micro-batch from all of it.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx.components.trainer import data
from ga_tfx.components.trainer.settings import AccumulationSettings

import numpy as np
import pytest
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

pytestmark = [pytest.mark.tfx]  # tfx_bsl's TFXIO reads the examples, as in the Trainer

ROWS, MICRO = 1000, 50


def _sorted_examples(tmp_path):
    """A TFRecord file of ROWS examples sorted by their label ``y`` (= the row number)."""
    path = str(tmp_path / "sorted.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(ROWS):
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)])),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    schema = schema_pb2.Schema()
    for name in ("x", "y"):
        feature = schema.feature.add(name=name, type=schema_pb2.FLOAT)
        feature.shape.dim.add(size=1)
        feature.presence.min_fraction = 1.0
    return path, schema


class _FnArgs:
    """What micro_batches reads of the Trainer's fn_args: the TFXIO dataset factory."""

    class data_accessor:  # noqa: N801  (fn_args.data_accessor.tf_dataset_factory)
        @staticmethod
        def tf_dataset_factory(files, options, schema):
            return tfxio.TFExampleRecord(file_pattern=files, schema=schema).TensorFlowDataset(
                options
            )


def _first_epoch(tmp_path, shuffle_buffer):
    """The labels of the first ROWS examples (one epoch), in the order trained."""
    path, schema = _sorted_examples(tmp_path)
    settings = AccumulationSettings(2, MICRO, "y", shuffle_buffer=shuffle_buffer)
    batches = data.micro_batches(_FnArgs(), [path], settings, schema, shuffle=True)
    return np.concatenate(
        [np.reshape(y.numpy(), [-1]) for _, y in batches.take(ROWS // MICRO)]
    ).astype(int)


def test_a_buffer_of_the_whole_split_draws_every_batch_from_all_of_a_sorted_file(tmp_path):
    order = _first_epoch(tmp_path, ROWS)
    assert sorted(order) == list(range(ROWS))  # one epoch: each example once
    # Every quarter of the epoch holds the whole range (uniform draws: mean 500, sd about 18).
    for quarter in np.split(order, 4):
        assert 400 < quarter.mean() < 600, quarter.mean()
        assert quarter.min() < 100 and quarter.max() >= ROWS - 100


def test_a_buffer_smaller_than_the_split_leaves_a_sorted_file_in_order(tmp_path):
    # What tfx_bsl's default (10,000) does to a larger file, at this file's scale: the first
    # micro-batches come from the first rows only, the last from the last.
    order = _first_epoch(tmp_path, 100)
    assert sorted(order) == list(range(ROWS))
    quarters = [quarter.mean() for quarter in np.split(order, 4)]
    assert quarters == sorted(quarters) and quarters[0] < 200 and quarters[-1] > 800
    assert order[:MICRO].max() < 2 * 100  # drawn from the buffer's first fill only


def test_the_trainer_keeps_tfx_bsls_default_buffer_unless_told():
    assert AccumulationSettings(2, MICRO, "y").shuffle_buffer is None
    assert tfxio.TensorFlowDatasetOptions(batch_size=1).shuffle_buffer_size == 10000
