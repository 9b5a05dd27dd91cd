"""ga_tfx._tf_keras_internals: the one place ga-tfx reaches tf-keras (and TF) internals.

Each shim function is exercised against the installed tf-keras (2.16 in .venv, 2.21 in
.venv-lib), the version check warns for an unproven release, a missing internal is an error
naming it, and no other library or component module touches those internals.
"""

import ga_tfx  # noqa: I001  (first import: selects Keras 2)

import ast
import functools
import importlib
import pathlib
import re
import warnings

import numpy as np
import pytest

from ga_tfx import _tf_keras_internals as internals
from ga_tfx import keras, tf

pytestmark = []  # fast tier; library only (no TFX)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHIM_FILES = sorted((ROOT / "ga_tfx" / "_tf_keras_internals").glob("*.py"))  # the shim package


def test_installed_tf_keras_is_proven_and_has_every_internal():
    import tf_keras

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a proven version must not warn
        assert internals.check_version() is True
    assert tf_keras.__version__.rsplit(".", 1)[0] in internals.PROVEN_TF_KERAS_VERSIONS
    assert internals.missing_internals() == []


def test_unproven_version_warns_naming_both_versions():
    with pytest.warns(internals.UnprovenTfKerasVersionWarning, match=r"2\.16\.x.*2\.99\.1"):
        assert internals.check_version("2.99.1") is False


def test_missing_internal_is_an_error_naming_it():
    class Owner:
        present = 1

    with pytest.raises(internals.TfKerasInternalsError, match=r"Owner\._gone"):
        internals.check_internals(((Owner, "present"), (Owner, "_gone")))


def test_missing_instance_internal_is_an_error_naming_it():
    import tf_keras

    class Shadowed:  # a property in place of the instance attribute Keras used to set
        @property
        def optimizer(self):
            return None

    with pytest.raises(internals.TfKerasInternalsError) as raised:
        internals.check_internals(
            (),
            (
                (tf_keras.Model, "_steps_per_execution"),  # present: not named
                (tf_keras.Model, "_renamed_train_counter"),
                (Shadowed, "optimizer"),
            ),
        )
    message = str(raised.value)
    assert "Model._renamed_train_counter" in message and "Shadowed.optimizer" in message
    assert "_steps_per_execution" not in message


def _shim_private_names():
    """Every private name the shim's code reads, overrides or looks up by string."""
    tree = ast.Module(
        body=[node for path in SHIM_FILES for node in ast.parse(path.read_text()).body],
        type_ignores=[],
    )
    private = re.compile(r"^_[A-Za-z]\w*$")
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private.match(node.attr):
            used.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            used |= {
                item.name
                for item in node.body
                if isinstance(item, ast.FunctionDef) and private.match(item.name)
            }
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if private.match(node.value):
                used.add(node.value)
    return used


@pytest.mark.source_tree  # reads the shim's source file
def test_every_private_name_the_shim_uses_is_in_its_import_time_check():
    checked = {name for _, name in internals._REQUIRED + internals._REQUIRED_INSTANCE}
    used = _shim_private_names()
    assert {"_steps_per_execution", "_distribution_strategy", "_iterations"} <= used
    assert sorted(used - checked) == []


def test_every_instance_internal_is_on_a_real_object():
    model = _dense_model()
    model.compile(optimizer="sgd", loss="mse")
    layer = keras.layers.BatchNormalization()
    layer.build((None, 3))
    objects = {
        keras.Model: model,
        keras.layers.BatchNormalization: layer,
        keras.optimizers.Optimizer: keras.optimizers.SGD(0.1),
        internals._compile_utils.LossesContainer: model.compiled_loss,
    }
    absent = [
        f"{owner.__name__}.{name}"
        for owner, name in internals._REQUIRED_INSTANCE
        if name not in vars(objects[owner])
    ]
    assert absent == []


@functools.lru_cache(maxsize=None)
def _tf_keras_private_names(base):
    """Private names (``_x``, not dunder) of ``base``'s class and of real instances of it."""
    model = _dense_model()
    model.compile(optimizer="sgd", loss="mse")
    layer = keras.layers.BatchNormalization()
    layer.build((None, 3))
    strategy = tf.distribute.get_strategy()
    instances = [
        model,
        layer,
        model.optimizer,
        keras.optimizers.legacy.SGD(),
        keras.callbacks.Callback(),
        strategy,
        strategy.extended,
        tf.Variable(1.0),
    ]
    names = set()
    for obj in [base, *(o for o in instances if isinstance(o, base))]:
        names |= {n for n in dir(obj) if re.match(r"^_[A-Za-z]", n)}
        names |= {n for n in getattr(obj, "__dict__", {}) if re.match(r"^_[A-Za-z]", n)}
    return names


_KERAS_BASES = (
    keras.layers.Layer,
    keras.optimizers.Optimizer,
    keras.optimizers.legacy.Optimizer,
    keras.callbacks.Callback,
    tf.distribute.Strategy,
    tf.distribute.StrategyExtended,
    tf.Variable,
)


def _private_tf_keras_uses(path, every_name):
    """``"path:line: name"`` for each private tf-keras name ``path`` touches: an attribute of
    that name on any object, a method of that name defined in a subclass of a Keras class, or
    the name as a string; ``self.<name>`` counts in such a subclass only (elsewhere ``self`` is
    ga-tfx's own object)."""
    relative = path.relative_to(ROOT)
    module_name = ".".join(relative.with_suffix("").parts)
    module_name = module_name.replace("components.", "ga_tfx.components.", 1)
    module_name = module_name.replace("pipelines.", "ga_tfx.pipelines.", 1)
    module_name = module_name.removesuffix(".__init__")
    tree = ast.parse(path.read_text())
    found = []

    def private_names_of(class_name):
        """The private names of the Keras classes ``class_name`` derives from (all of them
        where the module does not import here)."""
        try:
            cls = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            return every_name
        bases = [b for b in _KERAS_BASES if isinstance(cls, type) and issubclass(cls, b)]
        return set().union(*(_tf_keras_private_names(b) for b in bases))

    def visit(node, names_of_self):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                defined = {item.name for item in child.body if isinstance(item, ast.FunctionDef)}
                read = {a.attr for a in ast.walk(child) if isinstance(a, ast.Attribute)}
                # Imported only when it could matter: a private tf-keras name in the class.
                names = private_names_of(child.name) if (defined | read) & every_name else set()
                for item in child.body:
                    if isinstance(item, ast.FunctionDef) and item.name in names:
                        found.append(f"{relative}:{item.lineno}: def {item.name}")
                visit(child, names)
                continue
            name = None
            if isinstance(child, ast.Attribute):
                receiver = child.value
                is_self = isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
                if child.attr in (names_of_self if is_self else every_name):
                    name = child.attr
            elif isinstance(child, ast.Constant) and child.value in every_name:
                name = child.value
            if name:
                found.append(f"{relative}:{child.lineno}: {name}")
            visit(child, names_of_self)

    visit(tree, set())
    return found


# The shims: tf-keras' (and TF's, for the Keras 2 front-ends), TensorFlow's alone (what the
# window core uses; re-exported by tf-keras'), Keras 3's (ga_tfx.keras3 and its optimizer binding).
_SHIMS = tuple(SHIM_FILES) + tuple(
    ROOT / "ga_tfx" / name for name in ("_tf_internals.py", "_keras3_internals.py")
)


def test_no_private_tf_keras_attribute_outside_the_shim():
    every_name = set().union(*(_tf_keras_private_names(b) for b in _KERAS_BASES))
    assert {"_distribution_strategy", "_train_counter", "_trackable_children"} <= every_name
    offenders = []
    for tree in ("ga_tfx", "components", "pipelines"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            if path not in _SHIMS:  # the allow-list: the shims only
                offenders += _private_tf_keras_uses(path, every_name)
    assert offenders == []


def _dense_model():
    inputs = keras.Input((3,), name="x")
    hidden = keras.layers.Dense(4, name="hidden")(inputs)
    outputs = keras.layers.Dense(1, name="out")(hidden)
    return keras.Model(inputs, outputs, name="m")


def test_fit_loop_internals_on_a_compiled_model():
    model = _dense_model()
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    variable = internals.steps_per_execution(model)
    assert isinstance(variable, tf.Variable) and int(variable.numpy()) == 2
    internals.set_steps_per_execution(model, 5)
    assert int(internals.steps_per_execution(model).numpy()) == 5
    before = int(model._train_counter.numpy())
    internals.count_train_step(model)
    assert int(model._train_counter.numpy()) == before + 1
    assert internals.uses_parameter_server(model) is False
    assert internals.compile_args(model)["loss"] == "mse"
    assert internals.execution_args(model) == dict(
        steps_per_execution=5, jit_compile=None, run_eagerly=None
    )
    model.compile(optimizer="sgd", loss="mse", steps_per_execution="auto", jit_compile=True)
    assert internals.execution_args(model) == dict(
        steps_per_execution="auto", jit_compile=True, run_eagerly=None
    )
    with pytest.raises(ValueError, match="loss"):
        internals.validate_target_and_loss(model, None, None)  # no target: Keras' own error


def test_reduce_per_replica_under_two_replicas():
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    per_replica = strategy.run(
        lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
    )
    # "auto" under MirroredStrategy: the first replica's value (what fit shows).
    assert float(internals.reduce_per_replica(per_replica, strategy, "first")) == 0.0
    assert float(internals.reduce_per_replica(per_replica, strategy, "sum")) == 1.0


def test_layers_tracking_and_functional_config():
    model = _dense_model()
    outer = keras.Sequential([model], name="outer")
    outer.build((None, 3))
    names = [layer.name for layer in internals.flatten_layers(outer)]
    assert {"m", "hidden", "out"} <= set(names) and "outer" not in names
    assert internals.is_graph_network(model)

    class Sub(keras.Model):
        def call(self, x):
            return x

    assert not internals.is_graph_network(Sub())

    tracked = tf.Module()
    tracked.v = tf.Variable(1.0)
    internals.track_trackable(model, tracked, "extra_state")
    assert model._trackable_children()["extra_state"] is tracked
    assert all(w is not tracked.v for w in model.weights)  # a dependency, not a weight

    config = internals.get_network_config(model, {"name": model.name})
    inputs, outputs, created = internals.reconstruct_from_config(config)
    rebuilt = keras.Model(inputs, outputs)
    internals.connect_ancillary_layers(rebuilt, created)
    rebuilt.set_weights(model.get_weights())
    x = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(rebuilt(x).numpy(), model(x).numpy(), rtol=0, atol=0)


def test_batchnorm_internals():
    layer = keras.layers.BatchNormalization(momentum=0.5)
    layer.build((None, 2, 3))
    assert tuple(internals.bn_param_shape(layer)) == (3,)
    assert internals.bn_param_dtype(layer) == tf.float32
    assert internals.constant_value(True) is True
    static = internals.constant_value(tf.constant(False))
    assert static is not None and not static
    assert internals.smart_cond(True, lambda: 1, lambda: 2) == 1
    layer.trainable = False  # Keras: a frozen BN runs in inference mode
    frozen = internals.constant_value(internals.bn_training_value(layer, True))
    assert frozen is not None and not frozen
    layer.trainable = True
    internals.bn_assign_moving_average(layer, layer.moving_mean, tf.ones(3), 0.5, 4.0)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.5 * np.ones(3))


def test_tensorflow_internals_are_in_the_import_time_check():
    """The autograph internals and the not-inlined attribute are TensorFlow's, not read by a
    private attribute name: they are checked at import all the same, so that a rename fails
    there, not silently (autograph then converting nothing, or every function inlined)."""
    from ga_tfx import _tf_internals

    ag_ctx, attributes = _tf_internals._ag_ctx, _tf_internals._function_attributes
    assert {  # TensorFlow's, checked once, by the module every front-end imports
        (ag_ctx, "ControlStatusCtx"),
        (ag_ctx, "Status"),
        (tf.__internal__.autograph, "tf_convert"),
        (attributes, "NO_INLINE"),
    } == set(_tf_internals._REQUIRED)
    assert {  # the shim's own use (tf-keras' autograph rule), checked by the shim
        (internals._autograph_config, "CONVERSION_RULES"),
        (internals._autograph_config, "DoNotConvert"),
    } <= set(internals._REQUIRED)
    assert not set(_tf_internals._REQUIRED) & set(internals._REQUIRED)  # not checked twice


def test_not_inlined_keeps_a_function_called_in_the_graph():
    def graph_functions(attributes):
        inner = tf.function(lambda x: x * 2.0 + 1.0, experimental_attributes=attributes)
        outer = tf.function(lambda x: inner(x) + inner(x + 1.0))
        graph = outer.get_concrete_function(tf.TensorSpec([], tf.float32)).graph
        # After Grappler's function inlining (what runs), as the runtime optimizes it.
        from tensorflow.core.protobuf import config_pb2, meta_graph_pb2
        from tensorflow.python.grappler import tf_optimizer

        meta = meta_graph_pb2.MetaGraphDef()
        meta.graph_def.CopyFrom(graph.as_graph_def())
        meta.collection_def["train_op"].node_list.value.extend([t.op.name for t in graph.outputs])
        optimized = tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta)
        return {node.op for node in optimized.node}

    calls = {"PartitionedCall", "StatefulPartitionedCall"}
    assert calls & graph_functions(internals.not_inlined())
    assert not calls & graph_functions(None)  # by default Grappler inlines it


def test_autotrackable_children_reads_attributes_now():
    module = tf.Module()
    module.first = tf.Variable(1.0)
    assert "first" in internals.autotrackable_children(module)
    module.second = tf.Variable(2.0)  # added later: still a child
    assert {"first", "second"} <= set(internals.autotrackable_children(module))


def test_learning_rate_schedule_tells_a_schedule_from_a_constant():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    assert internals.learning_rate_schedule(keras.optimizers.SGD(schedule)) is schedule
    assert internals.learning_rate_schedule(keras.optimizers.SGD(0.1)) is None
    loss_scaled = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(schedule))
    assert internals.learning_rate_schedule(loss_scaled) is schedule


def test_local_component_of_replica_local_variable():
    plain = tf.Variable(0.0)
    assert internals.local_component(plain) is plain
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    with strategy.scope():
        buffer = tf.Variable(
            tf.zeros(2),
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
        )

    def add():
        local = internals.local_component(buffer)
        return local.scatter_add(tf.IndexedSlices(tf.ones(1), tf.constant([1]), tf.constant([2])))

    strategy.run(tf.function(add))
    np.testing.assert_allclose(buffer.read_value().numpy(), [0.0, 2.0])  # both replicas added


# Private tf-keras/TF names that only the shim may use, and the source trees checked.
_PRIVATE = re.compile(
    r"tf_keras\.src|\._steps_per_execution|\._train_counter|\._flatten_layers|"
    r"\._track_trackable|\._get_compile_args|\._validate_target_and_loss|_cluster_coordinator|"
    r"_is_graph_network|\._param_shape|\._param_dtype|\._assign_moving_average|"
    r"\._get_training_value|_get_on_device_or_primary|autograph\.core|tf\.__internal__|\bvars\(|"
    r"_noinline|polymorphic_function"
)


@pytest.mark.source_tree
def test_no_module_outside_the_shim_uses_those_internals():
    assert SHIM_FILES, f"no source tree at {ROOT}: nothing to read"
    offenders = []
    for tree in ("ga_tfx", "components", "pipelines"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            if path in _SHIMS:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _PRIVATE.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
