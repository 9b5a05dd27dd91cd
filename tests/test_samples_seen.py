"""``samples_seen`` survives a checkpoint written and restored under MirroredStrategy (2 replicas).

tf.distribute restores a replica-local (``ON_READ``) ``SUM`` variable by giving each replica
``saved_sum / replicas`` cast to the variable's dtype: an integer counter with an odd sum lost a
sample there (63 restored as 31 + 31). The counter must come back as the exact count.
"""

import ga_tfx
from ga_tfx import keras, tf
from ga_tfx.window.accumulator import GradientAccumulator

import pytest

from tests.helpers import classification_data, mlp, sparse_ce, two_replica_strategy

pytestmark = []  # fast tier; library only (no TFX)

MICRO, K = 6, 4
N = 63  # odd: 10 micro-batches of 6 and one of 3 per epoch


def _restored_into_fresh(strategy, build, trained, path):
    """Writes ``trained`` with tf.train.Checkpoint; returns ``build()`` restored from it."""
    tf.train.Checkpoint(model=trained).write(path)
    with strategy.scope():
        fresh = build()
    tf.train.Checkpoint(model=fresh).read(path).expect_partial()
    return fresh


def test_accumulator_counter_restores_an_odd_sum_exactly(tmp_path):
    strategy = two_replica_strategy()
    with strategy.scope():
        variable = tf.Variable(tf.zeros([2]))
        acc = GradientAccumulator([variable])

    def add():  # replica 0 adds 2 samples, replica 1 adds 3: an odd total of 5
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        acc.add([tf.ones([2])], tf.cast(2 + replica, tf.float32))

    tf.function(lambda: strategy.run(add))()
    assert acc.samples_seen_count() == 5
    path = tf.train.Checkpoint(acc=acc).write(str(tmp_path / "acc"))
    with strategy.scope():
        fresh = GradientAccumulator([tf.Variable(tf.zeros([2]))])
    tf.train.Checkpoint(acc=fresh).read(path).assert_consumed()
    assert fresh.samples_seen_count() == 5


@pytest.mark.slow  # the model-level case; the accumulator-level one above stays fast
def test_engine_samples_seen_after_restore_under_mirrored_strategy(tmp_path):
    x, y = classification_data(n=N)
    strategy = two_replica_strategy()

    def build():
        model = ga_tfx.wrap_model(mlp(), accum_steps=K)
        model.compile(keras.optimizers.SGD(0.1), sparse_ce())
        return model

    with strategy.scope():
        model = build()
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    assert model.samples_seen == N
    resumed = _restored_into_fresh(strategy, build, model, str(tmp_path / "ckpt"))
    # The accumulator is created (and its saved values restored) by the first fit.
    resumed.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    model.fit(x, y, batch_size=MICRO, epochs=1, shuffle=False, verbose=0)
    assert isinstance(resumed.samples_seen, int)
    assert resumed.samples_seen == model.samples_seen == 2 * N
