"""The bound for Keras 3, on its TensorFlow and JAX backends: what accumulating ``K``
micro-batches of ``b`` could cost at the least, measured as the Keras 2 report measures it.

Each micro-batch's training-mode forward and backward pass (BatchNormalization on its batch
statistics) runs compiled, and the gradients of its mean loss are summed: no optimizer, no input
pipeline (the micro-batches are sliced from one tensor of the epoch's data), no bookkeeping
beyond the sum, one micro-batch in flight at a time (its memory is one micro-batch's, as
accumulation's).

- TensorFlow backend: :class:`benchmarks.builders.BoundSlot` itself (Keras-agnostic): one
  ``tf.function`` call per epoch whose ``tf.while_loop`` (``parallel_iterations=1``) runs
  ``tf.GradientTape`` over ``model(x, training=True)`` for every micro-batch; no host call
  per micro-batch.
- JAX backend: :class:`JaxBoundSlot`, ``jax.value_and_grad`` of the model's
  ``stateless_call`` (``training=True``; the non-trainable variables, BN's moving statistics,
  threaded from micro-batch to micro-batch as Keras 3's JAX trainer threads them), the sums
  carried; ``jax.block_until_ready`` at the epoch's end. The bound is one ``jax.jit`` call per
  micro-batch, dispatched from a host loop (as Keras 3's own ``fit`` runs even with
  ``steps_per_execution``). One ``jax.jit`` call per epoch with a ``jax.lax.fori_loop`` over
  the micro-batches (``loop="fori"``) is measured beside it, but is no bound on a CPU: XLA:CPU
  rewrites a convolution into the layout its fast (Eigen) kernel takes only in the entry
  computation (``ConvCanonicalization`` walks ``module->entry_computation()``, in
  ``xla/service/cpu/conv_canonicalization.cc``), so the backward pass's convolutions inside a
  while-loop body fall to a generic loop nest. Measured here: about 12x the CPU time of the
  host loop (and a fully unrolled loop in one call about 1.6x), the same cause as the Keras 2
  report's remark that XLA compiling the whole loop ran about 10x slower.
"""

from benchmarks.builders import BoundSlot, Timing, timed
from benchmarks.configs import loss_fn

# The JAX bound's micro-batch loop: "host" (a jit call per micro-batch, the bound), "fori" (one
# jit call per epoch, a lax.fori_loop inside: context, slow on XLA:CPU)
JAX_LOOPS = ("host", "fori")


def bound_slot(keras, tf, model, x, y, b, jax_loop="host"):
    """The bound's slot for the Keras 3 ``model`` (fresh, uncompiled) on the running backend:
    ``run_epoch()`` times one epoch over ``(x, y)`` (tensors on TensorFlow, arrays on JAX) in
    micro-batches of ``b``; ``gradient_sums()`` returns one epoch's sums as NumPy arrays, in the
    order of ``model.trainable_variables``. ``jax_loop``: one of :data:`JAX_LOOPS` (JAX only)."""
    if keras.backend.backend() == "tensorflow":
        return BoundSlot(tf, model, loss_fn(keras), x, y, b, jit=False)
    if keras.backend.backend() == "jax":
        return JaxBoundSlot(keras, tf, model, x, y, b, loop=jax_loop)
    raise ValueError(
        f"backend {keras.backend.backend()!r}: the bound is built for 'tensorflow' or 'jax'"
    )


class JaxBoundSlot:
    """The bound on the JAX backend (the module's docstring): one ``jax.jit`` call per
    micro-batch that adds its gradients to the sums, the micro-batch loop on the host
    (:data:`JAX_LOOPS` ``"host"``), or one call per epoch whose ``jax.lax.fori_loop`` runs them
    all (``"fori"``). ``tf`` only serves the timing helper, whose memory figure does not see
    JAX's buffers."""

    def __init__(self, keras, tf, model, x, y, b, loop="host"):
        import jax
        import jax.numpy as jnp

        if loop not in JAX_LOOPS:
            raise ValueError(f"loop {loop!r}: allowed {', '.join(map(repr, JAX_LOOPS))}")
        self.tf, self._jax = tf, jax
        n_micro = len(x) // b
        self._xs = jnp.reshape(jnp.asarray(x), (n_micro, b) + tuple(x.shape[1:]))
        self._ys = jnp.reshape(jnp.asarray(y), (n_micro, b))
        self._trainable = [v.value for v in model.trainable_variables]
        # a copy: the host loop donates the moving statistics it threads
        self._non_trainable = [jnp.array(v.value) for v in model.non_trainable_variables]
        loss = loss_fn(keras)

        def micro_loss(trainable, non_trainable, x_micro, y_micro):
            logits, non_trainable = model.stateless_call(
                trainable, non_trainable, x_micro, training=True
            )
            return loss(y_micro, logits), non_trainable

        value_and_grad = jax.value_and_grad(micro_loss, has_aux=True)

        def add_micro(trainable, xs, ys, i, carry):
            """Micro-batch ``i``'s gradients added to the sums of ``carry``."""
            non_trainable, total = carry
            (_, non_trainable), grads = value_and_grad(trainable, non_trainable, xs[i], ys[i])
            return non_trainable, [t + g for t, g in zip(total, grads)]

        if loop == "fori":

            @jax.jit
            def epoch(trainable, carry, xs, ys):
                body = lambda i, c: add_micro(trainable, xs, ys, i, c)  # noqa: E731
                return jax.lax.fori_loop(0, n_micro, body, carry)

        else:
            step = jax.jit(add_micro, donate_argnums=4)

            def epoch(trainable, carry, xs, ys):
                for i in range(n_micro):
                    carry = step(trainable, xs, ys, i, carry)
                return carry

        self._epoch = epoch

    def _run(self):
        """One epoch: the sums, ready; the moving statistics carried to the next epoch."""
        import jax.numpy as jnp

        zeros = [jnp.zeros_like(v) for v in self._trainable]
        carry = (self._non_trainable, zeros)
        self._non_trainable, total = self._jax.block_until_ready(
            self._epoch(self._trainable, carry, self._xs, self._ys)
        )
        return total

    def run_epoch(self) -> Timing:
        return timed(self.tf, self._run)

    def gradient_sums(self):
        import numpy as np

        return [np.asarray(t) for t in self._run()]
