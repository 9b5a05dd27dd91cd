"""Peak tensor memory of one epoch, measured in the process that runs it.

TensorFlow's CPU allocator counts the bytes of live tensors (weights, optimizer slots,
accumulation buffers, activations, gradients, input batches) and their peak since the last
reset (``tf.config.experimental.get_memory_info("CPU:0")``). Around one epoch: reset the peak,
run, and take ``peak − bytes in use before``: the memory the epoch itself needed on top of what
was already there (this and every other configuration's weights and the shared data). Only one
configuration runs at a time in a process, so the figure belongs to that configuration.
"""

import time

_MIB = 2**20


def tensor_peak_start(tf):
    """Reset the allocator's peak; returns the bytes in use now (None if not available)."""
    try:
        current = tf.config.experimental.get_memory_info("CPU:0")["current"]
        tf.config.experimental.reset_memory_stats("CPU:0")
        return current
    except (ValueError, RuntimeError):  # no allocator statistics in this build
        return None


def tensor_peak_mib(tf, start):
    """MiB of the allocator's peak since :func:`tensor_peak_start` above its bytes then."""
    if start is None:
        return None
    return (tf.config.experimental.get_memory_info("CPU:0")["peak"] - start) / _MIB


def clocks():
    """``(wall, cpu)``: ``time.perf_counter()`` and this process's ``time.process_time()``."""
    return time.perf_counter(), time.process_time()
