"""Start-up and run time of ``TrainingLoop`` and ``fit``, one tree against another, paired.

``python benchmarks/training_loop_start.py --before DIR --after DIR [--pairs N] [--output
FILE]`` (best from a copy outside both trees, e.g. in /tmp: a process finds the ``ga_tfx`` of
its script's folder and working directory before ``PYTHONPATH``'s) times, in a fresh process
per tree and front-end (so that neither front-end's start-up warms the other's), each pair
of processes alternating which tree runs first:

* ``TrainingLoop``: its first call (``run(max_updates=1)``: the trace of the window and the
  first window) and a run of 1,000 more windows after it;
* ``fit``: its first call (``fit`` on one window: the trace of the train function and the
  window) and a ``fit`` of 1,000 windows after it (paced, the default).

The model is small (8 -> 16 -> 3, tanh; SGD), micro-batches of 8, K = 4, so that the figures
are the library's host and trace overhead, which is what the window runner changes. Each
process imports ga_tfx from its tree (``PYTHONPATH``; the path is checked); each figure is
CPU seconds of the process (``time.process_time``: all its threads; on a shared machine it
moves far less than wall time, which other jobs stretch) and wall seconds
(``time.perf_counter``). The report gives their medians per tree and the median of the
per-pair ratios ``after / before`` (below 1: the after tree is faster). The machine is
shared: the pairing is what makes the ratio honest.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

MICRO, K, WINDOWS = 8, 4, 1000
FRONT_ENDS = ("training_loop", "fit")
CLOCKS = (("cpu", time.process_time), ("wall", time.perf_counter))
FIGURES = (
    ("training_loop_first_call", "`TrainingLoop` first call (trace + 1 window)"),
    ("training_loop_run", "`TrainingLoop` 1,000 windows after it"),
    ("fit_first_call", "`fit` first call (trace + 1 window)"),
    ("fit_run", "`fit` 1,000 windows after it"),
)


def measure(front_end: str) -> Dict[str, float]:
    """In the child process: ``front_end``'s two figures (``"training_loop"`` or ``"fit"``), in
    seconds, and where ga_tfx came from."""
    import ga_tfx
    from ga_tfx import keras

    import numpy as np

    rng = np.random.default_rng(0)
    n = MICRO * K * (WINDOWS + 1)
    x = rng.normal(size=(n, 8)).astype("float32")
    y = rng.integers(0, 3, n).astype("int64")

    def model() -> keras.Model:
        keras.utils.set_random_seed(1)
        inputs = keras.Input((8,))
        h = keras.layers.Dense(16, activation="tanh")(inputs)
        return keras.Model(inputs, keras.layers.Dense(3)(h))

    figures: Dict[str, float] = {}

    def timed(name: str, run: Callable[[], Any]) -> None:
        started = {clock: read() for clock, read in CLOCKS}
        run()
        for clock, read in CLOCKS:
            figures[f"{name}_{clock}"] = read() - started[clock]

    if front_end == "training_loop":
        time_training_loop(ga_tfx, model, x, y, timed)
    else:
        time_fit(ga_tfx, model, x, y, timed)
    return dict(figures, ga_tfx=os.path.dirname(os.path.dirname(ga_tfx.__file__)))


def time_training_loop(ga_tfx: Any, model: Callable, x: Any, y: Any, timed: Callable) -> None:
    """``TrainingLoop``'s first call, then 1,000 windows."""
    from ga_tfx import keras, tf

    loop = ga_tfx.TrainingLoop(
        model(),
        keras.optimizers.SGD(0.01),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        tf.data.Dataset.from_tensor_slices((x, y)).batch(MICRO),
        accum_steps=K,
        verbose=False,
        stop_on_signals=False,
    )
    timed("training_loop_first_call", lambda: loop.run(max_updates=1))
    timed("training_loop_run", lambda: loop.run(max_updates=1 + WINDOWS))
    assert loop.window_core.updates == 1 + WINDOWS, loop.window_core.updates


def time_fit(ga_tfx: Any, model: Callable, x: Any, y: Any, timed: Callable) -> None:
    """``fit``'s first call (one window), then a ``fit`` of 1,000 windows."""
    from ga_tfx import keras

    fitted = ga_tfx.wrap_model(model(), accum_steps=K)
    fitted.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
    w = MICRO * K
    fit = lambda a, b: fitted.fit(a, b, batch_size=MICRO, shuffle=False, verbose=0)  # noqa: E731
    timed("fit_first_call", lambda: fit(x[:w], y[:w]))
    timed("fit_run", lambda: fit(x[w:], y[w:]))
    assert fitted.window_core.updates == 1 + WINDOWS, fitted.window_core.updates


def run_tree(tree: str, front_end: str) -> Dict[str, float]:
    """One fresh process importing ga_tfx from ``tree``; ``front_end``'s figures."""
    env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", front_end],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    if os.path.realpath(figures["ga_tfx"]) != os.path.realpath(tree):
        raise RuntimeError(f"ga_tfx came from {figures['ga_tfx']}, not {tree}")
    return figures


def report(before: str, after: str, pairs: List[Dict[str, Dict[str, float]]], command: str) -> str:
    """The Markdown report of the pairs."""
    commit = lambda tree: subprocess.run(  # noqa: E731
        ["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# `TrainingLoop` and `fit`: start-up and 1,000 windows, before and after the window "
        "runner",
        "",
        f"Made by `{command}` on {time.strftime('%Y-%m-%d')} ({os.uname().machine}, "
        f"{os.cpu_count()} cores, shared with other jobs). Before: {before} at "
        f"{commit(before)}; after: {after} at {commit(after)} (with its uncommitted changes, "
        "if any). What it runs and why: the docstring of `benchmarks/training_loop_start.py`. "
        f"{len(pairs)} pairs of fresh processes, alternating which tree runs first; CPU seconds "
        "of each process (all threads) and wall seconds.",
        "",
        "| figure | before (median) | after (median) | after / before, per pair: median "
        "[min-max] |",
        "| --- | ---: | ---: | ---: |",
    ]
    for clock, _ in CLOCKS:
        for key, title in FIGURES:
            b = [pair["before"][f"{key}_{clock}"] for pair in pairs]
            a = [pair["after"][f"{key}_{clock}"] for pair in pairs]
            ratios = [x / y for x, y in zip(a, b)]
            lines.append(
                f"| {title}, {clock} s | {statistics.median(b):.2f} | {statistics.median(a):.2f} "
                f"| **{statistics.median(ratios):.2f}** [{min(ratios):.2f}-{max(ratios):.2f}] |"
            )
    lines += ["", "Each pair (CPU seconds, before / after):", ""]
    lines.append("| pair | order | " + " | ".join(key for key, _ in FIGURES) + " |")
    lines.append("| --- | --- |" + " --- |" * len(FIGURES))
    for i, pair in enumerate(pairs, start=1):
        cells = [
            f"{pair['before'][k + '_cpu']:.2f} / {pair['after'][k + '_cpu']:.2f}"
            for k, _ in FIGURES
        ]
        lines.append(f"| {i} | {pair['order']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=FRONT_ENDS, help=argparse.SUPPRESS)
    parser.add_argument("--before", help="the tree to compare against (its ga_tfx/)")
    parser.add_argument("--after", help="the tree measured (its ga_tfx/)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--output", help="write the Markdown report there (default: print)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    if not (args.before and args.after):
        parser.error("--before DIR and --after DIR are required")
    pairs = []
    for i in range(args.pairs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        pair: Dict[str, Any] = {"order": " then ".join(order), "before": {}, "after": {}}
        for front_end in FRONT_ENDS:
            for side in order:
                pair[side].update(run_tree(getattr(args, side), front_end))
        pairs.append(pair)
        print(json.dumps(pair), file=sys.stderr)
    command = "python benchmarks/training_loop_start.py " + " ".join(sys.argv[1:])
    text = report(args.before, args.after, pairs, command)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
