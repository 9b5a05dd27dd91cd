"""One worker of the optimizer wrapper's MultiWorkerMirroredStrategy test
(tests/test_optimizer_multi_worker.py).

``python -m tests.optimizer_multi_worker_script OUT`` with ``TF_CONFIG`` set: creates the
strategy first (before any other TensorFlow operation, as it must be), then runs the custom loop
of tests/test_optimizer_distributed.py (uneven global micro-batches ``SIZES``, ``accum_steps=K``,
``apply_gradients`` inside ``strategy.run`` on every micro-step, ``strategy.run(opt.flush)`` at
the end) once per optimizer in ``OPTIMIZERS``. Each worker reads its own, explicit share of every
global micro-batch (samples ``0, 2, 4, ...`` for worker 0, ``1, 3, ...`` for worker 1). Writes
``OUT/<optimizer>.npz`` (the trained weights) and ``OUT/summary.json`` (updates per optimizer and
the applied flags).
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2)
from ga_tfx._keras import keras, tf

import json
import os
import sys


def main(out):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import numpy as np

    from tests.helpers import mlp
    from tests.test_optimizer_distributed import (
        OPTIMIZERS,
        PER_EXAMPLE_LOSS,
        SIZES,
        K,
        bounds,
        data,
    )

    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync  # 1 per worker
    x, y = data()

    def dataset_fn(context):
        index, workers = context.input_pipeline_id, context.num_input_pipelines
        parts = [
            tf.data.Dataset.from_tensor_slices(
                (x[s:e][index::workers], y[s:e][index::workers])
            ).batch(e - s)
            for s, e in bounds(SIZES)
        ]
        dataset = parts[0]
        for part in parts[1:]:
            dataset = dataset.concatenate(part)
        return dataset

    summary = {}
    for name in sorted(OPTIMIZERS):
        with strategy.scope():
            model = mlp(l2=1e-2)
            optimizer = ga_tfx.GradientAccumulateOptimizer(
                optimizer=OPTIMIZERS[name](), accum_steps=K
            )
        dataset = strategy.distribute_datasets_from_function(dataset_fn)

        def replica_step(xb, yb, n, model=model, optimizer=optimizer):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(
                    PER_EXAMPLE_LOSS(yb, model(xb, training=True)), global_batch_size=n
                )
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            grads = tape.gradient(loss, model.trainable_variables)
            return optimizer.apply_gradients(zip(grads, model.trainable_variables), sample_count=n)

        @tf.function(input_signature=[dataset.element_spec, tf.TensorSpec([], tf.int32)])
        def step(batch, n, replica_step=replica_step):
            return strategy.run(replica_step, args=(*batch, n))

        flush = tf.function(lambda optimizer=optimizer: strategy.run(optimizer.flush))
        applied = [
            bool(strategy.experimental_local_results(step(batch, tf.constant(n)))[0])
            for batch, n in zip(dataset, SIZES)
        ]
        applied.append(bool(strategy.experimental_local_results(flush())[0]))
        np.savez(os.path.join(out, f"{name}.npz"), *model.get_weights())
        summary[name] = {"updates": int(optimizer.iterations.numpy()), "applied": applied}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f)
    keras.backend.clear_session()


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    main(sys.argv[1])
