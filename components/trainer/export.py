"""Export of the trained model with the serving and transform signatures (penguin style)."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf
from ga_tfx.components.trainer.distribution import remove_worker_dir, worker_write_dir

SERVING_OUTPUT_KEY = "outputs"
# Optional in the user's module: make_serving_fn(model, transform_output) -> a tf.function of
# serialized tf.Examples (penguin's _get_serve_tf_examples_fn), used as serving_default.
SERVING_FN_NAME = "make_serving_fn"


def export_serving_model(
    model, serving_model_dir, transform_output, schema, raw_label_key, make_serving_fn=None
):
    """Saves ``model`` (a plain Keras model) with the penguin-style signatures.

    ``serving_default``: serialized raw tf.Examples (no label) -> transform -> model outputs,
    as ``{"outputs": ...}`` (the TFX examples' convention; a model with named outputs returns
    its dict), or the module's own ``make_serving_fn(model, transform_output)``.
    ``transform_features``: serialized raw tf.Examples -> transformed features (Evaluator).
    Without a transform graph both parse with ``schema`` and apply no transformation.
    ``raw_label_key``: the raw feature(s) serving requests do not carry (a name or a tuple).

    Under ``"multi_worker"`` every worker must call this; only the chief writes
    ``serving_model_dir``, the others save to a temporary directory that is then removed.
    """
    if transform_output is not None:
        model.tft_layer = transform_output.transform_features_layer()
        raw_spec = transform_output.raw_feature_spec()
        transform = _traced_as_it_is(model.tft_layer)
    else:
        from tensorflow_transform.tf_metadata import schema_utils

        raw_spec = schema_utils.schema_as_feature_spec(schema).feature_spec
        transform = dict
    label_keys = (raw_label_key,) if isinstance(raw_label_key, str) else tuple(raw_label_key)
    serving_spec = {k: v for k, v in raw_spec.items() if k not in label_keys}
    examples = tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")

    @tf.function(input_signature=[examples])
    def serve_tf_examples_fn(serialized_tf_examples):
        features = transform(tf.io.parse_example(serialized_tf_examples, serving_spec))
        outputs = model(features)
        return outputs if isinstance(outputs, dict) else {SERVING_OUTPUT_KEY: outputs}

    @tf.function(input_signature=[examples])
    def transform_features_fn(serialized_tf_examples):
        return transform(tf.io.parse_example(serialized_tf_examples, raw_spec))

    serving = (
        make_serving_fn(model, transform_output)
        if make_serving_fn is not None
        else serve_tf_examples_fn
    )
    if not hasattr(serving, "get_concrete_function"):
        raise TypeError(
            f"{SERVING_FN_NAME}(model, transform_output) must return a "
            f"tf.function with an input signature, got {serving!r}."
        )
    # The functions themselves, not their concrete functions: under MultiWorkerMirroredStrategy
    # the model's variables are distributed, and a concrete function capturing them cannot be
    # saved ("ConcreteFunction that uses distributed variables in certain way cannot be saved":
    # the Trainer on two workers, tests/test_container_job.py); saved from the tf.function with
    # its input signature, it is traced for the export and can.
    signatures = {
        "serving_default": serving,
        "transform_features": transform_features_fn,
    }
    # Keras SavedModel (keras_metadata.pb): also loadable by keras.models.load_model.
    write_dir = worker_write_dir(serving_model_dir, model.distribute_strategy)
    try:
        model.save(write_dir, save_format="tf", signatures=signatures)
    finally:
        remove_worker_dir(write_dir, serving_model_dir)


def _traced_as_it_is(layer):
    """``layer`` (TensorFlow Transform's ``TransformFeaturesLayer``) called with autograph's
    conversion off. TFT's code applies a loaded graph with Python control flow on Python values
    only, and a signature traced with autograph (as ``tf.function`` does by default) converted
    all of it, about 20 functions of TFT's ``SavedModelLoader``: 1.9 s of the main job's 6 s
    Trainer. The model's own layers are still converted (they are called outside this)."""

    @tf.autograph.experimental.do_not_convert
    def transform(features):
        return layer(features)

    return transform


def label_only_raw_features(transform_output, label_key):
    """The raw features that feed only the transformed label ``label_key``: what a serving
    request does not carry. ``(label_key,)`` when the label is not transformed.

    Found from the transform graph: a raw feature ``f`` is label-only when transforming every
    raw feature but ``f`` yields every transformed feature but ``label_key`` (TFX's taxi
    example: ``tips_xf`` is computed from ``tips`` and ``fare``; only ``tips`` is label-only).
    """
    if transform_output is None:
        return (label_key,)
    raw_spec = transform_output.raw_feature_spec()
    if label_key in raw_spec:
        return (label_key,)

    def outputs(names):
        with tf.Graph().as_default():  # transform_raw_features builds a TF1 graph
            return set(
                transform_output.transform_raw_features(
                    {name: _example_value(raw_spec[name]) for name in names},
                    drop_unused_features=True,
                )
            )

    everything = outputs(raw_spec)
    if label_key not in everything:
        return (label_key,)
    wanted = everything - {label_key}
    found = tuple(
        name for name in raw_spec if outputs([n for n in raw_spec if n != name]) == wanted
    )
    return found or (label_key,)


def _example_value(spec):
    """A batch of one placeholder value for a raw feature spec (graph building only)."""
    dtype = spec.dtype
    if isinstance(spec, tf.io.FixedLenFeature):
        shape = [1] + list(spec.shape)
        return tf.fill(shape, "") if dtype == tf.string else tf.zeros(shape, dtype)
    values = tf.constant([""]) if dtype == tf.string else tf.zeros([1], dtype)
    return tf.SparseTensor(indices=[[0, 0]], values=values, dense_shape=[1, 1])
