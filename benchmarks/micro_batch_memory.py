"""Memory against micro-batch, the micro-batch a budget picks, and what a smaller one costs.

    TF_CPU_ALLOCATOR_USE_BFC=true .venv/bin/python -m benchmarks.micro_batch_memory \\
        --output benchmarks/MEMORY.md

The benchmark conv net (``benchmarks.configs.conv_net``, SGD with momentum) at one effective
batch (256) made of micro-batches of 32, 64, 128 and 256 (K = 8, 4, 2, 1) with ga-tfx ``fit``:

* the peak tensor memory of an epoch (the allocator's peak above the bytes in use before it,
  plus the run's variables, optimizer slots and accumulation buffers: what training needs);
* samples per CPU-second, the configurations measured in rounds, one epoch each, the order
  rotated, ratios to micro-batch 256 taken within each round (median [IQR]);
* at every size, ``--repeats`` readings of that peak (a fresh model each) and as many of
  ``ga_tfx.fit_micro_batch``'s probe (its reading of the size alone, the margin left out), and
  the probe's worst under-read: the highest training peak over the lowest probe reading, the
  figure ``ga_tfx.sizing.memory.PROBE_MARGIN`` is set from;
* for three budgets placed between the measured peaks, and for one inside the probe's error at
  each size where the training peak went above a probe reading (halfway between the two), the
  micro-batch ``ga_tfx.fit_micro_batch`` picks, and whether that size's training peak (the
  highest read) is within the budget.

TensorFlow keeps allocator statistics on the CPU only with its BFC CPU allocator: the script
sets ``TF_CPU_ALLOCATOR_USE_BFC=true`` before TensorFlow starts.
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

EFFECTIVE = 256
MICRO = (256, 128, 64, 32)


def _q(values):
    values = sorted(values)
    if len(values) < 4:
        return statistics.median(values), values[0], values[-1]
    q = statistics.quantiles(values, n=4)
    return q[1], q[0], q[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--samples", type=int, default=1024, help="samples per epoch")
    parser.add_argument(
        "--repeats", type=int, default=5, help="readings of each size's peak and of its probe"
    )
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)

    import ga_tfx
    from ga_tfx import keras, tf
    from ga_tfx.sizing import memory as memory_lib

    from benchmarks.configs import LEARNING_RATE, MOMENTUM, conv_net, loss_fn, make_data

    started = time.time()
    x, y = make_data(args.samples)

    def compiled(model):
        model.compile(keras.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM), loss_fn(keras))
        return model

    def training_peak(micro):
        """A fresh model's training peak at ``micro`` (its second epoch; the first traces)."""
        model = compiled(ga_tfx.wrap_model(conv_net(keras), EFFECTIVE // micro))
        model.fit(data[micro], epochs=1, verbose=0)  # traces
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        tf.config.experimental.reset_memory_stats("CPU:0")
        model.fit(data[micro], epochs=1, verbose=0)
        epoch = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
        buffers = model.window_core.accumulator.sums if model.window_core else []  # K=1
        held = model.variables + list(model.optimizer.variables) + buffers
        return model, epoch + sum(int(v.shape.num_elements()) * v.dtype.size for v in held)

    def probe_reading(micro):
        """``fit_micro_batch``'s own reading of ``micro`` alone, without the margin."""
        return ga_tfx.fit_micro_batch(
            compiled(conv_net(keras)),
            x,
            y,
            EFFECTIVE,
            2**50,
            candidates=[micro],
            device="CPU:0",
            margin=0.0,
        ).peaks[micro]

    models, readings, probes, data = {}, {}, {}, {}
    for micro in MICRO:
        # One dataset per size, made and iterated once before the measurement: TensorFlow
        # copies a new dataset's in-memory tensors on its first iteration (the data, not the
        # training step).
        data[micro] = tf.data.Dataset.from_tensor_slices((x, y)).batch(micro)
        readings[micro], probes[micro] = [], []
    for _ in range(args.repeats):  # the sizes interleaved, a training run then a probe each
        for micro in MICRO:
            models[micro], peak = training_peak(micro)
            readings[micro].append(peak)
            probes[micro].append(probe_reading(micro))
    # A size's training cost: the highest reading (what a budget must hold).
    peaks = {micro: max(readings[micro]) for micro in MICRO}
    under = {micro: peaks[micro] / min(probes[micro]) for micro in MICRO}
    worst = max(MICRO, key=under.get)

    rates = {micro: [] for micro in MICRO}
    for r in range(args.rounds):
        order = MICRO[r % len(MICRO) :] + MICRO[: r % len(MICRO)]
        for micro in order:
            cpu = time.process_time()
            models[micro].fit(data[micro], epochs=1, verbose=0)
            rates[micro].append(args.samples / (time.process_time() - cpu))
    ratios = {micro: [a / b for a, b in zip(rates[micro], rates[EFFECTIVE])] for micro in MICRO}

    ordered = sorted(peaks.values())
    budgets = [("halfway", (a + b) // 2) for a, b in zip(ordered, ordered[1:])][:3]
    # Inside the probe's error: halfway between a size's lowest probe reading and its training
    # peak, where that peak is the higher (a pick without the margin would take that size).
    budgets += [
        (f"inside {m}'s error", (min(probes[m]) + peaks[m]) // 2)
        for m in MICRO
        if peaks[m] > min(probes[m])
    ]
    choices = []
    for kind, budget in budgets:
        try:
            choice = ga_tfx.fit_micro_batch(
                compiled(conv_net(keras)),
                x,
                y,
                EFFECTIVE,
                budget,
                candidates=MICRO,
                device="CPU:0",
            )
        except ValueError:  # no size fits with the margin: refused, nothing overruns
            choice = None
        choices.append((kind, budget, choice))

    mib = lambda n: f"{n / 2**20:.1f}"  # noqa: E731
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# Memory against micro-batch (effective batch 256), and the micro-batch a budget picks",
        "",
        f"Generated by `python -m benchmarks.micro_batch_memory` at commit {commit} on "
        f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC ({time.time() - started:.0f} s; "
        f"{args.repeats} readings of each peak, {args.rounds} rounds of {args.samples} samples; "
        "CPU, 2 cores, shared). Command:",
        "",
        "```",
        "TF_CPU_ALLOCATOR_USE_BFC=true .venv/bin/python -m benchmarks.micro_batch_memory "
        "--output benchmarks/MEMORY.md",
        "```",
        "",
        "The benchmark conv net (benchmarks/configs.py), SGD with momentum, ga-tfx `fit` on a "
        "`tf.data` dataset made (and iterated) once. Training peak: an epoch's allocator peak "
        "above the bytes in use before it, plus the run's variables, optimizer slots and "
        f"accumulation buffers, read {args.repeats} times (a fresh model each); probe: "
        "`ga_tfx.fit_micro_batch`'s reading of the size alone (one window of two micro-batches "
        f"of ga-tfx `fit`, the margin left out), {args.repeats} times, interleaved with them. "
        "Under-read: the highest training peak over the lowest probe reading. Samples per "
        "CPU-second: median [IQR] over rounds; the ratio to micro-batch 256 is taken within "
        "each round.",
        "",
        "| micro-batch x K | training peak (MiB) | probe (MiB) | under-read | samples / CPU-s "
        "| vs 256 x 1 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for micro in MICRO:
        rate, ratio = _q(rates[micro]), _q(ratios[micro])
        lines.append(
            f"| {micro} x {EFFECTIVE // micro} | {mib(min(readings[micro]))}-{mib(peaks[micro])}"
            f" | {mib(min(probes[micro]))}-{mib(max(probes[micro]))} | {under[micro]:.3f} | "
            f"{rate[0]:.0f} [{rate[1]:.0f}-{rate[2]:.0f}] | "
            f"{ratio[0]:.2f} [{ratio[1]:.2f}-{ratio[2]:.2f}] |"
        )
    margin = memory_lib.PROBE_MARGIN
    lines += [
        "",
        f"The probe's worst under-read: {under[worst]:.3f} at micro-batch {worst} (training "
        f"peaks up to {mib(peaks[worst])} MiB, probe readings down to "
        f"{mib(min(probes[worst]))} MiB); `ga_tfx.sizing.memory.PROBE_MARGIN` = {margin}: a size "
        f"fits when its probe reading x {1 + margin:g}, plus one more input micro-batch "
        f"(`ga_tfx.sizing.memory.required_bytes`), is within the budget "
        f"(the factor alone {'covers' if 1 + margin >= under[worst] else 'does NOT cover'} it).",
        "",
        "Budgets halfway between neighbouring training peaks, and inside the probe's error "
        "(halfway between a size's lowest probe reading and its training peak: a pick without "
        "the margin takes that size); `ga_tfx.fit_micro_batch` (its own probe, the margin "
        "applied) picks:",
        "",
        "| budget (MiB) | placed | picked | its probe's reading (MiB) | its training peak (MiB) "
        "| within |",
        "|---:|---|---|---:|---:|---|",
    ]
    for kind, budget, choice in choices:
        if choice is None:
            lines.append(f"| {mib(budget)} | {kind} | none fits (refused) | | | yes |")
            continue
        measured = peaks[choice.micro_batch]
        lines.append(
            f"| {mib(budget)} | {kind} | {choice.micro_batch} x {choice.accum_steps} | "
            f"{mib(choice.peaks[choice.micro_batch])} | {mib(measured)} | "
            f"{'yes' if measured <= budget else 'NO'} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    return 0 if all(c is None or peaks[c.micro_batch] <= b for _, b, c in choices) else 1


if __name__ == "__main__":
    sys.exit(main())
