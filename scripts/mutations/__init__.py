"""The seeded bugs that ``scripts/mutants.py`` runs, as data: one module per area of the code.

Each area module holds ``MUTATIONS``, a list of :class:`~mutations.mutation.Mutation` (the one
file, the code text replaced there and its count, the bug, the tests that must kill it, whether
those tests are slow); :data:`MUTATIONS` is all of them, area by area in :data:`AREAS`' order
(``--sample`` draws from it by name). A new mutation goes into the module of the area its file
is in.
"""

from typing import List

from . import (
    compat,
    engine,
    harness,
    judgment,
    library,
    pipelines,
    tabular,
    trainer,
    training_loop,
    tuner,
    window,
)
from .mutation import Mutation

AREAS = (
    engine,
    window,
    training_loop,
    library,
    judgment,
    compat,
    trainer,
    tuner,
    pipelines,
    tabular,
    harness,
)
MUTATIONS: List[Mutation] = [m for area in AREAS for m in area.MUTATIONS]
