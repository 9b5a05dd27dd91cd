"""The resume root ``create_pipeline`` gives the Trainer (pipelines/pipeline.py), as built, no
run: keyed by the pipeline's name under the pipeline root, so two pipelines sharing a root
never resume each other's checkpoints, and a Kubeflow job submitted again (a new job id, new
output URIs) finds its pipeline's. Issue 53: the name dropped from it was seen only by the
slow tier.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)

import os

import pytest

pytestmark = [pytest.mark.tfx]  # builds the TFX pipeline


def _resume_root(name, root, serving):
    from ga_tfx.pipelines import cli
    from ga_tfx.pipelines import pipeline as pipeline_lib

    made = pipeline_lib.create_pipeline(
        name, root, cli.SHIPPED_DATA, serving, pipeline_lib.TrainingOptions()
    )
    [trainer] = [c for c in made.components if c.id == "GradientAccumulationTrainer"]
    return trainer.exec_properties["resume_root"]


def test_each_pipeline_resumes_from_its_own_folder_under_the_pipeline_root(tmp_path):
    root, serving = str(tmp_path / "root"), str(tmp_path / "serving")
    for name in ("ga-tfx-digits", "another-pipeline"):
        assert _resume_root(name, root, serving) == os.path.join(root, ".ga_tfx_resume", name)
