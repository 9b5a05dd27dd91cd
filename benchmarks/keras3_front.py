"""The Keras 3 front-end (``ga_tfx.keras3``) beside Keras 3's built-in accumulation, plain
Keras 3 at ``b`` and ``K·b``, and the bound: one Keras 3 process, paired epochs, per CPU-second
and peak tensor memory.

Run in the Keras 3 environment (``.venv-keras3``: keras 3.15, no tf-keras)::

    .venv-keras3/bin/python -m benchmarks.keras3_front --backend tensorflow --rounds 7

Every configuration trains :func:`benchmarks.configs.conv_net` (conv+BN) on the same synthetic
data with ``SGD(0.01, momentum=0.9)`` through ``fit`` (:class:`benchmarks.builders.FitSlot`),
but the bound, which sums the gradients of every micro-batch in one compiled call per epoch
(:mod:`benchmarks.keras3_bound`). All run in ONE process: every round runs one epoch of each,
the order reversed every other round, so each paired ratio compares neighbouring epochs. Rates
are samples per CPU-second of the whole process (``time.process_time``); memory is the epoch's
peak of TensorFlow's CPU allocator above the bytes in use before it (:mod:`benchmarks.memory`;
none on JAX, whose buffers that allocator does not see). The report, ``benchmarks/KERAS3.md``
and ``.json`` (``KERAS3_<backend>`` for another backend), states the goal of issue 52 item 6
and whether each part was met; nothing is tuned to meet it.
"""

import argparse
import json
import os
import sys

ROWS = (
    ("keras3_plain_b", "plain Keras 3 @ b"),
    ("keras3_plain_b_spe", "plain Keras 3 @ b, steps_per_execution=K"),
    ("keras3_plain_Kb", "plain Keras 3 @ K·b (another compute shape: one batch of K·b)"),
    ("keras3_bound", "the bound: compiled fwd+bwd of every micro-batch of b, summed"),
    ("keras3_ga", "Keras 3 gradient_accumulation_steps @ (b, K)"),
    ("keras3_ga_spe", "Keras 3 gradient_accumulation_steps @ (b, K), steps_per_execution=K"),
    ("ga_keras3", "ga_tfx.keras3.wrap_model @ (b, K)"),
)
# (numerator, denominator, what it answers, goal: the ratio's median at least this)
PAIRS = (
    ("ga_keras3", "keras3_ga", "ga_tfx.keras3 vs Keras 3 built-in (goal ≥ 1.05)", 1.05),
    ("ga_keras3", "keras3_bound", "ga_tfx.keras3 vs the bound (goal ≥ 0.97)", 0.97),
    (
        "keras3_bound",
        "keras3_plain_b_spe",
        "the bound vs plain Keras 3 @ b, steps_per_execution=K (check that it bounds: ≥ 1)",
        1.0,
    ),
    (
        "ga_keras3",
        "keras3_ga_spe",
        "ga_tfx.keras3 vs Keras 3 built-in, both one window per call (context)",
        None,
    ),
    ("ga_keras3", "keras3_plain_b", "ga_tfx.keras3 vs plain Keras 3 @ b (context)", None),
    (
        "ga_keras3",
        "keras3_plain_b_spe",
        "ga_tfx.keras3 vs plain Keras 3 @ b, steps_per_execution=K (context)",
        None,
    ),
    (
        "ga_keras3",
        "keras3_plain_Kb",
        "ga_tfx.keras3 vs plain Keras 3 @ K·b (context: another compute shape, not a bound)",
        None,
    ),
    ("keras3_ga", "keras3_bound", "Keras 3 built-in vs the bound (context)", None),
)
# JAX only: the bound's computation in one jax.jit call per epoch (benchmarks/keras3_bound.py)
JAX_ROWS = (
    (
        "keras3_bound_fori",
        "the bound's sums in one jax.jit call per epoch, a lax.fori_loop inside (no bound here)",
    ),
)
JAX_PAIRS = (
    (
        "keras3_bound_fori",
        "keras3_bound",
        "the bound's sums: one jit call per epoch (fori_loop) vs one per micro-batch (context)",
        None,
    ),
)


def rows_on(backend):
    """The report's rows on ``backend``: ``(name, label)``."""
    return ROWS + (JAX_ROWS if backend == "jax" else ())


def pairs_on(backend):
    """The report's paired ratios on ``backend``: ``(num, den, what, goal or None)``."""
    return PAIRS + (JAX_PAIRS if backend == "jax" else ())


def _build(name, keras, b, k, x, y):
    """The slot of row ``name`` (a fresh conv net, same seed for every row): a FitSlot, or the
    bound's slot (:mod:`benchmarks.keras3_bound`)."""
    import tensorflow as tf

    from benchmarks.builders import FitSlot
    from benchmarks.configs import LEARNING_RATE, MOMENTUM, conv_net, loss_fn

    model = conv_net(keras)
    if name.startswith("keras3_bound"):
        from benchmarks.keras3_bound import bound_slot

        return bound_slot(keras, tf, model, x, y, b, "fori" if name.endswith("fori") else "host")
    extra = {}
    if name == "ga_keras3":
        import ga_tfx.keras3 as ga3

        model = ga3.wrap_model(model, accum_steps=k)
    elif name.startswith("keras3_ga"):
        extra["gradient_accumulation_steps"] = k
    # On TensorFlow, wrap_model's compile sets steps_per_execution=K (a window per call);
    # the *_spe rows give Keras the same; the other rows keep Keras' default of 1.
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM, **extra),
        loss=loss_fn(keras),
        **({"steps_per_execution": k} if name.endswith("_spe") else {}),
    )
    return FitSlot(keras, tf, model, x, y, b * k if name == "keras3_plain_Kb" else b)


def measure(args):
    """``{name: [Timing per round]}`` after ``args.warmup`` untimed epochs of each row."""
    import ga_tfx.keras3  # noqa: F401  (first: keeps this process on Keras 3)

    import keras
    import numpy as np

    from benchmarks.configs import make_data

    x, y = make_data(args.samples)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        from benchmarks.builders import as_tensors

        x, y = as_tensors(tf, x, y)
    else:
        x, y = np.asarray(x), np.asarray(y)
    slots = {
        name: _build(name, keras, args.micro_batch, args.accum_steps, x, y)
        for name, _ in rows_on(args.backend)
    }
    for slot in slots.values():
        for _ in range(args.warmup):
            slot.run_epoch()
    times = {name: [] for name in slots}
    order = list(slots)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            times[name].append(slots[name].run_epoch())
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    return times


def summarize(args, times):
    """The report's JSON: per row the CPU rate and memory spreads, per pair the paired ratios
    and whether its goal was met, and the memory goal."""
    from benchmarks.stats import paired_ratios, spread

    cpu = {name: [t.cpu for t in ts] for name, ts in times.items()}
    rows = {}
    for name, label in rows_on(args.backend):
        # TensorFlow's allocator sees no JAX buffers: no memory figure on JAX.
        peaks = [t.tensor_peak_mib for t in times[name] if t.tensor_peak_mib is not None]
        peaks = peaks if args.backend == "tensorflow" else []
        rows[name] = {
            "label": label,
            "cpu_rate": spread(args.samples / c for c in cpu[name]),
            "tensor_peak_mib": spread(peaks) if peaks else None,
        }
    pairs = []
    for num, den, what, goal in pairs_on(args.backend):
        ratio = spread(paired_ratios(cpu[num], cpu[den]))
        met = None if goal is None else ratio["median"] >= goal
        pairs.append({"num": num, "den": den, "what": what, "goal": goal, "cpu": ratio, "met": met})
    ours, plain = rows["ga_keras3"]["tensor_peak_mib"], rows["keras3_plain_b"]["tensor_peak_mib"]
    memory_met = None if ours is None or plain is None else ours["median"] <= plain["median"]
    return {"rows": rows, "pairs": pairs, "memory_goal_met": memory_met}


def _fmt(s, unit=""):
    return f"{s['median']:.3g}{unit} [{s['q1']:.3g}, {s['q3']:.3g}]"


VERDICT = {True: "**met**", False: "**not met**", None: "not measured"}
BOUND_HOW = {
    "tensorflow": "one `tf.function` call per epoch, its `tf.while_loop` "
    "(`parallel_iterations=1`) running `tf.GradientTape` over `model(x, training=True)` for "
    "every micro-batch: no host call per micro-batch.",
    "jax": "one `jax.jit` call per micro-batch, dispatched from a host loop (as Keras 3's own "
    "`fit` runs on JAX, `steps_per_execution` or not), each adding `jax.value_and_grad` of "
    "`model.stateless_call(..., training=True)` to the sums, the non-trainable variables "
    "threaded. The same sums in one `jax.jit` call per epoch with a `jax.lax.fori_loop` "
    "(`keras3_bound_fori`) are no bound on a CPU: XLA:CPU puts a convolution into its fast "
    "kernel's layout only in the entry computation, not in a loop body (`ConvCanonicalization`, "
    "`xla/service/cpu/conv_canonicalization.cc`), so the backward pass's convolutions run a "
    "generic loop nest there.",
}


def pair_row(pair):
    """The Markdown row of one paired ratio (the report's, and what tests read back)."""
    goal = VERDICT[pair["met"]] if pair["goal"] is not None else "context"
    return f"| {pair['what']} | {_fmt(pair['cpu'], 'x')} | {goal} |"


def write_report(args, facts, result, stem):
    """``stem``.json (the summaries, :func:`benchmarks.results.write`) and ``stem``.md (the
    tables and the verdicts)."""
    from benchmarks import results

    # the Markdown prints the figures the JSON keeps (rounded once, by results.compact)
    result = results.compact({"command": facts["command"], "facts": facts, **result})
    results.write(result, stem + ".json")
    verdict = VERDICT
    lines = [
        f"# ga_tfx.keras3 beside Keras 3's accumulation ({facts['backend']} backend)",
        "",
        f"Command: `{facts['command']}`  ",
        f"Code: commit {facts['commit']}; keras {facts['keras']}, {facts['backend']} "
        f"{facts['backend_version']}, Python {facts['python']}  ",
        f"Machine: {facts['cpus']} CPUs, load average {facts['load_before']} before and "
        f"{facts['load_after']} after (shared with other jobs: rates are only comparable within a "
        "round; the paired ratios are the result).  ",
        f"Work: conv+BN net, {args.samples} samples per epoch, b = {args.micro_batch}, "
        f"K = {args.accum_steps}, SGD(0.01, momentum 0.9), `fit`; {args.warmup} untimed epochs, "
        f"then {args.rounds} rounds of one epoch each, order reversed every other round, one "
        "process (`benchmarks/keras3_front.py`).",
        "",
        "The bound (`keras3_bound`, `benchmarks/keras3_bound.py`), as the Keras 2 report's: the "
        "compiled training-mode forward and backward pass of every micro-batch of b, sliced from "
        "one tensor, its gradients summed: no optimizer, no input pipeline, one micro-batch in "
        f"flight; {BOUND_HOW[facts['backend']]} Plain Keras 3 at K·b is another compute shape "
        "(one batch of K·b samples, whose larger matrix products cost more or less per sample "
        "than K of b), not a bound for accumulation at b: it is context. Median "
        "[interquartile range] over the rounds.",
        "",
        "| configuration | samples / CPU-second | peak tensor memory (MiB) |",
        "|---|---|---|",
    ]
    for name, _ in rows_on(facts["backend"]):
        row = result["rows"][name]
        mib = _fmt(row["tensor_peak_mib"]) if row["tensor_peak_mib"] else "n/a"
        lines.append(f"| {row['label']} (`{name}`) | {_fmt(row['cpu_rate'])} | {mib} |")
    lines += ["", "| paired ratio per CPU-second | median [IQR] | goal |", "|---|---|---|"]
    lines += [pair_row(pair) for pair in result["pairs"]]
    ours, plain = (result["rows"][n]["tensor_peak_mib"] for n in ("ga_keras3", "keras3_plain_b"))
    figures = f" ({ours['median']:.3g} vs {plain['median']:.3g} MiB)" if ours and plain else ""
    lines += [
        "",
        "Memory goal (ga_tfx.keras3's peak ≤ plain Keras 3 @ b, medians): "
        + verdict[result["memory_goal_met"]]
        + figures
        + ".",
        "",
    ]
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines))


def _facts(args, load_before):
    import platform

    import keras

    from benchmarks.provenance import measured_code

    backend = keras.backend.backend()
    module = "tensorflow" if backend == "tensorflow" else backend
    return {
        "command": " ".join([".venv-keras3/bin/python -m benchmarks.keras3_front"] + sys.argv[1:]),
        "commit": measured_code(),
        "backend": backend,
        "backend_version": __import__(module).__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": " ".join(f"{v:.2f}" for v in load_before),
        "load_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
    }


def main(argv=None):
    from benchmarks.provenance import ROOT, add_allow_dirty, refuse_uncommitted

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--accum-steps", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2048)
    add_allow_dirty(parser)
    args = parser.parse_args(argv)
    if args.samples % (args.micro_batch * args.accum_steps):
        parser.error(f"--samples {args.samples}: must be a multiple of K·b")
    refuse_uncommitted(parser, args.allow_dirty)
    os.environ["KERAS_BACKEND"] = args.backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    load_before = os.getloadavg()
    result = summarize(args, measure(args))
    stem = "KERAS3" if args.backend == "tensorflow" else f"KERAS3_{args.backend}"
    write_report(args, _facts(args, load_before), result, os.path.join(ROOT, "benchmarks", stem))
    print(json.dumps(result["pairs"], indent=1))


if __name__ == "__main__":
    main()
