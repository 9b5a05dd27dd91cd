"""Test set-up: Keras 2 first, deterministic ops, two logical CPU devices for tf.distribute."""

import os

# TensorFlow's oneDNN kernels off, unless the caller chose (set before TensorFlow is imported):
# on the suite's tiny models their set-up costs more than they save (measured: test_equivalence
# and test_windows, 70 s with them, 54 s without). Numbers are checked against references
# computed in the same process, so both kernel sets are held to the same tolerances;
# scripts/test.sh runs the library tier with oneDNN on, the benchmark and the pipelines keep
# TensorFlow's default (on).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# TensorFlow's BFC allocator on the CPU, which counts live tensor bytes (get_memory_info) for the
# memory tests; without oneDNN the default CPU allocator keeps no statistics.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

# One scratch directory per pytest process, removed when it exits, as every temporary file's home
# (set before TensorFlow and TFX first ask for one). What the suite leaves in the system's /tmp
# otherwise: TFX packages each module_file Trainer's user module in a build directory of its own
# and never removes it (about 49 MB each, 48 of them per CI run), and autograph writes a source
# file per converted function (thousands per run); with the CI clones they filled this machine's
# 252 GB disk in a day. xdist workers and the processes tests start inherit TMPDIR, so each makes
# its own directory inside its parent's.
_SCRATCH = tempfile.mkdtemp(prefix="ga-tfx-tests-")
os.environ["TMPDIR"] = _SCRATCH
tempfile.tempdir = _SCRATCH
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)

import importlib.util  # noqa: E402

# The Keras 3 environment (.venv-keras3/, scripts/test.sh tier keras3) has no tf-keras: only the
# modules marked keras3 run there, and the set-up below does not select Keras 2. JAX gets two
# CPU devices (keras.distribution.DataParallel) from XLA's flag, set before JAX is imported.
_KERAS3_ENV = importlib.util.find_spec("tf_keras") is None
if _KERAS3_ENV:
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import ga_tfx  # noqa: E402, F401  (first ga_tfx import: selects Keras 2 before TensorFlow)

# scripts/wheel_check.sh runs the suite against the installed wheel: GA_TFX_EXPECT_INSTALLED_IN
# names the site-packages ga_tfx must come from (not a source tree on the path).
_INSTALLED_IN = os.environ.get("GA_TFX_EXPECT_INSTALLED_IN")
if _INSTALLED_IN and not os.path.realpath(ga_tfx.__file__).startswith(
    os.path.join(os.path.realpath(_INSTALLED_IN), "")
):
    raise RuntimeError(
        f"ga_tfx was imported from {ga_tfx.__file__}, not from the installed wheel in "
        f"{_INSTALLED_IN} (GA_TFX_EXPECT_INSTALLED_IN): a source tree is on the path"
    )
if _KERAS3_ENV:
    import ga_tfx.keras3  # noqa: E402, F401  (a Keras 3 process: tf.keras stays Keras 3)

    import tensorflow as tf  # noqa: E402
else:
    from ga_tfx._keras import tf  # noqa: E402

import gc  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import textwrap  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402

tf.config.experimental.enable_op_determinism()
# Python's full garbage collections: a worker of the fast tier holds about a million objects,
# most of them TensorFlow's and TFX's modules, which never become garbage, and each full
# collection walked them all. They leave the collector's view once the test modules are
# collected (gc.freeze in pytest_collection_finish). Measured on the fast tier (2 cores, quiet,
# gc.callbacks): 11-13 s per worker in the collector. Full collections made rarer
# (gc.set_threshold(700, 10, 100)) cost more: garbage piles up and one collection then stalled
# a test for 20-36 s (TensorFlow's objects finalised in bulk), 3 min 16 s against 3 min 4 s.
# Under pytest-xdist (the fast tier's `-n 2` on 2 cores) each worker computes on one thread:
# two processes with a 2-thread pool each fight for the cores (measured on the fast tier:
# 8 min 44 s of CPU for 4 min 55 s of wall time).
if os.environ.get("PYTEST_XDIST_WORKER"):
    tf.config.threading.set_intra_op_parallelism_threads(1)
_cpus = tf.config.list_physical_devices("CPU")
# Two logical CPUs so that MirroredStrategy runs 2 replicas on this machine.
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

# The library environment (Python 3.12, TF 2.21) has no TFX. Test modules marked `tfx` import
# TFX at their top, so they would fail at collection before `-m "not tfx"` deselects them: there,
# they are not collected at all (their module-level `pytestmark` line is the one declaration).
# Only there: a run whose -m expression would select tfx-marked tests stops at once when TFX is
# missing (a third of the suite would otherwise vanish from a green run).
_HAS_TFX = importlib.util.find_spec("tfx") is not None
_TFX_MARK = re.compile(r"^pytestmark = .*\bpytest\.mark\.tfx\b", re.MULTILINE)
_IGNORED_TFX_MODULES = []


def _selects_tfx_tests(markexpr):
    """Whether ``-m markexpr`` selects tests marked ``tfx`` (slow or not)."""
    if not markexpr:
        return True
    from _pytest.mark.expression import Expression  # pytest's own -m parser

    expression = Expression.compile(markexpr)
    return any(
        expression.evaluate(lambda name, marks=marks, **kwargs: name in marks)
        for marks in ({"tfx"}, {"tfx", "slow"})
    )


def _described(markexpr):
    return f"-m {markexpr!r}" if markexpr else "no -m expression"


def pytest_configure(config):
    _keep_the_collection_report_to_this_run(config)
    if not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError(
            "pytest-timeout is not installed in this environment, so a hanging test would "
            "never fail (the suite's per-test time limits: tests/conftest.py TIME_LIMITS). "
            "Install the locked test tools: bash scripts/bootstrap.sh"
        )
    if not _HAS_TFX and _selects_tfx_tests(config.getoption("markexpr")):
        raise pytest.UsageError(
            "TFX does not import in this environment, so the test modules marked tfx cannot "
            f"run, but this run ({_described(config.getoption('markexpr'))}) selects them. Run "
            "the library tier with -m 'not tfx', or use the TFX environment (.venv/)."
        )


# Per-test time limits in seconds, by tier (pytest-timeout, pinned in setup.py's `test` extra):
# a test that hangs fails with its name after its tier's limit instead of running out CI's
# time. The fast tier's is pyproject.toml's `timeout` (its heaviest test: 15 s quiet, about a
# minute at load 7); the limits below leave the same room over the slowest tests of each tier
# (tests/README.md, "Time limits"). A test's own @pytest.mark.timeout wins. The method is
# SIGALRM (pyproject.toml's `timeout_method`): the test fails and the run goes on; a hang
# inside one call into TensorFlow's C++ that never returns is not interrupted by it.
TIME_LIMITS = {"slow": 600, "slow_tfx": 1800, "container": 3600}


def _time_limit(item):
    """The tier's limit of ``item`` (None: the fast tier, pyproject.toml's ``timeout``)."""
    names = {marker.name for marker in item.iter_markers()}
    if "container" in names:
        return TIME_LIMITS["container"]
    if "slow" in names:
        return TIME_LIMITS["slow_tfx" if "tfx" in names else "slow"]
    return None


def pytest_collection_modifyitems(config, items):
    """The tests listed in tests/tiers.py join the slow tier (one list, one reason each); each
    test not given its own limit gets its tier's (``TIME_LIMITS``); in the Keras 3 environment a
    test marked ``keras3_backend(NAME)`` is deselected (not skipped) in the run of another
    KERAS_BACKEND."""
    from tests.tiers import is_slow

    for item in items:
        if is_slow(item.nodeid.split("/")[-1]):
            item.add_marker(pytest.mark.slow)
        limit = _time_limit(item)
        if limit is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(limit))
    if _KERAS3_ENV:
        backend = os.environ.get("KERAS_BACKEND", "tensorflow")
        other = [
            item
            for item in items
            if any(backend not in m.args for m in item.iter_markers("keras3_backend"))
        ]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [item for item in items if item not in other]


# Modules marked keras3 are collected in the Keras 3 environment only, and only they are there
# (the others import Keras 2); found by their module-level `pytestmark` line, as the tfx ones.
_KERAS3_MARK = re.compile(r"^pytestmark = .*\bpytest\.mark\.keras3\b", re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if bool(_KERAS3_MARK.search(collection_path.read_text())) != _KERAS3_ENV:
        return True
    if _HAS_TFX:
        return None
    if _TFX_MARK.search(collection_path.read_text()):
        _IGNORED_TFX_MODULES.append(collection_path.name)
        return True
    return None


# GA_TFX_COLLECTION_REPORT=FILE (scripts/test.sh): after collection, FILE gets the selected
# tests counted by marker, for the committed floor (tests/collection_floor.json). Under
# pytest-xdist the first worker writes it (the controller collects nothing). The process that
# runs the tests takes the variable out of its environment, so that a pytest a test starts
# (tests/test_mutants.py collects the fast tier) cannot overwrite this run's report.
_DESELECTED = []
_COLLECTION_REPORT = os.environ.get("GA_TFX_COLLECTION_REPORT")


def _keep_the_collection_report_to_this_run(config):
    xdist_controller = not os.environ.get("PYTEST_XDIST_WORKER") and getattr(
        config.option, "numprocesses", None
    )
    if not xdist_controller:  # its workers inherit the variable when they start
        os.environ.pop("GA_TFX_COLLECTION_REPORT", None)


def pytest_deselected(items):
    _DESELECTED.extend(items)


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()
    path = _COLLECTION_REPORT
    if not path or os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return
    marks = [{m.name for m in item.iter_markers()} for item in session.items]
    report = {
        "tfx_imports": _HAS_TFX,
        "selected": len(session.items),
        "deselected": len(_DESELECTED),
        "by_marker": {
            "tfx": sum("tfx" in m for m in marks),
            "slow": sum("slow" in m for m in marks),
            "stack": sum("stack" in m and "slow" in m for m in marks),
            "neither": sum(not m & {"tfx", "slow"} for m in marks),
        },
        "tfx_modules_not_collected": sorted(_IGNORED_TFX_MODULES),
    }
    with open(path + ".tmp", "w") as f:
        json.dump(report, f, indent=1)
    os.replace(path + ".tmp", path)


@pytest.fixture
def model_module(tmp_path, monkeypatch):
    """Writes a model module under a fresh importable name; returns ``write(source) -> name``
    (default source: the taxi test model of ``tests/taxi.py``)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source=None):
        if source is None:
            from tests.taxi import MODEL_MODULE as source  # imports TFX: tfx-marked tests only
        name = f"ga_tfx_tuner_model_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write
