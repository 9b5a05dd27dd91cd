"""The lock of a resume folder: one training at a time writes its checkpoints.

Two jobs with one resume identity (the same job submitted twice, or a retry started while
the first attempt still runs) would otherwise write one folder's checkpoints in turn. The
holder keeps a small JSON file, :data:`LOCK_NAME`, in the folder (who: host, process, task;
a heartbeat time and count it rewrites every ``heartbeat_seconds`` from a thread). Another
run that finds it:

* takes it over when the holder is gone: its heartbeat is older than ``stale_seconds`` (by
  the file's time, or unchanged that long while this run watched: a clock skew between
  machines cannot hold a dead lock), or it was written on this machine in this process
  namespace by a process that no longer exists (a killed job's retry on the same machine
  takes over at once);
* else waits, one line saying for whom, up to ``stale_seconds`` plus two heartbeats (a
  killed holder goes stale within that); a holder still beating then is alive, and the run
  stops with :class:`ResumeLockHeld`'s one line naming it and what to do.

A run that ends (exported, stopped by a signal, failed) removes its lock. A holder that finds
another's token in the file (taken over while it was frozen for ``stale_seconds``) stops
before its next checkpoint with :class:`ResumeLockLost`.

**What each file system guarantees** (the Trainer writes through ``tf.io.gfile``):

* Local disks: the lock is created with ``open(O_CREAT | O_EXCL)``, atomic: of two runs
  starting at once exactly one creates it. NFS: the same call is an exclusive create from
  NFSv3 on (Linux's client sends ``CREATE`` in exclusive mode); NFSv2 has none.
* Any other scheme (``gs://``, ``s3://``, ``hdfs://``): ``tf.io.gfile`` has no exclusive
  create. Its ``rename(..., overwrite=False)`` checks that the target is absent and then
  renames (on GCS, copies then deletes): two runs can both pass the check. TensorFlow's GCS
  file system sends no ``ifGenerationMatch=0`` precondition, the one atomic create GCS
  offers. The lock is then: check absent, write a token, wait ``settle_seconds``, read it
  back; GCS reads are strongly consistent and the last write wins, so of two runs whose
  writes both land within the settle time only one reads its own token. Two runs are both
  let in only when one run's check-to-write gap exceeds the other's settle time (a process
  frozen for seconds between two calls): improbable, not impossible.
* Taking over a stale lock (all file systems) is the same write, wait and read back.
"""

from ga_tfx import tf

import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, Optional

from absl import logging

LOCK_NAME = "ga_tfx.lock"
HEARTBEAT_SECONDS = 20.0
STALE_SECONDS = 120.0


class ResumeLockHeld(RuntimeError):
    """Another live run holds the resume folder's lock."""


class ResumeLockLost(RuntimeError):
    """This run's lock was taken over (it was frozen longer than the stale time)."""


@dataclasses.dataclass
class Holder:
    """What the lock file says: who holds it and when it last beat."""

    token: str
    host: str
    pidns: str
    pid: int
    task: str
    beat: float
    beats: int = 0

    def describe(self, now: float) -> str:
        return (
            f"host {self.host}, pid {self.pid}"
            + (f", task {self.task}" if self.task else "")
            + f", heartbeat {max(0.0, now - self.beat):.0f} s ago"
        )


def _local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def _task() -> str:
    """The orchestrator's name of this task, where one is set (for the messages)."""
    for name in ("KFP_POD_NAME", "ARGO_NODE_ID", "CLOUD_ML_JOB_ID", "HOSTNAME"):
        if os.environ.get(name):
            return os.environ[name]
    return ""


class ResumeLock:
    """The lock of ``directory`` (see the module docstring); a context manager.

    Args:
      directory: the resume folder (created when missing).
      heartbeat_seconds: how often the holder rewrites its heartbeat.
      stale_seconds: a heartbeat older than this is a dead holder's.
      settle_seconds: the wait between writing and reading back a token (``None``: 2 s on
        remote file systems, 0.5 s on local ones, where only a takeover uses it).
      exclusive: whether to create the lock with ``O_EXCL`` (``None``: on local paths; tests
        pass False to run the remote file systems' protocol on a local folder).
      clock, sleep: wall-clock seconds and sleeping (tests pass fakes).
    """

    def __init__(
        self,
        directory: str,
        *,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        stale_seconds: float = STALE_SECONDS,
        settle_seconds: Optional[float] = None,
        exclusive: Optional[bool] = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.path = os.path.join(directory, LOCK_NAME)
        self.folder = directory
        self._heartbeat, self._stale = heartbeat_seconds, stale_seconds
        local = _local(directory) if exclusive is None else exclusive
        self._settle = settle_seconds if settle_seconds is not None else (0.5 if local else 2.0)
        self._local = local
        self._clock, self._sleep = clock, sleep
        self.me = Holder(
            token=uuid.uuid4().hex,
            host=socket.gethostname(),
            pidns=_pid_namespace(),
            pid=os.getpid(),
            task=_task(),
            beat=clock(),
        )
        self.lost = False
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ the file
    def read(self) -> Optional[Holder]:
        """The holder the lock file names (``None``: no lock file, or not readable yet)."""
        try:
            with tf.io.gfile.GFile(self.path, "r") as f:
                text = f.read()
            return Holder(**json.loads(text))
        except tf.errors.NotFoundError:
            return None
        except (ValueError, TypeError):  # torn or foreign: stale by its file's time
            try:
                written = tf.io.gfile.stat(self.path).mtime_nsec / 1e9
            except tf.errors.NotFoundError:
                return None
            return Holder("unreadable", "?", "", 0, "", written)

    def _text(self) -> str:
        """This run's record, its heartbeat stamped now: a lock is as fresh as its last
        write (not as the run's start: a settle, or a wait for a dead holder, comes first)."""
        self.me.beat = self._clock()
        return json.dumps(dataclasses.asdict(self.me))

    def _write(self) -> None:
        """Writes this run's lock over any (atomic replace on a local disk)."""
        if self._local:
            temporary = f"{self.path}.{self.me.token}"
            with open(temporary, "w") as f:
                f.write(self._text())
            os.replace(temporary, self.path)
        else:
            with tf.io.gfile.GFile(self.path, "w") as f:
                f.write(self._text())

    def _create(self) -> bool:
        """Creates the lock if there is none; True if this run now holds it."""
        if self._local:
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(descriptor, "w") as f:
                f.write(self._text())
            return True
        if tf.io.gfile.exists(self.path):
            return False
        return self._write_and_confirm()

    def _write_and_confirm(self) -> bool:
        self._write()
        self._sleep(self._settle)
        held = self.read()
        return held is not None and held.token == self.me.token

    # ------------------------------------------------------------------ taking it
    def _gone(self, holder: Holder, first_seen: float) -> str:
        """Why ``holder`` no longer holds the lock ('' when it may be alive)."""
        now = self._clock()
        if holder.host == self.me.host and holder.pidns == self.me.pidns and holder.pidns:
            if holder.pid != self.me.pid and not _alive(holder.pid):
                return f"its process {holder.pid} on this machine has ended"
        if now - holder.beat > self._stale:
            return f"its heartbeat is {now - holder.beat:.0f} s old (stale after {self._stale:g} s)"
        if now - first_seen > self._stale:
            return f"its heartbeat did not change for {now - first_seen:.0f} s"
        return ""

    def acquire(self) -> "ResumeLock":
        """Takes the lock (waiting, taking over a dead holder's, or raising
        :class:`ResumeLockHeld`) and starts the heartbeat."""
        tf.io.gfile.makedirs(self.folder)
        start = self._clock()
        seen: Optional[Holder] = None
        seen_at = start
        waited = False
        while not self._create():
            holder = self.read()
            if holder is None:
                continue  # released (or being written) meanwhile: try again
            if seen is None or (holder.token, holder.beats) != (seen.token, seen.beats):
                seen, seen_at = holder, self._clock()
            why = self._gone(holder, seen_at)
            if why and self._take_over(holder):
                logging.warning("ga-tfx: took over the resume lock %s: %s", self.path, why)
                break
            if self._clock() - start > self._stale + 2 * self._heartbeat:
                raise ResumeLockHeld(self._held_message(holder))
            if not waited and not why:
                logging.warning(
                    "ga-tfx: waiting for the resume lock %s, held by %s",
                    self.path,
                    holder.describe(self._clock()),
                )
                waited = True
            self._sleep(min(self._heartbeat, self._stale))
        self._thread = threading.Thread(target=self._beat_forever, daemon=True)
        self._thread.start()
        return self

    def _take_over(self, stale: Holder) -> bool:
        now = self.read()
        if now is None or (now.token, now.beats) != (stale.token, stale.beats):
            return False  # it changed meanwhile: look again
        return self._write_and_confirm()

    def _held_message(self, holder: Holder) -> str:
        return (
            f"ga-tfx: another run is training this job: {self.path} is held by "
            f"{holder.describe(self._clock())}; wait for it to end, or, if it is dead, "
            f"re-run after {self._stale:g} s without a heartbeat (its lock is then taken "
            "over) or delete that file."
        )

    # ------------------------------------------------------------------ holding it
    def beat(self) -> None:
        """Rewrites the heartbeat (if the lock is still this run's; else marks it lost)."""
        held = self.read()
        if held is None or held.token != self.me.token:
            self.lost = True
            return
        self.me.beats += 1
        self._write()

    def _beat_forever(self) -> None:
        while not self._stopped.wait(self._heartbeat) and not self.lost:
            try:
                self.beat()
            except (OSError, tf.errors.OpError) as error:  # try again at the next beat
                logging.warning("ga-tfx: the resume lock's heartbeat failed: %s", error)

    def check(self) -> None:
        """Raises :class:`ResumeLockLost` if another run took the lock over."""
        if self.lost:
            raise ResumeLockLost(
                f"ga-tfx: the resume lock {self.path} was taken over by another run (this run "
                f"was silent over {self._stale:g} s); stopping without writing a checkpoint."
            )

    def stop_heartbeat(self) -> None:
        """Stops rewriting the lock (before its folder is deleted)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def release(self) -> None:
        """Stops the heartbeat and removes the lock if it is still this run's."""
        self.stop_heartbeat()
        held = self.read()
        if held is not None and held.token == self.me.token:
            tf.io.gfile.remove(self.path)

    def __enter__(self) -> "ResumeLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
