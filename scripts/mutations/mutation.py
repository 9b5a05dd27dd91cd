"""One seeded bug (:class:`Mutation`), and the files and test selections several areas name."""

import dataclasses
from typing import Tuple


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One seeded bug.

    name: unique id (``area.what``); path: the one file (relative to the root) holding the
    site; find: code text replaced there (every occurrence); replace: the bug; tests: pytest
    arguments (files, node ids, ``-k`` expressions) that must kill it; count: how many times
    ``find`` occurs in ``path`` (anything else is a broken anchor); slow: its tests are in the
    slow tier (run only with ``--slow``, without ``-m "not slow"``).
    """

    name: str
    path: str
    find: str
    replace: str
    tests: Tuple[str, ...]
    count: int = 1
    slow: bool = False


MIXED_FLOAT16 = ("tests/test_mixed_precision.py", "-k", "matches_float32 and float16")
STEP, LOOP, ENGINE = "ga_tfx/engine/step.py", "ga_tfx/engine/loop.py", "ga_tfx/engine/__init__.py"
RUNNER = "ga_tfx/window/runner.py"  # the traced window runner of fit and TrainingLoop
CONFIG = "ga_tfx/config.py"
# The window core (ga_tfx/window/), one file per concern.
CORE, SHIMS, SPLIT = "ga_tfx/window/core.py", "ga_tfx/window/shims.py", "ga_tfx/window/split.py"
NOISE, SCHEDULE = "ga_tfx/window/noise.py", "ga_tfx/window/next_k.py"
STEPS = "ga_tfx/window/steps.py"
PACING, ACCUMULATOR = "ga_tfx/engine/pacing.py", "ga_tfx/window/accumulator.py"
PREEMPTION = "ga_tfx/preemption.py"
COMPAT = "ga_tfx/compat/gradient_accumulator/accumulators.py"
DIALECT = "pipelines/tabular/csv_dialect.py"
