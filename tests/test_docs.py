"""Every Python example of README.md and docs/*.md runs, at small sizes, and README.md's links
resolve.

An example may use names the prose around it takes as given (your model, your data); the HTML
comment ``<!-- example given: NAME, ... -->`` just above its code block lists them, and
:func:`given` makes each a small real one (8 features, 10 classes, 512 rows). Nothing else is
added to an example's namespace, so an example that uses a name it does not list fails here.
An example that builds TFX components runs in the TFX environments (marker ``tfx``); the others
run in the library environment too. After some examples, :data:`CHECKS` asserts what the
example's own comments claim (one update per window, the recommendation, ...).

mkdocs itself checks the manual's links and anchors (``mkdocs build --strict`` in
scripts/lint.sh); README.md is not part of that site, so its relative links are checked here.
"""

import ga_tfx
from ga_tfx import keras, tf

import glob
import os
import re

import numpy as np
import pytest

from tests.helpers import two_replica_strategy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(f"{ROOT}/docs/*.md"))]
FEATURES, CLASSES, ROWS = 8, 10, 512
GIVEN_LINE = re.compile(r"<!-- example given: (.*?) -->")
KERAS3_EXAMPLE = "<!-- example keras3"


def examples():
    """``[(page, number, code, given names)]``: every ```python block of every page, numbered
    from 1 in its page."""
    found = []
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            lines = f.read().split("\n")
        number = 0
        for i, line in enumerate(lines):
            if line.strip() != "```python":
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            if i and lines[i - 1].strip().startswith(KERAS3_EXAMPLE):
                continue  # Keras 3: tests/test_keras3_docs.py runs it in .venv-keras3/
            number += 1
            given = GIVEN_LINE.fullmatch(lines[i - 1].strip()) if i else None
            names = [n.strip() for n in given.group(1).split(",")] if given else []
            found.append((page, number, "\n".join(lines[i + 1 : end]), names))
    return found


def _data(rows, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=rows).astype("int64")
    return x, y


def _model(softmax=False):
    """A small built model that outputs logits (or probabilities)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    outputs = keras.layers.Dense(CLASSES, activation="softmax" if softmax else None)(hidden)
    return keras.Model(inputs, outputs)


def _build_model(hp=None):
    """``build_model(hp)`` as Keras Tuner calls it (``hp`` unused), or ``build_model()``:
    a compiled model (the training loop's example ignores the compile)."""
    model = _model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def _tfx_components(tmp_path):
    """CsvExampleGen -> SchemaGen -> Transform on the shipped digits data (built, not run)."""
    from tfx import v1 as tfx

    example_gen = tfx.components.CsvExampleGen(
        input_base=os.path.join(ROOT, "pipelines", "data", "digits")
    )
    statistics = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema = tfx.components.SchemaGen(statistics=statistics.outputs["statistics"])
    module_file = os.path.join(ROOT, "pipelines", "digits.py")
    transform = tfx.components.Transform(
        examples=example_gen.outputs["examples"],
        schema=schema.outputs["schema"],
        module_file=module_file,
    )
    return tfx, transform, module_file


def given(names, tmp_path):
    """The namespace an example starts from: each of ``names``, small and real."""
    x, y = _data(ROWS, 0)
    x_val, y_val = _data(ROWS // 2, 1)
    makers = {
        "ga_tfx": lambda: ga_tfx,
        "keras": lambda: keras,
        "tf": lambda: tf,
        "my_keras_model": lambda: _model(softmax=True),
        "my_model": _model,
        "make_model": lambda: _model,
        "build_model": lambda: _build_model,
        "x": lambda: x,
        "y": lambda: y,
        "x_val": lambda: x_val,
        "y_val": lambda: y_val,
        "loss_fn": lambda: keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none"
        ),
        "dataset": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
        # 64 micro-batches of 8: every micro-batch has the same global size
        "micro_batches": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
        "global_size_of_this_micro_batch": lambda: 8,
        "evaluate": lambda: lambda loop, logs: None,
        "train_ds": lambda: tf.data.Dataset.from_tensor_slices(_data(40 * 4 * 32, 2)),
        "AccumulationHyperModel": lambda: (
            __import__("ga_tfx.tuning", fromlist=["AccumulationHyperModel"]).AccumulationHyperModel
        ),
    }
    namespace = {}
    tfx_names = {"tfx", "transform", "module_file", "GradientAccumulationTrainer"}
    if tfx_names & set(names):
        tfx, transform, module_file = _tfx_components(tmp_path)
        from ga_tfx.components.trainer import GradientAccumulationTrainer

        makers.update(
            tfx=lambda: tfx,
            transform=lambda: transform,
            module_file=lambda: module_file,
            GradientAccumulationTrainer=lambda: GradientAccumulationTrainer,
        )
    for name in names:
        assert name in makers, f"the docs name {name!r} as given, which this test cannot make"
        namespace[name] = makers[name]()
    return namespace


def _check_wrapped_fit(ns):
    # 512 rows in micro-batches of 32: 16 micro-batches, 2 windows of 8 per epoch, 3 epochs:
    # 6 updates. The serving model is a plain Keras model on my_keras_model's variables, which
    # training moved.
    assert int(ns["model"].optimizer.iterations) == 6
    serving, mine = ns["serving_model"], ns["my_keras_model"]
    assert not isinstance(serving, (ga_tfx.GradientAccumulateModel,))
    assert [v.ref() for v in serving.weights] == [v.ref() for v in mine.weights]
    assert not np.allclose(mine.get_weights()[0], _model(softmax=True).get_weights()[0])


def _check_optimizer_wrapper(ns):
    # 64 micro-batches at K=8: 8 windows, each applied on its 8th micro-step; flush() finds
    # nothing left.
    assert int(ns["opt"].iterations.numpy()) == 8


def _check_training_loop(ns):
    # 512 rows in micro-batches of 32, K=8: 2 windows per epoch, 3 epochs: 6 updates.
    assert int(ns["optimizer"].iterations.numpy()) == 6
    assert os.listdir("ckpt") and os.listdir("logs")


def _check_probe(ns):
    rec = ns["probe"].recommendation()
    assert ns["probe"].get_best_hyperparameters()[0]["accum_steps"] == rec.accum_steps
    assert rec.accum_steps in (1, 2, 4, 8, 16) and "B_path" in rec.reason


def _check_divisor_example(ns):
    # The masked tagger accumulated over micro-batches of 96, 8, 48 and 16 tokens is its big
    # batch to float32 round-off, where training moved the weights by far more.
    assert ns["diff"] <= 1e-6
    moved = max(
        np.abs(a - b).max() for a, b in zip(ns["big"].get_weights(), ns["tagger"]().get_weights())
    )
    assert moved > 1e-2


def _check_trainer(ns):
    assert ns["trainer"].outputs["model"] is not None


CHECKS = {
    ("README.md", 1): _check_wrapped_fit,
    ("README.md", 2): _check_trainer,
    ("docs/exactness.md", 2): _check_divisor_example,
    ("docs/front-ends.md", 1): _check_optimizer_wrapper,
    ("docs/front-ends.md", 2): _check_training_loop,
    ("docs/trainer-and-tuner.md", 2): _check_probe,
    ("docs/trainer-and-tuner.md", 3): _check_trainer,
}
# Longer runs (a search of 8 trials, a probe of 40 windows): in the slow tier.
SLOW = {("docs/trainer-and-tuner.md", 1), ("docs/trainer-and-tuner.md", 2)}


def _params():
    params = []
    for page, number, code, names in examples():
        marks = []
        if {"tfx", "transform", "module_file", "GradientAccumulationTrainer"} & set(names):
            marks.append(pytest.mark.tfx)
        if (page, number) in SLOW:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(page, number, code, names, marks=marks, id=f"{page}#{number}"))
    return params


@pytest.mark.parametrize("page,number,code,names", _params())
def test_example_runs(page, number, code, names, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples write checkpoints, logs and tuner directories here
    # An example's MirroredStrategy() is the suite's two-replica strategy without collectives:
    # several collective strategies in one test process collide ("Shape mismatch in the
    # collective instance", a known limit), and the next test of this worker would fail.
    real = tf.distribute.MirroredStrategy
    monkeypatch.setattr(
        tf.distribute,
        "MirroredStrategy",
        lambda *args, **kwargs: real(*args, **kwargs) if args or kwargs else two_replica_strategy(),
    )
    namespace = given(names, tmp_path)
    exec(compile(code, f"{page} example {number}", "exec"), namespace)  # noqa: S102
    check = CHECKS.get((page, number))
    if check is not None:
        check(namespace)


def test_every_example_and_check_is_known():
    """The checks and the slow list name examples that exist, and the pages hold the examples
    this test was written for (a new example is picked up; a deleted one fails here)."""
    found = {(page, number) for page, number, _, _ in examples()}
    assert set(CHECKS) <= found and SLOW <= found
    assert len(found) >= 9


def _slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_links_resolve():
    """Each relative link of README.md names a file of the tree, and an anchor one of its
    headings."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10
    for link in local:
        path, _, anchor = link.partition("#")
        target = os.path.join(ROOT, path) if path else os.path.join(ROOT, "README.md")
        assert os.path.exists(target), f"README.md links to {link!r}: no such file"
        if anchor:
            with open(target, encoding="utf-8") as f:
                headings = re.findall(r"^#+ (.*)$", f.read(), re.M)
            assert anchor in {_slug(h) for h in headings}, f"README.md: no anchor in {link!r}"


def test_every_public_name_is_in_the_front_ends_api_table():
    """docs/front-ends.md's "What you get" is the users' index of the public names: every name
    of ``ga_tfx.__all__`` has a row there (``ga_tfx.NAME``), so none is documented only in
    ARCHITECTURE.md or setup.md."""
    with open(os.path.join(ROOT, "docs", "front-ends.md"), encoding="utf-8") as f:
        table = f.read().split("## What you get", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`ga_tfx\.(\w+)", table))
    assert sorted(set(ga_tfx.__all__) - listed) == []


@pytest.mark.source_tree
def test_architecture_first_screen_says_where_each_installed_name_lives():
    """docs/ARCHITECTURE.md's first table maps each installed name to the folder setup.py
    installs it from, and the ``ga-tfx`` command to its entry point's file."""
    import ast

    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    [folders] = [
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["NAMESPACED_FOLDERS"]
    ]
    [script] = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and str(node.value).startswith("ga-tfx=")
    ]
    module, function = script.split("=", 1)[1].split(":")
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        first_screen = f.read().split("\n")[:20]
    rows = {
        cells[0]: cells[1:]
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in first_screen
            if line.startswith("| `") or line.startswith("| the `ga-tfx` command")
        )
    }
    expected = {"`ga_tfx`, `ga_tfx.*`": "`ga_tfx/`"}
    expected.update({f"`{name}`, `{name}.*`": f"`{path}/`" for name, path in folders.items()})
    assert {name: cells[0] for name, cells in rows.items() if name in expected} == expected
    assert set(rows) == set(expected) | {"the `ga-tfx` command"}
    package, _, leaf = module.rpartition(".")
    folder = next(path for name, path in folders.items() if package == name)
    assert rows["the `ga-tfx` command"] == [f"`{folder}/{leaf}.py`", f"`{module}:{function}`"]
    assert os.path.isfile(os.path.join(ROOT, folder, f"{leaf}.py"))
