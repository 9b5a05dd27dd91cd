"""What exactness costs for a loss of several terms with their own divisors, paired in one process.

``python -m benchmarks.divisor_parts [--samples N] [--rounds R] [--output FILE]`` (Keras 2,
``.venv``) trains a masked GRU tagger with two heads whose losses divide by different valid
tokens (the tokens, and the padding: :func:`model`), K = 8 micro-batches of 32, and times per
round one epoch of each of:

* ``parts``: ga_tfx as it is: each head's term weighed by its own divisor (two gradients per
  micro-batch, one backward pass more: ``ga_tfx.divisor_rule.micro_batch_groups``);
* ``one_weight``: the same run with every micro-batch weighed by one divisor (one gradient;
  not exact), on the persistent tape a model of several outputs gets;
* ``one_tape``: ``one_weight`` on a plain tape (what one output's step runs: the cost before);
* ``forward``: the training-mode forward pass of every micro-batch of the epoch in one
  ``tf.function`` loop, nothing else: the least a pre-pass that reads the window's divisors
  before its backward passes (the alternative design) would add.

The order rotates each round; the report gives, per round, each configuration's epoch
seconds over ``one_tape``'s as ratios (CPU seconds of the process, and wall),
their median and interquartile range. It names the commit it measured.
"""

import argparse
import datetime
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchmarks import provenance  # noqa: E402
from benchmarks.stats import spread  # noqa: E402

SEQ_LEN, VOCAB, CLASSES, EMBED, UNITS = 32, 1000, 10, 32, 64
MICRO, K = 32, 8
CONFIGS = ("parts", "one_weight", "one_tape", "forward")


def model(keras, tf):
    """Embedding(mask_zero) -> GRU -> two per-token Dense heads: one on the tokens' mask, one on
    the padding (the mask negated): their divisors are in other ratios in every micro-batch."""
    keras.utils.set_random_seed(1)
    tokens = keras.Input((SEQ_LEN,), dtype="int32")
    h = keras.layers.Embedding(VOCAB, EMBED, mask_zero=True)(tokens)
    h = keras.layers.GRU(UNITS, return_sequences=True)(h)
    first = keras.layers.Dense(CLASSES, name="tags")(h)
    second = keras.layers.Lambda(
        tf.identity, mask=lambda t, mask: tf.logical_not(mask), name="padding"
    )(keras.layers.Dense(CLASSES)(h))
    return keras.Model(tokens, [first, second])


def data(n, np):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, SEQ_LEN, size=(n, 1))
    x = np.where(np.arange(SEQ_LEN) < lengths, rng.integers(1, VOCAB, (n, SEQ_LEN)), 0)
    y = rng.integers(0, CLASSES, size=(n, SEQ_LEN))
    return x.astype("int32"), [y.astype("int64"), ((y + 3) % CLASSES).astype("int64")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--output", default="benchmarks/DIVISOR_PARTS.md")
    provenance.add_allow_dirty(parser)
    args = parser.parse_args(argv)
    provenance.refuse_uncommitted(parser, args.allow_dirty)
    commit = provenance.measured_code()
    command = "python -m benchmarks.divisor_parts " + " ".join(argv or sys.argv[1:])

    import ga_tfx
    from ga_tfx import keras, tf
    from ga_tfx.engine import step

    import numpy as np

    x, y = data(args.samples, np)
    losses = [keras.losses.SparseCategoricalCrossentropy(from_logits=True) for _ in y]
    real_groups = step.micro_batch_groups

    def one_weight(terms, rows, total, who="the model"):
        return [(total, terms[0].divisor)]

    real_several = step.several_outputs

    def use(name):
        step.micro_batch_groups = real_groups if name == "parts" else one_weight
        step.several_outputs = (lambda m: False) if name == "one_tape" else real_several

    def fitted(name):
        use(name)
        wrapped = ga_tfx.wrap_model(model(keras, tf), K)
        wrapped.compile(keras.optimizers.SGD(0.01, momentum=0.9), losses)
        wrapped.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)  # traced
        return wrapped

    runs = {name: fitted(name) for name in ("parts", "one_weight", "one_tape")}
    use("parts")
    forward_model = model(keras, tf)
    micro_batches = tf.constant(x.reshape(-1, MICRO, SEQ_LEN))

    @tf.function
    def forward():
        def body(i, total):
            outputs = forward_model(micro_batches[i], training=True)
            return i + 1, total + tf.reduce_sum(outputs[0]) + tf.reduce_sum(outputs[1])

        return tf.while_loop(
            lambda i, _: i < micro_batches.shape[0], body, (0, 0.0), parallel_iterations=1
        )[1]

    forward()

    def epoch(name):
        if name == "forward":
            forward().numpy()
            return
        use(name)
        runs[name].fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)

    seconds = {name: {"cpu": [], "wall": []} for name in CONFIGS}
    started = time.perf_counter()
    for r in range(args.rounds):
        order = CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]
        for name in order:
            cpu, wall = time.process_time(), time.perf_counter()
            epoch(name)
            seconds[name]["cpu"].append(time.process_time() - cpu)
            seconds[name]["wall"].append(time.perf_counter() - wall)
    use("parts")
    elapsed = time.perf_counter() - started
    lines = report(seconds, args, command, commit, elapsed)
    with open(args.output, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def report(seconds, args, command, commit, elapsed):
    def ratio(num, clock):
        values = [n / d for n, d in zip(seconds[num][clock], seconds["one_tape"][clock])]
        s = spread(values)
        return f"{s['median']:.2f} [{s['q1']:.2f}–{s['q3']:.2f}]"

    def epoch_seconds(name, clock):
        s = spread(seconds[name][clock])
        return f"{s['median']:.2f} [{s['q1']:.2f}–{s['q3']:.2f}]"

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        "# Several loss terms with their own divisors: what exactness costs",
        "",
        f"Generated by `{command}` on {now} (wall time {elapsed / 60:.1f} min), "
        f"commit {commit}; {os.cpu_count()} CPUs, shared with other runs "
        f"(load average at the end {os.getloadavg()[0]:.1f}).",
        "",
        f"Model: Embedding({VOCAB}, {EMBED}, mask_zero=True), GRU({UNITS}, "
        f"return_sequences=True), two per-token Dense({CLASSES}) heads, one on the tokens' mask "
        "and one on the padding (the GRU's state differs there from row to row); "
        f"sequences of {SEQ_LEN}, lengths uniform in 1..{SEQ_LEN - 1}; "
        f"{args.samples} samples, micro-batches of {MICRO}, K = {K}, SGD with momentum; "
        f"{args.rounds} rounds, each one epoch of every configuration, the order rotated. "
        "Ratios are of epoch seconds within a round (above 1: slower than `one_tape`), "
        "median [interquartile range].",
        "",
        "| configuration | CPU s per epoch | wall s per epoch | CPU ratio to `one_tape` "
        "| wall ratio to `one_tape` |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(
            f"| `{name}` | {epoch_seconds(name, 'cpu')} | {epoch_seconds(name, 'wall')} | "
            + (
                "1 | 1 |"
                if name == "one_tape"
                else f"{ratio(name, 'cpu')} | {ratio(name, 'wall')} |"
            )
            for name in CONFIGS
        ),
        "",
        "`parts` is ga_tfx (exact: each term weighed by its own divisor, one backward pass per "
        "term); `one_weight` the same run with one weight per micro-batch (one backward pass, "
        "not exact) on the persistent tape of a model of several outputs, `one_tape` on a plain "
        "tape (one output's step: the cost before); `forward` the training-mode forward passes "
        "alone, the least that a "
        "pre-pass reading the window's divisors before its backward passes would add to "
        "`one_tape` (and it would hold only where the runner has the whole window: Keras 2 "
        "`fit`).",
    ]


if __name__ == "__main__":
    main()
