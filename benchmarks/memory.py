"""Peak memory of training one configuration (run in a fresh process per configuration).

Two measures: the process's resident set (``ru_maxrss``: TensorFlow runtime, traced graphs,
allocator caches included) and the TensorFlow CPU allocator's peak of bytes in use
(``tf.config.experimental.get_memory_info("CPU:0")``): tensor memory only (weights, optimizer
slots, accumulation buffers, activations, gradients, input batches).
"""

import resource

from benchmarks import builders, frameworks
from benchmarks.configs import CONFIGS, make_data


def maxrss_mib():
    """The process's peak resident set size so far (ru_maxrss), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def tf_memory(tf, reset=False):
    """TensorFlow's CPU allocator: bytes in use and peak since the last reset, in MiB."""
    info = tf.config.experimental.get_memory_info("CPU:0")
    if reset:
        tf.config.experimental.reset_memory_stats("CPU:0")
    return info["current"] / 2**20, info["peak"] / 2**20


def memory_samples(args):
    """Samples per memory epoch: 4 windows of ``K·b`` (at most ``--samples``)."""
    return min(args.samples, 4 * args.micro_batch * args.accum_steps)


def worker_memory(args, result):
    """Fresh process: peak memory of two epochs of ``args.config`` (the first traces)."""
    cfg = CONFIGS[args.config]
    _, tf = frameworks.load(cfg.framework)
    b, k = args.micro_batch, args.accum_steps
    n = memory_samples(args)
    x, y = make_data(n)
    # Copies owned by TensorFlow's allocator (tf.constant may alias numpy memory, or not,
    # depending on its alignment): the same pre-training baseline in every subprocess.
    x, y = tf.add(tf.constant(x), 0.0), tf.add(tf.constant(y), 0)
    result.update(config=cfg.name, status="ok", samples=n)
    slot = builders.build(cfg, b, k, x, y)
    result["pre_train_maxrss_mib"] = maxrss_mib()
    result["tf_pre_train_mib"], _ = tf_memory(tf, reset=True)
    slot.run_epoch()  # includes tracing
    result["after_first_epoch_maxrss_mib"] = maxrss_mib()
    result["tf_before_steady_mib"], result["tf_peak_first_epoch_mib"] = tf_memory(tf, reset=True)
    slot.run_epoch()
    _, result["tf_peak_steady_mib"] = tf_memory(tf)
    result["peak_maxrss_mib"] = maxrss_mib()
