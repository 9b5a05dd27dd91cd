"""The built wheel: everything under the one `ga_tfx` namespace, the data shipped, deps split.

The wheel is built with this environment's pip and setuptools (no build isolation, no network)
from a copy of the files the build reads, so that the build leaves nothing in the work tree.
"""

import email
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What setup.py reads; the repository's folder -> where its packages land in the wheel.
SOURCES = {"ga_tfx": "ga_tfx", "components": "ga_tfx/components", "pipelines": "ga_tfx/pipelines"}
SHIPPED_CSV = "ga_tfx/pipelines/data/digits/digits.csv"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """(path of the built wheel, its zipfile.ZipFile)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    for folder in SOURCES:
        shutil.copytree(
            os.path.join(ROOT, folder),
            src / folder,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
        )
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [path] = [str(p) for p in out.iterdir()]
    assert os.path.basename(path).startswith("ga_tfx-") and path.endswith(".whl"), path
    with zipfile.ZipFile(path) as archive:
        yield path, archive


def _package_modules(folder, prefix):
    """Wheel paths of the modules of every package (folder with __init__.py) under `folder`."""
    paths = set()
    for directory, _, files in os.walk(os.path.join(ROOT, folder)):
        if "__init__.py" not in files:
            continue
        relative = os.path.relpath(directory, os.path.join(ROOT, folder))
        for name in files:
            if name.endswith(".py"):
                paths.add(os.path.normpath(os.path.join(prefix, relative, name)))
    return paths


def _metadata(archive):
    [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(archive.read(name))


def test_only_ga_tfx_at_the_top_level(wheel):
    _, archive = wheel
    top = {name.split("/")[0] for name in archive.namelist()}
    assert "ga_tfx" in top
    dist_info = [t for t in top if t.endswith(".dist-info")]
    assert len(dist_info) == 1 and dist_info[0].startswith("ga_tfx-"), top
    assert top - {"ga_tfx"} - set(dist_info) == set(), top  # no `components`, no `pipelines`


def test_every_module_of_the_three_folders_is_under_ga_tfx(wheel):
    _, archive = wheel
    names = set(archive.namelist())
    expected = set()
    for folder, prefix in SOURCES.items():
        expected |= _package_modules(folder, prefix)
    assert {"ga_tfx/components/trainer/run_fn.py", "ga_tfx/pipelines/cli.py"} <= expected
    assert expected - names == set()


def test_the_shipped_csv_is_in_the_wheel_unchanged(wheel):
    _, archive = wheel
    with open(os.path.join(ROOT, "pipelines", "data", "digits", "digits.csv"), "rb") as f:
        assert archive.read(SHIPPED_CSV) == f.read()


def test_console_script_and_dependency_split(wheel):
    _, archive = wheel
    [entry_points] = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "ga-tfx = ga_tfx.pipelines.cli:main" in archive.read(entry_points).decode()
    metadata = _metadata(archive)
    assert metadata["Requires-Python"] == ">=3.10,<3.13"
    requires = metadata.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    # `pip install ga-tfx` brings TensorFlow and tf-keras only; TFX comes with the `tfx` extra.
    assert sorted(re.match(r"[\w.-]+", r).group() for r in base) == ["tensorflow", "tf-keras"], base
    tfx = [r for r in requires if r.startswith("tfx") and 'extra == "tfx"' in r]
    assert tfx and "==1.16.0" in tfx[0], requires
    assert set(metadata.get_all("Provides-Extra")) >= {"tfx", "tuner", "test", "dev"}


def test_the_installed_wheel_imports_without_the_work_tree(wheel, tmp_path):
    """Unpacked alone on sys.path (no site-packages, cwd elsewhere): the three namespaces import
    from it, and no top-level `components`/`pipelines` exists."""
    path, archive = wheel
    target = tmp_path / "site"
    archive.extractall(target)
    code = (
        "import importlib.util, ga_tfx, ga_tfx.components, ga_tfx.pipelines\n"
        "for m in (ga_tfx, ga_tfx.components, ga_tfx.pipelines): print(m.__file__)\n"
        "print(importlib.util.find_spec('components'), importlib.util.find_spec('pipelines'))"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(target)},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4, lines
    assert all(line.startswith(str(target) + os.sep) for line in lines[:3]), lines
    assert lines[3] == "None None"
