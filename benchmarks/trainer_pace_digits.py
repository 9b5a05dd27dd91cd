"""The main job's Trainer against TFX's stock Trainer on the main job's data (``--job digits``).

    python -m benchmarks.trainer_pace --job digits [--pairs 4]

Inputs, made once per benchmark run in the parent process (:func:`prepare`): the main job
(``ga-tfx run``'s digits pipeline, default :class:`~ga_tfx.pipelines.options.TrainingOptions`)
is built, and its components up to Transform (CsvExampleGen, ImportSchemaGen, StatisticsGen,
ExampleValidator, DataCheck, Transform) run with ``LocalDagRunner`` (TFX's partial run,
``to_nodes``) into a scratch pipeline root; Transform's ``transformed_examples`` (splits train
and eval) and ``transform_graph`` are read back from its ML Metadata store. Both sides get these
same artifacts (the Trainer's two inputs in the main job). The ga-tfx side's execution
properties are those the built pipeline gives its ``GradientAccumulationTrainer`` (read from
the component, not copied by hand).

ga-tfx side: ``GradientAccumulationTrainer``'s executor with those properties, as the main job
runs it: ``model_fn`` ``ga_tfx.pipelines.digits`` (``build_model``, its BatchNormalization
replaced by AccumBatchNormalization), ``train_args.num_steps`` windows of ``accum_steps``
micro-batches of ``micro_batch_size``, an evaluation of ``eval_args.num_steps`` micro-batches
after each ``windows_per_epoch`` windows, AGC, resumable checkpoints (and their deletion), the
run log and run record, TensorBoard, then the export (``serving_default``, ``transform_features``).

Stock side: TFX's own ``GenericExecutor`` with :data:`STOCK_MODULE`, a module file written the
way TFX's penguin/taxi examples write theirs: ``run_fn`` reads the same transformed examples with
``fn_args.data_accessor.tf_dataset_factory`` (batches of ``micro_batch_size x accum_steps``,
the ga-tfx side's effective batch), trains the same ``digits.build_model(hparams)`` with plain
Keras ``fit`` (its stock BatchNormalization) for ``train_args.num_steps`` steps in epochs of
``windows_per_epoch`` steps, evaluates ``eval_args.num_steps`` batches of ``micro_batch_size``
after each epoch, logs to TensorBoard per epoch, and saves a serving SavedModel
(``serving_default``: serialized raw tf.Example -> transform layer -> model; and
``transform_features``) with ``model.save(fn_args.serving_model_dir, signatures=...)``.

Why the comparison is fair: the same samples per step (``K x b``, a window), as many steps as
windows, the same evaluations (same count, same micro-batches, same samples), the same model and
optimizer (``build_model({})``: Adam 1e-2, seed 0), the same inputs, and the same export kind.
What differs is what the ga-tfx Trainer adds and is measured for: the accumulation (``K``
micro-batches per window, AccumBatchNormalization instead of BatchNormalization), AGC
(``agc_clip_factor`` of the main job), checkpoints, the run log and record. Also as a stock
module writes it: no ``tf.distribute`` strategy (the ga-tfx side's ``strategy`` ``"auto"`` is the
same default strategy on a machine with at most one GPU; with more it mirrors, so compare on one
device), and tfxio's default shuffle (the ga-tfx side's is seeded, ``shuffle_seed``).
"""

import json
import os

# The Trainer's id in the main job's pipeline, and the last component the benchmark runs.
TRAINER_ID, LAST_INPUT = "GradientAccumulationTrainer", "Transform"
PIPELINE_NAME = "trainer-pace-digits"
TITLE = "the main job: digits"

# The stock module's custom_config keys: its batch, its evaluation batch, its epoch (in steps).
CONFIG_KEYS = ("batch_size", "eval_batch_size", "steps_per_epoch")
# The stock side's module file: TFX's penguin/taxi style, training digits.build_model.
STOCK_MODULE = '''"""Stock TFX Trainer module: digits.build_model trained by plain Keras."""

import ga_tfx  # noqa: F401  (first import: Keras 2, as the main job's user code)
from ga_tfx._keras import keras, tf
from ga_tfx.pipelines import digits

import tensorflow_transform as tft
from tfx_bsl.public import tfxio

BATCH_SIZE, EVAL_BATCH_SIZE, STEPS_PER_EPOCH = CONFIG_KEYS


def _input_fn(file_pattern, data_accessor, tf_transform_output, batch_size):
    return data_accessor.tf_dataset_factory(
        file_pattern,
        tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=digits.LABEL_KEY),
        tf_transform_output.transformed_metadata.schema,
    )


def _signatures(model, tf_transform_output):
    model.tft_layer = tf_transform_output.transform_features_layer()
    examples = tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")

    @tf.function(input_signature=[examples])
    def serve_tf_examples_fn(serialized_tf_examples):
        feature_spec = tf_transform_output.raw_feature_spec()
        feature_spec.pop(digits.RAW_LABEL_KEY)
        parsed_features = tf.io.parse_example(serialized_tf_examples, feature_spec)
        return {"outputs": model(model.tft_layer(parsed_features))}

    @tf.function(input_signature=[examples])
    def transform_features_fn(serialized_tf_examples):
        feature_spec = tf_transform_output.raw_feature_spec()
        return model.tft_layer(tf.io.parse_example(serialized_tf_examples, feature_spec))

    return {
        "serving_default": serve_tf_examples_fn.get_concrete_function(),
        "transform_features": transform_features_fn.get_concrete_function(),
    }


def run_fn(fn_args):
    config = fn_args.custom_config
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    train_dataset = _input_fn(
        fn_args.train_files, fn_args.data_accessor, tf_transform_output, config[BATCH_SIZE]
    )
    eval_dataset = _input_fn(
        fn_args.eval_files, fn_args.data_accessor, tf_transform_output, config[EVAL_BATCH_SIZE]
    )
    model = digits.build_model({})
    per_epoch = config[STEPS_PER_EPOCH] or fn_args.train_steps
    model.fit(
        train_dataset,
        epochs=fn_args.train_steps // per_epoch,
        steps_per_epoch=per_epoch,
        validation_data=eval_dataset,
        validation_steps=fn_args.eval_steps,
        callbacks=[keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch")],
        verbose=2,
    )
    model.save(
        fn_args.serving_model_dir,
        save_format="tf",
        signatures=_signatures(model, tf_transform_output),
    )
'''.replace("CONFIG_KEYS", repr(CONFIG_KEYS))


def prepare(root):
    """Runs the main job's components up to Transform into ``root`` (ML Metadata caches them
    there); returns ``{"examples": uri, "splits": encoded split names, "transform_graph": uri,
    "props": the main job's Trainer execution properties}`` (JSON-able)."""
    import ga_tfx  # noqa: F401  (first import: Keras 2)
    from ga_tfx.pipelines import cli, local
    from ga_tfx.pipelines import pipeline as pipeline_lib

    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2
    from tfx import v1 as tfx
    from tfx.orchestration.pipeline import RunOptions

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = os.path.join(root, "metadata.db")
    config.sqlite.connection_mode = (
        metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    )
    os.makedirs(root, exist_ok=True)
    made = pipeline_lib.create_pipeline(  # the main job's pipeline, default options
        PIPELINE_NAME,
        root,
        cli.SHIPPED_DATA,
        os.path.join(root, "serving"),
        pipeline_lib.TrainingOptions(),
        metadata_connection_config=config,
        beam_pipeline_args=local.beam_args(),
    )
    props = trainer_properties(made)
    # TFX's partial run: the pipeline's nodes up to Transform (cached in root's store).
    tfx.orchestration.LocalDagRunner().run(made, run_options=RunOptions(to_nodes=[LAST_INPUT]))
    store = metadata_store.MetadataStore(config)

    def latest(type_name, key):
        made_by_transform = [
            a
            for a in store.get_artifacts_by_type(type_name)
            if f"{os.sep}{LAST_INPUT}{os.sep}{key}{os.sep}" in a.uri
        ]
        return max(made_by_transform, key=lambda a: a.id)

    examples = latest("Examples", "transformed_examples")
    return {
        "examples": examples.uri,
        "splits": examples.properties["split_names"].string_value,
        "transform_graph": latest("TransformGraph", "transform_graph").uri,
        "props": props,
    }


def trainer_properties(pipeline):
    """The execution properties ``pipeline`` gives its ``GradientAccumulationTrainer`` (as
    its executor receives them: protos as JSON, ``None`` left out)."""
    (trainer,) = [c for c in pipeline.components if c.id == TRAINER_ID]
    return {k: v for k, v in trainer.exec_properties.items() if v is not None}


def _settings(props):
    """The accumulation settings among a Trainer's execution properties (as its executor
    reads them)."""
    from ga_tfx.components.trainer import settings as settings_lib

    return settings_lib.from_dict(
        {name: props[name] for name in settings_lib.field_names() if props.get(name) is not None}
    )


def executor_args(side, out, inputs_file):
    """``(executor, inputs, outputs, exec_properties)`` of one side (``"stock"`` or
    ``"ga_tfx"``) writing into ``out``, from :func:`prepare`'s JSON in ``inputs_file``."""
    from ga_tfx.components.trainer.executor import Executor

    from tfx.components.trainer import executor as tfx_executor
    from tfx.types import standard_artifacts
    from tfx.types import standard_component_specs as specs

    with open(inputs_file) as f:
        job = json.load(f)
    examples, graph = standard_artifacts.Examples(), standard_artifacts.TransformGraph()
    examples.uri, graph.uri = job["examples"], job["transform_graph"]
    examples.split_names = job["splits"]
    inputs = {specs.EXAMPLES_KEY: [examples], specs.TRANSFORM_GRAPH_KEY: [graph]}
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = os.path.join(out, "model"), os.path.join(out, "model_run")
    outputs = {specs.MODEL_KEY: [model], specs.MODEL_RUN_KEY: [model_run]}
    props = job["props"]
    if side == "ga_tfx":
        return Executor(), inputs, outputs, props
    settings = _settings(props)
    os.makedirs(out, exist_ok=True)
    module = os.path.join(out, "digits_stock_module.py")
    with open(module, "w") as f:
        f.write(STOCK_MODULE)
    stock = {
        specs.TRAIN_ARGS_KEY: props[specs.TRAIN_ARGS_KEY],
        specs.EVAL_ARGS_KEY: props[specs.EVAL_ARGS_KEY],
        specs.MODULE_FILE_KEY: module,
        specs.CUSTOM_CONFIG_KEY: json.dumps(stock_config(settings)),
    }
    return tfx_executor.GenericExecutor(), inputs, outputs, stock


def stock_config(settings):
    """The stock module's ``custom_config``: the ga-tfx side's effective batch, its
    evaluation micro-batch and its epoch (windows between evaluations)."""
    values = (settings.effective_batch_size, settings.micro_batch_size, settings.windows_per_epoch)
    return dict(zip(CONFIG_KEYS, values))


def describe(job):
    """The report's line on what each side ran (``job``: :func:`prepare`'s dict)."""
    settings = _settings(job["props"])
    steps = json.loads(job["props"]["train_args"])["num_steps"]
    evals = json.loads(job["props"]["eval_args"])["num_steps"]
    return (
        f"Inputs: the main job's Transform outputs (digits, default options). Stock: TFX's "
        f"`GenericExecutor`, `digits.build_model` by plain Keras, {steps} steps of "
        f"{settings.effective_batch_size}. ga-tfx: the main job's `GradientAccumulationTrainer` "
        f"properties, {steps} windows of {settings.accum_steps} x {settings.micro_batch_size}. "
        f"Both: {evals} evaluation batches of {settings.micro_batch_size} every "
        f"{settings.windows_per_epoch} windows."
    )
