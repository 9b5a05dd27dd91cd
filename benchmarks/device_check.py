"""A short check of ga-tfx on one accelerator: ratios and PASS / FAIL / SKIP lines.

    python -m benchmarks.device_check [--output benchmarks/DEVICE.md] [--quick]

Made to run in under 8 minutes on one GPU (``--quick``: seconds, for the CPU test of the
script itself, ``tests/test_device_check.py``). Each section prints one line per claim:

1. **precision**: ``mixed_float16`` and ``mixed_bfloat16`` accumulation (``K = 4``) against
   float32 big-batch SGD with momentum: ``max |dw| <= 4 u x movement`` (u: the compute dtype's
   unit round-off; the bound of ``tests/test_mixed_precision.py``).
2. **memory**: ``fit_micro_batch`` under a budget halfway between its probe's peaks at two
   sizes, the smaller one's with the probe's margin and one more input micro-batch
   (``ga_tfx.sizing.memory.required_bytes``, which the pick applies); the chosen size's real
   training peak (``get_memory_info``: peak above what was in use, plus what the run holds)
   must be within the budget. On a CPU (TensorFlow's BFC
   allocator, set by this module before TensorFlow starts) the line is INFO, not a verdict:
   there the probe's reading of one size moved by up to 20% between runs (e.g. 65.6, 74.0 and
   81.0 MiB at 512 in three ``--quick`` runs), so a budget halfway between two sizes is inside
   the noise; ``tests/test_memory.py`` checks the claim on the CPU with one op at a time.
3. **oom**: a real device out-of-memory error: in a child process whose GPU is limited to
   ``OOM_LIMIT_MIB``, ``fit`` at a micro-batch whose activations do not fit; ga-tfx splits
   the micro-batch and goes on; the weights must equal a run at half the micro-batch from
   the start (``<= 1e-5``, relative to the weights). Needs a GPU (SKIP on a CPU).
4. **speed**: samples per second of ga-tfx ``fit`` (micro-batch ``b``, ``K = 4``) against
   plain Keras ``fit`` at ``b`` and at ``4b`` (the effective batch), and against Keras 3's
   built-in accumulation (``gradient_accumulation_steps``, its own process), as ratios.
   The same section gives the **noise scale**'s cost: samples per second with
   ``log_noise_scale`` against without.

Exit status 1 when a line says FAIL. The device's name heads the output.
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # memory statistics on a CPU too

import argparse
import json
import subprocess
import sys
import time
from typing import List, Tuple

UNIT_ROUNDOFF = {"mixed_float16": 2.0**-11, "mixed_bfloat16": 2.0**-8}
ROUNDOFF_FACTOR = 4.0  # tests/test_mixed_precision.py's bound
OOM_LIMIT_MIB = 1024  # the child's GPU memory limit
K = 4


def _keras():
    import ga_tfx  # noqa: F401  (first import: Keras 2)
    from ga_tfx import keras, tf

    return ga_tfx, keras, tf


def _data(n, features, classes=10, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    return x, (x[:, :classes].argmax(1)).astype("int64")


def _mlp(keras, features, width, classes=10, seed=1):
    """Two tanh layers (smooth: a half-precision rounding does not flip a ReLU's kink, which
    would make the comparison with float32 chaotic rather than a measure of round-off)."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((features,))
    h = keras.layers.Dense(width, activation="tanh")(inputs)
    h = keras.layers.Dense(width, activation="tanh")(h)
    outputs = keras.layers.Dense(classes, dtype="float32")(h)  # float32 logits
    return keras.Model(inputs, outputs)


def _loss(keras):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _compiled(keras, model):
    model.compile(keras.optimizers.SGD(0.01, momentum=0.9), _loss(keras))
    return model


def _max_diff(a, b):
    import numpy as np

    return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b))


def precision(quick: bool) -> List[str]:
    ga_tfx, keras, tf = _keras()
    n, micro = (96, 6) if quick else (1024, 32)
    x, y = _data(n, 32)
    keras.mixed_precision.set_global_policy("float32")
    reference = _mlp(keras, 32, 64)
    start = [w.copy() for w in reference.get_weights()]
    reference.compile(keras.optimizers.SGD(0.1, momentum=0.9), _loss(keras))
    reference.fit(x, y, batch_size=micro * K, epochs=2, shuffle=False, verbose=0)
    movement = _max_diff(reference.get_weights(), start)
    lines = []
    for policy in UNIT_ROUNDOFF:
        keras.mixed_precision.set_global_policy(policy)
        try:
            model = ga_tfx.wrap_model(_mlp(keras, 32, 64), K)
            model.compile(keras.optimizers.SGD(0.1, momentum=0.9), _loss(keras))
            model.fit(x, y, batch_size=micro, epochs=2, shuffle=False, verbose=0)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        diff = _max_diff(model.get_weights(), reference.get_weights())
        bound = ROUNDOFF_FACTOR * UNIT_ROUNDOFF[policy] * movement
        verdict = "PASS" if diff <= bound and movement > 0.05 else "FAIL"
        lines.append(
            f"{verdict} precision {policy}: K={K} x {micro} vs float32 batch {K * micro}: "
            f"max|dw| {diff:.3g} <= {bound:.3g} (4 u x movement {movement:.3g})"
        )
    return lines


def _training_peak(ga_tfx, keras, tf, device, x, y, micro, effective):
    """Bytes one ga-tfx fit epoch at ``micro`` costs on ``device`` (its second epoch's peak
    above what was in use, plus the run's variables, slots and accumulation buffers)."""
    model = ga_tfx.wrap_model(_mlp(keras, x.shape[1], 256), effective // micro)
    model.compile(keras.optimizers.SGD(0.01, momentum=0.9), _loss(keras))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(micro)
    model.fit(dataset, epochs=1, verbose=0)
    before = tf.config.experimental.get_memory_info(device)["current"]
    tf.config.experimental.reset_memory_stats(device)
    model.fit(dataset, epochs=1, verbose=0)
    peak = tf.config.experimental.get_memory_info(device)["peak"] - before
    held = list(model.variables) + list(model.optimizer.variables)
    held += model.window_core.accumulator.sums if model.window_core else []
    return peak + sum(int(v.shape.num_elements()) * v.dtype.size for v in held)


def memory(quick: bool) -> List[str]:
    ga_tfx, keras, tf = _keras()
    from ga_tfx.sizing import memory as memory_lib

    device = memory_lib.default_device()
    effective = 1024 if quick else 4096
    x, y = _data(effective, 8192 if quick else 4096)  # the batch's bytes set the difference
    big, small = effective // 2, effective // 4
    probe = {
        size: ga_tfx.fit_micro_batch(
            _compiled(keras, _mlp(keras, x.shape[1], 256)),
            x,
            y,
            effective,
            2**50,
            candidates=[size],
            device=device,
        ).peaks[size]
        for size in (big, small)
    }
    # What the pick compares: the reading with the margin and one more input micro-batch.
    with_margin = memory_lib.required_bytes(probe[small], memory_lib.input_bytes(x, y, small))
    budget = (probe[big] + with_margin) // 2
    gpu = device.startswith("GPU")
    try:
        choice = ga_tfx.fit_micro_batch(
            _compiled(keras, _mlp(keras, x.shape[1], 256)),
            x,
            y,
            effective,
            budget,
            candidates=[big, small],
            device=device,
        )
    except ValueError as error:  # its second reading of the smaller size was over the budget
        return [f"{'FAIL' if gpu else 'INFO'} memory on {device}: {error}"]
    real = _training_peak(ga_tfx, keras, tf, device, x, y, choice.micro_batch, effective)
    verdict = "PASS" if choice.micro_batch == small and real <= budget else "FAIL"
    if not gpu:  # see the module docstring
        verdict = "INFO"
    mib = 2**20
    return [
        f"{verdict} memory on {device}: budget {budget / mib:.1f} MiB (halfway between the probe's "
        f"{probe[small] / mib:.1f} at {small}, {with_margin / mib:.1f} with its margin of "
        f"{memory_lib.PROBE_MARGIN:.0%} and one more input micro-batch, and "
        f"{probe[big] / mib:.1f} at {big}): picked "
        f"{choice.micro_batch} x {choice.accum_steps}; its training peaks at {real / mib:.1f} MiB "
        f"(probe / training {probe[choice.micro_batch] / real:.3f})"
    ]


def _oom_child() -> None:
    """In its own process: a GPU limited to OOM_LIMIT_MIB; fit at a micro-batch whose
    activations do not fit, then at half of it from the start; prints a JSON line."""
    ga_tfx, keras, tf = _keras()  # first: Keras 2 (nothing runs on the GPU yet)
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_logical_device_configuration(
        gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=OOM_LIMIT_MIB)]
    )
    tf.config.experimental.enable_op_determinism()
    width, features = 16384, 4096
    micro = 8192  # activations of 8192 x 16384 float32: 512 MiB each, several per step
    x, y = _data(micro * 2, features)

    def run(micro_batch, k):
        model = ga_tfx.wrap_model(_mlp(keras, features, width), k)
        model.compile(keras.optimizers.SGD(0.01, momentum=0.9), _loss(keras))
        model.fit(x, y, batch_size=micro_batch, epochs=1, shuffle=False, verbose=0)
        return model

    recovered = run(micro, 2)
    split = int(recovered.window_core.micro_batch_split)
    reference = run(micro // 2, 4)
    scale = max(float(abs(w).max()) for w in reference.get_weights())
    diff = _max_diff(recovered.get_weights(), reference.get_weights()) / scale
    print(json.dumps({"split": split, "diff": diff, "micro": micro}))


def oom(quick: bool) -> List[str]:
    _, _, tf = _keras()
    if not tf.config.list_physical_devices("GPU"):
        return ["SKIP oom: needs a GPU (a real device out-of-memory error)"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check", "--oom-child"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return [f"FAIL oom: the child failed ({done.returncode}): {done.stderr[-500:]}"]
    result = json.loads(lines[-1])
    verdict = "PASS" if result["split"] >= 2 and result["diff"] <= 1e-5 else "FAIL"
    return [
        f"{verdict} oom: micro-batch {result['micro']} on a GPU limited to {OOM_LIMIT_MIB} MiB: "
        f"split {result['split']}x; weights vs micro-batch {result['micro'] // 2} from the "
        f"start: {result['diff']:.2g} (relative, <= 1e-5)"
    ]


def _samples_per_second(fit, samples, repeats=3) -> float:
    fit()  # traces
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        fit()
        best = max(best, samples / (time.perf_counter() - start))
    return best


def _keras3_child(micro: int, n: int) -> None:
    """Keras 3's built-in accumulation (its own process): prints samples per second."""
    from benchmarks import frameworks

    keras, tf = frameworks.load(frameworks.KERAS3)
    x, y = _data(n, 512)
    model = _mlp(keras, 512, 1024)
    model.compile(
        keras.optimizers.SGD(0.01, momentum=0.9, gradient_accumulation_steps=K), _loss(keras)
    )
    rate = _samples_per_second(
        lambda: model.fit(x, y, batch_size=micro, epochs=1, shuffle=False, verbose=0), n
    )
    print(json.dumps({"rate": rate}))


def speed(quick: bool) -> List[str]:
    ga_tfx, keras, tf = _keras()
    from benchmarks import frameworks

    micro, n = (16, 256) if quick else (256, 65536)
    x, y = _data(n, 512)

    def rate(accumulate, batch, **settings):
        model = _mlp(keras, 512, 1024)
        if accumulate:
            model = ga_tfx.wrap_model(model, K, **settings)
        model.compile(keras.optimizers.SGD(0.01, momentum=0.9), _loss(keras))
        return _samples_per_second(
            lambda: model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0), n
        )

    ours = rate(True, micro)
    plain_micro, plain_big = rate(False, micro), rate(False, K * micro)
    noisy = rate(True, micro, log_noise_scale=True)
    child = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check", "--keras3-child", str(micro), str(n)],
        capture_output=True,
        text=True,
        timeout=600,
        env=frameworks.subprocess_env(frameworks.KERAS3),
    )
    found = [line for line in child.stdout.splitlines() if line.startswith("{")]
    keras3 = json.loads(found[-1])["rate"] if not child.returncode and found else None
    lines = [
        f"INFO speed: ga-tfx {ours:.0f} samples/s (micro-batch {micro} x K={K}); plain Keras "
        f"at {micro}: {plain_micro:.0f} (ga-tfx / it {ours / plain_micro:.2f}); at "
        f"{K * micro}: {plain_big:.0f} (ga-tfx / it {ours / plain_big:.2f})",
        (
            f"INFO speed: Keras 3 gradient_accumulation_steps={K} at {micro}: {keras3:.0f} "
            f"samples/s (ga-tfx / it {ours / keras3:.2f})"
            if keras3
            else f"SKIP speed: Keras 3's accumulation did not run: {child.stderr[-300:]}"
        ),
        f"INFO noise scale: log_noise_scale costs {1 - noisy / ours:.1%} of the samples/s "
        f"({noisy:.0f} with it, {ours:.0f} without)",
    ]
    return lines


SECTIONS = (("precision", precision), ("memory", memory), ("oom", oom), ("speed", speed))


def device_name() -> str:
    _, _, tf = _keras()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"GPU: {details.get('device_name', gpus[0].name)}"
    import platform

    return f"CPU: {platform.machine()}, {os.cpu_count()} cores (no GPU)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the script's test)")
    parser.add_argument("--output", default=None, help="also write the lines here (Markdown)")
    parser.add_argument("--only", action="append", help="run only these sections")
    parser.add_argument("--oom-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keras3-child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.oom_child:
        _oom_child()
        return 0
    if args.keras3_child:
        _keras3_child(*args.keras3_child)
        return 0
    start = time.monotonic()
    lines: List[str] = [f"device: {device_name()}"]
    print(lines[0], flush=True)
    results: List[Tuple[str, str]] = []
    for name, section in SECTIONS:
        if args.only and name not in args.only:
            continue
        for line in section(args.quick):
            print(line, flush=True)
            lines.append(line)
            results.append((name, line))
    lines.append(f"took {time.monotonic() - start:.0f} s")
    print(lines[-1])
    if args.output:
        command = "python -m benchmarks.device_check" + (" --quick" if args.quick else "")
        with open(args.output, "w") as f:
            f.write(f"# ga-tfx on one device\n\nMade by `{command}`.\n\n```\n")
            f.write("\n".join(lines) + "\n```\n")
    return 1 if any(line.startswith("FAIL") for _, line in results) else 0


if __name__ == "__main__":
    sys.exit(main())
