"""Runs a compiled TFX job step by step in Docker containers, as a backend runs it: a test
harness for each backend's container contract, not a second orchestrator.

``--backend kfp``: open-source Kubeflow Pipelines 2.x (``harness_kfp.py``: the bare
PipelineSpec YAML, the pipeline root and parameters given at run creation, upstream artifacts
handed on untyped, no ExampleGen hook, the user command under stand-ins for Argo's emissary and
KFP's launcher, Argo's retry backoff). ``--backend vertex``: Vertex AI Pipelines
(``harness_vertex.py``: the PipelineJob JSON, typed inputs, its output layout, the hook run).
Each module's docstring lists what was read (repository, file, function) and what is assumed;
``harness_base.py`` what both do and what neither does (refused by name).

Usage: ``python scripts/kfp_harness.py JOB --backend kfp|vertex --image IMG --pipeline-root DIR
[--mount DIR ...] [--job-id ID] [--param NAME=VALUE ...] [--backoff-scale X]
[--stock-entrypoint]``; prints one line per task, then the evaluation, blessing and push.
``--backoff-scale``: multiplies each retry's wait (tests: 0.01), said in each retry's line.
``--stock-entrypoint``: runs TFX's own entry point in every step instead of ours.
"""

import argparse
import json
import subprocess
import sys
from typing import Dict, List

import vertex_standin
from harness_base import (  # noqa: F401  (the harness's names, for its users)
    BaseRun,
    TaskFailed,
    Unsupported,
    _as_v20,
    ignored_resources,
    pb,
    task_order,
)
from harness_kfp import KfpRun
from harness_vertex import PROJECT, VertexRun, load_spec  # noqa: F401

BACKENDS = {"kfp": KfpRun, "vertex": VertexRun}
# The PipelineJob's run, as before the backends were split.
JobRun = VertexRun

EVALUATION_SCRIPT = """
import json, sys
import tensorflow_model_analysis as tfma
result = tfma.load_eval_result(sys.argv[1])
overall = dict(result.slicing_metrics)[()]
print(json.dumps({name: value.get("doubleValue") for name, value in overall[""][""].items()}))
"""


def type_title(schema: pb.ArtifactTypeSchema) -> str:
    """An artifact type's title: ``schemaTitle``, or the ``title:`` of an ``instanceSchema``
    (TFX compiles its types as instance schemas: ``title: tfx.Model``)."""
    if schema.WhichOneof("kind") == "instance_schema":
        for line in schema.instance_schema.splitlines():
            if line.startswith("title:"):
                return line.split(":", 1)[1].strip()
    return schema.schema_title


def artifacts_of_type(run: BaseRun, title: str) -> List[pb.RuntimeArtifact]:
    """Every output artifact of the run whose type's title is ``title`` (e.g. ``tfx.Model``)."""
    return [
        art
        for out in run.outputs.values()
        for arts in out.artifacts.values()
        for art in arts.artifacts
        if type_title(art.type) == title
    ]


def summary(run: BaseRun) -> Dict[str, object]:
    """What the run ended with: the overall evaluation metrics (read by TFMA in the image),
    whether the model was blessed, and where it was pushed."""
    result: Dict[str, object] = {}
    for art in artifacts_of_type(run, "tfx.ModelEvaluation"):
        proc = subprocess.run(
            ["docker", "run", "--rm", "--network=none"]
            + [f"--volume={run.pipeline_root}:{run.pipeline_root}"]
            + ["--entrypoint=python", run.image, "-c", EVALUATION_SCRIPT, art.uri],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
        result["evaluation"] = json.loads(proc.stdout.strip().splitlines()[-1])
    for art in artifacts_of_type(run, "tfx.ModelBlessing"):
        result["blessed"] = bool(art.metadata["blessed"])
    for art in artifacts_of_type(run, "tfx.PushedModel"):
        result["pushed"] = bool(art.metadata["pushed"])
        result["pushed_destination"] = (
            art.metadata["pushed_destination"] if result["pushed"] else None
        )
    return result


def _params(pairs: List[str]) -> Dict[str, str]:
    params = {}
    for pair in pairs:
        if "=" not in pair:
            raise Unsupported(f"--param {pair!r}: allowed NAME=VALUE")
        name, value = pair.split("=", 1)
        params[name] = value
    return params


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("--backend", choices=sorted(BACKENDS), required=True)
    parser.add_argument("--image", required=True)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--mount", action="append", default=[])
    parser.add_argument("--job-id")
    parser.add_argument("--network", default="none")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        help="a run parameter, NAME=VALUE (kfp: the run's; vertex: the PipelineJob's "
        "parameter_values, over its runtimeConfig)",
    )
    parser.add_argument("--backoff-scale", type=float, default=1.0)
    parser.add_argument("--stock-entrypoint", action="store_true")
    args = parser.parse_args(argv)
    try:
        kwargs = dict(
            job_id=args.job_id,
            network=args.network,
            backoff_scale=args.backoff_scale,
            stock_entrypoint=args.stock_entrypoint,
            params=_params(args.param),
        )
        run = BACKENDS[args.backend](
            args.job, args.image, args.pipeline_root, tuple(args.mount), **kwargs
        )
        if args.backend == "vertex":  # Vertex's job API, for a Trainer of --trainer-workers N
            vertex_standin.attach(run)
        entry = "TFX's stock entry point" if args.stock_entrypoint else "the job's entry point"
        print(
            f"harness ({args.backend}): job {run.job_id}, schema {run.spec.schema_version}, "
            f"image {args.image}, {entry}"
        )
        for label, request in ignored_resources(run.spec).items():
            print(f"  (resources of {label} ignored: {request})")
        run.run()
    except (Unsupported, TaskFailed) as error:
        print(f"harness: error: {error}", file=sys.stderr)
        return 1
    print(f"harness: {len(run.outputs)} tasks done under {run.run_dir}")
    for key, value in summary(run).items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
