"""Test set-up: Keras 2 first, deterministic ops, two logical CPU devices for tf.distribute."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow)
from ga_tfx._keras import tf

tf.config.experimental.enable_op_determinism()
_cpus = tf.config.list_physical_devices("CPU")
# Two logical CPUs so that MirroredStrategy runs 2 replicas on this machine.
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
