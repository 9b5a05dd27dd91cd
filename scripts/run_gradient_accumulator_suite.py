"""Runs gradient-accumulator's own test suite (v0.5.2) offline, against ga-tfx's compat module.

    .venv/bin/python scripts/run_gradient_accumulator_suite.py [--target compat|package]
        [--source GIT_DIR] [--files test_a.py,test_b.py] [--timeout 900] [--keep DIR]

What it does, in a fresh temporary directory:

* copies ``tests/`` of the package at the pinned commit (tag v0.5.2) out of a git mirror of
  github.com/andreped/GradientAccumulator (``--source``; default: the mirror made by the
  project's ``fetch`` tool, ``/work/.mirror/andreped+GradientAccumulator/repo``). The tests
  are not part of this repository; nothing is downloaded.
* writes a stand-in ``tensorflow_datasets`` (the suite loads MNIST and IMDb reviews with
  ``tfds.load``, which needs the network): ``mnist`` is scikit-learn's 1797 real 8x8 digits,
  scaled to 24x24 and padded to 28x28x1 uint8 (1000 train, 500 test); ``imdb_reviews`` is 1000
  + 500 generated texts whose label decides the letter frequencies. Both are deterministic.
* writes a ``conftest.py`` that makes ``keras.applications.MobileNetV2(weights="imagenet")``
  build with ``weights=None`` (the ImageNet file cannot be downloaded here): the only change
  to what a test does.
* ``--target compat`` (default) puts a ``gradient_accumulator`` package first on the path whose
  modules are ``ga_tfx.compat.gradient_accumulator``'s, so the suite's
  ``import gradient_accumulator`` gets ga-tfx; ``--target package`` runs the installed
  ``gradient-accumulator`` itself (the yardstick).
* runs each test file in its own pytest process (as the package's CI does), with
  ``TF_USE_LEGACY_KERAS=1`` (the suite is written for Keras 2), and prints one line per test
  (passed/failed/error and the first line of the failure) and the totals.

Two of the suite's tests start a ``multiprocessing`` child whose failure pytest does not see
(``test_mixed_precision.py``); the script reports "child traceback" when a file's output holds
a Python traceback although pytest passed it.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

PINNED_TAG = "v0.5.2"
PINNED_COMMIT = "d3fce336879cedb52e4fefaf32850c0aec714aac"
DEFAULT_SOURCE = "/work/.mirror/andreped+GradientAccumulator/repo"
COMPAT_MODULES = ("accumulators", "agc", "layers", "utils")
REPO_ROOT = Path(__file__).resolve().parent.parent

TFDS_STANDIN = '''
"""Offline stand-in for tensorflow_datasets.load (mnist, imdb_reviews); see the runner."""
import types

import numpy as np
import tensorflow as tf

TRAIN, TEST = 1000, 500


def _mnist():
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = np.kron(digits.images, np.ones((3, 3))) * (255.0 / 16.0)  # 24x24 in [0, 255]
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))[..., None].astype("uint8")
    labels = digits.target.astype("int64")
    return (images[:TRAIN], labels[:TRAIN]), (images[TRAIN:TRAIN + TEST],
                                              labels[TRAIN:TRAIN + TEST])


def _imdb_reviews():
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz "))
    texts, labels = [], []
    for i in range(TRAIN + TEST):
        label = i % 2
        p = np.ones(len(letters))
        p[slice(0, 13) if label else slice(13, 26)] *= 2.0  # the label shifts letter frequencies
        chars = rng.choice(letters, size=int(rng.integers(60, 140)), p=p / p.sum())
        texts.append("".join(chars))
        labels.append(label)
    texts, labels = np.array(texts), np.array(labels, "int64")
    return (texts[:TRAIN], labels[:TRAIN]), (texts[TRAIN:], labels[TRAIN:])


_DATA = {"mnist": _mnist, "imdb_reviews": _imdb_reviews}


def load(name, split=None, shuffle_files=False, as_supervised=False, with_info=False, **_):
    if name not in _DATA:
        raise ValueError(f"stand-in tensorflow_datasets has no {name!r}")
    parts = dict(zip(("train", "test"), _DATA[name]()))
    names = [split] if isinstance(split, str) else list(split)
    datasets = []
    for part in names:
        x, y = parts[part]
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if not as_supervised:
            key = "image" if name == "mnist" else "text"
            ds = ds.map(lambda a, b: {key: a, "label": b})
        datasets.append(ds)
    result = datasets[0] if isinstance(split, str) else tuple(datasets)
    if not with_info:
        return result
    splits = {part: types.SimpleNamespace(num_examples=len(parts[part][1])) for part in parts}
    return result, types.SimpleNamespace(splits=splits, name=name)
'''

CONFTEST = '''
"""No network: keras.applications.MobileNetV2 builds without its ImageNet weights."""
import functools

import tensorflow as tf

_original = tf.keras.applications.MobileNetV2


@functools.wraps(_original)
def _mobilenet_v2(*args, **kwargs):
    kwargs["weights"] = None
    return _original(*args, **kwargs)


tf.keras.applications.MobileNetV2 = _mobilenet_v2
'''

SHIM = '''
"""gradient_accumulator -> ga_tfx.compat.gradient_accumulator (written by the suite runner)."""
import sys

import ga_tfx.compat.gradient_accumulator as _compat
from ga_tfx.compat.gradient_accumulator import *  # noqa: F401,F403

for _name in {modules!r}:
    sys.modules[__name__ + "." + _name] = getattr(_compat, _name)
'''


def export_tests(source: str, destination: Path) -> None:
    """Writes the pinned ``tests/`` of the package's git mirror into ``destination``."""
    commit = subprocess.run(
        ["git", "--git-dir", source, "rev-parse", PINNED_TAG + "^{commit}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if commit != PINNED_COMMIT:
        raise SystemExit(f"{source}: tag {PINNED_TAG} is {commit}, expected {PINNED_COMMIT}.")
    archive = subprocess.run(
        ["git", "--git-dir", source, "archive", PINNED_COMMIT, "tests"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(destination)], input=archive, check=True)


def prepare(workdir: Path, source: str, target: str) -> None:
    export_tests(source, workdir)
    (workdir / "tensorflow_datasets").mkdir()
    (workdir / "tensorflow_datasets" / "__init__.py").write_text(TFDS_STANDIN)
    (workdir / "conftest.py").write_text(CONFTEST)
    (workdir / "pytest.ini").write_text("[pytest]\n")
    if target == "compat":
        (workdir / "gradient_accumulator").mkdir()
        (workdir / "gradient_accumulator" / "__init__.py").write_text(
            SHIM.format(modules=COMPAT_MODULES)
        )


def _environment(workdir: Path) -> dict:
    return dict(
        os.environ,
        TF_USE_LEGACY_KERAS="1",
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join([str(workdir), str(REPO_ROOT)]),
    )


def implementation(workdir: Path) -> str:
    """The module that ``import gradient_accumulator`` gives the suite (what is under test)."""
    probe = "import gradient_accumulator as g; print(g.GradientAccumulateModel.__module__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=workdir,
        env=_environment(workdir),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def run_file(workdir: Path, test_file: str, timeout: int) -> list:
    """Runs one test file in its own pytest process; returns ``[(test, outcome, message)]``."""
    report = workdir / f"{test_file}.xml"
    env = _environment(workdir)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        f"tests/{test_file}",
    ]
    try:
        done = subprocess.run(
            command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
        )
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired:
        return [(test_file, "timeout", f"over {timeout} s")]
    (workdir / f"{test_file}.log").write_text(output)
    if not report.exists():
        return [(test_file, "error", output.strip().splitlines()[-1] if output.strip() else "")]
    results = []
    for case in ElementTree.parse(report).iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message = (element.get("message") or "").strip().splitlines()
                message = message[0][:160] if message else ""
        if outcome == "passed" and "Traceback (most recent call last)" in output:
            message = "child traceback in the output (pytest passed it)"
        results.append((f"{test_file}::{case.get('name')}", outcome, message))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--target",
        choices=("compat", "package"),
        default="compat",
        help="compat: ga_tfx.compat.gradient_accumulator (default); package: "
        "the installed gradient-accumulator",
    )
    parser.add_argument(
        "--source",
        default=DEFAULT_SOURCE,
        help="git directory of a clone/mirror of andreped/GradientAccumulator",
    )
    parser.add_argument(
        "--files", default="", help="comma-separated test files (default: all tests/test_*.py)"
    )
    parser.add_argument("--timeout", type=int, default=900, help="seconds per test file")
    parser.add_argument("--keep", default="", help="work in this (new) directory and keep it")
    args = parser.parse_args(argv)
    if not Path(args.source).exists():
        raise SystemExit(
            f"--source {args.source} does not exist: make a git mirror of "
            "github.com/andreped/GradientAccumulator (git clone --mirror) first."
        )
    with tempfile.TemporaryDirectory(prefix="ga_suite_") as temporary:
        workdir = Path(args.keep) if args.keep else Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        prepare(workdir, args.source, args.target)
        files = [f for f in args.files.split(",") if f] or sorted(
            p.name for p in (workdir / "tests").glob("test_*.py")
        )
        print(f"import gradient_accumulator -> {implementation(workdir)}", flush=True)
        results = []
        for test_file in files:
            file_results = run_file(workdir, test_file, args.timeout)
            for name, outcome, message in file_results:
                print(f"{outcome:8s} {name}" + (f"  -- {message}" if message else ""), flush=True)
            results += file_results
    passed = sum(outcome == "passed" for _, outcome, _ in results)
    print(
        textwrap.dedent(f"""
        target={args.target} (gradient-accumulator {PINNED_TAG} tests, {PINNED_COMMIT[:10]}):
        {passed} of {len(results)} passed""")
    )
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
