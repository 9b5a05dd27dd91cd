"""``ga-tfx run``'s local runner (``ga_tfx.pipelines.local``), without a pipeline run: the run's
temporary folder is this process's and its children's, and is removed however the run ends."""

from ga_tfx.pipelines import local

import contextlib
import os
import tempfile

import pytest

pytestmark = [pytest.mark.tfx]  # the ga_tfx.pipelines package (installed with the tfx extra)


@pytest.mark.parametrize("ends", ["returns", "raises"])
def test_the_runs_temporary_folder_is_used_then_removed(tmp_path, ends):
    before = tempfile.gettempdir(), os.environ.get("TMPDIR")
    root = tmp_path / "root"
    with pytest.raises(RuntimeError) if ends == "raises" else contextlib.nullcontext():
        with local.run_temp_dir(str(root)) as folder:
            assert folder == str(root / f".tmp-{os.getpid()}")
            assert tempfile.gettempdir() == os.environ["TMPDIR"] == folder
            left = tempfile.mkdtemp()  # what TFX leaves: a folder it never removes
            assert os.path.dirname(left) == folder
            if ends == "raises":
                raise RuntimeError("a component failed")
    assert not os.path.exists(folder) and os.listdir(root) == []
    assert (tempfile.gettempdir(), os.environ.get("TMPDIR")) == before
