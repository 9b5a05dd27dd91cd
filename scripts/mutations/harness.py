"""Seeded bugs in the Kubeflow container-contract harness (scripts/kfp_harness.py and its
harness_*.py modules), which the container tests run the compiled job with."""

from .mutation import Mutation

MUTATIONS = [
    Mutation(
        "harness.cache_serves_a_changed_upstream",  # a task taken though what it reads ran again
        "scripts/harness_base.py",
        "                and upstream <= set(taken)\n",
        "",
        ("tests/test_kfp_harness.py", "-k", "cache"),
    ),
]
