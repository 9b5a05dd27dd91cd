"""The Keras 3 examples of README.md and docs/*.md (a ```python block just below a
``<!-- example keras3 given: NAMES -->`` line) run in the Keras 3 environment; tests/test_docs.py
runs the others (and leaves these out)."""

import glob
import os
import re

import keras
import numpy as np
import pytest

pytestmark = [pytest.mark.keras3, pytest.mark.keras3_backend("tensorflow")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(f"{ROOT}/docs/*.md"))]
LINE = re.compile(r"<!-- example keras3 given: (.*?) -->")
FEATURES, CLASSES, ROWS = 8, 10, 256


def examples():
    found = []
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            lines = f.read().split("\n")
        number = 0
        for i, line in enumerate(lines):
            match = LINE.fullmatch(line.strip())
            if not match or lines[i + 1].strip() != "```python":
                continue
            end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
            number += 1
            names = [n.strip() for n in match.group(1).split(",")]
            found.append((page, number, "\n".join(lines[i + 2 : end]), names))
    return found


def _given(names):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=ROWS).astype("int64")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    makers = {"my_keras_model": lambda: model, "x": lambda: x, "y": lambda: y}
    return {name: makers[name]() for name in names}


def test_there_are_keras3_examples():
    pages = {page for page, *_ in examples()}
    assert {"README.md", "docs/keras3.md"} <= pages


@pytest.mark.parametrize(
    "page, number, code, names", examples(), ids=[f"{p}#{n}" for p, n, *_ in examples()]
)
def test_keras3_example_runs(page, number, code, names, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example's tuner directory is written here
    namespace = _given(names)
    exec(compile(code, f"{page}#{number}", "exec"), namespace)
    if "model" in namespace and hasattr(namespace["model"], "window_core"):
        # fit: 256 rows in micro-batches of 32, K=8: one update per epoch, 3 epochs.
        assert int(namespace["model"].optimizer.iterations.numpy()) == 3
    if "opt" in namespace:
        # 8 micro-batches of 32, K=4: two updates, nothing left to flush.
        assert int(namespace["opt"].iterations.numpy()) == 2
    if "probe" in namespace:
        rec = namespace["probe"].recommendation()
        assert namespace["probe"].get_best_hyperparameters()[0]["accum_steps"] == rec.accum_steps
        assert rec.accum_steps in (1, 2, 4, 8) and "B_path" in rec.reason
        assert len(namespace["probe"].probe_report()["curve"]) == 2 * 256 // (4 * 16)
