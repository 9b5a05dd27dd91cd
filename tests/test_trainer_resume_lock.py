"""The lock of a resume folder (``components/trainer/resume_lock.py``): two runs of one
training at once never both write the folder; a dead holder's lock is taken over."""

import ga_tfx
from ga_tfx import keras, tf
from ga_tfx.components.trainer import checkpoints, resume_lock
from ga_tfx.components.trainer.resume_lock import ResumeLock, ResumeLockHeld, ResumeLockLost

import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

pytestmark = [pytest.mark.tfx]  # the Trainer's package imports TFX

# Short times, with room for a loaded machine (a thread may wait a second for the CPU).
FAST = dict(heartbeat_seconds=0.1, stale_seconds=2.0)


class _BothCheckFirst(ResumeLock):
    """A lock whose first write waits until the other run has checked too: the worst
    interleaving of the remote protocol (both find no lock, then both write)."""

    checked = threading.Barrier(2)

    def _write(self):
        if not getattr(self, "_wrote", False):
            self._wrote = True
            self.checked.wait(timeout=10)
        super()._write()


def _race(folder, runs=2, hold=1.5, kind=ResumeLock, **options):
    """``runs`` threads each taking the lock of ``folder`` at the same instant and holding it
    ``hold`` s; returns (how many took it, the ResumeLockHeld messages of the others)."""
    start = threading.Barrier(runs)
    took, refused = [], []

    def run():
        lock = kind(folder, **dict(FAST, **options))
        start.wait()
        try:
            with lock:
                took.append(lock)
                time.sleep(hold)
        except ResumeLockHeld as error:
            refused.append(str(error))

    threads = [threading.Thread(target=run) for _ in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(took), refused


@pytest.mark.parametrize("exclusive", [True, False], ids=["O_EXCL", "write-settle-read"])
def test_of_two_identical_runs_at_once_one_holds_the_folder_the_other_is_refused(
    tmp_path, exclusive
):
    # O_EXCL: local disks and NFS; the other: what gs:// gets (check, write, settle, read
    # back), run here on a local folder (TF's ram:// appends on rewrite: no stand-in for GCS).
    folder = str(tmp_path / "folder")
    kind = ResumeLock if exclusive else _BothCheckFirst
    # stale after 3 s (not FAST's 2): on a loaded 2-core machine the holder's heartbeat
    # thread once waited 2 s for the CPU, and the other run took the lock over as a dead
    # holder's (CI, TFX 1.21 stack); the hold outlasts the other's wait (3 s + 2 beats).
    stale = 3.0
    took, refused = _race(
        folder, hold=6.0, kind=kind, settle_seconds=1.0, exclusive=exclusive, stale_seconds=stale
    )
    assert took == 1 and len(refused) == 1
    assert refused[0].startswith(
        f"ga-tfx: another run is training this job: {folder}/{resume_lock.LOCK_NAME} is held by "
        f"host {os.uname().nodename}, pid {os.getpid()}"
    )
    assert f"wait for it to end, or, if it is dead, re-run after {stale:g} s" in refused[0]
    assert not tf.io.gfile.exists(os.path.join(folder, resume_lock.LOCK_NAME))  # released


def test_a_run_waits_for_the_holder_that_ends_and_takes_the_lock_then(tmp_path, caplog):
    folder = str(tmp_path / "folder")
    first = ResumeLock(folder, **FAST).acquire()
    threading.Timer(0.5, first.release).start()
    with caplog.at_level(logging.WARNING):
        with ResumeLock(folder, **FAST) as second:
            assert second.read().token == second.me.token
    assert any("waiting for the resume lock" in r.getMessage() for r in caplog.records)


def _write_lock(folder, **holder):
    os.makedirs(folder, exist_ok=True)
    record = dict(token="dead", host="other-host", pidns="", pid=1, task="", beat=time.time())
    with open(os.path.join(folder, resume_lock.LOCK_NAME), "w") as f:
        json.dump(dict(record, **holder), f)


def test_a_stale_lock_is_taken_over_saying_so(tmp_path, caplog):
    folder = str(tmp_path / "folder")
    _write_lock(folder, beat=time.time() - 3600)  # a killed job's, an hour ago, elsewhere
    with caplog.at_level(logging.WARNING):
        with ResumeLock(folder, **FAST) as lock:
            assert lock.read().token == lock.me.token
    (line,) = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert line.startswith("ga-tfx: took over the resume lock") and "heartbeat is 36" in line


def test_a_lock_that_stops_beating_goes_stale_whatever_its_clock_says(tmp_path):
    folder = str(tmp_path / "folder")
    _write_lock(folder, beat=time.time() + 3600)  # a holder's clock an hour ahead, now dead
    began = time.monotonic()
    with ResumeLock(folder, **FAST) as lock:
        assert lock.read().token == lock.me.token
    assert 2.0 <= time.monotonic() - began < 10


def test_a_killed_holders_retry_on_the_same_machine_takes_over_at_once(tmp_path):
    folder = str(tmp_path / "folder")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    me = ResumeLock(folder).me
    _write_lock(folder, host=me.host, pidns=me.pidns, pid=int(dead.stdout))
    began = time.monotonic()
    with ResumeLock(folder, heartbeat_seconds=0.05, stale_seconds=20) as lock:
        assert lock.read().token == lock.me.token
    assert time.monotonic() - began < 5  # at once, not after the stale time


def test_a_live_holder_keeps_its_lock_by_beating(tmp_path):
    folder = str(tmp_path / "folder")
    with ResumeLock(folder, **FAST) as holder:
        time.sleep(0.3)
        assert holder.read().beats >= 2  # its heartbeat runs
        with pytest.raises(ResumeLockHeld):  # alive past the stale time: never taken over
            ResumeLock(folder, **FAST).acquire()
        assert holder.read().token == holder.me.token and not holder.lost


def test_a_holder_whose_lock_was_taken_over_writes_no_checkpoint(tmp_path):
    folder = str(tmp_path / "folder")
    holder = ResumeLock(folder, heartbeat_seconds=3600).acquire()
    _write_lock(folder, token="the other run")  # taken over while this run was frozen
    holder.beat()
    inputs = keras.Input(shape=(2,))
    model = ga_tfx.wrap_model(keras.Model(inputs, keras.layers.Dense(1)(inputs)), accum_steps=2)
    model.compile(keras.optimizers.SGD(0.1), "mse")
    checkpoint = checkpoints.UpdateCheckpoint(
        model,
        folder,
        total_windows=4,
        every_updates=1,
        every_seconds=1e9,
        before_save=holder.check,
    )
    with pytest.raises(ResumeLockLost, match=r"was taken over by another run .* stopping"):
        checkpoint.save()
    assert tf.train.latest_checkpoint(folder) is None
    holder.release()  # leaves the other run's lock in place
    assert ResumeLock(folder).read().token == "the other run"


@pytest.mark.parametrize("exclusive", [True, False], ids=["O_EXCL", "write-settle-read"])
def test_a_lock_is_written_with_the_time_of_its_write_not_of_the_runs_start(tmp_path, exclusive):
    # A run waits (a settle, a dead holder's stale time) between its start and its write; a
    # lock stamped with the start would read as that much older to the next run (a race once
    # lost in CI: a holder taken over 2 s after its settle, its heartbeat 1 s old at its write).
    now = [1000.0]
    lock = ResumeLock(
        str(tmp_path / "folder"),
        exclusive=exclusive,
        heartbeat_seconds=3600,
        settle_seconds=0.0,
        clock=lambda: now[0],
        sleep=lambda seconds: None,
    )
    now[0] += 500.0  # between the run's start and its lock
    with lock:
        assert lock.read().beat == 1500.0
        now[0] += 7.0
        lock.beat()
        assert lock.read().beat == 1507.0 and lock.read().beats == 1
