"""The built wheel: everything under the one `ga_tfx` namespace, the data shipped, deps split.

The wheel is built with this environment's pip and setuptools (no build isolation, no network)
from a copy of the files the build reads, so that the build leaves nothing in the work tree.
"""

import email
import os
import re
import runpy
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What setup.py reads; the repository's folder -> where its packages land in the wheel.
SOURCES = {"ga_tfx": "ga_tfx", "components": "ga_tfx/components", "pipelines": "ga_tfx/pipelines"}
SHIPPED_CSV = "ga_tfx/pipelines/data/digits/digits.csv"
# Every test builds the wheel from the source files: the wheel environment (scripts/wheel_check.sh,
# no source tree) leaves the module out.
pytestmark = [pytest.mark.source_tree]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """(path of the built wheel, its zipfile.ZipFile)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("setup.py", "pyproject.toml", "LICENSE"):
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
    assert {
        "ga_tfx/components/trainer/run_fn.py",
        "ga_tfx/pipelines/cli.py",
        "ga_tfx/pipelines/tabular/generic.py",
        "ga_tfx/pipelines/parts/data.py",
    } <= expected
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
    # 3.10 (TFX 1.16) to 3.13 (TFX 1.21's newest); 3.14 is out.
    python = SpecifierSet(metadata["Requires-Python"])
    assert all(v in python for v in ("3.10.13", "3.12.1", "3.13.5")), python
    assert "3.9.18" not in python and "3.14.0" not in python, python
    requires = metadata.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    # `pip install ga-tfx` brings TensorFlow only: tf-keras comes with the `keras2` extra (and
    # `tfx`, `tuner`), TFX with the `tfx` extra.
    assert [re.match(r"[\w.-]+", r).group() for r in base] == ["tensorflow"], base
    keras2 = [Requirement(r) for r in requires if 'extra == "keras2"' in r]
    assert [r.name for r in keras2] == ["tf-keras"], requires
    tfx = [Requirement(r) for r in requires if r.startswith("tfx") and 'extra == "tfx"' in r]
    # The range's two ends are the two proven stacks, nothing outside them.
    assert len(tfx) == 1 and tfx[0].extras == {"kfp"}, requires
    assert all(v in tfx[0].specifier for v in ("1.16.0", "1.21.0")), tfx[0]
    assert not any(v in tfx[0].specifier for v in ("1.15.0", "1.22.0")), tfx[0]
    assert set(metadata.get_all("Provides-Extra")) >= {"keras2", "keras3", "tfx", "tuner", "test"}


def _setup_py():
    """(setup()'s keyword arguments, setup.py's module namespace), setup.py run as pip runs it
    but with setuptools.setup replaced by a recorder."""
    import setuptools

    called = {}
    real = setuptools.setup
    setuptools.setup = lambda **kwargs: called.update(kwargs)
    try:
        namespace = runpy.run_path(os.path.join(ROOT, "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = real
    return called, namespace


def test_tf_keras_is_an_extra_declared_once():
    """`pip install ga-tfx` brings no tf-keras (a Keras 3 user's process gets no second Keras);
    the `keras2` extra, and `tfx` and `tuner` (Keras 2 only), bring setup.py's one TF_KERAS."""
    called, namespace = _setup_py()
    tf_keras = Requirement(namespace["TF_KERAS"])
    assert canonicalize_name(tf_keras.name) == "tf-keras", tf_keras
    # Its ends are the proven stacks' tf-keras (2.16.0: TFX 1.16; 2.21.0: TFX 1.21, lock-lib).
    assert all(v in tf_keras.specifier for v in ("2.16.0", "2.21.0")), tf_keras
    assert not any(v in tf_keras.specifier for v in ("2.15.1", "2.22.0")), tf_keras

    def names(requirements):
        return {canonicalize_name(Requirement(r).name) for r in requirements}

    assert "tf-keras" not in names(called["install_requires"]), called["install_requires"]
    extras = called["extras_require"]
    with_tf_keras = {e for e, requirements in extras.items() if "tf-keras" in names(requirements)}
    assert with_tf_keras == {"keras2", "tfx", "tuner"}, with_tf_keras
    for extra in sorted(with_tf_keras):  # the constant itself, not a second range
        assert namespace["TF_KERAS"] in extras[extra], (extra, extras[extra])
    # One declaration of the range: setup.py spells a tf-keras requirement once.
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        assert len(re.findall(r"[\"']tf[-_]keras\s*[<>=!~]", f.read())) == 1


def test_the_wheel_carries_the_apache_licence(wheel):
    """The wheel ships LICENSE (the repository's file, byte for byte: the Apache License 2.0's
    standard text with the copyright line of "The ga-tfx Authors") in its .dist-info, and its
    metadata names Apache-2.0 (the License field, the License-File and the classifier)."""
    _, archive = wheel
    [shipped] = [n for n in archive.namelist() if re.search(r"\.dist-info/(licenses/)?LICENSE$", n)]
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        text = f.read()
    assert archive.read(shipped) == text
    assert b"Apache License\n                           Version 2.0, January 2004" in text
    assert b"Copyright 2026 The ga-tfx Authors" in text
    metadata = _metadata(archive)
    assert metadata["License"] == "Apache-2.0", metadata["License"]
    assert metadata.get_all("License-File") == ["LICENSE"]
    classifiers = metadata.get_all("Classifier")
    assert "License :: OSI Approved :: Apache Software License" in classifiers, classifiers


# The Pythons each lock is proven on (README "Support matrix").
LOCKS = {
    "lock-tfx-1.16.txt": ("3.10",),
    "lock-tfx-1.21.txt": ("3.12", "3.13"),
    "lock-lib.txt": ("3.12",),
    "lock-keras3.txt": ("3.12",),
}
# The extras each lock holds, beside `pip install ga-tfx` itself (the TFX locks: all of them).
LOCK_EXTRAS = {"lock-lib.txt": ("keras2", "tuner", "test"), "lock-keras3.txt": ("keras3",)}


def _pins(lock, python):
    """{name: version} of a lock file's pins whose markers hold on ``python`` (Linux)."""
    environment = {"python_version": python, "python_full_version": python + ".0"}
    pins = {}
    for line in open(os.path.join(ROOT, "requirements", lock)).read().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                pins[canonicalize_name(requirement.name)] = str(requirement.specifier)[2:]
    return pins


@pytest.mark.parametrize("lock, python", [(k, p) for k, ps in LOCKS.items() for p in ps])
def test_every_lock_satisfies_setup_pys_ranges(wheel, lock, python):
    """Each lock, on each Python it is proven on, satisfies every requirement the wheel declares
    for the extras the lock holds: the ranges in setup.py admit the proven stacks (a range that
    excluded one, e.g. tfx==1.16.0 beside the 1.21 lock, fails here)."""
    _, archive = wheel
    pins = _pins(lock, python)
    environment = {"python_version": python, "python_full_version": python + ".0"}
    extras = LOCK_EXTRAS.get(lock, ("keras2", "tfx", "tuner", "test", "dev"))
    checked = 0
    for text in _metadata(archive).get_all("Requires-Dist"):
        requirement = Requirement(text)
        applies = [
            requirement.marker is None or requirement.marker.evaluate(dict(environment, extra=e))
            for e in ("",) + extras
        ]
        if not any(applies):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock} on Python {python} lacks {name} ({text})"
        assert pins[name] in requirement.specifier, f"{lock}: {name}=={pins[name]} vs {text}"
        checked += 1
    assert checked >= {"lock-lib.txt": 7, "lock-keras3.txt": 5}.get(lock, 16), checked


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


def test_the_changelog_opens_with_the_declared_version():
    """CHANGELOG.md's newest section (its first "## " heading) is the version setup.py declares,
    the one place it is declared (``ga_tfx.__version__`` and ``ga-tfx --version`` read it)."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        [declared] = re.findall(r'^\s*version="([^"]+)"', f.read(), re.M)
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        text = f.read()
    releases = re.findall(r"^## (\S+)", text, re.M)
    assert releases and releases[0] == declared, (releases, declared)
    newest = text.split(f"## {declared}", 1)[1].split("\n## ", 1)[0]
    assert {"Added", "Changed", "Removed"} <= set(re.findall(r"^### (.*)$", newest, re.M))
