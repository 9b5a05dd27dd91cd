"""The paired throughput runner: every configuration in one process, interleaved by round.

Each round times one epoch of every configuration, the order rotated each round, so that
machine-load drift hits all configurations of a round alike; ratios are taken within a round.
"""

import ga_tfx  # noqa: F401  (first import: selects Keras 2 before TensorFlow is imported)

import gc  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from ga_tfx import keras  # noqa: E402

from benchmarks.configs import CONFIGS, build_config, config_batch_size, make_data  # noqa: E402
from benchmarks.errors import error_text  # noqa: E402


class _EpochTimer(keras.callbacks.Callback):
    """Wall time from epoch begin to epoch end (excludes fit's data-adapter set-up)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.start



def measure_throughput(args):
    b, k, n = args.micro_batch, args.accum_steps, args.samples
    x, y = make_data(n)
    models, errors = {}, {}
    for name in CONFIGS:
        try:
            model = build_config(name, k)
            timer = _EpochTimer()
            start = time.perf_counter()
            model.fit(x, y, batch_size=config_batch_size(name, b, k), epochs=1, shuffle=False,
                      verbose=0, callbacks=[timer])  # warm-up: tracing + one full epoch
            print(f"  warm-up {name}: {time.perf_counter() - start:.1f}s "
                  f"({n / timer.seconds:.0f} samples/s)", flush=True)
            models[name] = (model, timer)
        except Exception as error:
            errors[name] = error_text(error)
            print(f"  {name} FAILED: {errors[name]}", flush=True)
    names = list(models)
    times = {name: [] for name in names}
    for r in range(args.repeats):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate: no fixed position
        for name in order:
            model, timer = models[name]
            gc.collect()
            model.fit(x, y, batch_size=config_batch_size(name, b, k), epochs=1, shuffle=False,
                      verbose=0, callbacks=[timer])
            times[name].append(timer.seconds)
        print(f"  round {r + 1}/{args.repeats}: " + ", ".join(
            f"{name}={n / times[name][-1]:.0f}" for name in names), flush=True)
    results = {}
    for name in CONFIGS:
        if name in errors:
            results[name] = {"status": "error", "error": errors[name]}
            continue
        rates = [n / t for t in times[name]]
        results[name] = {"status": "ok", "median": statistics.median(rates),
                         "min": min(rates), "max": max(rates), "rates": rates,
                         "updates_per_epoch": (n // (b * k) if name not in ("plain_b",
                                                                            "plain_b_spe")
                                               else n // b)}
    # Paired ratio: per round, config / plain_b (the two measured close together in time).
    if "plain_b" in times:
        for name in names:
            ratios = [times["plain_b"][i] / times[name][i] for i in range(args.repeats)]
            results[name]["paired_ratio_median"] = statistics.median(ratios)
            if len(ratios) >= 2:
                q1, _, q3 = statistics.quantiles(ratios, n=4)
                results[name]["paired_ratio_iqr"] = (q1, q3)
    return results

