"""Distributed Keras Tuner searches that survive a killed worker.

In a distributed search (``KERASTUNER_TUNER_ID`` / ``KERASTUNER_ORACLE_IP`` /
``KERASTUNER_ORACLE_PORT``) keras-tuner 1.4.5's chief never learns that a worker died: a trial
stays in ``oracle.ongoing_trials`` until its worker calls ``end_trial``
(``keras_tuner/src/engine/oracle.py``, ``Oracle.end_trial``), and the chief's
``oracle_chief.start_server`` loops ``while oracle.ongoing_trials: time.sleep(2)`` once the
budget is spent. A worker killed by SIGKILL (the kernel's OOM killer, a preempted machine) so
leaves its trial RUNNING and the chief waiting forever, and no best hyperparameters are
written.

Here, a worker sends a **heartbeat** for the trial it runs (``GetTrial`` of that trial, from a
daemon thread, every ``stale_after_seconds / HEARTBEATS_PER_TIMEOUT`` seconds, during model
building and training alike), and the chief serves the oracle itself
(:func:`serve_oracle`, the same gRPC service as keras-tuner's) while watching the heartbeats: a
running trial with no message from its worker for ``stale_after_seconds`` is ended as
``FAILED`` with a message naming the worker, through the oracle's own ``end_trial`` (so it is
saved, counted in the budget and never retried). The remaining workers spend the rest of the
budget, the chief's search returns once every trial has ended, and the best completed trial
is exported as usual. A late ``EndTrial`` from a worker that was declared dead (a frozen,
not killed, process) is ignored: the trial stays failed.

Limits: the chief itself must live (it holds the oracle); if every worker dies, the budget is
not spent and the chief waits for a worker to (re)connect; a (re)started worker with the same
``KERASTUNER_TUNER_ID`` as a dead one before the trial is declared stale resumes that trial
(keras-tuner's ``create_trial`` hands it back); a trial ended here counts towards keras-tuner's
``max_consecutive_failed_trials`` (3): the third failure in a row ends the chief with keras-tuner's
``RuntimeError`` and the workers' next requests fail after keras-tuner's 5-minute RPC timeout.
"""

from ga_tfx.tuning import _keras_tuner_hooks  # noqa: F401  (checks keras_tuner.src's names)

import logging
import os
import threading
import time
from concurrent import futures
from typing import Callable, Dict, Optional, Set

from keras_tuner.src import protos
from keras_tuner.src.distribute import oracle_chief
from keras_tuner.src.engine import trial as trial_module

HEARTBEATS_PER_TIMEOUT = 5  # a worker is declared dead after this many missed heartbeats
_log = logging.getLogger(__name__)


def heartbeat_seconds(stale_after_seconds: float) -> float:
    """Seconds between two heartbeats of a worker (also the chief's check interval)."""
    return stale_after_seconds / HEARTBEATS_PER_TIMEOUT


class Heartbeat:
    """A worker's heartbeat for one trial: ``oracle.get_trial(trial_id)`` every ``interval``
    seconds from a daemon thread until :meth:`stop` (``oracle`` is keras-tuner's
    ``OracleClient``). A failed call is logged and retried at the next beat."""

    def __init__(self, oracle, trial_id: str, interval: float):
        self._oracle, self._trial_id, self._interval = oracle, trial_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{trial_id}", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self._interval):
            try:
                self._oracle.get_trial(self._trial_id)
            except Exception as error:  # noqa: BLE001 (the chief may be busy; beat again)
                _log.warning("Heartbeat of trial %s failed: %s", self._trial_id, error)

    def stop(self) -> None:
        self._stop.set()


class _WatchingServicer(oracle_chief.OracleServicer):
    """keras-tuner's oracle service, noting when each trial's worker was last heard of."""

    def __init__(self, oracle):
        super().__init__(oracle)
        self.last_seen: Dict[str, float] = {}
        self.declared_dead: Set[str] = set()

    def _seen(self, trial_id):
        if trial_id:
            self.last_seen[trial_id] = time.monotonic()

    def CreateTrial(self, request, context):
        response = super().CreateTrial(request, context)
        self._seen(response.trial.trial_id)
        return response

    def UpdateTrial(self, request, context):
        self._seen(request.trial_id)
        return super().UpdateTrial(request, context)

    def GetTrial(self, request, context):
        self._seen(request.trial_id)
        return super().GetTrial(request, context)

    def EndTrial(self, request, context):
        if request.trial.trial_id in self.declared_dead:
            _log.warning(
                "Trial %s ended by its worker after it was declared failed (no "
                "heartbeat); it stays failed.",
                request.trial.trial_id,
            )
            return protos.get_service().EndTrialResponse()
        return super().EndTrial(request, context)


def end_stale_trials(
    oracle,
    servicer: _WatchingServicer,
    stale_after_seconds: float,
    on_failed: Optional[Callable] = None,
) -> list:
    """Ends as FAILED every running trial whose worker was not heard of for
    ``stale_after_seconds``; returns them (``on_failed(trial)`` is called for each)."""
    now, ended = time.monotonic(), []
    for tuner_id, trial in list(oracle.ongoing_trials.items()):
        silent = now - servicer.last_seen.setdefault(trial.trial_id, now)
        if silent < stale_after_seconds:
            continue
        servicer.declared_dead.add(trial.trial_id)
        trial.status = trial_module.TrialStatus.FAILED
        trial.message = (
            f"Worker {tuner_id!r} sent no heartbeat for {silent:.1f} s "
            f"(stale_trial_seconds={stale_after_seconds:g}): presumed dead "
            "(killed or out of memory); trial ended as failed."
        )
        _log.warning("Trial %s: %s", trial.trial_id, trial.message)
        oracle.end_trial(trial)
        ended.append(trial)
        if on_failed is not None:
            on_failed(trial)
    return ended


def serve_oracle(oracle, stale_after_seconds: float, on_failed: Optional[Callable] = None) -> None:
    """The chief's side of a distributed search: serves ``oracle`` on
    ``KERASTUNER_ORACLE_IP:KERASTUNER_ORACLE_PORT`` until the budget is spent and every trial
    has ended, ending trials of dead workers as failed (module docstring)."""
    address = f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}"
    server = oracle_chief.grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    servicer = _WatchingServicer(oracle)
    protos.get_service_grpc().add_OracleServicer_to_server(servicer, server)
    server.add_insecure_port(address)
    server.start()
    try:
        while not (servicer.stop_triggered and not oracle.ongoing_trials):
            time.sleep(heartbeat_seconds(stale_after_seconds))
            end_stale_trials(oracle, servicer, stale_after_seconds, on_failed)
    finally:
        server.stop(grace=1.0)
