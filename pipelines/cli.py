"""The ``ga-tfx`` command: run the digits pipeline locally, compile it for Kubeflow, or demo.

    ga-tfx run [--accum-steps K] [--micro-batch B] [--tune] [--output-dir DIR] ...
    ga-tfx compile --image IMAGE --pipeline-root gs://... --data-root gs://... ...
    ga-tfx demo

``ga-tfx <command> --help`` explains every flag.
"""

import argparse
import os
import sys

SHIPPED_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits")


def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    return parse


_positive_int = _int_at_least(1)


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return value


def _int_list(text):
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers >= 1 (e.g. 1,2,4), got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def _float_range(text):
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected MIN,MAX (e.g. 0.01,0.16), got {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"expected 0 < MIN <= MAX, got {text!r}")
    return [low, high]


def _add_training_flags(parser):
    group = parser.add_argument_group("training (the ga-tfx Trainer and the optional Tuner)")
    group.add_argument("--accum-steps", type=_positive_int, default=4,
                       help="micro-batches accumulated per optimizer update (default 4)")
    group.add_argument("--micro-batch", type=_positive_int, default=32,
                       help="examples per micro-batch; effective batch = accum steps x micro "
                            "batch (default 32)")
    group.add_argument("--train-updates", type=_positive_int, default=60,
                       help="optimizer updates (effective batches) to train (default 60)")
    group.add_argument("--updates-per-epoch", type=_positive_int, default=20,
                       help="updates between checkpoints/evaluations; must divide "
                            "--train-updates (default 20)")
    group.add_argument("--eval-steps", type=_positive_int, default=8,
                       help="evaluation micro-batches after each epoch (default 8)")
    group.add_argument("--agc-clip-factor", type=_positive_float, default=0.08,
                       help="adaptive gradient clipping factor (default 0.08)")
    group.add_argument("--no-agc", action="store_true", help="train without AGC")
    group.add_argument("--strategy", choices=("auto", "mirrored", "none", "multi_worker"),
                       default="auto", help="tf.distribute strategy of the Trainer (default "
                       "auto: MirroredStrategy when several GPUs are visible)")
    group.add_argument("--min-accuracy", type=_positive_float, default=0.8,
                       help="the Evaluator blesses (and the Pusher pushes) a model whose eval "
                            "accuracy is at least this (default 0.8)")
    tuning = parser.add_argument_group("tuning (the Keras Tuner plugin in a TFX Tuner)")
    tuning.add_argument("--tune", action="store_true",
                        help="add a Tuner searching accum steps and the AGC clip factor; its "
                             "best values override --accum-steps/--agc-clip-factor")
    tuning.add_argument("--search-accum-steps", type=_int_list, default=[1, 2, 4],
                        help="accum steps the Tuner tries (default 1,2,4)")
    tuning.add_argument("--search-agc-clip-factor", type=_float_range, default=[0.01, 0.16],
                        help="AGC clip factor range the Tuner samples (log), AGC off "
                             "included (default 0.01,0.16)")
    tuning.add_argument("--tuning-trials", type=_positive_int, default=3,
                        help="Tuner trials (default 3)")
    tuning.add_argument("--tuning-updates", type=_positive_int, default=10,
                        help="updates of the trial with the largest effective batch; every "
                             "trial sees as many examples (default 10)")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ga-tfx", description="Gradient accumulation for Keras 2 and TFX pipelines.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run", help="run the digits pipeline on this machine (LocalDagRunner, Beam)",
        description="Runs CsvExampleGen, StatisticsGen, SchemaGen, ExampleValidator, "
                    "Transform, [Tuner], the ga-tfx Trainer, Evaluator and Pusher on this "
                    "machine and prints a summary. Re-running with the same --output-dir "
                    "reuses cached outputs and resumes a Trainer that failed.")
    run.add_argument("--data-root", default=SHIPPED_DATA,
                     help="directory of CSV files (pixel_00..pixel_63, label); default: the "
                          "shipped digits data")
    run.add_argument("--output-dir", default="pipeline_output",
                     help="holds root/ (artifacts), metadata.db and serving_model/ "
                          "(default ./pipeline_output)")
    run.add_argument("--pipeline-name", default="ga-tfx-digits",
                     help="pipeline name in ML Metadata (default ga-tfx-digits)")
    run.add_argument("--no-cache", action="store_true",
                     help="re-run every component even if its inputs did not change")
    run.add_argument("--direct-num-workers", type=_int_at_least(0), default=1,
                     help="Beam DirectRunner workers: 1 in-memory (default), N > 1 or 0 "
                          "(one per core) multi-processing")
    _add_training_flags(run)

    compile_ = sub.add_parser(
        "compile", help="compile the pipeline for Kubeflow Pipelines v2 (PipelineJob JSON)",
        description="Writes a PipelineJob JSON (KubeflowV2DagRunner) whose steps run in "
                    "--image (built from docker/Dockerfile). Paths are as the cluster sees "
                    "them.")
    compile_.add_argument("--image", required=True,
                          help="container image with TFX and ga-tfx (docker/Dockerfile)")
    compile_.add_argument("--pipeline-root", required=True, help="e.g. gs://bucket/root")
    compile_.add_argument("--data-root", required=True, help="e.g. gs://bucket/digits")
    compile_.add_argument("--serving-dir", required=True,
                          help="where the Pusher copies blessed models")
    compile_.add_argument("--output", default="ga_tfx_digits_pipeline.json",
                          help="the PipelineJob JSON to write (default "
                               "ga_tfx_digits_pipeline.json)")
    compile_.add_argument("--pipeline-name", default="ga-tfx-digits")
    _add_training_flags(compile_)

    demo = sub.add_parser(
        "demo", help="train on the digits data with accumulation and as big batches; compare",
        description="Trains a small CNN on scikit-learn's digits twice from the same initial "
                    "weights, as big batches and with ga_tfx accumulation, and prints the "
                    "largest weight difference.")
    demo.add_argument("--accum-steps", type=_positive_int, default=8,
                      help="micro-batches per optimizer update (default 8)")
    demo.add_argument("--micro-batch", type=_positive_int, default=16,
                      help="micro-batch size (default 16)")
    demo.add_argument("--epochs", type=_positive_int, default=3, help="epochs (default 3)")
    return parser


def training_options(args):
    from ga_tfx.pipelines.pipeline import TrainingOptions

    return TrainingOptions(
        accum_steps=args.accum_steps, micro_batch_size=args.micro_batch,
        train_updates=args.train_updates, updates_per_epoch=args.updates_per_epoch,
        eval_steps=args.eval_steps,
        agc_clip_factor=None if args.no_agc else args.agc_clip_factor,
        strategy=args.strategy, tune=args.tune,
        search_accum_steps=tuple(args.search_accum_steps),
        search_agc_clip_factor=tuple(args.search_agc_clip_factor),
        tuning_trials=args.tuning_trials, tuning_updates=args.tuning_updates,
        min_accuracy=args.min_accuracy)


def _run(args):
    from absl import logging
    from ga_tfx.pipelines import local

    logging.set_verbosity(logging.INFO)  # LocalDagRunner's "Component X is running" lines
    output_dir = os.path.abspath(args.output_dir)
    summary = local.run(
        args.pipeline_name, os.path.join(output_dir, "root"), args.data_root,
        os.path.join(output_dir, "serving_model"), training_options(args),
        metadata_path=os.path.join(output_dir, "metadata.db"),
        enable_cache=not args.no_cache, direct_num_workers=args.direct_num_workers)
    print("\n== ga-tfx digits pipeline: done ==")
    for line in summary.lines():
        print(line)
    return 0


def _compile(args):
    from ga_tfx.pipelines import kubeflow

    job = kubeflow.compile_pipeline(
        args.output, args.image, args.pipeline_name, args.pipeline_root, args.data_root,
        args.serving_dir, training_options(args))
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    print(f"wrote {args.output}: {len(tasks)} steps ({', '.join(tasks)}), image {args.image}")
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "compile":
            return _compile(args)
        from ga_tfx.pipelines.demo import run_demo

        run_demo(accum_steps=args.accum_steps, micro_batch=args.micro_batch, epochs=args.epochs)
        return 0
    except ValueError as error:  # bad data or settings: found before anything ran
        print(f"ga-tfx {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
