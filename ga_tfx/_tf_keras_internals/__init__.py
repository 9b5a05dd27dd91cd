"""Every private tf-keras (and TensorFlow) name ga-tfx relies on, in one place.

ga-tfx extends Keras 2 where tf-keras has no public hook: the window loop reads and, for
``partial_window="carry"``, sets the model's ``steps_per_execution`` variable, counts windows
in Keras' train counter, reduces per-replica logs as ``fit`` does, rebuilds functional graphs
from a config, and subclasses ``BatchNormalization``. Nothing else in ga-tfx (library,
components, pipelines) touches a private tf-keras attribute or imports ``tf_keras.src``; it
calls the functions below (this package: the model's and the optimizer's here, the layers',
tracking, functional-config and TensorFlow ones in :mod:`.layers`, re-exported here). A
tf-keras release that moves one of these fails here, at import, with an error naming the
missing internal and the versions ga-tfx was proven on, instead of an ``AttributeError`` deep
inside a traced train function.

Version check: :data:`PROVEN_TF_KERAS_VERSIONS` lists the tf-keras ``major.minor`` releases the
test suite passed on. Another release gets a :class:`UnprovenTfKerasVersionWarning` at import
(once), and works if every internal below is still there (checked at import by
:func:`missing_internals`: class attributes by ``hasattr``, instance attributes by their
assignment in tf-keras' source). ``tests/test_internals_shim.py`` checks each function against
the installed tf-keras, that every private name used here is in the import-time check, and
that no module outside this one uses a private tf-keras name.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import tensorflow as tf
import tf_keras

# tf-keras major.minor releases the ga-tfx test suite passed on.
PROVEN_TF_KERAS_VERSIONS: Tuple[str, ...] = ("2.16", "2.21")


class UnprovenTfKerasVersionWarning(UserWarning):
    """The installed tf-keras is not one ga-tfx was tested on (it may still work)."""


class TfKerasInternalsError(ImportError):
    """A tf-keras internal that ga-tfx needs is missing in the installed tf-keras."""


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_version(version: Optional[str] = None) -> bool:
    """Warns (:class:`UnprovenTfKerasVersionWarning`) if ``version`` is not a proven release.

    Args:
      version: a tf-keras version string such as ``"2.16.0"``; defaults to the installed one.

    Returns:
      True if ``version``'s ``major.minor`` is in :data:`PROVEN_TF_KERAS_VERSIONS`.
    """
    version = tf_keras.__version__ if version is None else version
    if _major_minor(version) in PROVEN_TF_KERAS_VERSIONS:
        return True
    warnings.warn(
        f"ga_tfx was tested with tf-keras {', '.join(v + '.x' for v in PROVEN_TF_KERAS_VERSIONS)}"
        f"; this process has tf-keras {version}. The tf-keras internals ga_tfx uses are present "
        "(checked at import), but results on this version are not verified.",
        UnprovenTfKerasVersionWarning,
        stacklevel=2,
    )
    return False


# --------------------------------------------------------------------------- private modules
def _import_private(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise TfKerasInternalsError(
            f"ga_tfx needs the private module {module!r}, which this installation (tf-keras "
            f"{tf_keras.__version__}, TensorFlow {tf.__version__}) does not have ({error}). "
            "ga_tfx was tested with tf-keras "
            f"{', '.join(v + '.x' for v in PROVEN_TF_KERAS_VERSIONS)}."
        ) from error


_training = _import_private("tf_keras.src.engine.training")
_functional = _import_private("tf_keras.src.engine.functional")
_control_flow_util = _import_private("tf_keras.src.utils.control_flow_util")
_distribute_values = _import_private("tensorflow.python.distribute.values")
_base_layer_utils = _import_private("tf_keras.src.engine.base_layer_utils")
_autograph_config = _import_private("tensorflow.python.autograph.core.config")
_compile_utils = _import_private("tf_keras.src.engine.compile_utils")
_losses_utils = _import_private("tf_keras.src.utils.losses_utils")

# (owner, attribute) pairs that must exist on the classes/modules of the installed tf-keras.
_REQUIRED: Tuple[Tuple[Any, str], ...] = (
    (_training, "reduce_per_replica"),
    (_functional, "get_network_config"),
    (_functional, "reconstruct_from_config"),
    (_functional, "connect_ancillary_layers"),
    (_control_flow_util, "constant_value"),
    (_control_flow_util, "smart_cond"),
    (tf_keras.Model, "_flatten_layers"),
    (tf_keras.Model, "_track_trackable"),
    (tf_keras.Model, "_get_compile_args"),
    (tf_keras.Model, "_validate_target_and_loss"),
    (tf_keras.layers.BatchNormalization, "_assign_moving_average"),
    (tf_keras.layers.BatchNormalization, "_get_training_value"),
    (tf_keras.layers.BatchNormalization, "_param_dtype"),
    (tf.__internal__.tracking.AutoTrackable, "_trackable_children"),
    (tf_keras.callbacks.Callback, "_implements_train_batch_hooks"),
    (tf_keras.callbacks.Callback, "_implements_test_batch_hooks"),
    (tf.distribute.StrategyExtended, "_in_multi_worker_mode"),
    (tf_keras.optimizers.Optimizer, "_create_iteration_variable"),
    (tf_keras.optimizers.Optimizer, "_trackable_children"),
    (_distribute_values.DistributedVariable, "_get_on_device_or_primary"),
    (_base_layer_utils, "call_context"),
    (_base_layer_utils.CallContext, "saving"),
    (_autograph_config, "CONVERSION_RULES"),
    (_autograph_config, "DoNotConvert"),
    (_compile_utils.LossesContainer, "build"),
    (_losses_utils, "get_mask"),
    (_losses_utils, "apply_mask"),
    (tf_keras.losses.Loss, "_get_reduction"),
)

# (class, attribute) pairs for instance attributes: tf-keras sets them on its objects in
# ``__init__``/``compile``/``build`` (``self.<attribute> = ...`` in the source of the class or
# one of its bases), and no class attribute (a property) shadows them in the instance dict.
_REQUIRED_INSTANCE: Tuple[Tuple[Any, str], ...] = (
    (tf_keras.Model, "_steps_per_execution"),
    (tf_keras.Model, "_autotune_steps_per_execution"),
    (tf_keras.Model, "_jit_compile"),
    (tf_keras.Model, "_run_eagerly"),
    (tf_keras.Model, "_train_counter"),
    (tf_keras.Model, "_cluster_coordinator"),
    (tf_keras.Model, "_is_graph_network"),
    (tf_keras.Model, "train_tf_function"),
    (tf_keras.Model, "optimizer"),
    (tf_keras.layers.BatchNormalization, "_param_shape"),
    (tf_keras.optimizers.Optimizer, "_learning_rate"),
    (tf_keras.optimizers.Optimizer, "_iterations"),
    (tf_keras.optimizers.Optimizer, "_distribution_strategy"),
    (_compile_utils.LossesContainer, "_losses"),
    (_compile_utils.LossesContainer, "_loss_weights"),
    (tf_keras.Model, "compiled_loss"),
)


def _sets_on_instances(owner: type, name: str) -> bool:
    """Whether the source of ``owner`` or one of its bases assigns ``self.<name>``, and no class
    attribute of that name (a property would shadow the instance dict) exists."""
    if any(name in vars(cls) for cls in owner.__mro__):
        return False
    assignment = re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=[^=]")
    sources = []
    for cls in owner.__mro__[:-1]:  # not ``object``
        try:
            sources.append(inspect.getsource(inspect.getmodule(cls)))
        except (OSError, TypeError):  # compiled without source: nothing to read
            continue
    # Without any source to read (an install without .py files), the version check decides.
    return not sources or any(assignment.search(source) for source in sources)


def missing_internals(
    required: Iterable[Tuple[Any, str]] = _REQUIRED,
    required_instance: Iterable[Tuple[Any, str]] = _REQUIRED_INSTANCE,
) -> List[str]:
    """Names (``"owner.attribute"``) of required internals the installed tf-keras lacks:
    ``required``'s class (or module) attributes, ``required_instance``'s instance attributes."""
    return [
        f"{getattr(owner, '__name__', owner)}.{name}"
        for owner, name in required
        if not hasattr(owner, name)
    ] + [
        f"{owner.__name__}.{name}"
        for owner, name in required_instance
        if not _sets_on_instances(owner, name)
    ]


def check_internals(
    required: Iterable[Tuple[Any, str]] = _REQUIRED,
    required_instance: Iterable[Tuple[Any, str]] = _REQUIRED_INSTANCE,
) -> None:
    """Raises :class:`TfKerasInternalsError` naming every missing internal (none: returns)."""
    missing = missing_internals(required, required_instance)
    if missing:
        raise TfKerasInternalsError(
            f"tf-keras {tf_keras.__version__} lacks internals ga_tfx needs: "
            f"{', '.join(missing)}. ga_tfx was tested with tf-keras "
            f"{', '.join(v + '.x' for v in PROVEN_TF_KERAS_VERSIONS)}."
        )


# --------------------------------------------------------------------------- Model: fit loop
def steps_per_execution(model: tf_keras.Model) -> tf.Variable:
    """The compiled model's ``steps_per_execution`` variable (micro-batches per execution,
    read by Keras' data handler before each call of the train function)."""
    return model._steps_per_execution


def set_steps_per_execution(model: tf_keras.Model, steps: int) -> None:
    """Sets the number of micro-batches Keras hands the next train-function call (host side).

    The one assignment to a Keras private attribute in ga-tfx: ``partial_window="carry"`` makes
    the first execution of an epoch ``K - pending`` micro-batches long (Keras' data handler
    does the same for the last execution of an epoch). Written, not read first: a write from
    the host needs no read back from the device.
    """
    model._steps_per_execution.assign(steps)


def watches_batches(callback: tf_keras.callbacks.Callback) -> bool:
    """Whether Keras would call ``callback`` for every train or test batch (Keras' own test,
    ``Callback._implements_*_batch_hooks``)."""
    return callback._implements_train_batch_hooks() or callback._implements_test_batch_hooks()


def in_multi_worker_mode(strategy: tf.distribute.Strategy) -> bool:
    """True when ``strategy`` spans several worker processes (``MultiWorkerMirroredStrategy``
    with a cluster), as Keras asks it."""
    return strategy.extended._in_multi_worker_mode()


def count_train_step(model: tf_keras.Model) -> Any:
    """Adds one to Keras' train counter (``model._train_counter``): one finished window
    (applied or skipped)."""
    return model._train_counter.assign_add(1)


def uses_parameter_server(model: tf_keras.Model) -> bool:
    """True when the model trains under a ParameterServerStrategy cluster coordinator."""
    return bool(getattr(model, "_cluster_coordinator", None))


def reduce_per_replica(values: Any, strategy: tf.distribute.Strategy, reduction: str) -> Any:
    """Keras' reduction of per-replica logs to one value each (what ``fit`` shows)."""
    return _training.reduce_per_replica(values, strategy, reduction=reduction)


def validate_target_and_loss(model: tf_keras.Model, y: Any, loss: Any) -> None:
    """Keras' check that a loss and targets were given (clear errors for a missing ``y``)."""
    model._validate_target_and_loss(y, loss)


def compile_args(model: tf_keras.Model) -> dict:
    """The arguments the model was compiled with (what ``clone_and_build_model`` reuses)."""
    return model._get_compile_args()


def execution_args(model: tf_keras.Model) -> dict:
    """How the compiled ``model`` was asked to run, which :func:`compile_args` leaves out:
    ``steps_per_execution`` (``"auto"`` where Keras tunes it, else the count), ``jit_compile``
    and ``run_eagerly`` (``None`` where left to Keras)."""
    tuned = model._autotune_steps_per_execution
    return dict(
        steps_per_execution="auto" if tuned else int(model._steps_per_execution.numpy()),
        jit_compile=model._jit_compile,
        run_eagerly=model._run_eagerly,
    )


def set_train_tf_function(model: tf_keras.Model, function: Callable) -> None:
    """Makes ``function`` the model's traced train function as Keras' callbacks see it
    (``model.train_tf_function``: what ``TensorBoard``'s profiler traces), where ga-tfx's
    window loop replaces ``make_train_function``'s."""
    model.train_tf_function = function


@contextlib.contextmanager
def untracked_attribute(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Sets ``owner.<name>`` to ``value`` for the ``with`` block, then back to what it was: in
    the instance dict, past Keras' attribute tracking (``value`` never becomes a checkpoint
    dependency or a layer). For an attribute Keras keeps there, such as ``Model.optimizer``."""
    owner_dict = vars(owner)
    previous = owner_dict.get(name)
    owner_dict[name] = value
    try:
        yield
    finally:
        owner_dict[name] = previous


# --------------------------------------------------------------------------- losses
def keras_mask(tensor: Any) -> Any:
    """The Keras mask a layer attached to ``tensor`` (``None`` without one), as tf-keras' losses
    read it (``losses_utils.get_mask``)."""
    return _losses_utils.get_mask(tensor)


def masked_sample_weight(y_pred: Any, sample_weight: Any, mask: Any) -> Any:
    """tf-keras' merge of a mask into the sample weights (``losses_utils.apply_mask``), as its
    compiled loss applies it before calling each loss."""
    return _losses_utils.apply_mask(y_pred, sample_weight, mask)


@contextlib.contextmanager
def loss_call_recorded(loss: tf_keras.losses.Loss, recorded: List[Any]) -> Iterator[None]:
    """Inside the block, ``loss.call`` also appends the element losses it returns to
    ``recorded``: ``Loss.__call__`` reads ``self.call``, and an instance attribute wins."""
    real_call = loss.call

    def call(*args: Any, **kwargs: Any) -> Any:
        losses = real_call(*args, **kwargs)
        recorded.append(losses)
        return losses

    vars(loss)["call"] = call
    try:
        yield
    finally:
        del vars(loss)["call"]


def loss_reduction(loss: tf_keras.losses.Loss) -> str:
    """The reduction ``loss`` applies now (``AUTO`` resolved as tf-keras resolves it)."""
    return str(loss._get_reduction())


def compiled_loss_objects(container: Any, y_pred: Any) -> List[Tuple[Any, Any]]:
    """The compiled loss's flat list of ``(loss object, loss_weights entry)`` (``None`` for an
    output without a loss or weight), built for ``y_pred``'s structure first if needed."""
    if not container.built:
        container.build(y_pred)
    return list(zip(container._losses, container._loss_weights))


@contextlib.contextmanager
def compiled_loss_objects_as(container: Any, objects: List[Any]) -> Iterator[None]:
    """The compiled loss calls ``objects`` in place of its own loss objects in the block."""
    real = container._losses
    container._losses = objects
    try:
        yield
    finally:
        container._losses = real


# --------------------------------------------------------------------------- optimizers
def optimizer_strategy(optimizer: tf_keras.optimizers.Optimizer) -> tf.distribute.Strategy:
    """The distribution strategy a tf-keras optimizer was created under."""
    return optimizer._distribution_strategy


class DelegatingOptimizer(tf_keras.optimizers.Optimizer):
    """Base of a tf-keras optimizer whose ``iterations`` are another optimizer's (a wrapper).

    It creates no ``iterations`` variable of its own (the subclass defines the ``iterations``
    property), and its checkpoint children are its attributes at the time of saving (tf-keras'
    optimizer caches them at first use, which would leave out state created later). In a
    SavedModel the ``iterations`` variable is also exported under ``_iterations``, the child
    tf-keras' ``RestoredOptimizer`` binds its own counter to on loading (the same variable,
    saved once); ``tf.train.Checkpoint`` and ``.keras`` files are unchanged.
    """

    def _create_iteration_variable(self) -> None:
        pass

    def _trackable_children(self, save_type: str = "checkpoint", **kwargs: Any) -> Dict[str, Any]:
        children = autotrackable_children(self, save_type, **kwargs)
        if save_type == "savedmodel":  # tf.saved_model's SaveType.SAVEDMODEL (a str enum)
            children["_iterations"] = self.iterations
        return children


check_internals()
check_version()

# The layers', tracking, functional-config and TensorFlow internals (same checks, above).
# TensorFlow's own internals, shared with the Keras 3 front-end (no Keras: ga_tfx._tf_internals).
from ga_tfx._tf_internals import (  # noqa: E402, F401
    autograph_converted,
    local_component,
    not_inlined,
    user_code,
)
from ga_tfx._tf_keras_internals.layers import (  # noqa: E402
    autotrackable_children,
    bn_assign_moving_average,
    bn_param_dtype,
    bn_param_shape,
    bn_training_value,
    connect_ancillary_layers,
    constant_value,
    flatten_layers,
    get_network_config,
    is_graph_network,
    learning_rate_schedule,
    leave_tf_keras_unconverted_by_autograph,
    reconstruct_from_config,
    smart_cond,
    traced_for_saving,
    track_trackable,
)
