"""Weight-level correctness against big-batch training, and BatchNormalization statistics.

Runs in a subprocess worker (op determinism is switched on for the whole process).
"""

import ga_tfx  # first import: selects Keras 2 before TensorFlow is imported
from ga_tfx import keras, tf

import numpy as np

from benchmarks import anchor
from benchmarks.configs import DATA_SEED, MODEL_SEED, conv_net, make_data
from benchmarks.configs import loss_fn as _loss_fn
from benchmarks.errors import error_text

BN_MOMENTUM = 0.9  # for the moving-statistics experiment (Keras' default is 0.99)
CORRECTNESS_UPDATES = 8


def small_net(seed=MODEL_SEED):
    """The conv net without BatchNormalization (biases on)."""
    return conv_net(keras, bn=False, seed=seed, name="convnet_nobn")


def loss_fn():
    return _loss_fn(keras)


def max_abs_diff(a_list, b_list):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(a_list, b_list))


def worker_correctness(args, result):
    """Weight-level comparison against big-batch training (no BatchNormalization)."""
    tf.config.experimental.enable_op_determinism()
    b, k = args.micro_batch, args.accum_steps
    n = CORRECTNESS_UPDATES * k * b
    x, y = make_data(n, seed=DATA_SEED + 1)
    init = small_net().get_weights()

    optimizers = {
        "SGD(lr=0.05, momentum=0.9)": (
            lambda: keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
            lambda: keras.optimizers.legacy.SGD(learning_rate=0.05, momentum=0.9),
        ),
        "Adam(lr=1e-3)": (
            lambda: keras.optimizers.Adam(learning_rate=1e-3),
            lambda: keras.optimizers.legacy.Adam(learning_rate=1e-3),
        ),
    }

    def train(kind, make_opt, make_legacy):
        keras.utils.set_random_seed(MODEL_SEED)
        base = small_net()
        base.set_weights(init)
        batch = b
        if kind in ("big", "big_legacy"):
            model, batch = base, k * b
            optimizer = make_opt() if kind == "big" else make_legacy()
        elif kind == "plain_b":
            model, optimizer = base, make_opt()
        elif kind == "ga_tfx":
            model, optimizer = ga_tfx.wrap_model(base, accum_steps=k), make_opt()
        elif kind == "anchor_model":
            model = anchor.require("GradientAccumulateModel")(
                accum_steps=k, inputs=base.input, outputs=base.output
            )
            optimizer = make_opt()
        elif kind == "anchor_optimizer":
            model = base
            optimizer = anchor.require("GradientAccumulateOptimizer")(
                optimizer=make_legacy(), accum_steps=k
            )
        else:
            raise ValueError(kind)
        model.compile(optimizer=optimizer, loss=loss_fn())
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        return base.get_weights(), int(model.optimizer.iterations.numpy())

    rows = []
    for opt_name, (make_opt, make_legacy) in optimizers.items():
        ref_w, ref_it = train("big", make_opt, make_legacy)
        moved = max_abs_diff(ref_w, init)
        legacy = None
        entries = [
            ("plain Keras @ K·b (reference)", "big", "big"),
            ("ga_tfx.wrap_model @ (b, K)", "ga_tfx", "big"),
            ("gradient-accumulator GradientAccumulateModel @ (b, K)", "anchor_model", "big"),
            (
                "gradient-accumulator GradientAccumulateOptimizer @ (b, K) [legacy optimizer; "
                "reference: big batch with the same legacy optimizer]",
                "anchor_optimizer",
                "big_legacy",
            ),
            ("context: plain Keras @ b, no accumulation (K× more updates)", "plain_b", "big"),
        ]
        for label, kind, ref_kind in entries:
            row = {"optimizer": opt_name, "method": label, "kind": kind}
            try:
                if ref_kind == "big_legacy":
                    if legacy is None:
                        legacy = train("big_legacy", make_opt, make_legacy)
                    reference = legacy
                else:
                    reference = (ref_w, ref_it)
                if kind == "big":
                    weights, its = ref_w, ref_it
                else:
                    weights, its = train(kind, make_opt, make_legacy)
                row.update(
                    status="ok",
                    max_dw=max_abs_diff(weights, reference[0]),
                    iterations=its,
                    reference_iterations=reference[1],
                    max_w_moved=moved,
                )
            except Exception as error:
                row.update(status="error", error=error_text(error))
            rows.append(row)
            print(
                f"  correctness {opt_name} {kind}: {row.get('max_dw', row.get('error'))}",
                flush=True,
            )
    result["correctness"] = rows
    result["correctness_setup"] = {"samples": n, "updates": CORRECTNESS_UPDATES}

    result["bn_moving"] = bn_moving_statistics(b, k)
    result["bn_replace"] = bn_replace(b, k)


def bn_window(shape, b, k, seed):
    rng = np.random.default_rng(seed)
    parts = [
        rng.normal(size=(b,) + shape).astype("float32") + np.float32(10.0 * i) for i in range(k)
    ]
    return np.concatenate(parts, axis=0)


def _bn_probe_model(shape, layer):
    keras.utils.set_random_seed(MODEL_SEED)
    inputs = keras.Input(shape)
    h = layer(inputs)
    h = keras.layers.Flatten()(h)
    outputs = keras.layers.Dense(1)(h)
    return keras.Model(inputs, outputs)


def bn_moving_statistics(b, k):
    """One window of K micro-batches (micro-batch i offset by 10*i): moving statistics vs one
    Keras BatchNormalization update on the concatenated window."""
    layouts = {
        "4D input (N,8,8,4): Keras BN fused": (8, 8, 4),
        "2D input (N,16): Keras BN not fused": (16,),
    }
    rows = []
    for layout, shape in layouts.items():
        window = bn_window(shape, b, k, seed=DATA_SEED + 2)
        target = np.zeros((window.shape[0], 1), "float32")
        ref = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)
        ref.build((None,) + shape)
        ref(tf.constant(window), training=True)
        ref_mean, ref_var = ref.moving_mean.numpy(), ref.moving_variance.numpy()
        context = {
            "layout": layout,
            "ref_moving_mean_max": float(np.max(ref_mean)),
            "ref_moving_variance_max": float(np.max(ref_var)),
            "window_variance_max": float(np.max(np.var(window.reshape(-1, shape[-1]), axis=0))),
        }

        def run(kind, shape, window, target):
            if kind == "ga_tfx":
                layer = ga_tfx.AccumBatchNormalization(momentum=BN_MOMENTUM)  # the model's K
                model = ga_tfx.wrap_model(_bn_probe_model(shape, layer), accum_steps=k)
            elif kind == "anchor":
                layer = anchor.require("AccumBatchNormalization")(
                    accum_steps=k, momentum=BN_MOMENTUM
                )
                base = _bn_probe_model(shape, layer)
                model = anchor.require("GradientAccumulateModel")(
                    accum_steps=k, inputs=base.input, outputs=base.output
                )
            elif kind == "keras_bn":
                layer = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)
                model = ga_tfx.wrap_model(_bn_probe_model(shape, layer), accum_steps=k)
            # The statistics depend only on the inputs (BN is the first layer); lr=0 keeps
            # everything else fixed.
            model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss="mse")
            model.fit(window, target, batch_size=b, epochs=1, shuffle=False, verbose=0)
            return np.asarray(layer.moving_mean), np.asarray(layer.moving_variance)

        for label, kind in [
            ("ga_tfx AccumBatchNormalization (ga_tfx.wrap_model)", "ga_tfx"),
            (
                "gradient-accumulator AccumBatchNormalization (its GradientAccumulateModel)",
                "anchor",
            ),
            ("context: Keras BatchNormalization, updated every micro-batch", "keras_bn"),
        ]:
            row = dict(context, method=label, kind=kind)
            try:
                mean, var = run(kind, shape, window, target)
                row.update(
                    status="ok",
                    max_d_mean=float(np.max(np.abs(mean - ref_mean))),
                    max_d_var=float(np.max(np.abs(var - ref_var))),
                    rel_d_var=float(np.max(np.abs(var - ref_var) / np.abs(ref_var))),
                )
            except Exception as error:
                row.update(status="error", error=error_text(error))
            rows.append(row)
            print(
                f"  bn-moving {layout} {kind}: {row.get('max_d_var', row.get('error'))}", flush=True
            )
    return rows


def bn_replace(b, k):
    """Inference output before/after replace_batchnorm_layers on a model with non-trivial BN
    gamma, beta, moving mean and moving variance."""
    model = conv_net(keras, name="pretrained")
    rng = np.random.default_rng(DATA_SEED + 3)
    bn_layers = [
        layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)
    ]
    originals = {}
    for layer in bn_layers:
        c = layer.gamma.shape[0]
        values = [
            rng.uniform(0.5, 2.0, c),
            rng.normal(0.0, 1.0, c),
            rng.normal(0.0, 1.0, c),
            rng.uniform(0.5, 3.0, c),
        ]
        values = [v.astype("float32") for v in values]
        layer.set_weights(values)
        originals[layer.name] = values
    x, _ = make_data(2 * b, seed=DATA_SEED + 4)
    ref = model(x, training=False).numpy()

    def carried(new_model):
        """Which BN quantities the replacement carried over (per quantity, all layers)."""
        new_bn = [layer for layer in new_model.layers if "batch" in type(layer).__name__.lower()]
        flags = {"gamma": [], "beta": [], "moving_mean": [], "moving_variance": []}
        for old, new in zip(bn_layers, new_bn):
            for i, attr in enumerate(flags):
                value = getattr(new, attr, None)
                flags[attr].append(
                    value is not None and np.allclose(np.asarray(value), originals[old.name][i])
                )
        return {attr: (all(v) if v else False) for attr, v in flags.items()}, len(new_bn)

    rows = []
    for label, kind in [
        ("ga_tfx.replace_batchnorm_layers", "ga_tfx"),
        ("gradient_accumulator.utils.replace_batchnorm_layers", "anchor"),
    ]:
        row = {"method": label, "kind": kind, "ref_output_max": float(np.max(np.abs(ref)))}
        try:
            if kind == "ga_tfx":
                new = ga_tfx.replace_batchnorm_layers(model)  # no K: the front-end's windows
            else:
                new = anchor.require("replace_batchnorm_layers")(model, accum_steps=k)
            out = new(x, training=False).numpy()
            flags, count = carried(new)
            shared = any(
                a is c
                for a in new.layers
                for c in model.layers
                if not isinstance(c, keras.layers.InputLayer)
            )
            row.update(
                status="ok",
                max_d_out=float(np.max(np.abs(out - ref))),
                carried=flags,
                bn_layers=count,
                shares_layers_with_original=shared,
            )
        except Exception as error:
            row.update(status="error", error=error_text(error))
        rows.append(row)
        print(f"  bn-replace {kind}: {row.get('max_d_out', row.get('error'))}", flush=True)
    return rows
