"""Export of the trained model with the serving and transform signatures (penguin style)."""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx import tf

from ga_tfx.components.trainer.distribution import remove_worker_dir, worker_write_dir


def export_serving_model(model, serving_model_dir, transform_output, schema, raw_label_key):
    """Saves ``model`` (a plain Keras model) with the penguin-style signatures.

    ``serving_default``: serialized raw tf.Examples (no label) -> transform -> model outputs.
    ``transform_features``: serialized raw tf.Examples -> transformed features (Evaluator).
    Without a transform graph both parse with ``schema`` and apply no transformation.

    Under ``"multi_worker"`` every worker must call this; only the chief writes
    ``serving_model_dir``, the others save to a temporary directory that is then removed.
    """
    if transform_output is not None:
        model.tft_layer = transform_output.transform_features_layer()
        raw_spec = transform_output.raw_feature_spec()
        transform = model.tft_layer
    else:
        from tensorflow_transform.tf_metadata import schema_utils
        raw_spec = schema_utils.schema_as_feature_spec(schema).feature_spec
        transform = dict
    serving_spec = {k: v for k, v in raw_spec.items() if k != raw_label_key}
    examples = tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")

    @tf.function(input_signature=[examples])
    def serve_tf_examples_fn(serialized_tf_examples):
        features = transform(tf.io.parse_example(serialized_tf_examples, serving_spec))
        return model(features)

    @tf.function(input_signature=[examples])
    def transform_features_fn(serialized_tf_examples):
        return transform(tf.io.parse_example(serialized_tf_examples, raw_spec))

    signatures = {
        "serving_default": serve_tf_examples_fn.get_concrete_function(),
        "transform_features": transform_features_fn.get_concrete_function(),
    }
    # Keras SavedModel (keras_metadata.pb): also loadable by keras.models.load_model.
    write_dir = worker_write_dir(serving_model_dir, model.distribute_strategy)
    try:
        model.save(write_dir, save_format="tf", signatures=signatures)
    finally:
        remove_worker_dir(write_dir, serving_model_dir)
