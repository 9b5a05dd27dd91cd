"""The compiled Kubeflow job reads the curated schema where the image has it."""

from ga_tfx.pipelines import kubeflow
from ga_tfx.pipelines.options import TrainingOptions

import json
import os

import pytest

from tests.test_kubeflow_pipeline import compile_job

pytestmark = [pytest.mark.tfx, pytest.mark.slow, pytest.mark.stack]  # compiles a Kubeflow job

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_schema_gen_reads_the_schema_inside_the_image(tmp_path):
    job = compile_job(str(tmp_path), TrainingOptions())
    text = json.dumps(job)
    assert kubeflow.IMAGE_DIGITS_SCHEMA in text
    assert ROOT + "/pipelines" not in text  # no path of the machine that compiled it
    dockerfile = open(os.path.join(ROOT, "docker", "Dockerfile")).read()
    assert f"WORKDIR {kubeflow.IMAGE_SOURCE_DIR}" in dockerfile
    assert "COPY pipelines pipelines" in dockerfile
    # The file the image path stands for is the shipped one.
    relative = os.path.relpath(kubeflow.IMAGE_DIGITS_SCHEMA, kubeflow.IMAGE_SOURCE_DIR)
    assert os.path.isfile(os.path.join(ROOT, relative))
