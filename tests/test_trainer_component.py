"""GradientAccumulationTrainer and the ga-tfx run_fn on the testdata shipped in the TFX wheel.

TFX 1.16 ships a transform graph only for the Chicago taxi data
(``tfx/components/testdata/transform``: transformed examples + transform graph; raw examples
in ``csv_example_gen``), so that is the data here (label ``tips_xf``, raw ``tips``).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import _tf_keras_internals
from ga_tfx._keras import keras, tf
from ga_tfx.components.trainer import (
    AccumulationSettings,
    Executor,
    GradientAccumulationTrainer,
    checkpoints,
    run_record,
)
from ga_tfx.components.trainer import model as model_lib
from ga_tfx.components.trainer import run_fn as run_fn_lib
from ga_tfx.components.trainer import settings as settings_lib
from ga_tfx.engine import pacing

import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow_transform as tft
import tfx
from packaging.version import Version
from tfx import version as tfx_version
from tfx.components.trainer import executor as tfx_trainer_executor
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import io_utils, proto_utils

from tests import taxi

TFX_VERSION = Version(tfx_version.__version__)

pytestmark = [pytest.mark.tfx]  # the TFX Trainer component, executor and run_fn

TESTDATA, MODEL_MODULE = taxi.TESTDATA, taxi.MODEL_MODULE

BASE_SETTINGS = dict(label_key="tips_xf", raw_label_key="tips", strategy="none", shuffle=0)


def _module(tmp_path, source=MODEL_MODULE, name="model_module.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def _artifacts(out, hyperparameters=None):
    inputs = taxi.transform_inputs()
    if hyperparameters is not None:
        hp = standard_artifacts.HyperParameters()
        hp.uri = os.path.join(out, "hyperparameters")
        io_utils.write_string_file(
            os.path.join(hp.uri, "hyperparameters.txt"), json.dumps(hyperparameters)
        )
        inputs[specs.HYPERPARAMETERS_KEY] = [hp]
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = os.path.join(out, "model"), os.path.join(out, "model_run")
    return inputs, {specs.MODEL_KEY: [model], specs.MODEL_RUN_KEY: [model_run]}


def _exec_properties(module_file, num_steps=3, eval_steps=1, **settings):
    return dict(
        {
            specs.TRAIN_ARGS_KEY: proto_utils.proto_to_json(
                trainer_pb2.TrainArgs(num_steps=num_steps)
            ),
            specs.EVAL_ARGS_KEY: proto_utils.proto_to_json(
                trainer_pb2.EvalArgs(num_steps=eval_steps)
            ),
            specs.MODULE_FILE_KEY: module_file,
        },
        **dict(BASE_SETTINGS, **settings),
    )


def _run(tmp_path, name, hyperparameters=None, module_file=None, **kwargs):
    out = str(tmp_path / name)
    inputs, outputs = _artifacts(out, hyperparameters)
    Executor().Do(inputs, outputs, _exec_properties(module_file or _module(tmp_path), **kwargs))
    return os.path.join(out, "model", "Format-Serving"), os.path.join(out, "model_run")


def _scalars(log_dir):
    """{tag: [(step, value), ...]} of every event file under log_dir (or of that file)."""
    found = {}
    paths = (
        [log_dir]
        if os.path.isfile(log_dir)
        else glob.glob(os.path.join(log_dir, "**", "events.out.tfevents.*"), recursive=True)
    )
    for path in paths:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor) if value.HasField("tensor") else None
                if array is not None and (array.ndim or array.dtype.kind not in "fiu"):
                    continue  # not a scalar (e.g. Keras' model-config text summary)
                number = value.simple_value if array is None else float(array)
                found.setdefault(value.tag, []).append((event.step, number))
    return found


def _raw_examples(n=20):
    path = sorted(glob.glob(os.path.join(TESTDATA, "csv_example_gen", "Split-eval", "*.gz")))[0]
    dataset = tf.data.TFRecordDataset(path, compression_type="GZIP").take(n)
    return tf.stack(list(dataset))


def _saved_variables(serving_dir):
    """{checkpoint key: value} of the exported model's variables (weights and optimizer)."""
    reader = tf.train.load_checkpoint(os.path.join(serving_dir, "variables", "variables"))
    return {
        key: reader.get_tensor(key)
        for key, dtype in reader.get_variable_to_dtype_map().items()
        if key.endswith("VARIABLE_VALUE") and dtype.is_floating
    }


FEATURES = ("fare_xf", "trip_miles_xf", "trip_seconds_xf")  # the inputs of MODEL_MODULE
TRANSFORM_GRAPH = os.path.join(TESTDATA, "transform", "transform_graph")


def _train_in_memory(tmp_path, name, module_source=MODEL_MODULE, **settings):
    """``run_fn.train_and_export`` as the executor calls it (the module's build_model and
    make_serving_fn, if any); returns (the trained model, still in memory; fn_args)."""
    out = str(tmp_path / name)
    inputs, outputs = _artifacts(out)
    props = _exec_properties(_module(tmp_path, module_source, f"{name}.py"), **settings)
    fn_args = Executor()._GetFnArgs(inputs, outputs, props)
    settings = settings_lib.from_dict(
        {k: props[k] for k in settings_lib.field_names() if props.get(k) is not None}
    )
    namespace = {}
    exec(textwrap.dedent(module_source), namespace)
    live = run_fn_lib.train_and_export(
        fn_args,
        settings,
        namespace["build_model"],
        make_serving_fn=namespace.get("make_serving_fn"),
    )
    return live, fn_args


def _in_memory_answer(model, examples):
    """``model``'s answer to serialized raw examples, transformed apart from any export: a new
    TFTransformOutput's layer on the parsed examples (the raw label left out)."""
    transform = tft.TFTransformOutput(TRANSFORM_GRAPH)
    spec = {k: v for k, v in transform.raw_feature_spec().items() if k != "tips"}
    features = transform.transform_features_layer()(tf.io.parse_example(examples, spec))
    return model({k: features[k] for k in FEATURES}, training=False)


def _training_examples(n):
    """The first ``n`` transformed training examples in the order the Trainer reads them
    (file order, shuffle off), read apart from TFXIO: ``(x, y)``."""
    files = sorted(
        glob.glob(os.path.join(TESTDATA, "transform", "transformed_examples", "Split-train", "*"))
    )
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").take(n)
    spec = tft.TFTransformOutput(TRANSFORM_GRAPH).transformed_feature_spec()
    parsed = tf.io.parse_example(tf.stack(list(records)), spec)
    x = {k: tf.reshape(parsed[k], (-1, 1)) for k in FEATURES}
    y = parsed["tips_xf"]
    assert y.shape[0] == n  # the data holds that many examples
    return x, y


def _plain_keras_big_batch(hparams, batch_size, updates):
    """The reference of the Trainer comparisons: MODEL_MODULE's model trained by plain Keras
    ``fit`` (no ga-tfx, no TFXIO) on batches of ``batch_size``, ``updates`` of them, in the
    order the Trainer reads the data (the transformed training split's examples in file order,
    shuffle off). Returns the model."""
    x, y = _training_examples(batch_size * updates)
    namespace = {}
    exec(textwrap.dedent(MODEL_MODULE), namespace)
    model = namespace["build_model"](hparams)
    model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == updates
    return model


def _saved_variables_diff(serving_dir_a, serving_dir_b):
    """(max |a - b| over the exported variables, their number); the same names in both."""
    a, b = _saved_variables(serving_dir_a), _saved_variables(serving_dir_b)
    assert set(a) == set(b) and b
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in b), len(b)


def _plain_keras_by_window(hparams, sizes):
    """MODEL_MODULE's model trained by plain Keras, one ``train_on_batch`` per window on the
    next ``size`` examples in the Trainer's order, for each of ``sizes``. Returns the model."""
    x, y = _training_examples(sum(sizes))
    namespace = {}
    exec(textwrap.dedent(MODEL_MODULE), namespace)
    model = namespace["build_model"](hparams)
    start = 0
    for size in sizes:
        part = {k: v[start : start + size] for k, v in x.items()}
        model.train_on_batch(part, y[start : start + size])
        start += size
    return model


def _exported_weights(serving_dir):
    """The exported model's weights, in the order of ``get_weights()``."""
    return keras.models.load_model(serving_dir, compile=False).get_weights()


def _max_diff(weights_a, weights_b):
    assert [w.shape for w in weights_a] == [w.shape for w in weights_b]
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights_a, weights_b))


# ---------------------------------------------------------------------- construction
def test_component_carries_settings_as_primitive_exec_properties():
    examples = tfx.types.Channel(type=standard_artifacts.Examples)
    trainer = GradientAccumulationTrainer(
        examples=examples,
        module_file="m.py",
        accum_steps=4,
        micro_batch_size=8,
        label_key="y",
        agc_clip_factor=0.02,
        replace_batchnorm=False,
        strategy="mirrored",
        train_args=trainer_pb2.TrainArgs(num_steps=10),
    )
    props = trainer.exec_properties
    assert props["accum_steps"] == 4 and props["micro_batch_size"] == 8
    assert props["agc_clip_factor"] == 0.02 and props["replace_batchnorm"] == 0
    assert props["strategy"] == "mirrored" and props["partial_window"] == "apply"
    assert all(isinstance(v, (int, float, str)) for v in props.values())
    assert set(trainer.outputs) == {"model", "model_run"}
    # The stock Trainer's inputs of the installed TFX: 1.21 added StatisticsGen's output.
    stock = {"examples", "transform_graph", "schema", "base_model", "hyperparameters"}
    if TFX_VERSION >= Version("1.21"):
        stock.add("statistics")
    assert set(trainer.spec.INPUTS) == stock == set(specs.TrainerSpec.INPUTS)


def test_statistics_input_follows_the_installed_tfx():
    """TFX 1.21's Trainer takes ``statistics`` (``fn_args.num_examples``); on 1.16 it is refused
    with the installed version named, not passed to a spec that lacks it."""
    statistics = tfx.types.Channel(type=standard_artifacts.ExampleStatistics)
    build = lambda: GradientAccumulationTrainer(  # noqa: E731
        examples=tfx.types.Channel(type=standard_artifacts.Examples),
        module_file="m.py",
        accum_steps=2,
        micro_batch_size=8,
        label_key="y",
        statistics=statistics,
    )
    if TFX_VERSION >= Version("1.21"):
        assert build().inputs["statistics"] is statistics
    else:
        with pytest.raises(ValueError, match=r"statistics= needs TFX 1\.21 .* 1\.16"):
            build()


@pytest.mark.parametrize(
    "field,value",
    [
        ("accum_steps", 0),
        ("accum_steps", 2.0),
        ("micro_batch_size", -1),
        ("agc_clip_factor", 0.0),
        ("strategy", "tpu"),
        ("partial_window", "keep"),
        ("mixed_precision", "float16"),
        ("replace_batchnorm", "yes"),
        ("label_key", ""),
        ("windows_per_epoch", 3),
        ("shuffle_seed", -1),
        ("shuffle_seed", 1.5),
    ],
)
def test_component_rejects_bad_settings_naming_the_field(field, value):
    kwargs = dict(
        examples=tfx.types.Channel(type=standard_artifacts.Examples),
        module_file="m.py",
        accum_steps=2,
        micro_batch_size=4,
        label_key="y",
        train_args=trainer_pb2.TrainArgs(num_steps=10),
    )
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        GradientAccumulationTrainer(**kwargs)


def test_component_takes_exactly_one_of_module_file_and_model_fn():
    examples = tfx.types.Channel(type=standard_artifacts.Examples)
    common = dict(examples=examples, accum_steps=2, micro_batch_size=4, label_key="y")
    trainer = GradientAccumulationTrainer(model_fn="ga_tfx.pipelines.digits", **common)
    assert trainer.exec_properties["model_fn"] == "ga_tfx.pipelines.digits"
    for kwargs in ({}, {"module_file": "m.py", "model_fn": "ga_tfx.pipelines.digits"}):
        with pytest.raises(ValueError, match="exactly one of module_file"):
            GradientAccumulationTrainer(**kwargs, **common)


def test_effective_batch_size_instead_of_accum_steps():
    examples = tfx.types.Channel(type=standard_artifacts.Examples)
    common = dict(examples=examples, model_fn="ga_tfx.pipelines.digits", label_key="y")
    trainer = GradientAccumulationTrainer(micro_batch_size=16, effective_batch_size=128, **common)
    assert trainer.exec_properties["accum_steps"] == 8
    with pytest.raises(
        ValueError, match="micro_batch_size=64 is larger than effective_batch_size=32"
    ):
        GradientAccumulationTrainer(micro_batch_size=64, effective_batch_size=32, **common)
    with pytest.raises(ValueError, match="effective_batch_size=100 is not a multiple"):
        GradientAccumulationTrainer(micro_batch_size=16, effective_batch_size=100, **common)
    with pytest.raises(ValueError, match="exactly one of accum_steps and effective_batch"):
        GradientAccumulationTrainer(
            micro_batch_size=16, accum_steps=2, effective_batch_size=32, **common
        )
    # The stock-Trainer route (custom_config["ga_tfx"]) takes it too.
    assert (
        settings_lib.from_dict(
            {"micro_batch_size": 8, "effective_batch_size": 64, "label_key": "y"}
        ).accum_steps
        == 8
    )
    with pytest.raises(ValueError, match="micro_batch_size=128 is larger"):
        settings_lib.from_dict(
            {"micro_batch_size": 128, "effective_batch_size": 64, "label_key": "y"}
        )


def test_settings_reject_unknown_keys_and_apply_tuner_overrides():
    with pytest.raises(ValueError, match="acum_steps"):
        settings_lib.from_dict({"acum_steps": 2, "micro_batch_size": 4, "label_key": "y"})
    base = settings_lib.from_dict(
        {"accum_steps": 2, "micro_batch_size": 4, "label_key": "y", "shuffle": 0}
    )
    assert base == AccumulationSettings(2, 4, "y", shuffle=False)
    tuner_config = {"space": [], "values": {"accum_steps": 8, "agc_clip_factor": 0.1, "units": 3}}
    tuned = base.with_hyperparameters(tuner_config)
    assert (tuned.accum_steps, tuned.agc_clip_factor, tuned.micro_batch_size) == (8, 0.1, 4)
    with pytest.raises(ValueError, match="accum_steps"):
        base.with_hyperparameters({"accum_steps": 0})
    # A searched micro-batch size is taken too; a search that turned AGC off turns it off.
    with_agc = dataclasses.replace(base, agc_clip_factor=0.05)
    off = with_agc.with_hyperparameters({"accum_steps": 4, "agc": False, "micro_batch_size": 16})
    assert (off.accum_steps, off.agc_clip_factor, off.micro_batch_size) == (4, None, 16)
    assert (
        with_agc.with_hyperparameters({"agc": True, "agc_clip_factor": 0.2}).agc_clip_factor == 0.2
    )


def test_the_users_steps_per_execution_jit_compile_and_run_eagerly_reach_the_wrapper():
    settings = AccumulationSettings(2, 4, "y", replace_batchnorm=False)

    def wrapped(**compile_kwargs):
        def build_model(hparams):
            model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
            model.compile(keras.optimizers.SGD(0.1), "mse", **compile_kwargs)
            return model

        return model_lib.accumulation_model(build_model, {}, settings)

    def steps(model):
        return int(_tf_keras_internals.steps_per_execution(model).numpy())

    model = wrapped(steps_per_execution=4, jit_compile=True)
    assert (steps(model), model.jit_compile, model.run_eagerly) == (4, True, False)
    model = wrapped(run_eagerly=True)  # steps_per_execution unset: one window (K = 2)
    assert (steps(model), model.jit_compile, model.run_eagerly) == (2, None, True)
    assert wrapped(steps_per_execution="auto")._pacing == pacing.ALWAYS
    with pytest.raises(ValueError, match="steps_per_execution=3 is not supported"):
        wrapped(steps_per_execution=3)  # not whole windows of accum_steps=2


# ---------------------------------------------------------------------- training
def test_executor_trains_exports_serving_signatures_and_logs(tmp_path):
    serving_dir, run_dir = _run(
        tmp_path, "run", accum_steps=2, micro_batch_size=8, num_steps=3, agc_clip_factor=0.05
    )
    assert os.path.exists(os.path.join(serving_dir, "saved_model.pb"))

    loaded = tf.saved_model.load(serving_dir)
    assert {"serving_default", "transform_features"} <= set(loaded.signatures)
    examples = _raw_examples()
    (served,) = loaded.signatures["serving_default"](examples=examples).values()
    assert served.shape == (20, 2)
    # Keras loads the export (its AccumBN layers included); the values the signature gives are
    # checked against the trained in-memory model in
    # test_serving_signature_answers_like_the_trained_in_memory_model.
    model = keras.models.load_model(serving_dir)
    assert any(isinstance(layer, ga_tfx.AccumBatchNormalization) for layer in model.layers)
    features = loaded.signatures["transform_features"](examples=examples)
    assert "tips_xf" in features and "fare_xf" in features

    scalars = _scalars(os.path.join(run_dir, "ga_tfx"))
    assert [v for _, v in scalars["ga_tfx/effective_batch_size"]] == [16.0] * 3
    assert [v for _, v in scalars["ga_tfx/updates"]] == [1.0, 2.0, 3.0]
    assert all(v > 0 for _, v in scalars["ga_tfx/samples_per_second"])
    assert all(np.isfinite(v) and v > 0 for _, v in scalars["ga_tfx/loss_per_update"])
    assert "epoch_loss" in _scalars(os.path.join(run_dir, "train"))  # Keras' own logs


def test_the_run_log_writes_one_point_per_window_and_the_noise_scale_where_estimated(tmp_path):
    """AccumulationLogger's traced writer: every window of a call at its update, the skipped
    windows counted, the noise scale's three scalars only for windows with an estimate."""
    from ga_tfx.components.trainer import run_log

    from types import SimpleNamespace

    nan = float("nan")
    windows = [  # window 2 skipped (update stays 1); window 3 estimated the noise scale
        dict(window=1, update=1, samples=16, loss=0.5, noise=(nan, nan, nan)),
        dict(window=2, update=1, samples=16, loss=0.25, noise=(nan, nan, nan)),
        dict(window=3, update=2, samples=32, loss=0.125, noise=(12.0, 3.0, 0.25)),
    ]
    logger = run_log.AccumulationLogger(str(tmp_path))
    logger.set_model(keras.Sequential([keras.layers.Dense(1, input_shape=(2,))]))
    logger.on_train_begin()
    logger.on_epoch_begin(0)
    for w in windows:
        scale, trace, grad_sq = w["noise"]
        logger.on_window_end(
            SimpleNamespace(
                window=w["window"],
                update=w["update"],
                samples=w["samples"],
                micro_batches=w["samples"] // 8,
                loss=w["loss"],
                noise_scale=scale,
                noise_trace=trace,
                noise_grad_sq=grad_sq,
            )
        )
    logger.on_train_batch_end(0)  # one call of the train function: three windows
    logger.on_train_end()
    scalars = _scalars(str(tmp_path))
    assert scalars["ga_tfx/effective_batch_size"] == [(1, 16.0), (1, 16.0), (2, 32.0)]
    assert scalars["ga_tfx/updates"] == [(1, 1.0), (1, 1.0), (2, 2.0)]
    assert scalars["ga_tfx/skipped_windows"] == [(1, 0.0), (1, 1.0), (2, 1.0)]
    assert scalars["ga_tfx/loss_per_update"] == [(1, 0.5), (1, 0.25), (2, 0.125)]
    rates = {value for _, value in scalars["ga_tfx/samples_per_second"]}
    assert len(rates) == 1 and rates.pop() > 0  # the call's rate, for each of its windows
    assert scalars["ga_tfx/noise_scale"] == [(2, 12.0)]
    assert scalars["ga_tfx/noise_trace"] == [(2, 3.0)]
    assert scalars["ga_tfx/noise_grad_sq"] == [(2, 0.25)]
    assert logger.noise_scale == 12.0 and logger.schedule_used == [[0, 2], [2, 4]]


def test_serving_signature_answers_like_the_trained_in_memory_model(tmp_path):
    # train_and_export returns the model it trained and exported, still in memory; the
    # serving signature must give its answers on raw examples (parsed and transformed inside
    # the signature). MODEL_MODULE has BatchNormalization: a serving path in training mode
    # would normalise with the batch's statistics and answer otherwise.
    live, fn_args = _train_in_memory(
        tmp_path, "live", accum_steps=2, micro_batch_size=8, num_steps=3
    )
    assert not any(v.name.startswith("ga_tfx") for v in live.variables)  # plain model
    examples = _raw_examples()
    signature = tf.saved_model.load(fn_args.serving_model_dir).signatures["serving_default"]
    (served,) = signature(examples=examples).values()
    expected = _in_memory_answer(live, examples)
    diff = float(np.max(np.abs(served.numpy() - expected.numpy())))
    print(f"max |served - in-memory| = {diff:.3g}")
    # The same float32 operations in another graph: round-off only (measured 0).
    assert diff <= 1e-6
    assert float(np.max(np.abs(expected.numpy()))) > 0.1  # real predictions, not zeros


# float32 round-off of 3 updates (measured ~1e-7); a gradient off by any factor (e.g. the
# number of replicas) moves the SGD weights by ~1e-2, and the check below asserts > 1e-3.
BIG_BATCH_TOLERANCE = 1e-5


@pytest.mark.parametrize(
    # Plain SGD and Adam in the slow tier: SGD with momentum sees a scale error as SGD does.
    "optimizer",
    [
        pytest.param("sgd", marks=pytest.mark.slow),
        "sgd_momentum",
        pytest.param("adam", marks=pytest.mark.slow),
    ],
)
def test_accumulated_micro_batches_give_the_big_batch_weights(tmp_path, optimizer):
    # The Trainer (b=4, K=4, K coming from the Tuner's hyperparameters; and b=8 split 4+4 over
    # MirroredStrategy's 2 replicas, K=2) against plain Keras big-batch training (b=16, no
    # ga-tfx, the examples read apart from TFXIO in the order the Trainer reads them: shuffle
    # off). A bug in run_fn or the data path (order, learning rate, loss set-up) shows.
    # SGD with and without momentum: their steps are proportional to the gradient, so a scale
    # error shows (Adam would normalise it away). No BatchNormalization here: it normalises
    # each micro-batch on its own.
    hparams = {"batchnorm": False, "optimizer": optimizer}
    reference = _plain_keras_big_batch(hparams, batch_size=16, updates=3)
    accumulated, acc_run = _run(
        tmp_path,
        "acc",
        micro_batch_size=4,
        accum_steps=1,
        num_steps=3,
        hyperparameters=dict(hparams, accum_steps=4),
    )
    assert [
        v for _, v in _scalars(os.path.join(acc_run, "ga_tfx"))["ga_tfx/effective_batch_size"]
    ] == [16.0] * 3
    mirrored, _ = _run(
        tmp_path,
        "mirrored",
        micro_batch_size=8,
        accum_steps=2,
        num_steps=3,
        strategy="mirrored",
        hyperparameters=hparams,
    )
    for name, serving_dir in (("accumulated", accumulated), ("mirrored", mirrored)):
        diff = _max_diff(_exported_weights(serving_dir), reference.get_weights())
        print(f"{name}: max |w_trainer - w_plain_keras| = {diff:.3g}")
        assert diff <= BIG_BATCH_TOLERANCE, (name, diff)
    # ...and training did move the weights (the comparison is not between initial weights).
    namespace = {}
    exec(MODEL_MODULE, namespace)
    initial = namespace["build_model"](hparams).get_weights()
    moved = _max_diff(initial, reference.get_weights())
    print(f"max |w_trained - w_initial| = {moved:.3g}")
    assert moved > 100 * BIG_BATCH_TOLERANCE


def test_a_piecewise_accum_schedule_trains_each_window_as_its_own_big_batch(tmp_path):
    # accum_schedule "0:2,2:4" with micro-batches of 4 and 2 windows per epoch (one fit per
    # epoch, its micro-batches the sum of its windows' K): windows of 8, 8, 16 and 16 examples.
    # The reference is plain Keras, one train_on_batch per window on those examples in order.
    hparams = {"batchnorm": False, "optimizer": "sgd_momentum"}
    sizes = (8, 8, 16, 16)
    reference = _plain_keras_by_window(hparams, sizes)
    serving_dir, run_dir = _run(
        tmp_path,
        "scheduled",
        micro_batch_size=4,
        accum_steps=2,
        accum_schedule="0:2,2:4",
        windows_per_epoch=2,
        num_steps=4,
        hyperparameters=hparams,
    )
    scalars = _scalars(os.path.join(run_dir, "ga_tfx"))
    windows = [v for _, v in sorted(scalars["ga_tfx/effective_batch_size"])]  # by update
    assert windows == [float(size) for size in sizes]
    diff = _max_diff(_exported_weights(serving_dir), reference.get_weights())
    print(f"scheduled: max |w_trainer - w_plain_keras| = {diff:.3g}")
    assert diff <= BIG_BATCH_TOLERANCE
    assert run_record.read(run_dir).accum_schedule_used == [[0, 2], [2, 4]]


def test_an_adaptive_accum_schedule_follows_the_windows_k_across_epochs(tmp_path):
    # accum_schedule "adaptive:2-2" from accum_steps 4: the noise scale's target is clamped to
    # 2, so K switches from 4 to 2 once, after the warm-up and patience (about window 20), in
    # the fourth of five epochs of 6 windows. Each epoch's fit has an upper bound of
    # micro-batches and ends at its last window; the next one reads the data from the position
    # the window events counted (the fifth starts after the switch). The reference is plain
    # Keras, one train_on_batch per window on the examples of the K the run record says each
    # window had, in order.
    hparams = {"batchnorm": False, "optimizer": "sgd_momentum"}
    serving_dir, run_dir = _run(
        tmp_path,
        "adaptive",
        micro_batch_size=4,
        accum_steps=4,
        accum_schedule="adaptive:2-2",
        windows_per_epoch=6,
        num_steps=30,
        eval_steps=1,
        hyperparameters=hparams,
    )
    record = run_record.read(run_dir)
    used = record.accum_schedule_used
    print(f"adaptive: schedule used {used}")
    assert len(used) == 2 and used[0] == [0, 4] and used[1][1] == 2 and 12 <= used[1][0] < 24
    ks = [4] * used[1][0] + [2] * (30 - used[1][0])
    sizes = [4 * k for k in ks]
    reference = _plain_keras_by_window(hparams, sizes)
    scalars = _scalars(os.path.join(run_dir, "ga_tfx"))
    windows = [v for _, v in sorted(scalars["ga_tfx/effective_batch_size"])]  # by update
    assert windows == [float(size) for size in sizes]
    diff = _max_diff(_exported_weights(serving_dir), reference.get_weights())
    print(f"adaptive: max |w_trainer - w_plain_keras| = {diff:.3g}")
    assert diff <= BIG_BATCH_TOLERANCE
    assert record.windows == 30 and record.noise_scale is not None


def test_a_memory_budget_sets_the_micro_batch_and_keeps_the_effective_batch(tmp_path):
    # Asked for micro-batches of 4 x K 4; with room for the whole effective batch the Trainer
    # trains micro-batches of 16 x K 1: the same updates as plain Keras at 16.
    hparams = {"batchnorm": False, "optimizer": "sgd_momentum"}
    reference = _plain_keras_big_batch(hparams, batch_size=16, updates=3)
    serving_dir, run_dir = _run(
        tmp_path,
        "budget",
        micro_batch_size=4,
        accum_steps=4,
        memory_budget="64GiB",
        num_steps=3,
        hyperparameters=hparams,
    )
    record = run_record.read(run_dir)
    assert (record.micro_batch_size, record.accum_steps, record.effective_batch_size) == (16, 1, 16)
    assert record.micro_batch_choice.startswith(
        "micro-batch 16 x accum_steps 1 = effective batch 16"
    )
    assert _max_diff(_exported_weights(serving_dir), reference.get_weights()) <= BIG_BATCH_TOLERANCE


OUT_OF_MEMORY_MODULE = (
    MODEL_MODULE
    + """
class OutOfMemoryAt(keras.layers.Layer):
    # The identity; a real allocator OOM on its 6th training call when the batch has more than
    # 4 rows (tests/test_oom_recovery.py's injection). Its call counter is a weight of its own.
    def build(self, input_shape):
        self.calls = self.add_weight("calls", [], tf.int64, "zeros", trainable=False)

    def call(self, inputs, training=None):
        if not training:
            return inputs
        calls = self.calls.assign_add(1)
        rows = tf.cast(tf.shape(inputs)[0], tf.int64)
        boom = tf.cond(
            (calls >= 6) & (rows > 4),
            lambda: tf.reduce_sum(tf.fill(tf.reshape(calls * 2**40, [1]), 0.0)),
            lambda: 0.0,
        )
        return inputs + boom


_plain_build = build_model


def build_model(hparams):
    model = _plain_build(hparams)
    outputs = OutOfMemoryAt(name="oom")(model.output)
    wrapped = keras.Model(model.inputs, outputs)
    wrapped.compile(model.optimizer, model.loss)
    return wrapped
"""
)


@pytest.mark.slow  # a real out-of-memory error: the allocator retries for 10 s first
def test_the_trainer_survives_an_out_of_memory_error_with_the_big_batch_weights(tmp_path):
    # Micro-batches of 8, K=2: the 6th micro-batch (the 3rd window) runs out of memory; the
    # Trainer re-plans from the windows done at micro-batches of 4 (K 4), the same windows of
    # 16, and ends with plain Keras' big-batch weights.
    hparams = {"batchnorm": False, "optimizer": "sgd_momentum"}
    reference = _plain_keras_big_batch(hparams, batch_size=16, updates=4)
    serving_dir, run_dir = _run(
        tmp_path,
        "oom",
        module_file=_module(tmp_path, OUT_OF_MEMORY_MODULE, "oom_module.py"),
        micro_batch_size=8,
        accum_steps=2,
        num_steps=4,
        hyperparameters=hparams,
    )
    assert run_record.read(run_dir).micro_batch_split == 2
    exported = keras.models.load_model(serving_dir, compile=False)
    trained = [w for name in ("hidden", "logits") for w in exported.get_layer(name).get_weights()]
    want = [w for name in ("hidden", "logits") for w in reference.get_layer(name).get_weights()]
    assert _max_diff(trained, want) <= BIG_BATCH_TOLERANCE


def _kill_a_trainer(tmp_path, settings, at_update):
    """Runs ``_run(tmp_path, "killed", **settings)`` in a process killed (SIGKILL) right after
    the checkpoint of update ``at_update`` is written."""
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            KILLED_TRAINER,
            str(tmp_path),
            json.dumps(settings),
            str(at_update),
        ],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not os.path.exists(tmp_path / "killed" / "model" / "Format-Serving")


KILLED_TRAINER = """
import json, os, pathlib, signal, sys
import ga_tfx
from ga_tfx._keras import tf
from ga_tfx.components.trainer import checkpoints
from tests import test_trainer_component as t

tf.config.experimental.enable_op_determinism()
save = checkpoints.UpdateCheckpoint.save

KILL_AT = int(sys.argv[3])

def save_then_die(self):
    save(self)
    if self.windows_done == KILL_AT:  # KILL_AT windows checkpointed: the machine goes away
        os.kill(os.getpid(), signal.SIGKILL)

checkpoints.UpdateCheckpoint.save = save_then_die
t._run(pathlib.Path(sys.argv[1]), "killed", **json.loads(sys.argv[2]))
"""


@pytest.mark.slow  # a Trainer process killed mid-training, then two more Trainer runs
def test_a_killed_trainer_rerun_resumes_and_ends_with_the_uninterrupted_weights(tmp_path):
    # Shuffled data, AccumBN, Adam: the re-run must restore weights, slots, iterations and
    # BN statistics, and skip exactly the micro-batches the killed attempt trained on.
    settings = dict(
        accum_steps=2,
        micro_batch_size=8,
        num_steps=4,
        windows_per_epoch=1,
        checkpoint_every_updates=1,
        eval_steps=0,
        shuffle=1,
        shuffle_seed=3,
    )
    _kill_a_trainer(tmp_path, settings, at_update=2)
    (resume_dir,) = glob.glob(str(tmp_path / ".ga_tfx_resume" / "*"))
    assert tf.train.latest_checkpoint(resume_dir).endswith("ckpt-2")

    # The re-run: a new execution with new output URIs, as TFX gives it.
    resumed, resumed_run = _run(tmp_path, "rerun", **settings)
    assert not os.path.exists(resume_dir)  # cleaned up once the model is exported
    uninterrupted, _ = _run(tmp_path, "uninterrupted", **settings)
    diff, variables = _saved_variables_diff(resumed, uninterrupted)
    assert variables >= 8  # weights, BN statistics, Adam slots
    print(f"max |w_resumed - w_uninterrupted| = {diff:.3g}")
    assert diff == 0.0
    # The re-run made updates 3 and 4 only; without the checkpoint it would redo 1 and 2.
    steps = [step for step, _ in _scalars(os.path.join(resumed_run, "ga_tfx"))["ga_tfx/updates"]]
    assert steps == [3, 4]
    # A different training (another seed) does not pick up someone else's checkpoints.
    assert checkpoints.resume_directory(
        "r/T/model_run/1", {"seed": 1}
    ) != checkpoints.resume_directory("r/T/model_run/2", {"seed": 2})


@pytest.mark.slow  # a Trainer process killed mid-training, then two more Trainer runs
def test_a_killed_trainer_resumes_an_adaptive_schedule_after_its_switch(tmp_path):
    # The adaptive K's switch (4 -> 2, about window 20) happens before the kill at update 23;
    # the re-run must take the data position from the checkpoint (the sum of the windows' K),
    # the schedule's state (K, its streak) and the noise-scale averages, and end bitwise where
    # the uninterrupted run ends.
    settings = dict(
        accum_steps=4,
        accum_schedule="adaptive:2-2",
        micro_batch_size=4,
        num_steps=30,
        windows_per_epoch=6,
        checkpoint_every_updates=1,
        eval_steps=0,
        shuffle=1,
        shuffle_seed=3,
    )
    _kill_a_trainer(tmp_path, settings, at_update=23)
    resumed, resumed_run = _run(tmp_path, "rerun", **settings)
    uninterrupted, uninterrupted_run = _run(tmp_path, "uninterrupted", **settings)
    whole = run_record.read(uninterrupted_run).accum_schedule_used
    assert len(whole) == 2 and whole[1][1] == 2 and whole[1][0] < 23  # switched before the kill
    assert run_record.read(resumed_run).accum_schedule_used == [[23, 2]]
    diff, variables = _saved_variables_diff(resumed, uninterrupted)
    assert variables >= 6  # weights, momentum slots
    print(f"adaptive, killed and resumed: max |w_resumed - w_uninterrupted| = {diff:.3g}")
    assert diff == 0.0


@pytest.mark.slow  # four Trainer executions, each exporting a SavedModel
def test_base_model_warm_starts_the_new_training(tmp_path):
    first, _ = _run(tmp_path, "first", accum_steps=2, micro_batch_size=8, num_steps=6)
    namespace = {}
    exec(MODEL_MODULE, namespace)
    model = ga_tfx.replace_batchnorm_layers(namespace["build_model"]({}))
    assert model_lib.warm_start(model, first) == ["hidden", "bn", "logits"]
    trained = keras.models.load_model(first, compile=False)
    for layer in ("hidden", "bn", "logits"):
        for got, want in zip(model.get_layer(layer).weights, trained.get_layer(layer).weights):
            np.testing.assert_array_equal(got.numpy(), want.numpy())

    # Through the executor (SGD, 2 windows): training starts from the base model's weights.
    # The reference is a run without base_model whose build_model loads those weights
    # itself: the same start, data and settings, so the same weights (the same float32
    # operations: 1e-6 leaves room only for round-off).
    hparams, settings = {"optimizer": "sgd"}, dict(accum_steps=2, micro_batch_size=8, num_steps=2)
    out = str(tmp_path / "warm")
    inputs, outputs = _artifacts(out, hparams)
    base = standard_artifacts.Model()
    base.uri = os.path.dirname(first)
    inputs[specs.BASE_MODEL_KEY] = [base]
    Executor().Do(inputs, outputs, _exec_properties(_module(tmp_path), **settings))
    warm = _saved_variables(os.path.join(out, "model", "Format-Serving"))
    loads_base = _module(
        tmp_path, MODEL_MODULE + LOADS_BASE_WEIGHTS.format(path=first), "loads_base.py"
    )
    reference, _ = _run(tmp_path, "reference", hparams, module_file=loads_base, **settings)
    cold, _ = _run(tmp_path, "cold", hparams, **settings)
    reference, cold = _saved_variables(reference), _saved_variables(cold)
    assert set(warm) == set(reference) == set(cold) and len(warm) >= 8
    diff = max(float(np.max(np.abs(warm[k] - reference[k]))) for k in warm)
    print(f"max |w_warm - w_reference| = {diff:.3g}")
    assert diff <= 1e-6
    assert max(float(np.max(np.abs(warm[k] - cold[k]))) for k in warm) > 1e-3

    other = keras.Sequential([keras.layers.Dense(3, name="hidden", input_shape=(2,))])
    with pytest.raises(ValueError, match="Cannot warm-start layer 'hidden'"):
        model_lib.warm_start(other, first)
    extra = keras.Sequential([keras.layers.Dense(2, name="not_in_base", input_shape=(3,))])
    with pytest.raises(
        ValueError,
        match="Cannot warm-start layer 'not_in_base' .* from base "
        "model .*: it has no layer of that name",
    ):
        model_lib.warm_start(extra, first)


# Appended to MODEL_MODULE: build_model starts from a saved model's weights (by layer name).
LOADS_BASE_WEIGHTS = """

_build_model = build_model


def build_model(hparams):
    model = _build_model(hparams)
    base = keras.models.load_model({path!r}, compile=False)
    for layer in model.layers:
        if layer.weights:
            layer.set_weights(base.get_layer(layer.name).get_weights())
    return model
"""


# ---------------------------------------------------------------------- errors before training
def test_module_without_build_model_is_rejected(tmp_path):
    module = _module(tmp_path, "def something_else(hparams):\n    return None\n", "bad.py")
    with pytest.raises(ValueError, match="build_model"):
        _run(tmp_path, "bad", module_file=module, accum_steps=2, micro_batch_size=4)
    assert not os.path.exists(tmp_path / "bad" / "model_run" / "ga_tfx")


def test_bad_exec_properties_are_rejected_before_training(tmp_path):
    with pytest.raises(ValueError, match="accum_steps"):
        _run(tmp_path, "zero", accum_steps=0, micro_batch_size=4)
    with pytest.raises(ValueError, match="windows_per_epoch"):
        _run(
            tmp_path, "epochs", accum_steps=2, micro_batch_size=4, num_steps=3, windows_per_epoch=2
        )
    # "mirrored" on the two logical CPUs of conftest: a micro-batch of 1 cannot be split.
    with pytest.raises(ValueError, match="micro_batch_size=1 is smaller than the 2 replicas"):
        _run(tmp_path, "mirrored", accum_steps=2, micro_batch_size=1, strategy="mirrored")
    for name in ("zero", "epochs", "mirrored"):
        assert not os.path.exists(tmp_path / name / "model_run" / "ga_tfx")


def test_stock_trainer_route_rejects_unknown_settings(tmp_path):
    out = str(tmp_path / "stock")
    inputs, outputs = _artifacts(out)
    props = _exec_properties(None)
    props = {k: props[k] for k in (specs.TRAIN_ARGS_KEY, specs.EVAL_ARGS_KEY)}
    props[specs.RUN_FN_KEY] = "ga_tfx.components.trainer.run_fn.run_fn"
    props[specs.CUSTOM_CONFIG_KEY] = json.dumps(
        {
            "ga_tfx": {
                "accum_steps": 2,
                "micro_batch_size": 4,
                "label_key": "tips_xf",
                "acum_step": 2,
            },
            "model_fn": "no.such.module",
        }
    )
    with pytest.raises(ValueError, match="acum_step"):
        tfx_trainer_executor.GenericExecutor().Do(inputs, outputs, props)


def test_pipeline_with_the_trainer_compiles_for_kubeflow_v2(tmp_path):
    from tfx import v1 as tfx_v1

    examples = tfx_v1.dsl.Importer(
        source_uri=os.path.join(TESTDATA, "transform", "transformed_examples"),
        artifact_type=standard_artifacts.Examples,
    ).with_id("examples")
    trainer = GradientAccumulationTrainer(
        examples=examples.outputs["result"],
        module_file=_module(tmp_path),
        accum_steps=4,
        micro_batch_size=8,
        label_key="tips_xf",
        agc_clip_factor=0.01,
        strategy="auto",
        train_args=trainer_pb2.TrainArgs(num_steps=8),
    )
    pipeline = tfx_v1.dsl.Pipeline(
        pipeline_name="ga-tfx-trainer",
        pipeline_root=str(tmp_path / "root"),
        components=[examples, trainer],
    )
    runner = tfx_v1.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx_v1.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image="ga-tfx:test"
        )
    )
    job = runner.run(pipeline, write_out=False)
    text = json.dumps(job)
    assert "ga_tfx.components.trainer.executor.Executor" in text
    parameters = job["pipelineSpec"]["root"]["dag"]["tasks"]["GradientAccumulationTrainer"][
        "inputs"
    ]["parameters"]
    assert {
        "accum_steps",
        "micro_batch_size",
        "agc_clip_factor",
        "strategy",
        "replace_batchnorm",
        "partial_window",
        "mixed_precision",
    } <= set(parameters)


@pytest.mark.slow  # a Trainer run and export; the library tests of mixed precision stay fast
def test_mixed_precision_policy_trains_and_is_restored(tmp_path):
    before = keras.mixed_precision.global_policy().name
    serving_dir, run_dir = _run(
        tmp_path,
        "bf16",
        accum_steps=2,
        micro_batch_size=8,
        num_steps=2,
        mixed_precision="mixed_bfloat16",
    )
    assert keras.mixed_precision.global_policy().name == before
    model = keras.models.load_model(serving_dir)
    assert model.get_layer("hidden").compute_dtype == "bfloat16"
    assert model.get_layer("hidden").kernel.dtype == tf.float32  # float32 master weights
    losses = [v for _, v in _scalars(os.path.join(run_dir, "ga_tfx"))["ga_tfx/loss_per_update"]]
    assert len(losses) == 2 and all(np.isfinite(losses))


@pytest.mark.slow  # the stock Trainer and ours, end to end, each exporting
def test_stock_trainer_runs_the_ga_tfx_run_fn_like_the_component(tmp_path, monkeypatch):
    """``tfx.components.Trainer``'s own executor with ``run_fn`` = the ga-tfx run_fn and the
    settings in ``custom_config``: the same training as the ga-tfx component (SGD with
    momentum, same data and settings: the same weights, to float32 round-off)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "stock_route_model.py").write_text(textwrap.dedent(MODEL_MODULE))
    settings, hparams = dict(accum_steps=2, micro_batch_size=8), {"optimizer": "sgd_momentum"}
    out = str(tmp_path / "stock")
    inputs, outputs = _artifacts(out, hparams)
    props = _exec_properties(None, num_steps=2)
    props = {k: props[k] for k in (specs.TRAIN_ARGS_KEY, specs.EVAL_ARGS_KEY)}
    props[specs.RUN_FN_KEY] = "ga_tfx.components.trainer.run_fn.run_fn"
    props[specs.CUSTOM_CONFIG_KEY] = json.dumps(
        {"ga_tfx": dict(BASE_SETTINGS, **settings), "model_fn": "stock_route_model"}
    )
    tfx_trainer_executor.GenericExecutor().Do(inputs, outputs, props)
    stock_dir = os.path.join(out, "model", "Format-Serving")
    assert os.path.exists(os.path.join(stock_dir, "saved_model.pb"))
    scalars = _scalars(os.path.join(out, "model_run", "ga_tfx"))
    assert [v for _, v in scalars["ga_tfx/effective_batch_size"]] == [16.0] * 2
    assert [v for _, v in scalars["ga_tfx/updates"]] == [1.0, 2.0]

    component_dir, _ = _run(tmp_path, "component", hparams, num_steps=2, **settings)
    stock, component = _saved_variables(stock_dir), _saved_variables(component_dir)
    assert set(stock) == set(component) and len(stock) >= 8
    diff = max(float(np.max(np.abs(stock[k] - component[k]))) for k in stock)
    print(f"max |w_stock - w_component| = {diff:.3g}")
    assert diff <= 1e-6
