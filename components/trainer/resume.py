"""Which checkpoints a Trainer run resumes from: the training's identity, by content.

A run resumes only the checkpoints of the same training: the folder is
``<resume_root>/<digest of the identity>``
(:func:`~ga_tfx.components.trainer.checkpoints.resume_directory`).
The identity (:func:`identity_of`) holds what the model is trained from, by content, and no
URI (a job submitted again gets new output URIs for the same data and must resume):

* ``train_examples``, ``eval_examples``, ``transform_graph``, ``schema``, ``base_model``:
  digests of the files the Trainer reads (:func:`~ga_tfx.components.trainer.content.files_digest`);
* ``code``: the model module's source (:func:`~ga_tfx.components.trainer.content.code_digest`);
* ``ga_tfx``: the installed ga-tfx version;
* ``settings``: every Trainer setting but those of :data:`NOT_IDENTITY` (where and how often
  the folder is written, not what is trained), after the Tuner's hyperparameters and the
  memory budget's micro-batch;
* ``hparams``: every hyperparameter ``build_model`` gets;
* ``windows`` and ``eval_steps``: the run's length and its evaluations.

Beside its checkpoints each folder keeps its identity (:data:`RECORD_NAME`); a run that finds
no checkpoint of its own but another folder's under the same root says in one line why it does
not resume that one (:func:`why_not_resumed`), and holds the folder's lock
(:mod:`~ga_tfx.components.trainer.resume_lock`) while it trains.
"""

import ga_tfx
from ga_tfx import tf
from ga_tfx.components.trainer import checkpoints, content, distribution, resume_lock

import contextlib
import json
import os
import time
from typing import Any, Dict, Iterator, Optional

from absl import logging

RECORD_NAME = "ga_tfx_identity.json"

# Settings that say where and how often the checkpoints are written, not what is trained: a
# job submitted again with another checkpoint interval resumes (the resumed run ends at the
# uninterrupted weights whatever the interval; tests/test_preemption_kills.py).
NOT_IDENTITY = {
    "resume_root": "where the resume folders are (the folder's own location)",
    "checkpoint_every_updates": "how often checkpoints are written",
    "checkpoint_every_seconds": "how often checkpoints are written",
}

# The identity's parts named in a "starting over" line.
_FILES = {
    "train_examples": "the training examples",
    "eval_examples": "the evaluation examples",
    "transform_graph": "the transform graph",
    "schema": "the schema",
    "base_model": "the base model",
}
_NAMES = dict(
    _FILES,
    code="the model code",
    ga_tfx="the ga-tfx version",
    hparams="the hyperparameters",
    windows="the training length in windows (train_args.num_steps)",
    eval_steps="the evaluation steps (eval_args.num_steps)",
)


def identity_of(fn_args, run, build_model) -> Dict[str, Any]:
    """The identity of the training ``run`` (a ``run_fn.Run``) of ``build_model`` on
    ``fn_args``' inputs: a JSON-able dict (see the module docstring)."""
    settings = {
        name: value
        for name, value in run.settings.to_exec_properties().items()
        if name not in NOT_IDENTITY
    }
    return dict(
        train_examples=content.files_digest(fn_args.train_files),
        eval_examples=content.files_digest(fn_args.eval_files),
        transform_graph=content.files_digest(fn_args.transform_graph_path),
        schema=content.files_digest(fn_args.schema_path),
        base_model=content.files_digest(fn_args.base_model),
        code=content.code_digest(build_model),
        ga_tfx=ga_tfx.__version__,
        settings=settings,
        hparams=run.hparams,
        windows=run.windows,
        eval_steps=fn_args.eval_steps,
    )


def resume_directory_of(fn_args, run, build_model) -> str:
    """Step 3, resume: the checkpoint folder this training shares with its earlier attempts
    (``<resume_root>/<digest of identity_of(...)>``)."""
    return checkpoints.resume_directory(
        fn_args.model_run_dir, identity_of(fn_args, run, build_model), run.settings.resume_root
    )


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:8] + ".." if isinstance(value, str) and len(text) == 64 else text


def changes(old: Dict[str, Any], new: Dict[str, Any]) -> str:
    """What differs between two identities, in words ('' when nothing does)."""
    found = []
    for part in sorted(set(old) | set(new)):
        was, now = old.get(part), new.get(part)
        if was == now:
            continue
        if part == "settings":
            for name in sorted(set(was or {}) | set(now or {})):
                a, b = (was or {}).get(name), (now or {}).get(name)
                if a != b:
                    found.append(f"the setting {name} changed ({_short(a)} -> {_short(b)})")
        elif part in _FILES:
            found.append(f"{_NAMES[part]} changed (fingerprint {_short(was)} -> {_short(now)})")
        else:
            found.append(f"{_NAMES.get(part, part)} changed ({_short(was)} -> {_short(now)})")
    return "; ".join(found)


def read_record(folder: str) -> Optional[Dict[str, Any]]:
    """The identity record kept in ``folder`` (``None``: none, or unreadable)."""
    try:
        with tf.io.gfile.GFile(os.path.join(folder, RECORD_NAME)) as f:
            return json.loads(f.read())
    except (tf.errors.NotFoundError, ValueError):
        return None


def write_record(folder: str, identity: Dict[str, Any]) -> None:
    """Keeps ``identity`` (and when) in ``folder``."""
    with tf.io.gfile.GFile(os.path.join(folder, RECORD_NAME), "w") as f:
        f.write(json.dumps(dict(identity=identity, written=time.time()), sort_keys=True))


def why_not_resumed(folder: str, identity: Dict[str, Any]) -> Optional[str]:
    """The one line saying why a run without a checkpoint in ``folder`` does not resume the
    newest other folder under the same root that has one (``None``: there is none)."""
    root = os.path.dirname(folder.rstrip("/"))
    newest, newest_record = None, None
    for name in tf.io.gfile.listdir(root) if tf.io.gfile.isdir(root) else []:
        other = os.path.join(root, name.rstrip("/"))
        if other.rstrip("/") == folder.rstrip("/") or tf.train.latest_checkpoint(other) is None:
            continue
        record = read_record(other)
        if record and (newest_record is None or record["written"] > newest_record["written"]):
            newest, newest_record = other, record
    if newest_record is None:
        return None
    what = changes(newest_record["identity"], identity) or "its identity differs"
    return f"ga-tfx: starting over, not resuming {newest}: {what}"


@contextlib.contextmanager
def resume_folder(fn_args, run, build_model, strategy, **lock_options) -> Iterator[Any]:
    """The training's resume folder, held: yields the chief's
    :class:`~ga_tfx.components.trainer.resume_lock.ResumeLock` (``folder``: the resume
    folder), taken; it writes the identity record and logs why it does not resume another
    folder. Other workers get an unheld stand-in (only the chief writes the folder)."""
    identity = identity_of(fn_args, run, build_model)
    folder = checkpoints.resume_directory(fn_args.model_run_dir, identity, run.settings.resume_root)
    if not distribution.is_chief(strategy):
        yield _Unheld(folder)
        return
    with resume_lock.ResumeLock(folder, **lock_options) as lock:
        if tf.train.latest_checkpoint(folder) is None:
            line = why_not_resumed(folder, identity)
            if line:
                logging.warning("%s", line)
        if tf.train.latest_checkpoint(folder) is None or read_record(folder) is None:
            write_record(folder, identity)
        yield lock


class _Unheld:
    """A non-chief worker's stand-in for the lock: it holds nothing."""

    def __init__(self, folder: str):
        self.folder = folder

    def check(self) -> None:
        pass

    def stop_heartbeat(self) -> None:
        pass
