"""Gradient accumulation benchmark: ga_tfx vs plain Keras 2 vs gradient-accumulator 0.5.2.

One run measures, side by side:

1. Throughput (samples/s) and peak memory (RSS) of training a small conv net with
   BatchNormalization (synthetic 32x32x3 data, fixed numpy seed) as
     (a) plain Keras at micro-batch b,
     (b) ga_tfx.wrap_model(model, accum_steps=K) at (b, K),
     (c) plain Keras at K*b,
     (d) gradient-accumulator's GradientAccumulateModel at (b, K),
   plus three extra rows that help read them: plain Keras at b with steps_per_execution=K, and
   each library with its own AccumBatchNormalization layers.
   Throughput: every configuration is warmed up (tracing and one epoch excluded), then timed
   over --repeats rounds that interleave the configurations (the order is rotated each round) to
   cancel machine-load drift; the median samples/s is reported. Memory: every configuration runs
   in its own fresh subprocess (this script with a hidden --_worker flag); it reads
   ``ru_maxrss`` after building and compiling the model (before training) and after training,
   and the steady-state high-water mark (VmHWM) of later epochs after resetting it through
   /proc/self/clear_refs.
2. Weight-level correctness without BatchNormalization: max |Δw| after 8 optimizer updates
   against plain big-batch training at K*b (same initial weights, same data order, op
   determinism on), with SGD+momentum and Adam, and ``optimizer.iterations``.
3. BatchNormalization: moving statistics after one window of K micro-batches whose means differ
   strongly (micro-batch i offset by 10*i), against one Keras BatchNormalization update on the
   concatenated window; and the inference output change caused by each library's
   ``replace_batchnorm_layers`` on a model with non-trivial BN weights and statistics.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_accumulation.py --output benchmarks/REPORT.md

gradient-accumulator is only called, never copied.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow is imported)

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

from ga_tfx._keras import keras, tf  # noqa: E402

# The anchor (gradient-accumulator 0.5.2, installed beside ga_tfx): only called, never copied.
# Imported after ga_tfx, so its `tf.keras` is tf-keras (Keras 2) as well.
try:
    import gradient_accumulator as anchor_pkg
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
BN_MOMENTUM = 0.9  # for the moving-statistics experiment (Keras' default is 0.99)
CORRECTNESS_UPDATES = 8

# ---------------------------------------------------------------------------------- configs
# name -> (label, how, micro-batch multiplier, options)
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


def config_batch_size(name, b, k):
    return b * k if name == "plain_Kb" else b


# ---------------------------------------------------------------------------------- helpers
def make_data(n, seed=DATA_SEED):
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


def loss_fn():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def build_config(name, k):
    """A compiled model for one throughput/memory configuration."""
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
        raise ValueError(name)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
                  loss=loss_fn(), **compile_kwargs)
    return model


def error_text(error):
    text = f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def maxrss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class _EpochTimer(keras.callbacks.Callback):
    """Wall time from epoch begin to epoch end (excludes fit's data-adapter set-up)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.start


# ---------------------------------------------------------------------------------- workers
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


def max_abs_diff(a_list, b_list):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(a_list, b_list))


def small_net(seed=MODEL_SEED):
    return conv_net(bn=False, seed=seed, name="convnet_nobn")


def worker_correctness(args, result):
    """Weight-level comparison against big-batch training (no BatchNormalization)."""
    tf.config.experimental.enable_op_determinism()
    b, k = args.micro_batch, args.accum_steps
    n = CORRECTNESS_UPDATES * k * b
    x, y = make_data(n, seed=DATA_SEED + 1)
    init = small_net().get_weights()

    optimizers = {
        "SGD(lr=0.05, momentum=0.9)": (
            lambda: keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
            lambda: keras.optimizers.legacy.SGD(learning_rate=0.05, momentum=0.9)),
        "Adam(lr=1e-3)": (
            lambda: keras.optimizers.Adam(learning_rate=1e-3),
            lambda: keras.optimizers.legacy.Adam(learning_rate=1e-3)),
    }

    def train(kind, make_opt, make_legacy):
        keras.utils.set_random_seed(MODEL_SEED)
        base = small_net()
        base.set_weights(init)
        batch = b
        if kind in ("big", "big_legacy"):
            model, batch = base, k * b
            optimizer = make_opt() if kind == "big" else make_legacy()
        elif kind == "plain_b":
            model, optimizer = base, make_opt()
        elif kind == "ga_tfx":
            model, optimizer = ga_tfx.wrap_model(base, accum_steps=k), make_opt()
        elif kind == "anchor_model":
            if AnchorModel is None:
                raise ImportError(ANCHOR_IMPORT_ERROR)
            model = AnchorModel(accum_steps=k, inputs=base.input, outputs=base.output)
            optimizer = make_opt()
        elif kind == "anchor_optimizer":
            if AnchorOptimizer is None:
                raise ImportError(ANCHOR_IMPORT_ERROR)
            model = base
            optimizer = AnchorOptimizer(optimizer=make_legacy(), accum_steps=k)
        else:
            raise ValueError(kind)
        model.compile(optimizer=optimizer, loss=loss_fn())
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        return base.get_weights(), int(model.optimizer.iterations.numpy())

    rows = []
    for opt_name, (make_opt, make_legacy) in optimizers.items():
        ref_w, ref_it = train("big", make_opt, make_legacy)
        moved = max_abs_diff(ref_w, init)
        legacy = None
        entries = [
            ("plain Keras @ K·b (reference)", "big", "big"),
            ("ga_tfx.wrap_model @ (b, K)", "ga_tfx", "big"),
            ("gradient-accumulator GradientAccumulateModel @ (b, K)", "anchor_model", "big"),
            ("gradient-accumulator GradientAccumulateOptimizer @ (b, K) [legacy optimizer; "
             "reference: big batch with the same legacy optimizer]", "anchor_optimizer",
             "big_legacy"),
            ("context: plain Keras @ b, no accumulation (K× more updates)", "plain_b", "big"),
        ]
        for label, kind, ref_kind in entries:
            row = {"optimizer": opt_name, "method": label, "kind": kind}
            try:
                if ref_kind == "big_legacy":
                    if legacy is None:
                        legacy = train("big_legacy", make_opt, make_legacy)
                    reference = legacy
                else:
                    reference = (ref_w, ref_it)
                if kind == "big":
                    weights, its = ref_w, ref_it
                else:
                    weights, its = train(kind, make_opt, make_legacy)
                row.update(status="ok", max_dw=max_abs_diff(weights, reference[0]),
                           iterations=its, reference_iterations=reference[1],
                           max_w_moved=moved)
            except Exception as error:
                row.update(status="error", error=error_text(error))
            rows.append(row)
            print(f"  correctness {opt_name} {kind}: {row.get('max_dw', row.get('error'))}",
                  flush=True)
    result["correctness"] = rows
    result["correctness_setup"] = {"samples": n, "updates": CORRECTNESS_UPDATES}

    result["bn_moving"] = bn_moving_statistics(b, k)
    result["bn_replace"] = bn_replace(b, k)


def bn_window(shape, b, k, seed):
    rng = np.random.default_rng(seed)
    parts = [rng.normal(size=(b,) + shape).astype("float32") + np.float32(10.0 * i)
             for i in range(k)]
    return np.concatenate(parts, axis=0)


def _bn_probe_model(shape, layer):
    keras.utils.set_random_seed(MODEL_SEED)
    inputs = keras.Input(shape)
    h = layer(inputs)
    h = keras.layers.Flatten()(h)
    outputs = keras.layers.Dense(1)(h)
    return keras.Model(inputs, outputs)


def bn_moving_statistics(b, k):
    """One window of K micro-batches (micro-batch i offset by 10*i): moving statistics vs one
    Keras BatchNormalization update on the concatenated window."""
    layouts = {
        "4D input (N,8,8,4): Keras BN fused": (8, 8, 4),
        "2D input (N,16): Keras BN not fused": (16,),
    }
    rows = []
    for layout, shape in layouts.items():
        window = bn_window(shape, b, k, seed=DATA_SEED + 2)
        target = np.zeros((window.shape[0], 1), "float32")
        ref = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)
        ref.build((None,) + shape)
        ref(tf.constant(window), training=True)
        ref_mean, ref_var = ref.moving_mean.numpy(), ref.moving_variance.numpy()
        context = {"layout": layout, "ref_moving_mean_max": float(np.max(ref_mean)),
                   "ref_moving_variance_max": float(np.max(ref_var)),
                   "window_variance_max": float(np.max(np.var(
                       window.reshape(-1, shape[-1]), axis=0)))}

        def run(kind):
            if kind == "ga_tfx":
                layer = ga_tfx.AccumBatchNormalization(accum_steps=k, momentum=BN_MOMENTUM)
                model = ga_tfx.wrap_model(_bn_probe_model(shape, layer), accum_steps=k)
            elif kind == "anchor":
                if AnchorModel is None:
                    raise ImportError(ANCHOR_IMPORT_ERROR)
                layer = AnchorAccumBN(accum_steps=k, momentum=BN_MOMENTUM)
                base = _bn_probe_model(shape, layer)
                model = AnchorModel(accum_steps=k, inputs=base.input, outputs=base.output)
            elif kind == "keras_bn":
                layer = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)
                model = ga_tfx.wrap_model(_bn_probe_model(shape, layer), accum_steps=k)
            # The statistics depend only on the inputs (BN is the first layer); lr=0 keeps
            # everything else fixed.
            model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss="mse")
            model.fit(window, target, batch_size=b, epochs=1, shuffle=False, verbose=0)
            return np.asarray(layer.moving_mean), np.asarray(layer.moving_variance)

        for label, kind in [
            ("ga_tfx AccumBatchNormalization (ga_tfx.wrap_model)", "ga_tfx"),
            ("gradient-accumulator AccumBatchNormalization (its GradientAccumulateModel)",
             "anchor"),
            ("context: Keras BatchNormalization, updated every micro-batch", "keras_bn"),
        ]:
            row = dict(context, method=label, kind=kind)
            try:
                mean, var = run(kind)
                row.update(status="ok", max_d_mean=float(np.max(np.abs(mean - ref_mean))),
                           max_d_var=float(np.max(np.abs(var - ref_var))),
                           rel_d_var=float(np.max(np.abs(var - ref_var) / np.abs(ref_var))))
            except Exception as error:
                row.update(status="error", error=error_text(error))
            rows.append(row)
            print(f"  bn-moving {layout} {kind}: {row.get('max_d_var', row.get('error'))}",
                  flush=True)
    return rows


def bn_replace(b, k):
    """Inference output before/after replace_batchnorm_layers on a model with non-trivial BN
    gamma, beta, moving mean and moving variance."""
    model = conv_net(name="pretrained")
    rng = np.random.default_rng(DATA_SEED + 3)
    bn_layers = [layer for layer in model.layers
                 if isinstance(layer, keras.layers.BatchNormalization)]
    originals = {}
    for layer in bn_layers:
        c = layer.gamma.shape[0]
        values = [rng.uniform(0.5, 2.0, c), rng.normal(0.0, 1.0, c),
                  rng.normal(0.0, 1.0, c), rng.uniform(0.5, 3.0, c)]
        values = [v.astype("float32") for v in values]
        layer.set_weights(values)
        originals[layer.name] = values
    x, _ = make_data(2 * b, seed=DATA_SEED + 4)
    ref = model(x, training=False).numpy()

    def carried(new_model):
        """Which BN quantities the replacement carried over (per quantity, all layers)."""
        new_bn = [layer for layer in new_model.layers if "batch" in type(layer).__name__.lower()]
        flags = {"gamma": [], "beta": [], "moving_mean": [], "moving_variance": []}
        for old, new in zip(bn_layers, new_bn):
            for i, attr in enumerate(flags):
                value = getattr(new, attr, None)
                flags[attr].append(value is not None and np.allclose(
                    np.asarray(value), originals[old.name][i]))
        return {attr: (all(v) if v else False) for attr, v in flags.items()}, len(new_bn)

    rows = []
    for label, kind in [("ga_tfx.replace_batchnorm_layers", "ga_tfx"),
                        ("gradient_accumulator.utils.replace_batchnorm_layers", "anchor")]:
        row = {"method": label, "kind": kind, "ref_output_max": float(np.max(np.abs(ref)))}
        try:
            if kind == "ga_tfx":
                new = ga_tfx.replace_batchnorm_layers(model, accum_steps=k)
            else:
                if anchor_replace_bn is None:
                    raise ImportError(ANCHOR_IMPORT_ERROR)
                new = anchor_replace_bn(model, accum_steps=k)
            out = new(x, training=False).numpy()
            flags, count = carried(new)
            shared = any(a is c for a in new.layers for c in model.layers
                         if not isinstance(c, keras.layers.InputLayer))
            row.update(status="ok", max_d_out=float(np.max(np.abs(out - ref))),
                       carried=flags, bn_layers=count, shares_layers_with_original=shared)
        except Exception as error:
            row.update(status="error", error=error_text(error))
        rows.append(row)
        print(f"  bn-replace {kind}: {row.get('max_d_out', row.get('error'))}", flush=True)
    return rows


# ---------------------------------------------------------------------------------- parent
def run_worker(kind, args, config=None, timeout=600):
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
        path = f.name
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", kind, "--_result", path,
           "--micro-batch", str(args.micro_batch), "--accum-steps", str(args.accum_steps),
           "--samples", str(args.samples)]
    if config:
        cmd += ["--_config", config]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        with open(path) as f:
            text = f.read()
        result = json.loads(text) if text.strip() else {}
        if proc.stdout:
            sys.stdout.write(proc.stdout)
        if proc.returncode != 0 or not result:
            result.setdefault("status", "error")
            result.setdefault("error", f"worker exited with {proc.returncode}: "
                              + " ".join(proc.stderr.strip().splitlines()[-3:])[-300:])
        return result
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"worker timed out after {timeout}s"}
    finally:
        os.unlink(path)


def measure_throughput(args):
    b, k, n = args.micro_batch, args.accum_steps, args.samples
    x, y = make_data(n)
    models, errors = {}, {}
    for name in CONFIGS:
        try:
            model = build_config(name, k)
            timer = _EpochTimer()
            start = time.perf_counter()
            model.fit(x, y, batch_size=config_batch_size(name, b, k), epochs=1, shuffle=False,
                      verbose=0, callbacks=[timer])  # warm-up: tracing + one full epoch
            print(f"  warm-up {name}: {time.perf_counter() - start:.1f}s "
                  f"({n / timer.seconds:.0f} samples/s)", flush=True)
            models[name] = (model, timer)
        except Exception as error:
            errors[name] = error_text(error)
            print(f"  {name} FAILED: {errors[name]}", flush=True)
    names = list(models)
    times = {name: [] for name in names}
    for r in range(args.repeats):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate: no fixed position
        for name in order:
            model, timer = models[name]
            gc.collect()
            model.fit(x, y, batch_size=config_batch_size(name, b, k), epochs=1, shuffle=False,
                      verbose=0, callbacks=[timer])
            times[name].append(timer.seconds)
        print(f"  round {r + 1}/{args.repeats}: " + ", ".join(
            f"{name}={n / times[name][-1]:.0f}" for name in names), flush=True)
    results = {}
    for name in CONFIGS:
        if name in errors:
            results[name] = {"status": "error", "error": errors[name]}
            continue
        rates = [n / t for t in times[name]]
        results[name] = {"status": "ok", "median": statistics.median(rates),
                         "min": min(rates), "max": max(rates), "rates": rates,
                         "updates_per_epoch": (n // (b * k) if name not in ("plain_b",
                                                                            "plain_b_spe")
                                               else n // b)}
    # Paired ratio: per round, config / plain_b (the two measured close together in time).
    if "plain_b" in times:
        for name in names:
            ratios = [times["plain_b"][i] / times[name][i] for i in range(args.repeats)]
            results[name]["paired_ratio_median"] = statistics.median(ratios)
            if len(ratios) >= 2:
                q1, _, q3 = statistics.quantiles(ratios, n=4)
                results[name]["paired_ratio_iqr"] = (q1, q3)
    return results


def machine_facts():
    cpu_model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import tf_keras
        tf_keras_version = tf_keras.__version__
    except Exception:
        tf_keras_version = "?"
    try:
        from importlib.metadata import version
        anchor_version = version("gradient-accumulator")
    except Exception:
        anchor_version = "?"
    mem_total = "?"
    try:
        with open("/proc/meminfo") as f:
            mem_total = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "memory": mem_total,
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "tf_keras": tf_keras_version,
        "numpy": np.__version__,
        "gradient_accumulator": anchor_version,
        "ga_tfx": ga_tfx.__version__,
        "kernel": platform.release(),
        "load_avg_start": os.getloadavg(),
        "ga_tfx_source": ga_tfx_source(),
    }


def ga_tfx_source():
    """Fingerprint of the ga_tfx sources (to detect edits while the benchmark runs)."""
    import hashlib
    package = os.path.dirname(os.path.abspath(ga_tfx.__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    info = {"fingerprint": digest.hexdigest()[:12]}
    try:
        root = os.path.dirname(package)
        info["commit"] = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
        info["dirty"] = bool(subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--", "ga_tfx"],
            capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    return info


def fmt(value, spec=".3g"):
    return "n/a" if value is None else format(value, spec)


def render(args, facts, throughput, memory, checks, command, started, elapsed, phases=None):
    b, k = args.micro_batch, args.accum_steps
    mem_n = memory_samples(args)
    lines = []
    out = lines.append
    out("# Gradient accumulation benchmark: ga_tfx vs plain Keras 2 vs gradient-accumulator")
    out("")
    out(f"Generated by `benchmarks/bench_accumulation.py` on {started} "
        f"(wall time {elapsed / 60:.1f} min).")
    out("")
    out("Command (from the repository root):")
    out("")
    out("```")
    out(command)
    out("```")
    out("")
    out("## Machine")
    out("")
    out(f"- CPU: {facts['cpu_model']}; nproc = {facts['nproc']} "
        f"(usable: {facts['sched_affinity']}); memory {facts['memory']}; no GPU used")
    out(f"- Python {facts['python']}, TensorFlow {facts['tensorflow']}, tf-keras "
        f"{facts['tf_keras']}, numpy {facts['numpy']}, gradient-accumulator "
        f"{facts['gradient_accumulator']}, ga_tfx {facts['ga_tfx']}; Linux {facts['kernel']}")
    la0, la1 = facts["load_avg_start"], facts.get("load_avg_end", (None,) * 3)
    out(f"- Load average (1/5/15 min) at start {la0[0]:.2f}/{la0[1]:.2f}/{la0[2]:.2f}, at end "
        f"{fmt(la1[0], '.2f')}/{fmt(la1[1], '.2f')}/{fmt(la1[2], '.2f')} (the machine is "
        "shared; throughput rounds are interleaved to cancel drift)")
    src0, src1 = facts["ga_tfx_source"], facts.get("ga_tfx_source_end", {})
    out(f"- ga_tfx source: commit {src0.get('commit', '?')}"
        f"{' + uncommitted changes in ga_tfx/' if src0.get('dirty') else ', ga_tfx/ clean'}, "
        f"fingerprint {src0['fingerprint']}; "
        + ("unchanged during the run" if src1.get("fingerprint") == src0["fingerprint"] else
           f"**CHANGED during the run (now {src1.get('fingerprint')}): results may mix "
           "versions**"))
    if ANCHOR_IMPORT_ERROR:
        out(f"- gradient-accumulator import FAILED: `{ANCHOR_IMPORT_ERROR}`")
    out("")
    out("## Setup")
    out("")
    out(f"- Model: Conv2D({CONV_CHANNELS[0]})-BN-ReLU-MaxPool, Conv2D({CONV_CHANNELS[1]})-BN-"
        f"ReLU-MaxPool, Conv2D({CONV_CHANNELS[2]})-BN-ReLU, GlobalAveragePooling, Dense(10) "
        f"logits; input {INPUT_SHAPE[0]}x{INPUT_SHAPE[1]}x{INPUT_SHAPE[2]}; "
        "SparseCategoricalCrossentropy(from_logits=True); SGD(lr=0.01, momentum=0.9); no "
        "metrics.")
    out(f"- Data: {args.samples} synthetic samples (numpy seed {DATA_SEED}), float32; "
        "`fit(x, y, batch_size=..., epochs=1, shuffle=False)` per timed epoch.")
    out(f"- Micro-batch b = {b}, accumulation steps K = {k}, so K·b = {k * b}. One epoch = "
        f"{args.samples // b} micro-batches = {args.samples // (b * k)} accumulation windows.")
    out("- Throughput: per configuration one warm-up epoch (tracing included) is discarded; "
        f"then {args.repeats} rounds, each timing one epoch of every configuration "
        "(epoch-begin to epoch-end callback), the order rotated each round. Median samples/s; "
        "ratio = median / median of (a); paired = median (interquartile range) over rounds of "
        "time(a)/time(x), which cancels load drift shared by a round.")
    out(f"- Memory: each configuration in a fresh subprocess ({args.memory_jobs} at a time; "
        f"peak memory is per process), {mem_n} samples "
        "(2 epochs; the first includes tracing). RSS: `pre-train` = ru_maxrss after data, "
        "model build and compile; `peak` = ru_maxrss at the end; `increment` = peak − "
        "pre-train. TF tensors: the TensorFlow CPU allocator's peak during the second "
        "(steady-state) epoch minus the bytes it held before training (weights, data) = "
        "activations, gradients, optimizer slots, accumulation buffers and batches. Ratios "
        "are against (a).")
    out("")

    # --- throughput + memory table
    out("## 1. Throughput and peak memory (model with BatchNormalization)")
    out("")
    out("| configuration | updates/epoch | samples/s (median) | min–max | ratio vs (a) | paired "
        "(IQR) | peak RSS MiB | RSS increment MiB | ratio vs (a) | TF tensor peak MiB | ratio vs (a) |")
    out("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base_tp = throughput.get("plain_b", {}).get("median")
    base_mem = memory.get("plain_b", {})
    for mem in memory.values():
        if mem.get("status") == "ok":
            mem["increment_mib"] = mem["peak_maxrss_mib"] - mem["pre_train_maxrss_mib"]
            mem["tf_steady_mib"] = mem["tf_peak_steady_mib"] - mem["tf_pre_train_mib"]
    base_incr = base_mem.get("increment_mib")
    base_tf = base_mem.get("tf_steady_mib")
    failures = []
    for name, label in CONFIGS.items():
        tp, mem = throughput.get(name, {}), memory.get(name, {})
        cells = [label]
        if tp.get("status") == "ok":
            cells += [str(tp["updates_per_epoch"]), f"{tp['median']:.0f}",
                      f"{tp['min']:.0f}–{tp['max']:.0f}",
                      f"{tp['median'] / base_tp:.2f}" if base_tp else "n/a",
                      fmt(tp.get("paired_ratio_median"), ".2f") + (
                          " ({:.2f}–{:.2f})".format(*tp["paired_ratio_iqr"])
                          if name != "plain_b" and tp.get("paired_ratio_iqr") else "")]
        else:
            cells += ["—", "FAILED", "—", "—", "—"]
            failures.append(f"{label} (throughput): `{tp.get('error', 'not run')}`")
        if mem.get("status") == "ok":
            cells += [f"{mem['peak_maxrss_mib']:.0f}", f"{mem['increment_mib']:.0f}",
                      f"{mem['increment_mib'] / base_incr:.2f}" if base_incr else "n/a",
                      f"{mem['tf_steady_mib']:.1f}",
                      f"{mem['tf_steady_mib'] / base_tf:.2f}" if base_tf else "n/a"]
        else:
            cells += ["FAILED", "—", "—", "—", "—"]
            failures.append(f"{label} (memory): `{mem.get('error', 'not run')}`")
        out("| " + " | ".join(cells) + " |")
    out("")
    ok_mem = [m for m in memory.values() if m.get("status") == "ok"]
    if ok_mem:
        out("Pre-training RSS (TF runtime, data, model) was "
            f"{min(m['pre_train_maxrss_mib'] for m in ok_mem):.0f}–"
            f"{max(m['pre_train_maxrss_mib'] for m in ok_mem):.0f} MiB in every subprocess; "
            "TF allocator peak of the first epoch (tracing included): " + ", ".join(
                f"{k_}: {m['tf_peak_first_epoch_mib'] - m['tf_pre_train_mib']:.1f}"
                for k_, m in memory.items() if m.get("status") == "ok") + " MiB. Share of the "
            "RSS increment already reached by the end of the first (tracing) epoch: " + ", ".join(
                f"{k_}: {m['after_first_epoch_maxrss_mib'] - m['pre_train_maxrss_mib']:.0f}/"
                f"{m['increment_mib']:.0f}" for k_, m in memory.items()
                if m.get("status") == "ok") + " MiB.")
        out("")
    if failures:
        out("Failures:")
        out("")
        for failure in failures:
            out(f"- {failure}")
        out("")
    if phases:
        out("Phase wall times: " + ", ".join(f"{k_} {v:.0f}s" for k_, v in phases.items())
            + ".")
        out("")

    # --- correctness
    corr = checks.get("correctness", [])
    setup = checks.get("correctness_setup", {})
    out("## 2. Weight-level correctness (model without BatchNormalization)")
    out("")
    if checks.get("status") != "ok" and not corr:
        out(f"FAILED: `{checks.get('error')}`")
    else:
        out(f"Same conv net without BN (biases on); {setup.get('samples')} samples (seed "
            f"{DATA_SEED + 1}), one epoch, no shuffling: {setup.get('updates')} optimizer "
            f"updates at K·b = {k * b}; same initial weights; "
            "`tf.config.experimental.enable_op_determinism()`. max |Δw| over all weights "
            "against plain Keras at K·b.")
        out("")
        out("| optimizer | method | max abs Δw vs big batch | optimizer.iterations "
            "(reference) | max abs (w_ref − w_init) |")
        out("|---|---|---:|---:|---:|")
        for row in corr:
            if row.get("status") == "ok":
                out(f"| {row['optimizer']} | {row['method']} | {row['max_dw']:.3g} | "
                    f"{row['iterations']} ({row['reference_iterations']}) | "
                    f"{row['max_w_moved']:.3g} |")
            else:
                out(f"| {row['optimizer']} | {row['method']} | FAILED: `{row.get('error')}` "
                    "| — | — |")
    out("")

    # --- BN
    out("## 3. BatchNormalization")
    out("")
    out(f"### 3(i) Moving statistics after one window of K = {k} micro-batches of b = {b}, "
        "micro-batch i offset by 10·i")
    out("")
    out(f"Reference: one Keras `BatchNormalization(momentum={BN_MOMENTUM})` training call on the "
        f"concatenated window of {k * b} samples, from moving_mean = 0, moving_variance = 1. "
        f"All layers use momentum {BN_MOMENTUM}. The layer is the model's first layer, so its "
        "statistics depend only on the data.")
    out("")
    out("| input | method | max abs Δ moving_mean | max abs Δ moving_variance | max rel. Δ "
        "moving_variance | reference max moving_variance |")
    out("|---|---|---:|---:|---:|---:|")
    for row in checks.get("bn_moving", []):
        if row.get("status") == "ok":
            out(f"| {row['layout']} | {row['method']} | {row['max_d_mean']:.3g} | "
                f"{row['max_d_var']:.3g} | {row['rel_d_var']:.3g} | "
                f"{row['ref_moving_variance_max']:.4g} |")
        else:
            out(f"| {row['layout']} | {row['method']} | FAILED: `{row.get('error')}` | — | — "
                "| — |")
    out("")
    out("### 3(ii) Inference output after `replace_batchnorm_layers`")
    out("")
    out("The conv net of part 1 with every BN layer's gamma ~ U(0.5, 2), beta ~ N(0, 1), "
        "moving_mean ~ N(0, 1), moving_variance ~ U(0.5, 3) (fixed seed); output of "
        f"`model(x, training=False)` on {2 * b} samples vs the converted model's.")
    out("")
    out("| function | max abs Δ output | max abs output | BN layers found | carried over "
        "(gamma / beta / moving_mean / moving_variance) | new model shares layers with "
        "the original |")
    out("|---|---:|---:|---:|---|---|")
    for row in checks.get("bn_replace", []):
        if row.get("status") == "ok":
            c = row["carried"]
            carried = " / ".join("yes" if c[q] else "no" for q in
                                 ("gamma", "beta", "moving_mean", "moving_variance"))
            out(f"| `{row['method']}(model, accum_steps={k})` | {row['max_d_out']:.3g} | "
                f"{row['ref_output_max']:.3g} | {row['bn_layers']} | {carried} | "
                f"{'yes' if row['shares_layers_with_original'] else 'no'} |")
        else:
            out(f"| `{row['method']}` | FAILED: `{row.get('error')}` | — | — | — | — |")
    out("")
    out("## Interpretation")
    out("")
    for paragraph in interpret(throughput, memory, checks, b, k):
        out(f"- {paragraph}")
    out("")
    return "\n".join(lines)


def interpret(throughput, memory, checks, b, k):
    """Plain statements derived from the measured numbers (nothing hard-coded)."""
    notes = []
    tp = {n: r.get("median") for n, r in throughput.items() if r.get("status") == "ok"}
    mem = {n: r.get("increment_mib") for n, r in memory.items() if r.get("status") == "ok"}
    peak = {n: r.get("peak_maxrss_mib") for n, r in memory.items() if r.get("status") == "ok"}
    spreads = {n: (r["max"] - r["min"]) / r["median"] for n, r in throughput.items()
               if r.get("status") == "ok"}
    iqrs = {n: r["paired_ratio_iqr"] for n, r in throughput.items()
            if r.get("status") == "ok" and r.get("paired_ratio_iqr") and n != "plain_b"}
    if spreads and iqrs:
        widest = max(q3 - q1 for q1, q3 in iqrs.values())
        notes.append(
            f"Noise: absolute samples/s varied by {min(spreads.values()):.0%}–"
            f"{max(spreads.values()):.0%} (max − min)/median per configuration over the rounds "
            "(shared machine; load changes between rounds). Rounds are paired, so the paired "
            f"ratio cancels most of that; its interquartile ranges are at most {widest:.2f} "
            "wide here. Treat ratio differences within the IQR as noise.")
    if "plain_b" in tp and "ga_tfx" in tp:
        ratio = tp["ga_tfx"] / tp["plain_b"]
        paired = throughput["ga_tfx"].get("paired_ratio_median")
        verdict = ("meets the goal" if ratio >= 1.0 else
                   f"falls short of the goal by {1 - ratio:.0%}")
        notes.append(
            f"Throughput: ga_tfx at (b={b}, K={k}) trains at {ratio:.2f}x the samples/s of plain "
            f"Keras at b (paired per-round ratio {paired:.2f}); the goal 'at least as fast as "
            f"plain at b': this run {verdict}.")
        if "plain_b_spe" in tp:
            notes.append(
                f"Plain Keras at b with steps_per_execution=K runs at "
                f"{tp['plain_b_spe'] / tp['plain_b']:.2f}x plain at b. ga_tfx also runs K "
                "micro-batches per host call, so compare (b) with (a') to separate the "
                "accumulation work itself (one buffer add per variable per micro-batch; one "
                "optimizer update per window instead of K) from the saved host round-trips.")
    if "plain_Kb" in tp and "plain_b" in tp:
        notes.append(
            f"Plain Keras at K·b runs at {tp['plain_Kb'] / tp['plain_b']:.2f}x plain at b on "
            "this machine.")
    if "anchor" in tp and "ga_tfx" in tp:
        notes.append(
            f"gradient-accumulator at (b, K) runs at {tp['anchor'] / tp['plain_b']:.2f}x plain "
            f"at b; ga_tfx / gradient-accumulator = {tp['ga_tfx'] / tp['anchor']:.2f}.")
    tfm = {n: r.get("tf_steady_mib") for n, r in memory.items() if r.get("status") == "ok"}
    if all(n in mem for n in ("plain_b", "ga_tfx", "plain_Kb")):
        def near_b(values):
            return values["ga_tfx"] - values["plain_b"] < 0.5 * (values["plain_Kb"]
                                                                   - values["plain_b"])
        notes.append(
            f"Memory (TF tensor peak, steady state): {tfm['plain_b']:.1f} MiB plain at b, "
            f"{tfm['ga_tfx']:.1f} MiB ga_tfx at (b, K), {tfm['plain_Kb']:.1f} MiB plain at K·b"
            + (f", {tfm['anchor']:.1f} MiB gradient-accumulator" if "anchor" in tfm else "")
            + ". " + ("ga_tfx stays near plain-at-b and far below plain-at-K·b."
                      if near_b(tfm) else "ga_tfx is NOT clearly below plain-at-K·b here.")
            + f" Process RSS increments: {mem['plain_b']:.0f} / {mem['ga_tfx']:.0f} / "
            f"{mem['plain_Kb']:.0f} MiB (" + ("same ordering" if near_b(mem) else
                                             "not separated")
            + f"); absolute RSS peaks {peak['plain_b']:.0f} / {peak['ga_tfx']:.0f} / "
            f"{peak['plain_Kb']:.0f} MiB are dominated by the TensorFlow runtime and traced "
            "graphs, which activations only add to.")
        ga_mem = memory["ga_tfx"]
        first = ga_mem["after_first_epoch_maxrss_mib"] - ga_mem["pre_train_maxrss_mib"]
        if mem["ga_tfx"] > mem["plain_b"] and tfm["ga_tfx"] <= 1.1 * tfm["plain_b"]:
            notes.append(
                f"ga_tfx's RSS increment is {mem['ga_tfx'] - mem['plain_b']:.0f} MiB above "
                f"plain-at-b although its tensor peak is not higher; {first:.0f} of its "
                f"{mem['ga_tfx']:.0f} MiB were reached in the first epoch, which includes "
                "tracing. So the extra RSS is not tensor (activation) memory; it is consistent "
                "with the larger traced graph (the window loop) and tracing overhead.")
    corr = [r for r in checks.get("correctness", []) if r.get("status") == "ok"]
    for kind, name in (("ga_tfx", "ga_tfx"), ("anchor_model",
                                              "gradient-accumulator GradientAccumulateModel"),
                       ("anchor_optimizer", "gradient-accumulator GradientAccumulateOptimizer")):
        rows = [r for r in corr if r["kind"] == kind]
        if rows:
            notes.append(f"Correctness, {name}: max |Δw| vs big batch = " + ", ".join(
                f"{r['max_dw']:.2g} ({r['optimizer'].split('(')[0]}, iterations "
                f"{r['iterations']} vs {r['reference_iterations']})" for r in rows) + ".")
    anchor_rows = [r for r in corr if r["kind"] == "anchor_model"]
    if anchor_rows and all(r["max_dw"] <= 1e-5 for r in anchor_rows):
        notes.append("gradient-accumulator's GradientAccumulateModel is also at float32 "
                     "round-off here: with equal-size micro-batches and an unweighted mean loss "
                     "its sum of loss/K gradients is the big-batch gradient, and it applies once "
                     "per window. This test does not exercise uneven/partial windows, sample "
                     "weights, schedules or distribution.")
    ctx = [r for r in corr if r["kind"] == "plain_b"]
    if ctx:
        notes.append("For scale: plain training at b without accumulation differs from big batch "
                     "by " + ", ".join(f"{r['max_dw']:.2g} ({r['optimizer'].split('(')[0]})"
                                       for r in ctx) + ".")
    bn = [r for r in checks.get("bn_moving", []) if r.get("status") == "ok"]
    for kind, name in (("ga_tfx", "ga_tfx AccumBatchNormalization"),
                       ("anchor", "gradient-accumulator AccumBatchNormalization")):
        rows = [r for r in bn if r["kind"] == kind]
        if rows:
            notes.append(f"BN moving statistics, {name}: max |Δ moving_variance| " + ", ".join(
                f"{r['max_d_var']:.3g} (rel. {r['rel_d_var']:.2g}, {r['layout'].split(':')[0]})"
                for r in rows) + ", max |Δ moving_mean| " + ", ".join(
                f"{r['max_d_mean']:.3g}" for r in rows) + ".")
    for layout in sorted({r["layout"] for r in bn}):
        by_kind = {r["kind"]: r for r in bn if r["layout"] == layout}
        if "anchor" in by_kind and "keras_bn" in by_kind:
            notes.append(
                f"{layout.split(':')[0]}: gradient-accumulator's AccumBatchNormalization "
                f"misses the window variance by {by_kind['anchor']['max_d_var']:.3g}, plain "
                f"Keras BN updated every micro-batch by {by_kind['keras_bn']['max_d_var']:.3g}: "
                "averaging per-micro-batch variances drops the spread between micro-batch "
                "means.")
    for row in checks.get("bn_replace", []):
        if row.get("status") == "ok":
            notes.append(f"`{row['method']}`: max |Δ output| {row['max_d_out']:.3g} "
                         f"(outputs up to {row['ref_output_max']:.3g}).")
    return notes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro-batch", type=int, default=32, help="micro-batch size b")
    parser.add_argument("--accum-steps", type=int, default=8, help="accumulation steps K")
    parser.add_argument("--repeats", type=int, default=15,
                        help="timed rounds per configuration (interleaved)")
    parser.add_argument("--samples", type=int, default=2048,
                        help="samples per timed epoch (a multiple of K*b)")
    parser.add_argument("--output", default=None, help="write the Markdown report here")
    parser.add_argument("--memory-jobs", type=int, default=2,
                        help="memory subprocesses run at a time (peak memory is per process)")
    parser.add_argument("--skip-memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_config", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.samples % (args.micro_batch * args.accum_steps):
        parser.error("--samples must be a multiple of micro-batch * accum-steps")

    if args._worker:
        result = {}
        try:
            {"memory": worker_memory, "correctness": worker_correctness}[args._worker](
                args, result)
            result.setdefault("status", "ok")
        except Exception as error:
            result.update(status="error", error=error_text(error))
            traceback.print_exc()
        with open(args._result, "w") as f:
            json.dump(result, f)
        return

    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.perf_counter()
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) \
        else sys.executable
    command = shlex.join([python, os.path.relpath(os.path.abspath(__file__))] + sys.argv[1:])
    facts = machine_facts()
    print(f"ga_tfx benchmark: b={args.micro_batch} K={args.accum_steps} "
          f"samples={args.samples} repeats={args.repeats}", flush=True)

    memory, phases = {}, {}
    t_phase = time.perf_counter()
    if not args.skip_memory:
        print(f"[1/3] peak memory, one fresh subprocess per configuration "
              f"({args.memory_jobs} at a time)", flush=True)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=args.memory_jobs) as pool:
            futures = {name: pool.submit(run_worker, "memory", args, name) for name in CONFIGS}
            for name, future in futures.items():
                memory[name] = r = future.result()
                print(f"  {name}: " + (
                    f"RSS pre {r['pre_train_maxrss_mib']:.0f} MiB, peak "
                    f"{r['peak_maxrss_mib']:.0f} MiB; TF tensors steady peak "
                    f"{r['tf_peak_steady_mib']:.1f} MiB (pre-train {r['tf_pre_train_mib']:.1f})"
                    if r.get("status") == "ok" else f"FAILED {r.get('error')}"), flush=True)
        phases["memory"] = time.perf_counter() - t_phase
    print("[2/3] correctness and BatchNormalization checks (subprocess, op determinism)",
          flush=True)
    t_phase = time.perf_counter()
    checks = run_worker("correctness", args)
    phases["correctness+BN"] = time.perf_counter() - t_phase
    print("[3/3] throughput, interleaved rounds", flush=True)
    t_phase = time.perf_counter()
    throughput = measure_throughput(args)
    phases["throughput"] = time.perf_counter() - t_phase
    facts["load_avg_end"] = os.getloadavg()
    facts["ga_tfx_source_end"] = ga_tfx_source()

    report = render(args, facts, throughput, memory, checks, command, started,
                    time.perf_counter() - t0, phases)
    print()
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report + "\n")
        print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
