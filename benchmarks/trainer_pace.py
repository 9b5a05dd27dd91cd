"""The ga-tfx Trainer against TFX's stock Trainer on TFX's own taxi example, paired.

    .venv/bin/python -m benchmarks.trainer_pace [--job taxi|digits] [--pairs 4] [--out OUT]

``--job taxi`` (the default) is described here; ``--job digits`` pairs the main job's Trainer
with a stock Trainer on the main job's Transform outputs (:mod:`benchmarks.trainer_pace_digits`),
default ``--out benchmarks/TRAINER_PACE_DIGITS``.

The stock side is TFX's ``taxi_pipeline_native_keras`` Trainer as TFX ships it: its module file
(``tfx/examples/chicago_taxi_pipeline/taxi_utils_native_keras.py``: a 4-layer DNN over every
taxi feature, batches of 40, ``MirroredStrategy``, TensorBoard per epoch), 1000 steps and 150
evaluation steps, run by TFX's own Trainer executor (``GenericExecutor``). The ga-tfx side is
the same module plus ``build_model(hparams)`` (the module's own model, compiled as its run_fn
compiles it), run by ``GradientAccumulationTrainer``'s executor with micro-batches of 10 and
``accum_steps`` 4: 1000 windows of 40 samples, the same samples per window and in all as the
stock Trainer's 1000 steps, 600 evaluation micro-batches of 10 (its 150 batches of 40).

Both read TFX's taxi testdata (its transformed examples and transform graph, shipped in the
wheel). Each run is a fresh process (as a TFX component launch is) and is timed around the
executor's ``Do`` (imports and process start are the same on both sides and left out); each
pair runs the two back to back, the order alternating (ABBA...), so that a drift of the
machine's load falls on both alike. Writes ``OUT.json`` (every run) and ``OUT.md`` (the pairs,
the median ratio and the command). Nothing else should run on the machine meanwhile.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import trainer_pace_digits as digits_job
from benchmarks.provenance import add_allow_dirty, measured_code, refuse_uncommitted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# WINDOWS: the ga-tfx side's length in windows, the stock side's in steps (of K x MICRO each).
WINDOWS, EVAL_STEPS, BATCH, MICRO, K = 1000, 150, 40, 10, 4
# --job: its report's default path (without extension).
JOBS = {"taxi": "TRAINER_PACE", "digits": "TRAINER_PACE_DIGITS"}

# The taxi module plus the build_model(hparams) the ga-tfx Trainer calls: the module's model,
# with the layer sizes its run_fn uses.
BUILD_MODEL = """

def build_model(hparams):
    return _build_keras_model(
        hidden_units=[max(2, int(100 * 0.7**i)) for i in range(4)])
"""


def _one(side, out, inputs=None):
    """Runs one Trainer (``side``: "stock" or "ga_tfx") into ``out``; returns its seconds.
    ``inputs``: the digits job's inputs file (:func:`benchmarks.trainer_pace_digits.prepare`'s
    JSON), or None for the taxi job."""
    import ga_tfx  # noqa: F401  (first import: Keras 2)

    if inputs is None:
        executor, input_dict, outputs, props = _taxi_args(side, out)
    else:
        executor, input_dict, outputs, props = digits_job.executor_args(side, out, inputs)
    start = time.perf_counter()
    executor.Do(input_dict, outputs, props)
    return time.perf_counter() - start


def _taxi_args(side, out):
    """``(executor, inputs, outputs, exec_properties)`` of one side of the taxi job."""
    from ga_tfx.components.trainer.executor import Executor

    from tfx.components.trainer import executor as tfx_executor
    from tfx.proto import trainer_pb2
    from tfx.types import standard_artifacts
    from tfx.types import standard_component_specs as specs
    from tfx.utils import proto_utils

    from tests import taxi

    inputs = taxi.transform_inputs()
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = os.path.join(out, "model"), os.path.join(out, "model_run")
    outputs = {specs.MODEL_KEY: [model], specs.MODEL_RUN_KEY: [model_run]}
    module = os.path.join(taxi.EXAMPLE, "taxi_utils_native_keras.py")
    if side == "stock":
        props = {
            specs.TRAIN_ARGS_KEY: proto_utils.proto_to_json(
                trainer_pb2.TrainArgs(num_steps=WINDOWS)
            ),
            specs.EVAL_ARGS_KEY: proto_utils.proto_to_json(
                trainer_pb2.EvalArgs(num_steps=EVAL_STEPS)
            ),
            specs.MODULE_FILE_KEY: module,
        }
        executor = tfx_executor.GenericExecutor()
    else:
        path = os.path.join(out, "taxi_ga_tfx_module.py")
        os.makedirs(out, exist_ok=True)
        with open(module) as f, open(path, "w") as g:
            g.write(f.read() + BUILD_MODEL)
        props = {
            specs.TRAIN_ARGS_KEY: proto_utils.proto_to_json(
                trainer_pb2.TrainArgs(num_steps=WINDOWS)
            ),
            specs.EVAL_ARGS_KEY: proto_utils.proto_to_json(
                trainer_pb2.EvalArgs(num_steps=EVAL_STEPS * BATCH // MICRO)
            ),
            specs.MODULE_FILE_KEY: path,
            "micro_batch_size": MICRO,
            "accum_steps": K,
            "label_key": "tips_xf",
            "raw_label_key": "tips",
        }
        executor = Executor()
    return executor, inputs, outputs, props


def _run(side, scratch, index, inputs=None):
    out = os.path.join(scratch, f"{side}-{index}")
    job = ["--inputs", inputs] if inputs else []
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.trainer_pace", "--one", side, "--dir", out, *job],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("SECONDS ")]
    if result.returncode or not lines:
        raise SystemExit(f"{side} run {index} failed:\n{result.stderr[-4000:]}")
    return float(lines[-1].split()[1])


def _report(runs, command, commit, digits=None):
    """The report of the code at ``commit`` (``digits``:
    :func:`benchmarks.trainer_pace_digits.prepare`'s dict for the digits job; None: taxi)."""
    ratios = [pair["ga_tfx"] / pair["stock"] for pair in runs]
    rows = "\n".join(
        f"| {i + 1} | {pair['order']} | {pair['stock']:.1f} | {pair['ga_tfx']:.1f} | "
        f"{pair['ga_tfx'] / pair['stock']:.2f} |"
        for i, pair in enumerate(runs)
    )
    if digits is None:
        title, source = "TFX's taxi example", "benchmarks/trainer_pace.py"
        what = (
            f"Stock: TFX's `taxi_utils_native_keras` module and executor,\n{WINDOWS} steps of "
            f"{BATCH}. ga-tfx: the same module's model, {WINDOWS} windows of {K} x {MICRO}."
        )
    else:
        title, source = digits_job.TITLE, "benchmarks/trainer_pace_digits.py"
        what = digits_job.describe(digits)
    return f"""# The ga-tfx Trainer against the stock Trainer ({title})

Made by `{command}` at commit {commit} on {datetime.date.today().isoformat()}
({platform.machine()}, {os.cpu_count()} cores). What it runs and why: the docstring of
`{source}`. {what}
Seconds of the executor's `Do` (training, evaluation, export), each run a fresh process.

| pair | order | stock s | ga-tfx s | ga-tfx / stock |
| --- | --- | --- | --- | --- |
{rows}

Median ratio: **{statistics.median(ratios):.2f}** (min {min(ratios):.2f}, max {max(ratios):.2f}).
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=JOBS, default="taxi", help="whose Trainer is paired")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--out", help="report path without extension (default: per job)")
    parser.add_argument(
        "--inputs-root",
        help="digits: the pipeline root of its Transform (reused when it exists; "
        "default: a temporary directory)",
    )
    parser.add_argument("--one", choices=("stock", "ga_tfx"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    add_allow_dirty(parser)
    args = parser.parse_args(argv)
    if args.one:
        print(f"SECONDS {_one(args.one, args.dir, args.inputs)}", flush=True)
        return 0
    refuse_uncommitted(parser, args.allow_dirty)
    commit = measured_code()
    out = args.out or os.path.join("benchmarks", JOBS[args.job])
    runs, digits = [], None
    with tempfile.TemporaryDirectory() as scratch:
        inputs = None
        if args.job == "digits":  # the main job's Transform, once, before the pairs
            digits = digits_job.prepare(args.inputs_root or os.path.join(scratch, "inputs"))
            inputs = os.path.join(scratch, "digits_inputs.json")
            with open(inputs, "w") as f:
                json.dump(digits, f)
        for index in range(args.pairs):
            order = ("stock", "ga_tfx") if index % 2 == 0 else ("ga_tfx", "stock")
            pair = {"order": " then ".join(order)}
            for side in order:
                pair[side] = _run(side, scratch, index, inputs)
            print(
                f"pair {index + 1}: stock {pair['stock']:.1f} s, ga-tfx {pair['ga_tfx']:.1f} s",
                flush=True,
            )
            runs.append(pair)
    command = (
        "python -m benchmarks.trainer_pace"
        + (f" --job {args.job}" if args.job != "taxi" else "")
        + (f" --pairs {args.pairs}" if args.pairs != 4 else "")
        + (" --allow-dirty" if args.allow_dirty else "")
    )
    record = {"command": command, "commit": commit, "runs": runs}
    if digits is not None:
        record["digits"] = digits
    with open(f"{out}.json", "w") as f:
        json.dump(record, f, indent=1)
    with open(f"{out}.md", "w") as f:
        f.write(_report(runs, command, commit, digits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
