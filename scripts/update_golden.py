"""Regenerates tests/golden/digits_pipeline_job.json, the compiled Kubeflow job's golden file.

Both TFX stacks compare with the same golden (TFX 1.16 and 1.21 compile the same normalised
job); `--check` in each stack's environment says whether it still does (TFX 1.21 on an older
glibc: `bash scripts/debian13_root.sh run .venv/bin/python scripts/update_golden.py --check`).

Usage (from the project root, with the project's venv)::

    .venv/bin/python scripts/update_golden.py          # rewrite the golden, print the diff
    .venv/bin/python scripts/update_golden.py --check  # only say whether it is up to date

The test ``tests/test_kubeflow_pipeline.py::test_compiled_job_matches_the_golden`` compares
against this file and never writes it. After an intended change to the pipeline or the
compiler, run this script, review the printed diff, and commit the golden together with the
change. The job is compiled and normalised by the test module's own functions (the same
options, image and paths), so the golden is exactly what the test compares with.
"""

import argparse
import difflib
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if the golden is out of date"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    import ga_tfx  # noqa: F401  (first import: Keras 2)

    from tests import test_kubeflow_pipeline as kfp_test

    with tempfile.TemporaryDirectory() as directory:
        job = kfp_test.compile_job(directory, kfp_test.GOLDEN_OPTIONS)
        text = kfp_test.dump(kfp_test.normalize(job, [directory]))
    old = open(kfp_test.GOLDEN).read() if os.path.exists(kfp_test.GOLDEN) else ""
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(True), text.splitlines(True), "golden (before)", "golden (now)", n=2
        )
    )
    if not diff:
        print(f"{os.path.relpath(kfp_test.GOLDEN, ROOT)} is up to date")
        return 0
    print(diff)
    if args.check:
        print("the golden is out of date: run scripts/update_golden.py", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(kfp_test.GOLDEN), exist_ok=True)
    with open(kfp_test.GOLDEN, "w") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(kfp_test.GOLDEN, ROOT)}: review the diff above and commit it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
