"""Seeded bugs: applies hand-kept one-line mutations, one at a time, to a COPY of the tree and
runs a targeted subset of the test suite against each; reports which were killed.

This file is the runner; the mutations are data, in ``scripts/mutations/`` (one module per area
of the code, :class:`mutations.mutation.Mutation` each).

Usage (from the project root, with the project's venv)::

    .venv/bin/python scripts/mutants.py --slow          # the whole list, one command
    .venv/bin/python scripts/mutants.py                 # the mutations the fast tier kills
    .venv/bin/python scripts/mutants.py -k agc -k bn    # mutations whose name contains a word
    .venv/bin/python scripts/mutants.py --sample 3      # 3 of them, drawn from the commit
    .venv/bin/python scripts/mutants.py --check         # every anchor in place; nothing run
    .venv/bin/python scripts/mutants.py --list          # the list, nothing run
    .venv/bin/python scripts/mutants.py --slow --commit HEAD --summary /tmp/mutants.md

How it works:

* The tree (without ``.git``, virtual environments, build and pipeline outputs) is copied once
  to a temporary directory: the working tree, or with ``--commit REV`` that commit
  (``git archive``), so that a recorded run names exactly what it ran on. ``ga_tfx.components``
  and ``ga_tfx.pipelines`` are installed from ``components/`` and ``pipelines/`` (setup.py
  ``package_dir``) by an editable install pointing at the original checkout; in the copy,
  ``ga_tfx/components`` and ``ga_tfx/pipelines`` are links to the copy's own folders, and
  pytest runs from the copy with ``PYTHONPATH`` = the copy and ``-p no:cacheprovider``, so every
  ``ga_tfx`` module comes from the copy. A check before the first mutant fails if any of them is
  imported from elsewhere. The original tree is never written.
* A mutation is anchored: it names ONE file (``path``), the code *text* it replaces there
  (``find``, not line numbers: files are being split and moved), how many times that text
  occurs in that file (``count``, default 1; every occurrence is replaced), the bug
  (``replace``) and the tests that must kill it. Before anything runs, every chosen mutation is
  checked against the copy: the file exists, the text occurs exactly ``count`` times, the
  mutated file still compiles. A refactor that moves, rewrites or duplicates a site is an error
  (exit status 2) naming the mutation, never a silent pass; ``tests/test_mutants.py`` runs the
  same check on the checkout in the fast tier.
* The unmutated copy must pass every selected test first (baseline, one pytest run per tier;
  ``--no-slow-baseline``, as CI runs it after the whole suite passed, only the fast tier's);
  then each mutant runs its tests with ``-x`` (and ``-m "not slow"`` unless it is a slow-tier
  mutation). Killed: pytest reports a failure (exit status 1). Survived: all its tests pass.
  Anything else (collection error, timeout, no test selected) is reported as such.
* ``--sample N`` runs N of the chosen fast-tier mutations, drawn with ``--seed`` (default: the
  commit the run is on, so each commit draws its own deterministic subset), and
  ``--sample-slow M`` adds M slow-tier ones drawn the same way; CI runs such a sample
  (``.ci/run``). ``--summary FILE`` writes the result as Markdown, with the commit it ran on.

Exit status: 0 when every mutant was killed, 1 when some survived (or errored), 2 when a
mutation's anchor is broken (``--keep-going`` runs the others first) or the baseline fails.
"""

import argparse
import datetime
import fnmatch
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
EXCLUDE = (
    ".git",
    ".venv",
    ".venv-lib",
    ".venv-tfx-*",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    "pipeline_output",
    "build",
    "dist",
)
TIMEOUT_S = 900  # per pytest run

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # scripts/: the list beside it
from mutations import MUTATIONS, Mutation  # noqa: E402


# ---------------------------------------------------------------------- anchors
def list_problems(mutations: Sequence[Mutation] = MUTATIONS) -> List[str]:
    """What is wrong with the list itself: names not unique or not ``area.what``, a bug
    listed twice (the same file, text and replacement), a no-op, no test file named."""
    problems = []
    seen_names, seen_bugs = set(), {}
    for m in mutations:
        if m.name in seen_names:
            problems.append(f"{m.name}: the name is listed twice")
        seen_names.add(m.name)
        area, _, what = m.name.partition(".")
        if not area or not what:
            problems.append(f"{m.name}: name it area.what")
        bug = (m.path, m.find, m.replace)
        if bug in seen_bugs:
            problems.append(f"{m.name}: the same bug as {seen_bugs[bug]}")
        seen_bugs.setdefault(bug, m.name)
        if m.find == m.replace or not m.find:
            problems.append(f"{m.name}: find and replace must differ, find must not be empty")
        if m.count < 1:
            problems.append(f"{m.name}: count must be >= 1")
        if not any(t.startswith("tests/") for t in m.tests):
            problems.append(f"{m.name}: names no test file")
    return problems


def selected(m: Mutation, node_ids: Sequence[str]) -> List[str]:
    """The node ids (``tests/file.py::test[param]``) of ``node_ids`` that ``m.tests`` selects:
    its files or node ids, then its ``-k`` expression, matched as pytest's ``-k`` matches
    names (a case-insensitive substring of the test's file or name; markers not counted)."""
    from _pytest.mark.expression import Expression  # pytest's own -k grammar

    paths, expressions, args = [], [], list(m.tests)
    while args:
        arg = args.pop(0)
        if arg == "-k":
            expressions.append(Expression.compile(args.pop(0)))
        elif not arg.startswith("-"):
            paths.append(arg)
    chosen = []
    for node in node_ids:
        if not any(node == p or node.startswith(p + "::") for p in paths):
            continue
        names = [node.split("::")[0].rsplit("/", 1)[-1], *node.split("::")[1:]]
        text = " ".join(names).lower()
        if all(e.evaluate(lambda sub, text=text: sub.lower() in text) for e in expressions):
            chosen.append(node)
    return chosen


def anchor_problems(tree: str, m: Mutation) -> List[str]:
    """Why ``m`` cannot be applied to ``tree`` as listed ([] when it can): its file is
    missing, its text occurs other than ``count`` times there, the mutated file does not
    compile, or a test file it names is missing."""
    path = os.path.join(tree, m.path)
    if not os.path.isfile(path):
        return [f"{m.name}: {m.path} does not exist"]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = text.count(m.find)
    problems = []
    if found != m.count:
        problems.append(
            f"{m.name}: its text occurs {found} times in {m.path}, listed {m.count} "
            f"(the site moved or changed: update the mutation): {m.find!r}"
        )
    elif m.path.endswith(".py"):
        try:
            compile(text.replace(m.find, m.replace), m.path, "exec")
        except SyntaxError as error:
            problems.append(f"{m.name}: the mutated {m.path} does not compile: {error}")
    for test in m.tests:
        if test.startswith("tests/") and not os.path.exists(
            os.path.join(tree, test.split("::")[0])
        ):
            problems.append(f"{m.name}: test file {test} does not exist")
    return problems


# ---------------------------------------------------------------------- the copy
def _ignore(directory, names):
    return {n for n in names for pattern in EXCLUDE if fnmatch.fnmatch(n, pattern)}


def _git(*args: str, cwd: str = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def _link_namespaces(tree: str) -> None:
    for name in ("components", "pipelines"):
        link = os.path.join(tree, "ga_tfx", name)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..", name), link)


def make_copy(destination: str, source: str = ROOT) -> str:
    """Copies the tree to ``destination/tree``; links the namespace packages into ga_tfx/."""
    tree = os.path.join(destination, "tree")
    shutil.copytree(source, tree, ignore=_ignore, symlinks=True)
    _link_namespaces(tree)
    return tree


def export_commit(destination: str, commit: str) -> str:
    """The files of ``commit`` (``git archive``) in ``destination/tree``, namespaces linked."""
    tree = os.path.join(destination, "tree")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree)
    _link_namespaces(tree)
    return tree


def describe_source(source: str, commit: Optional[str]) -> Tuple[str, str]:
    """(commit hash, words saying what was run: the commit, or the working tree on it)."""
    if commit:
        full = _git("rev-parse", "--verify", f"{commit}^{{commit}}")
        return full, f"commit {full[:10]}"
    try:
        full = _git("rev-parse", "HEAD", cwd=source)
        dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=source)
    except (subprocess.CalledProcessError, OSError):
        return "unknown", f"the tree at {source} (no git history)"
    if dirty:
        return full, f"the working tree on {full[:10]} (with uncommitted changes)"
    return full, f"commit {full[:10]} (clean working tree)"


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
    print(f"import check: {len(files)} ga_tfx modules, all from {tree}", flush=True)


# ---------------------------------------------------------------------- running
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


def draw_sample(chosen: Sequence[Mutation], size: int, seed: str) -> List[Mutation]:
    """``size`` of ``chosen``, drawn by ``seed`` (the same seed, the same draw), list order."""
    if size >= len(chosen):
        return list(chosen)
    names = set(random.Random(seed).sample(sorted(m.name for m in chosen), size))
    return [m for m in chosen if m.name in names]


def write_summary(path: str, command: str, what: str, results, baselines, seconds: float) -> str:
    """The run as Markdown (returned, and written to ``path`` if given)."""
    killed = sum(verdict == "killed" for _, verdict, _ in results)
    broken = [name for name, verdict, _ in results if verdict == "anchor broken"]
    others = [
        f"{name} {verdict}"
        for name, verdict, _ in results
        if verdict not in ("killed", "anchor broken")
    ]
    date = datetime.date.today().isoformat()
    lines = [
        f"`{command}` on {what}, {date}, {seconds / 60:.0f} min: "
        f"**{killed} of {len(results) - len(broken)} run killed**"
        + (f" (not killed: {', '.join(others)})" if others else "")
        + (f"; {len(broken)} not run, anchor broken: {', '.join(broken)}" if broken else "")
        + "".join(f"; baseline, {tier}: {summary}" for tier, summary in baselines)
        + ".",
        "",
        "| mutation | verdict | seconds |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{name}` | {verdict} | {secs:.0f} |" for name, verdict, secs in results]
    text = "\n".join(lines) + "\n"
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text


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
        "--check",
        action="store_true",
        help="check the list and every chosen mutation's anchor in the source tree; run nothing",
    )
    parser.add_argument(
        "--slow", action="store_true", help="also the mutations whose tests are in the slow tier"
    )
    parser.add_argument(
        "--sample", type=int, default=0, metavar="N", help="run N of the chosen mutations"
    )
    parser.add_argument(
        "--sample-slow",
        type=int,
        default=0,
        metavar="M",
        help="with --sample: also M of the slow-tier mutations (their slow tests run), drawn "
        "the same way",
    )
    parser.add_argument(
        "--seed",
        default=None,
        help="the seed of --sample (default: the commit the run is on)",
    )
    parser.add_argument(
        "--commit",
        default=None,
        metavar="REV",
        help="run on this commit of the checkout (git archive), not on the working tree",
    )
    parser.add_argument(
        "--summary", default=None, metavar="FILE", help="write the result as Markdown to FILE"
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="run the mutations whose anchors hold when some are broken (those are reported "
        "as 'anchor broken'; the exit status is still 2)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the copy (path printed)")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the unmutated run (only when the selections are known to "
        "pass on this tree: a failing selection would read as killed)",
    )
    parser.add_argument(
        "--no-slow-baseline",
        action="store_true",
        help="skip the slow tier's unmutated run, keeping the fast tier's (CI: the test command "
        "has just passed every test on this commit, and the fast baseline still proves that "
        "the copy runs; a slow baseline is minutes)",
    )
    parser.add_argument(
        "--source",
        default=ROOT,
        help="the tree to copy (default: this checkout's working tree)",
    )
    args = parser.parse_args(argv)
    problems = list_problems()
    if problems:
        print("ERROR: the mutation list:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    chosen = [
        m
        for m in MUTATIONS
        if (not args.k or any(k in m.name for k in args.k)) and (args.slow or not m.slow)
    ]
    if args.list:
        for m in chosen:
            print(f"{m.name:48s} {m.path:44s} {' '.join(m.tests)}")
        return 0
    source = os.path.abspath(args.source)
    if args.check:
        broken = [p for m in chosen for p in anchor_problems(source, m)]
        for line in broken:
            print(f"ERROR: {line}", file=sys.stderr)
        print(
            f"{len(chosen) - len({b.split(':')[0] for b in broken})}/{len(chosen)} anchors in place"
        )
        return 2 if broken else 0

    started = time.monotonic()
    commit, what = describe_source(source, args.commit)
    if args.sample:
        seed = args.seed if args.seed is not None else commit
        slow = [m for m in MUTATIONS if m.slow and (not args.k or any(k in m.name for k in args.k))]
        chosen = draw_sample([m for m in chosen if not m.slow], args.sample, seed) + (
            draw_sample(slow, args.sample_slow, seed) if args.sample_slow else []
        )
        print(f"sample of {len(chosen)} (seed {seed!r}): {', '.join(m.name for m in chosen)}")
    work = tempfile.mkdtemp(prefix="ga_tfx_mutants_")
    try:
        tree = export_commit(work, commit) if args.commit else make_copy(work, source)
        print(f"running on {what}", flush=True)
        broken = {m.name: anchor_problems(tree, m) for m in chosen}
        broken = {name: problems for name, problems in broken.items() if problems}
        if broken:
            print(
                "ERROR: broken anchors (update the mutation list):\n  "
                + "\n  ".join(p for problems in broken.values() for p in problems),
                file=sys.stderr,
            )
            if not args.keep_going:
                return 2
            chosen = [m for m in chosen if m.name not in broken]
        check_imports(tree)
        # Baseline: the unmutated copy passes every selected test (one pytest run per tier).
        baselines = []
        tiers = set() if args.no_baseline else {m.slow for m in chosen}
        if args.no_slow_baseline:
            tiers.discard(True)
        for slow in sorted(tiers):
            selection = baseline_selection([m.tests for m in chosen if m.slow == slow])
            code, seconds, summary = run_pytest(tree, selection, slow=slow)
            tier = "slow tier" if slow else "fast tier"
            baselines.append((tier, summary))
            print(f"baseline   {'(' + tier + ')':48s} {seconds:5.0f}s  {summary}", flush=True)
            if code != 0:
                print("ERROR: the unmutated copy fails selected tests", file=sys.stderr)
                return 2

        results = [(name, "anchor broken", 0.0) for name in broken]
        for m in chosen:
            path = os.path.join(tree, m.path)
            with open(path, encoding="utf-8") as f:
                saved = f.read()
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(saved.replace(m.find, m.replace))
                code, seconds, summary = run_pytest(tree, m.tests, slow=m.slow)
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(saved)
            verdict = {0: "SURVIVED", 1: "killed"}.get(code, f"error (exit {code})")
            results.append((m.name, verdict, seconds))
            print(f"{verdict:10s} {m.name:48s} {seconds:5.0f}s  [{m.path}]  {summary}", flush=True)
        killed = sum(v == "killed" for _, v, _ in results)
        print(f"\n{killed}/{len(results)} mutants killed")
        for name, verdict, _ in results:
            if verdict != "killed":
                print(f"  {verdict}: {name}")
        command = "scripts/mutants.py " + " ".join(argv if argv is not None else sys.argv[1:])
        text = write_summary(
            args.summary, command.strip(), what, results, baselines, time.monotonic() - started
        )
        if args.summary:
            print(f"summary written to {args.summary}:\n{text.splitlines()[0]}")
        return 2 if broken else 0 if killed == len(results) else 1
    finally:
        if args.keep:
            print(f"copy kept at {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
