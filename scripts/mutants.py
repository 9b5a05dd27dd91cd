"""Seeded bugs: applies hand-kept one-line mutations, one at a time, to a COPY of the tree and
runs a targeted subset of the fast test tier against each; reports which were killed.

Usage (from the project root, with the project's venv)::

    .venv/bin/python scripts/mutants.py                 # every mutation
    .venv/bin/python scripts/mutants.py -k agc -k bn    # mutations whose name contains a word
    .venv/bin/python scripts/mutants.py --list          # the list, nothing run

How it works:

* The tree (without ``.git``, virtual environments, build and pipeline outputs) is copied once
  to a temporary directory. ``ga_tfx.components`` and ``ga_tfx.pipelines`` are installed from
  ``components/`` and ``pipelines/`` (setup.py ``package_dir``) by an editable install pointing
  at the original checkout; in the copy, ``ga_tfx/components`` and ``ga_tfx/pipelines`` are
  links to the copy's own folders, and pytest runs from the copy with ``PYTHONPATH`` = the copy
  and ``-p no:cacheprovider``, so every ``ga_tfx`` module comes from the copy. A check before
  the first mutant fails if any of them is imported from elsewhere. The original tree is never
  written.
* A mutation names code *text* (not line numbers: files are being split and moved), a
  replacement and the tests to run. The text is searched in ``ga_tfx/``, ``components/`` and
  ``pipelines/`` (or the files the mutation names) and replaced wherever it occurs; a mutation
  whose text is found nowhere is an error (exit status 2), never a silent pass.
* The unmutated copy must pass every selected test first (baseline); then each mutant runs its
  tests with ``-x -m "not slow"``. Killed: pytest reports a failure (exit status 1). Survived:
  all its tests pass. Anything else (collection error, timeout) is reported as such.

Exit status: 0 when every mutant was killed, 1 when some survived (or errored), 2 when a
mutation's target text is missing or the baseline fails.
"""

import argparse
import dataclasses
import fnmatch
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
SOURCE_DIRS = ("ga_tfx", "components", "pipelines")
EXCLUDE = (
    ".git",
    ".venv",
    ".venv-lib",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "pipeline_output",
    "build",
    "dist",
)
TIMEOUT_S = 900  # per pytest run


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One seeded bug.

    name: short id (``area.what``); find: code text replaced (all occurrences); replace: the
    bug; tests: pytest arguments (files, node ids, ``-k`` expressions) that should kill it;
    files: globs (relative to the root) to search instead of the source folders; slow: its
    tests are in the slow tier (run only with ``--slow``, without ``-m "not slow"``).
    """

    name: str
    find: str
    replace: str
    tests: Tuple[str, ...]
    files: Tuple[str, ...] = ()
    slow: bool = False


MIXED_FLOAT16 = ("tests/test_mixed_precision.py", "-k", "matches_float32 and float16")

MUTATIONS: List[Mutation] = [
    # ---- the engine (ga_tfx/engine): mixed precision, weighting, replicas, windows
    Mutation(
        "engine.unscale_missing",
        "grads = optimizer.get_unscaled_gradients(grads)",
        "grads = grads",
        MIXED_FLOAT16,
        ("ga_tfx/engine/*.py",),
    ),
    Mutation(
        "engine.unscale_twice",
        "grads = optimizer.get_unscaled_gradients(grads)",
        "grads = optimizer.get_unscaled_gradients(optimizer.get_unscaled_gradients(grads))",
        MIXED_FLOAT16,
        ("ga_tfx/engine/*.py",),
    ),
    Mutation(
        "engine.skipped_window_counted",
        "optimizer.iterations.assign_sub(1 - tf.cast(finite, tf.int64))",
        "optimizer.iterations.assign_sub(0 * tf.cast(finite, tf.int64))",
        ("tests/test_mixed_precision.py", "-k", "non_finite_window"),
    ),
    Mutation(
        "engine.micro_batches_weighted_equally",
        "return tf.cast(tf.shape(first)[0], tf.float32)",
        "return tf.constant(1.0)",
        ("tests/test_windows.py", "-k", "uneven"),
        ("ga_tfx/engine/*.py",),
    ),
    Mutation(
        "engine.replica_factor_dropped",
        "scale = tf.cast(replicas, grad_sum.dtype) / tf.cast(count, grad_sum.dtype)",
        "scale = 1.0 / tf.cast(count, grad_sum.dtype)",
        ("tests/test_distribution.py", "-k", "match_single_device"),
    ),
    Mutation(
        "engine.buffers_not_reset",
        "return acc.reset()",
        "return tf.no_op()",
        (
            "tests/test_equivalence.py",
            "tests/test_windows.py",
            "-k",
            "every_optimizer and sgd_momentum or train_on_batch",
        ),
        ("ga_tfx/engine/*.py",),
    ),
    Mutation(
        "engine.accum_steps_1_agc_ignored",
        "self._accum_steps > 1\n            or self._agc is not None\n",
        "self._accum_steps > 1\n",
        ("tests/test_agc.py", "-k", "accum_steps_one"),
    ),
    Mutation(
        "engine.parameter_server_accepted",
        'return bool(getattr(model, "_cluster_coordinator", None))',
        "return False",
        ("tests/test_validation.py", "-k", "parameter_server"),
    ),
    Mutation(
        "engine.ema_per_micro_batch",
        "grads = tape.gradient(loss_to_differentiate, variables)",
        "grads = tape.gradient(loss_to_differentiate, variables); "
        "optimizer._update_model_variables_moving_average(variables)",
        ("tests/test_equivalence.py", "-k", "ema"),
        ("ga_tfx/engine/*.py",),
    ),
    Mutation(
        "engine.drop_policy_ignored",
        'elif self._ending == "drop":',
        "elif False:",
        ("tests/test_windows.py", "-k", "policies"),
    ),
    Mutation(
        "engine.carry_not_realigned",
        "model, model.accum_steps - pending if pending else model._execution_steps",
        "model, model._execution_steps",
        ("tests/test_windows.py", "-k", "policies or whole_window"),
    ),
    Mutation(
        "engine.windows_inside_an_execution_not_applied",
        "                self._finish_window()\n",
        "                pass\n",
        ("tests/test_windows.py", "-k", "several_windows"),
    ),
    Mutation(
        "engine.train_on_batch_follows_the_policy",
        "            with loop.one_window_per_call():\n",
        "            if True:\n",
        ("tests/test_windows.py", "-k", "train_on_batch"),
    ),
    Mutation(
        "engine.data_end_leaves_the_window_pending",
        "            self._end_last_window()\n            raise",
        "            raise",
        ("tests/test_windows.py", "-k", "ends_inside"),
    ),
    # ---- the accumulator and the optimizer wrapper
    Mutation(
        "accumulator.count_micro_batches_not_samples",
        "ops.append(self.sample_count.assign_add(tf.cast(weight, tf.float32)))",
        "ops.append(self.sample_count.assign_add(tf.constant(1.0)))",
        ("tests/test_equivalence.py", "-k", "every_optimizer and sgd_momentum"),
    ),
    Mutation(
        "optimizer.window_one_too_long",
        "            steps >= self.accum_steps,\n            lambda: self._apply_everywhere",
        "            steps > self.accum_steps,\n            lambda: self._apply_everywhere",
        ("tests/test_optimizer_api.py", "-k", "custom_loop_matches_big_batch"),
        ("ga_tfx/optimizer.py",),
    ),
    Mutation(
        "optimizer.sample_count_ignored",
        "weight = 1.0 if sample_count is None else sample_count",
        "weight = 1.0",
        ("tests/test_optimizer_api.py",),
        ("ga_tfx/optimizer.py",),
    ),
    # ---- AccumBatchNormalization
    Mutation(
        "bn.between_micro_batch_variance_dropped",
        "between = tf.square(delta) * count_a * tf.math.divide_no_nan(count_b, count)",
        "between = 0.0 * delta",
        ("tests/test_batchnorm.py", "-k", "window_statistics"),
    ),
    Mutation(
        "bn.biased_variance",
        "divisor = tf.maximum(count - 1.0, 1.0) if self.fused else count",
        "divisor = count",
        ("tests/test_batchnorm.py", "-k", "window_statistics or keras_batchnorm"),
    ),
    # ---- AGC
    Mutation(
        "agc.comparison_flipped",
        "tf.where(grad_norm > max_norm, clipped, g)",
        "tf.where(grad_norm < max_norm, clipped, g)",
        ("tests/test_agc.py",),
    ),
    Mutation(
        "agc.eps_floor_dropped",
        "param_norm = tf.maximum(unitwise_norm(p, axes), tf.cast(eps, compute_dtype))",
        "param_norm = unitwise_norm(p, axes)",
        ("tests/test_agc.py", "-k", "zero_parameters"),
    ),
    Mutation(
        "agc.rank_6_accepted",
        "if rank > MAX_SUPPORTED_RANK:",
        "if rank > 6:",
        ("tests/test_agc.py", "-k", "rank"),
    ),
    Mutation(
        "agc.kernel_norm_over_all_axes",
        "return tuple(range(rank - 1))",
        "return tuple(range(rank))",
        ("tests/test_agc.py",),
    ),
    Mutation(
        "engine.grad_norm_logged_before_the_update",
        "            logs = dict(logs, grad_norm=tracker.result())",
        "            pass",
        ("tests/test_grad_norm_metric.py",),
    ),
    Mutation(
        "engine.grad_norm_counts_skipped_windows",
        "tf.where(finite, norm, 0.0), sample_weight=tf.cast(finite, tf.float32)",
        "norm",
        ("tests/test_grad_norm_metric.py", "-k", "skipped"),
    ),
    Mutation(
        "training_loop.jit_compile_ignored",
        "step = xla_step if self.jit_compile else (lambda function: function)",
        "step = lambda function: function  # noqa: E731",
        ("tests/test_training_loop.py", "-k", "jit"),
    ),
    Mutation(
        "training_loop.dataset_redistributed_every_epoch",
        "        return self._whole_epoch\n",
        "        return self._distribute(self._dataset, 0)\n",
        ("tests/test_training_loop.py", "-k", "in_memory"),
    ),
    # ---- the Trainer's checkpoints (components/trainer/checkpoints.py)
    Mutation(
        "checkpoints.one_window_per_call",
        "        self.done += (batch + 1 - self._seen) // self._accum_steps\n",
        "        self.done += 1\n",
        ("tests/test_preemption.py",),
    ),
    # ---- call pacing (ga_tfx/engine/pacing.py)
    Mutation(
        "pacing.ignores_callbacks_that_watch_batches",
        "        internals.watches_batches(callback)\n",
        "        False\n",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.auto_only_where_unwatched",
        "    return model._pacing == ALWAYS or not any(\n",
        "    return not any(\n",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.paces_several_workers",
        " or internals.in_multi_worker_mode(model.distribute_strategy):\n",
        ":\n",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.windows_not_whole",
        "windows * model.accum_steps)",
        "windows * model.accum_steps + 1)",
        ("tests/test_pacing.py",),
    ),
    Mutation(
        "pacing.left_on_after_fit",
        "                self.train_function.stop_pacing()\n",
        "                pass\n",
        ("tests/test_pacing.py",),
    ),
    # ---- the Trainer's resume and the tuner's budget
    Mutation(
        "trainer.resume_does_not_skip_trained_data",
        ".skip(skip * settings.accum_steps)",
        ".skip(0)",
        ("tests/test_trainer_component.py", "-k", "killed"),
        slow=True,
    ),
    Mutation(
        "trainer.base_model_ignored",
        "    if base_model_dir:\n        warm_start(model, base_model_dir)",
        "    if base_model_dir:\n        pass",
        ("tests/test_trainer_component.py", "-k", "warm_starts"),
        slow=True,
    ),
    Mutation(
        "trainer.stock_route_settings_ignored",
        "settings = settings_lib.from_dict(config[keys.GA_TFX])",
        "settings = settings_lib.from_dict(dict(config[keys.GA_TFX], accum_steps=1))",
        ("tests/test_trainer_component.py", "-k", "stock_trainer_runs"),
        slow=True,
    ),
    Mutation(
        "trainer.mirrored_replica_factor_dropped",
        "scale = tf.cast(replicas, grad_sum.dtype) / tf.cast(count, grad_sum.dtype)",
        "scale = 1.0 / tf.cast(count, grad_sum.dtype)",
        ("tests/test_trainer_component.py", "-k", "big_batch_weights and sgd"),
    ),
    Mutation(
        "trainer.multi_worker_replica_factor_dropped",
        "scale = tf.cast(replicas, grad_sum.dtype) / tf.cast(count, grad_sum.dtype)",
        "scale = 1.0 / tf.cast(count, grad_sum.dtype)",
        ("tests/test_multi_worker.py",),
        slow=True,
    ),
    Mutation(
        "cli.no_cache_ignored",
        "enable_cache=not args.no_cache",
        "enable_cache=True",
        ("tests/test_pipeline_e2e.py", "-k", "no_cache"),
    ),
    Mutation(
        "tuning.out_of_memory_not_caught",
        "except tf.errors.ResourceExhaustedError as error:",
        "except tf.errors.CancelledError as error:",
        ("tests/test_tuning.py", "-k", "out_of_memory"),
    ),
    Mutation(
        "tuner.search_restarts",
        "project_name=PROJECT_NAME,\n        overwrite=False,",
        "project_name=PROJECT_NAME,\n        overwrite=True,",
        ("tests/test_tuner_component.py", "-k", "resumes"),
        slow=True,
    ),
    Mutation(
        "tuner.budget_from_smallest_micro_batch",
        "return max(self.accum_steps) * max(self.micro_batch_size)",
        "return max(self.accum_steps) * min(self.micro_batch_size)",
        ("tests/test_tuner_component.py", "-k", "budget"),
    ),
    Mutation(
        "tuning.steps_per_epoch_off_by_one",
        'kwargs["steps_per_epoch"] = samples_per_epoch // micro',
        'kwargs["steps_per_epoch"] = samples_per_epoch // micro + 1',
        ("tests/test_tuner_component.py", "-k", "searches_accum_steps"),
        slow=True,
    ),
]


def _ignore(directory, names):
    return {n for n in names for pattern in EXCLUDE if fnmatch.fnmatch(n, pattern)}


def make_copy(destination: str, source: str = ROOT) -> str:
    """Copies the tree to ``destination/tree``; links the namespace packages into ga_tfx/."""
    tree = os.path.join(destination, "tree")
    shutil.copytree(source, tree, ignore=_ignore, symlinks=True)
    for name in ("components", "pipelines"):
        link = os.path.join(tree, "ga_tfx", name)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..", name), link)
    return tree


def environment(tree: str) -> dict:
    return dict(os.environ, PYTHONPATH=tree, PYTHONDONTWRITEBYTECODE="1", TF_CPP_MIN_LOG_LEVEL="2")


def check_imports(tree: str) -> None:
    """Fails unless ga_tfx and its namespace packages are imported from the copy."""
    code = (
        "import ga_tfx, ga_tfx.engine, ga_tfx.components.trainer.run_fn, "
        "ga_tfx.components.tuner.tuner_fn, ga_tfx.pipelines.cli, sys\n"
        "print('\\n'.join('GA_TFX_MODULE ' + m.__file__ for n, m in sorted(sys.modules.items()) "
        "if n.startswith('ga_tfx') and getattr(m, '__file__', None)))"
    )
    out = subprocess.run(
        [PYTHON, "-c", code],
        cwd=tree,
        env=environment(tree),
        capture_output=True,
        text=True,
        timeout=600,
    )
    files = [
        line.split(" ", 1)[1]
        for line in out.stdout.splitlines()
        if line.startswith("GA_TFX_MODULE ")
    ]
    real_tree = os.path.realpath(tree)
    outside = [f for f in files if not os.path.realpath(f).startswith(real_tree + os.sep)]
    if out.returncode or not files or outside:
        raise SystemExit(
            f"import check failed (exit {out.returncode}); modules outside the "
            f"copy: {outside}\n{out.stderr[-2000:]}"
        )
    print(f"import check: {len(files)} ga_tfx modules, all from {tree}")


def targets(tree: str, mutation: Mutation) -> List[str]:
    patterns = mutation.files or tuple(f"{d}/**/*.py" for d in SOURCE_DIRS)
    found = set()
    for pattern in patterns:
        found.update(glob.glob(os.path.join(tree, pattern), recursive=True))
    # The links ga_tfx/components and ga_tfx/pipelines would list those files twice.
    return sorted(
        {os.path.realpath(p) for p in found if mutation.find in open(p, encoding="utf-8").read()}
    )


def baseline_selection(selections) -> List[str]:
    """One pytest argument list selecting (a superset of) the union of ``selections``.

    Each selection is ``(file, ..., ["-k", expr])``; pytest's ``-k`` also matches the module
    names, so ``(test_x and (expr)) or (test_y)`` selects file by file.
    """
    files, terms = [], []
    for selection in selections:
        paths = [a for a in selection if a.startswith("tests/")]
        expression = selection[selection.index("-k") + 1] if "-k" in selection else None
        modules = " or ".join(os.path.splitext(os.path.basename(p))[0] for p in paths)
        terms.append(f"(({modules}) and ({expression}))" if expression else f"({modules})")
        files += [p for p in paths if p not in files]
    return files + ["-k", " or ".join(dict.fromkeys(terms))]


def run_pytest(tree: str, args, timeout=TIMEOUT_S, slow=False) -> Tuple[Optional[int], float, str]:
    tier = [] if slow else ["-m", "not slow"]
    command = [
        PYTHON,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-x",
        *tier,
        "-W",
        "ignore",
        *args,
    ]
    start = time.monotonic()
    try:
        out = subprocess.run(
            command,
            cwd=tree,
            env=environment(tree),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start, "timeout"
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else out.stderr[-300:]
    failed = [line.split(" - ")[0] for line in lines if line.startswith("FAILED ")]
    return out.returncode, time.monotonic() - start, " ".join([summary] + failed[:1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-k",
        action="append",
        default=[],
        help="run only mutations whose name contains this (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument(
        "--slow", action="store_true", help="also the mutations whose tests are in the slow tier"
    )
    parser.add_argument("--keep", action="store_true", help="keep the copy (path printed)")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run (only when the selections are known to "
        "pass on this tree: a failing selection would read as killed)",
    )
    parser.add_argument(
        "--source",
        default=ROOT,
        help="the tree to copy (default: this checkout), e.g. an export of "
        "a commit: git archive HEAD | tar -x -C DIR",
    )
    args = parser.parse_args(argv)
    chosen = [
        m
        for m in MUTATIONS
        if (not args.k or any(k in m.name for k in args.k)) and (args.slow or not m.slow)
    ]
    if args.list:
        for m in chosen:
            print(f"{m.name:48s} {' '.join(m.tests)}")
        return 0

    work = tempfile.mkdtemp(prefix="ga_tfx_mutants_")
    try:
        tree = make_copy(work, os.path.abspath(args.source))
        missing = [m.name for m in chosen if not targets(tree, m)]
        if missing:
            print(
                f"ERROR: target text not found for {missing}: update the mutation list",
                file=sys.stderr,
            )
            return 2
        check_imports(tree)
        # Baseline: the unmutated copy passes every selected test (one pytest run per tier).
        for slow in sorted({m.slow for m in chosen} if not args.no_baseline else ()):
            selection = baseline_selection([m.tests for m in chosen if m.slow == slow])
            code, seconds, summary = run_pytest(tree, selection, slow=slow)
            print(
                f"baseline   {'(slow tier)' if slow else '(fast tier)':48s} {seconds:5.0f}s  "
                f"{summary}",
                flush=True,
            )
            if code != 0:
                print("ERROR: the unmutated copy fails selected tests", file=sys.stderr)
                return 2

        results = []
        for m in chosen:
            paths = targets(tree, m)
            saved = {p: open(p, encoding="utf-8").read() for p in paths}
            try:
                for p, text in saved.items():
                    with open(p, "w", encoding="utf-8") as f:
                        f.write(text.replace(m.find, m.replace))
                code, seconds, summary = run_pytest(tree, m.tests, slow=m.slow)
            finally:
                for p, text in saved.items():
                    with open(p, "w", encoding="utf-8") as f:
                        f.write(text)
            verdict = {0: "SURVIVED", 1: "killed"}.get(code, f"error (exit {code})")
            where = ", ".join(
                f"{os.path.relpath(p, os.path.realpath(tree))}x{saved[p].count(m.find)}"
                for p in paths
            )
            results.append((m.name, verdict))
            print(f"{verdict:10s} {m.name:48s} {seconds:5.0f}s  [{where}]  {summary}", flush=True)
        killed = sum(v == "killed" for _, v in results)
        print(f"\n{killed}/{len(results)} mutants killed")
        for name, verdict in results:
            if verdict != "killed":
                print(f"  {verdict}: {name}")
        return 0 if killed == len(results) else 1
    finally:
        if args.keep:
            print(f"copy kept at {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
