"""The ``ga-tfx`` command: run the digits pipeline locally, compile it for Kubeflow, or demo.

    ga-tfx run [--accum-steps K] [--micro-batch B] [--tune] [--output-dir DIR] ...
    ga-tfx compile --image IMAGE --pipeline-root gs://... --data-root gs://... ...
    ga-tfx demo

``ga-tfx <command> --help`` explains every flag.
"""

from ga_tfx._schema import Spec
from ga_tfx._validation import ACCUM_STEPS
from ga_tfx.components import stack
from ga_tfx.components.trainer import preemption
from ga_tfx.pipelines import kubeflow_options as kubeflow
from ga_tfx.pipelines import options

import argparse
import os
import sys
import traceback

SHIPPED_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits")


# Flags that are not pipeline options (where the run happens, the demo's own knobs).
_WORKERS = Spec(
    int,
    "Beam DirectRunner workers: 1 in-memory, N > 1 or 0 (one per core) multi-processing",
    minimum=0,
)
_POSITIVE = Spec(int, "a count", minimum=1)


def _add_training_flags(parser):
    options.add_training_flags(
        parser.add_argument_group("training (the ga-tfx Trainer and the optional Tuner)")
    )


def _add_kubeflow_flags(group):
    group.add_argument(
        "--backend",
        choices=sorted(kubeflow.BACKENDS),
        default=kubeflow.DEFAULT_BACKEND,
        help="the backend the file is for: "
        + "; ".join(f"{k}: {v}" for k, v in kubeflow.BACKENDS.items())
        + f" (default {kubeflow.DEFAULT_BACKEND})",
    )
    group.add_argument(
        "--pipeline-spec",
        choices=sorted(kubeflow.PIPELINE_SPECS),
        default=kubeflow.DEFAULT_PIPELINE_SPEC,
        help="the PipelineSpec schema: "
        + "; ".join(f"{k}: {v}" for k, v in kubeflow.PIPELINE_SPECS.items())
        + f" (default {kubeflow.DEFAULT_PIPELINE_SPEC})",
    )
    group.add_argument(
        "--beam-runner",
        choices=kubeflow.BEAM_RUNNERS,
        default="DirectRunner",
        help="where the Beam steps run: DirectRunner in the step's container (default), or "
        "DataflowRunner with the image as the workers' container (needs --beam-arg=--project=P "
        "--beam-arg=--region=R)",
    )
    group.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more Beam flag for the Beam steps, e.g. --beam-arg=--region=europe-west4 "
        "(repeatable)",
    )
    group.add_argument(
        "--trainer-retries",
        type=int,
        default=kubeflow.DEFAULT_TRAINER_RETRIES,
        help="retries of a failed Trainer pod (a preempted one resumes from its checkpoint); "
        f"0: none (default {kubeflow.DEFAULT_TRAINER_RETRIES})",
    )
    group.add_argument(
        "--trainer-workers",
        type=int,
        default=1,
        metavar="N",
        help="the Trainer's replicas: N > 1 runs it as a Vertex AI custom job of N replicas "
        "through TFX's Vertex training extension (needs --project, --region and --strategy "
        "multi_worker; --trainer-resources then gives each replica's accelerator); default 1",
    )
    group.add_argument("--project", help="the Google Cloud project of --trainer-workers' job")
    group.add_argument("--region", help="the Vertex AI region of --trainer-workers' job")
    group.add_argument(
        "--trainer-machine-type",
        metavar="TYPE",
        help="each replica's Vertex AI machine type with --trainer-workers (default n1-standard-8)",
    )
    for step in ("trainer", "tuner"):
        group.add_argument(
            f"--{step}-resources",
            metavar="SPEC",
            help=f"the {step.capitalize()} container's resources, e.g. "
            "cpu=8,memory=32G,accelerator=NVIDIA_TESLA_T4,count=1; accelerators in the "
            "backend's names: vertex NVIDIA_TESLA_T4, NVIDIA_L4, ...; kfp a Kubernetes "
            "resource, nvidia.com/gpu, amd.com/gpu, ... (kfp also requests what it limits)",
        )


class _Version(argparse.Action):
    """``--version``: the stack in one line, unwrapped (argparse's own action wraps it)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(stack.line())
        parser.exit()


def build_parser():
    """The ``ga-tfx`` argument parser: ``--version`` and the ``run``, ``compile`` and ``demo``
    commands (one required)."""
    parser = argparse.ArgumentParser(
        prog="ga-tfx", description="Gradient accumulation for Keras 2 and TFX pipelines."
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the versions of ga-tfx, TFX, TensorFlow, Keras and Python, and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_command(sub)
    _add_compile_command(sub)
    _add_demo_command(sub)
    return parser


def _add_run_command(sub):
    """``ga-tfx run``: where the local run reads and writes, its console, Beam, training."""
    run = sub.add_parser(
        "run",
        help="run the digits pipeline on this machine (LocalDagRunner, Beam)",
        description="Runs CsvExampleGen, StatisticsGen, SchemaGen, ExampleValidator, "
        "Transform, [Tuner], the ga-tfx Trainer, Evaluator and Pusher on this "
        "machine and prints a summary. Re-running with the same --output-dir "
        "reuses cached outputs and resumes a Trainer that failed.",
    )
    run.add_argument(
        "--data-root",
        default=SHIPPED_DATA,
        help="directory of CSV files (pixel_00..pixel_63, label); default: the shipped digits data",
    )
    run.add_argument(
        "--output-dir",
        default="pipeline_output",
        help="holds root/ (artifacts), metadata.db and serving_model/ (default ./pipeline_output)",
    )
    run.add_argument(
        "--pipeline-name",
        default=None,
        help="pipeline name in ML Metadata (default ga-tfx-digits, or ga-tfx-csv with --label)",
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help="print every log line (absl, Beam, TensorFlow) on the console instead of the log file",
    )
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="re-run every component even if its inputs did not change",
    )
    run.add_argument(
        "--direct-num-workers",
        type=options.flag_type("direct_num_workers", _WORKERS),
        default=1,
        help="Beam DirectRunner workers: 1 in-memory (default), N > 1 or 0 "
        "(one per core) multi-processing",
    )
    _add_training_flags(run)


def _add_compile_command(sub):
    """``ga-tfx compile``: the image, the cluster's paths, the Kubeflow job's form, training."""
    compile_ = sub.add_parser(
        "compile",
        help="compile the pipeline for Kubeflow: open-source KFP (PipelineSpec YAML) or "
        "Vertex AI (PipelineJob JSON)",
        description="Writes the job (TFX's KubeflowV2DagRunner) whose steps run in --image "
        "(built from docker/Dockerfile): --backend kfp the bare PipelineSpec YAML that "
        "open-source Kubeflow Pipelines uploads, --backend vertex the PipelineJob JSON. "
        "--data-root, --serving-dir and the training length are the defaults of runtime "
        "parameters (data_root, serving_dir, train_windows) that each run may set; each run "
        "is created with its pipeline root. Paths are as the pods see them.",
    )
    compile_.add_argument(
        "--image", required=True, help="container image with TFX and ga-tfx (docker/Dockerfile)"
    )
    compile_.add_argument(
        "--pipeline-root",
        required=True,
        help="e.g. gs://bucket/root: the runs' pipeline root (kfp: not in the file, give it "
        "when creating each run; vertex: runtimeConfig's default) and the Trainer's "
        "checkpoints' root; gs:// or a mounted path, not minio://",
    )
    compile_.add_argument("--data-root", required=True, help="e.g. gs://bucket/digits")
    compile_.add_argument(
        "--serving-dir", required=True, help="where the Pusher copies blessed models"
    )
    compile_.add_argument(
        "--output",
        default=None,
        help="the file to write: .yaml for kfp, .json for vertex (default "
        "ga_tfx_digits_pipeline.yaml or .json)",
    )
    compile_.add_argument("--pipeline-name", default="ga-tfx-digits")
    _add_kubeflow_flags(compile_.add_argument_group("Kubeflow (the job's form, Beam, resources)"))
    _add_training_flags(compile_)


def _add_demo_command(sub):
    """``ga-tfx demo``: its own K, micro-batch and epochs (not pipeline options)."""
    demo = sub.add_parser(
        "demo",
        help="train on the digits data with accumulation and as big batches; compare",
        description="Trains a small CNN on scikit-learn's digits twice from the same initial "
        "weights, as big batches and with ga_tfx accumulation, and prints the "
        "largest weight difference.",
    )
    demo.add_argument(
        "--accum-steps",
        type=options.flag_type("accum_steps", ACCUM_STEPS),
        default=8,
        help="micro-batches per window (an update each; default 8)",
    )
    demo.add_argument(
        "--micro-batch",
        type=options.flag_type("micro_batch", _POSITIVE),
        default=16,
        help="micro-batch size (default 16)",
    )
    demo.add_argument(
        "--epochs",
        type=options.flag_type("epochs", _POSITIVE),
        default=3,
        help="epochs (default 3)",
    )


def training_options(args):
    return options.from_flags(args)


def _run(args):
    from ga_tfx.pipelines.console import RunConsole

    output_dir = os.path.abspath(args.output_dir)
    args.pipeline_name = args.pipeline_name or ("ga-tfx-csv" if args.label else "ga-tfx-digits")
    failure = None
    with RunConsole(verbose=args.verbose) as console:
        try:
            from ga_tfx.pipelines import local

            from absl import logging

            logging.set_verbosity(logging.INFO)  # the component lines come from these logs

            def started():
                log = console.keep_log(os.path.join(output_dir, "logs"), args.pipeline_name)
                console.line(
                    f"ga-tfx: pipeline {args.pipeline_name}"
                    + (f" (full log: {log})" if log else "")
                )

            summary = local.run(
                args.pipeline_name,
                os.path.join(output_dir, "root"),
                args.data_root,
                os.path.join(output_dir, "serving_model"),
                training_options(args),
                metadata_path=os.path.join(output_dir, "metadata.db"),
                enable_cache=not args.no_cache,
                direct_num_workers=args.direct_num_workers,
                on_checked=started,
            )
            console.line("")
            console.line(f"== ga-tfx pipeline {args.pipeline_name}: done ==")
            for line in summary.lines():
                console.line(line)
            if args.tune:
                _tuning_report(console, output_dir)
            if console.log_path:
                console.line(f"log:                  {console.log_path}")
        except Exception as error:  # reported below, once the console is restored
            if args.verbose:
                raise
            traceback.print_exc()  # into the log file
            failure, log_path = error, console.log_path
    if failure is None:
        return 0
    if preemption.interruption(failure) is None:
        if isinstance(failure, ValueError):
            args.log_path = log_path
            raise failure  # main() prints it as the last line (exit status 2)
        lines = [line for line in str(failure).strip().splitlines() if line.strip()]
        print(
            f"ga-tfx run: error: {type(failure).__name__}: "
            f"{lines[0][:300] if lines else 'failed'} (full log: {log_path})",
            file=sys.stderr,
        )
        return 1
    print(f"full log: {log_path}", flush=True)
    raise failure  # main(): the interruption's one line, last


def _tuning_report(console, output_dir):
    """The trials of the run's search: a table on the console, a CSV and a plot on disk."""
    from ga_tfx.pipelines import tuning_report
    from ga_tfx.pipelines.parts import training

    report = tuning_report.write(
        training.trials_file(os.path.join(output_dir, "root")), output_dir, training.TUNER_OBJECTIVE
    )
    if report is None:
        console.line(
            "tuning:               no trial recorded (the Tuner was cached from a "
            "run before trial records)"
        )
        return
    console.line(f"tuning trials ({training.TUNER_OBJECTIVE}, best first):")
    for line in report["lines"]:
        console.line("  " + line)
    for line in report["probe_lines"]:  # the noise-scale probe's evidence
        console.line(line)
    console.line(f"tuning report:        {', '.join(report['files'])}")


def _compile(args):
    from ga_tfx.pipelines.kubeflow import compile_pipeline

    backend = args.backend
    output = args.output or f"ga_tfx_digits_pipeline.{'yaml' if backend == 'kfp' else 'json'}"
    written = compile_pipeline(
        output,
        args.image,
        args.pipeline_name,
        args.pipeline_root,
        args.data_root,
        args.serving_dir,
        training_options(args),
        kubeflow.beam_args(args.beam_runner, args.image, args.pipeline_root, args.beam_arg),
        backend=backend,
        pipeline_spec=args.pipeline_spec,
        trainer_retries=args.trainer_retries,
        resources={
            step: kubeflow.Resources.parse(text, f"--{step}-resources", backend)
            for step, text in (("trainer", args.trainer_resources), ("tuner", args.tuner_resources))
            if text
        },
        trainer_workers=args.trainer_workers,
        project=args.project,
        region=args.region,
        trainer_machine_type=args.trainer_machine_type,
    )
    spec = written if backend == "kfp" else written["pipelineSpec"]
    tasks = spec["root"]["dag"]["tasks"]
    print(
        f"wrote {output} ({backend}): {len(tasks)} steps ({', '.join(tasks)}), image "
        f"{args.image}, pipeline spec {spec['schemaVersion']} "
        f"({kubeflow.PIPELINE_SPECS[args.pipeline_spec]}); runtime parameters "
        f"{', '.join(kubeflow.RUNTIME_PARAMETERS)}; create each run with its pipeline root as "
        f"{kubeflow.RUN_PIPELINE_ROOT[backend]}"
    )
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
        log_path = getattr(args, "log_path", None)
        print(
            f"ga-tfx {args.command}: error: {error}"
            + (f" (full log: {log_path})" if log_path else ""),
            file=sys.stderr,
        )
        return 2
    except Exception as error:  # SIGTERM/SIGINT: the Trainer saved a checkpoint and stopped
        return preemption.report_interruption(error)


if __name__ == "__main__":
    sys.exit(main())
