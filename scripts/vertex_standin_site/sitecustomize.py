"""Test-only: Vertex AI's job service, as the Trainer's container sees it under the harness.

``scripts/vertex_standin.py`` mounts this folder into every task container of the harness's
vertex mode and puts it on ``PYTHONPATH``, so Python loads this module at start (``site``'s
``sitecustomize``). It changes one thing: when TFX's
``tfx.extensions.google_cloud_ai_platform.training_clients`` is imported, the ``gapic`` it
imported (``from google.cloud.aiplatform import gapic``, line 24 in TFX v1.16.0 and v1.21.0) is
replaced, in that module only, by one whose ``JobServiceClient`` is :class:`SpoolJobServiceClient`.
``VertexJobClient.create_client`` (lines 301-314) builds it as it builds the real one, and the
rest of TFX's code runs unchanged: ``launch_job`` calls ``create_custom_job(parent=...,
custom_job=...)`` (lines 404-423), ``get_job`` calls ``get_custom_job(name=..., retry=...)``
(lines 425-430), ``runner._launch_cloud_training`` polls its ``state`` every 30 s (runner.py,
lines 97-120).

The client writes each request into the spool folder (``$VERTEX_STANDIN_SPOOL``, under the
pipeline root, mounted) as ``<job>.request.json``; the host (``scripts/vertex_standin.py``)
starts the replicas and writes ``<job>.state.json``, which ``get_custom_job`` returns. Nothing
else in the container changes; without ``$VERTEX_STANDIN_SPOOL`` this module does nothing. It
shadows the image's own ``sitecustomize`` (Debian's, which only installs the apport hook, absent
from the image).
"""

import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
import uuid

SPOOL_ENV = "VERTEX_STANDIN_SPOOL"
TARGET = "tfx.extensions.google_cloud_ai_platform.training_clients"
ENDPOINT_SUFFIX = "-aiplatform.googleapis.com"  # training_clients.py, line 42


class SpoolJobServiceClient:
    """The two calls TFX makes of ``google.cloud.aiplatform.gapic.JobServiceClient``, answered
    from the spool folder. Requests are built as the gapic client builds them
    (``CreateCustomJobRequest(parent=..., custom_job=...)``: a field Vertex's API does not have
    raises ``ValueError`` here too)."""

    def __init__(self, client_options=None, spool=None):
        self.endpoint = (client_options or {}).get("api_endpoint", "")
        if not self.endpoint.endswith(ENDPOINT_SUFFIX):
            raise ValueError(f"api_endpoint {self.endpoint!r}: not <region>{ENDPOINT_SUFFIX}")
        self.spool = spool or os.environ[SPOOL_ENV]

    def create_custom_job(self, parent=None, custom_job=None, **_):
        from google.cloud.aiplatform_v1.types import CreateCustomJobRequest, CustomJob, JobState

        request = CreateCustomJobRequest(parent=parent, custom_job=custom_job)
        job_id = uuid.uuid4().hex[:10]
        name = f"{parent}/customJobs/{job_id}"
        body = {
            "name": name,
            "endpoint": self.endpoint,
            "request": CreateCustomJobRequest.to_dict(
                request, use_integers_for_enums=False, preserving_proto_field_name=True
            ),
        }
        path = os.path.join(self.spool, f"{job_id}.request.json")
        with open(path + ".tmp", "w") as f:
            json.dump(body, f)
        os.rename(path + ".tmp", path)  # the host never reads half a file
        return CustomJob(name=name, state=JobState.JOB_STATE_PENDING)

    def get_custom_job(self, name=None, **_):
        from google.cloud.aiplatform_v1.types import CustomJob, JobState

        path = os.path.join(self.spool, f"{name.rsplit('/', 1)[-1]}.state.json")
        if not os.path.exists(path):
            return CustomJob(name=name, state=JobState.JOB_STATE_PENDING)
        with open(path) as f:
            state = json.load(f)
        return CustomJob(name=name, state=JobState[state["state"]], error=state.get("error"))


class _ReplaceGapic(importlib.abc.MetaPathFinder):
    """Finds ``training_clients`` as Python would, and replaces its ``gapic`` once it ran."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            module.gapic = types.SimpleNamespace(JobServiceClient=SpoolJobServiceClient)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get(SPOOL_ENV):
    sys.meta_path.insert(0, _ReplaceGapic())
