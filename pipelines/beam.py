"""The Beam flags of the pipelines' Beam-based components (ExampleGen, StatisticsGen, Transform,
Evaluator) on this machine or in a step's container. Imports neither Beam nor TFX."""

from typing import List

# Beam's in-process runner, named. Since Beam 2.6x `--runner=DirectRunner` first tries Prism,
# whose binary it downloads from GitHub in every pipeline (logged, then DirectRunner falls back
# to this runner where there is no network: seen in each Beam step of the compiled job with
# Beam 2.77). FnApiRunner is what DirectRunner ran TFX's batch pipelines on before Prism
# (Beam 2.59, TFX 1.16's), and it reads --direct_running_mode and --direct_num_workers. By its
# full name: Beam 2.59 does not know the short one (2.77 does).
IN_PROCESS_RUNNER = "--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"
# TFX's Beam executors build an "ephemeral" sdist of all of TFX into a new temporary folder,
# never removed (49 MB and about 3 s per Beam component), unless one of Beam's dependency flags
# is set (tfx/utils/dependency_utils.py, make_beam_dependency_flags). The in-process runner
# runs TFX's code in this process, or in worker processes started from this same environment:
# nothing is staged. This flag names the workers' container image on a portable runner; the
# in-process runner never reads it. (In a compiled job it is the image itself.)
NO_PACKAGE_FLAG = "--sdk_container_image=unused-by-the-in-process-runner"


def in_process_args(workers: int = 1, package_flag: str = NO_PACKAGE_FLAG) -> List[str]:
    """In-memory for 1 worker, multi-processing for more (0: one per core)."""
    mode = "in_memory" if workers == 1 else "multi_processing"
    return [
        IN_PROCESS_RUNNER,
        f"--direct_running_mode={mode}",
        f"--direct_num_workers={workers}",
        package_flag,
    ]
