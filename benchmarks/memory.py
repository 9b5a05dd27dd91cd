"""Peak memory of training one configuration (run in a fresh process per configuration)."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow is imported)

import resource  # noqa: E402

from ga_tfx import tf  # noqa: E402

from benchmarks.configs import build_config, config_batch_size, make_data  # noqa: E402


def maxrss_mib():
    """The process's peak resident set size so far (ru_maxrss), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def tf_memory(reset=False):
    """TensorFlow's CPU allocator: bytes in use and peak since the last reset, in MiB."""
    info = tf.config.experimental.get_memory_info("CPU:0")
    if reset:
        tf.config.experimental.reset_memory_stats("CPU:0")
    return info["current"] / 2**20, info["peak"] / 2**20


def worker_memory(args, result):
    """Fresh process: peak memory of training one configuration.

    RSS (ru_maxrss) includes the TensorFlow runtime, traced graphs and allocator caching; the
    TensorFlow CPU allocator's peak counts tensor memory only (weights, optimizer slots,
    accumulation buffers, activations, gradients, input batches).
    """
    name = args._config
    b, k = args.micro_batch, args.accum_steps
    n = memory_samples(args)
    x, y = make_data(n)
    # Copies owned by TensorFlow's allocator (tf.constant may alias numpy memory, or not,
    # depending on its alignment): the same pre-training baseline in every subprocess.
    x, y = tf.add(tf.constant(x), 0.0), tf.add(tf.constant(y), 0)
    result.update(config=name, status="ok", samples=n)
    model = build_config(name, k)
    bs = config_batch_size(name, b, k)
    result["pre_train_maxrss_mib"] = maxrss_mib()
    result["tf_pre_train_mib"], _ = tf_memory(reset=True)
    model.fit(x, y, batch_size=bs, epochs=1, shuffle=False, verbose=0)  # includes tracing
    result["after_first_epoch_maxrss_mib"] = maxrss_mib()
    result["tf_before_steady_mib"], result["tf_peak_first_epoch_mib"] = tf_memory(reset=True)
    model.fit(x, y, batch_size=bs, epochs=1, shuffle=False, verbose=0)
    _, result["tf_peak_steady_mib"] = tf_memory()
    result["peak_maxrss_mib"] = maxrss_mib()


def memory_samples(args):
    return min(args.samples, 4 * args.micro_batch * args.accum_steps)

