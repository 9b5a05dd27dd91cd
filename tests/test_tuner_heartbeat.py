"""The distributed Tuner's heartbeats (``components/tuner/heartbeat.py``), without processes: a
trial whose worker is silent for ``stale_after_seconds`` is ended as failed, naming the worker;
a heartbeat keeps a trial running; a late ``EndTrial`` of a trial declared failed is ignored; a
worker beats until stopped. (The killed worker itself: ``tests/test_tuner_failures.py``, slow.)"""

from ga_tfx.components.tuner import heartbeat

import time

import keras_tuner as kt
import pytest
from keras_tuner.src import protos
from keras_tuner.src.engine import trial as trial_module

pytestmark = [pytest.mark.tfx]  # the Tuner component's package (keras-tuner, the tfx extra)


class _Oracle:
    """The parts of keras-tuner's oracle the chief's watch uses."""

    def __init__(self, trials):
        self.ongoing_trials = dict(trials)  # {tuner_id: trial}
        self.ended, self.gets = [], []

    def end_trial(self, trial):
        self.ended.append(trial)
        self.ongoing_trials = {k: t for k, t in self.ongoing_trials.items() if t is not trial}

    def get_trial(self, trial_id):
        self.gets.append(trial_id)
        return trial_module.Trial(kt.HyperParameters(), trial_id=trial_id)


def test_a_silent_workers_trial_ends_failed_and_a_heard_one_keeps_running():
    silent = trial_module.Trial(kt.HyperParameters(), trial_id="00")
    heard = trial_module.Trial(kt.HyperParameters(), trial_id="01")
    oracle = _Oracle({"tuner0": silent, "tuner1": heard})
    servicer = heartbeat._WatchingServicer(oracle)
    now = time.monotonic()
    servicer.last_seen.update({"00": now - 30.0, "01": now})
    failed = []
    ended = heartbeat.end_stale_trials(oracle, servicer, 10.0, failed.append)
    assert ended == failed == oracle.ended == [silent]
    assert silent.status == trial_module.TrialStatus.FAILED
    assert silent.message.startswith("Worker 'tuner0' sent no heartbeat for 30.")
    assert "(stale_trial_seconds=10)" in silent.message
    assert heard.status == trial_module.TrialStatus.RUNNING
    assert list(oracle.ongoing_trials) == ["tuner1"]
    # Its worker was frozen, not killed: its late end is ignored, the trial stays failed.
    servicer.EndTrial(protos.get_service().EndTrialRequest(trial=silent.to_proto()), None)
    assert oracle.ended == [silent]
    # A heartbeat (GetTrial) of a trial silent so far keeps it running.
    servicer.last_seen["01"] = now - 30.0
    servicer.GetTrial(protos.get_service().GetTrialRequest(trial_id="01"), None)
    assert heartbeat.end_stale_trials(oracle, servicer, 10.0) == []
    # Five heartbeats per timeout (stated here, not read from HEARTBEATS_PER_TIMEOUT): a
    # worker is ended as dead after five missed beats, not after one late one.
    assert heartbeat.heartbeat_seconds(10.0) == 2.0


def test_a_worker_beats_for_its_trial_until_stopped():
    oracle = _Oracle({})
    beat = heartbeat.Heartbeat(oracle, "03", interval=0.01)
    deadline = time.monotonic() + 30.0
    while len(oracle.gets) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    beat.stop()
    beat._thread.join(5.0)
    beats = len(oracle.gets)
    time.sleep(0.05)
    assert beats >= 3 and len(oracle.gets) == beats and set(oracle.gets) == {"03"}
