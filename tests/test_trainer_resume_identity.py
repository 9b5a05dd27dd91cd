"""The Trainer's resume identity (``components/trainer/resume.py``): which checkpoints a run
resumes from. Every part of the identity, changed alone, must move the resume folder and be
named in the "starting over" line; the inputs' URIs must not move it (a job submitted again
gets new output URIs for the same data). The settings are taken from their declarations
(``components/trainer/settings.py``, the library's through ``ga_tfx/_schema.py``): a new
setting is covered here without a new test. Which settings stay out of the identity is written
out here (:data:`NOT_IDENTITY`), never read from the code under test.
"""

import ga_tfx
from ga_tfx import tf
from ga_tfx._schema import SettingError, specs
from ga_tfx.components.trainer import content, resume, run_fn, user_module
from ga_tfx.components.trainer import settings as settings_lib

import dataclasses
import gzip
import inspect
import logging
import os
import shutil
import types

import numpy as np
import pytest

pytestmark = [pytest.mark.tfx]  # the Trainer's modules import TFX

SETTINGS = dict(accum_steps=2, micro_batch_size=4, label_key="y")
MODULE = "def build_model(hparams):\n    return hparams  # version {}\n"
# A model module whose build_model reads a module constant and a helper: an edit of either
# leaves build_model's own source as it was and changes the model trained.
HELPER_MODULE = (
    "WIDTH = {width}\n\n\n"
    "def hidden_units():\n    return WIDTH * {scale}\n\n\n"
    "def build_model(hparams):\n    return dict(hparams, units=hidden_units())\n"
)

# The settings that must NOT change the identity, and why: they say where and how often the
# resume folder is written, not what is trained, so a job submitted again with another value
# resumes its checkpoint (the resumed run ends at the uninterrupted weights whatever the
# interval: tests/test_preemption_kills.py). Written out here, not read from the code under
# test (resume.NOT_IDENTITY): a setting added to the product's list fails this test.
NOT_IDENTITY = {
    "resume_root": "where the resume folders are: the same digest under another root",
    "checkpoint_every_updates": "how often checkpoints are written",
    "checkpoint_every_seconds": "how often checkpoints are written",
}
# Every other setting must change it (a run with another value resuming the old checkpoint
# would end at weights that no uninterrupted run gives). Some of them, by name and why, so that
# a rename or a move out of the declarations fails here rather than leaving the parametrized
# test without them:
IDENTITY = {
    "accum_steps": "K: the samples of each update",
    "micro_batch_size": "the micro-batch, and with K the effective batch",
    "accum_schedule": "K by window",
    "agc_clip_factor": "another clip factor clips the gradients otherwise: other weights",
    "clip_global_norm": "another norm clips the accumulated gradient otherwise",
    "gradient_noise": "other noise in every update",
    "lr_scaling": "another learning rate per window",
    "partial_window": "an epoch's short last window applied, dropped or carried: other updates",
    "shuffle_seed": "another data order, and a resumed run skips by the order",
    "shuffle": "another data order",
    "memory_budget": "the micro-batch (and K) fitted to the budget",
    "mixed_precision": "another dtype policy: other arithmetic",
    "label_key": "another label trained on",
}
FILE_PARTS = {  # identity part -> a file of that input (relative to the inputs' root)
    "train_examples": "examples/Split-train/data_tfrecord-00000-of-00002.gz",
    "eval_examples": "examples/Split-eval/data_tfrecord-00000-of-00001.gz",
    "transform_graph": "transform_graph/transform_fn/saved_model.pb",
    "schema": "schema/schema.pbtxt",
    "base_model": "base/variables/variables.index",
}


def _inputs(root):
    """A Trainer's input files under ``root`` (small, distinct bytes each)."""
    for i, relative in enumerate(
        list(FILE_PARTS.values()) + [FILE_PARTS["train_examples"][:-12] + "1-of-00002.gz"]
    ):
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(bytes([i + 1]) * 1000)
    return root


def _fn_args(root, execution="1", hyperparameters=None, train_steps=20, eval_steps=3):
    """fn_args as TFX gives them: patterns and folders under ``root``, a new ``model_run_dir``
    per execution, the resume root outside both (settings' ``resume_root``)."""
    return types.SimpleNamespace(
        hyperparameters=hyperparameters,
        train_steps=train_steps,
        eval_steps=eval_steps,
        model_run_dir=os.path.join(root, "Trainer", "model_run", execution),
        train_files=[os.path.join(root, "examples", "Split-train", "*")],
        eval_files=[os.path.join(root, "examples", "Split-eval", "*")],
        transform_graph_path=os.path.join(root, "transform_graph"),
        schema_path=os.path.join(root, "schema", "schema.pbtxt"),
        base_model=os.path.join(root, "base"),
    )


def _module(path, version=1):
    with open(path, "w") as f:
        f.write(MODULE.format(version))
    # As the executor loads a module_file (TFX's udf_utils).
    return user_module.load_build_model(exec_properties={"module_file": str(path)})


@pytest.fixture
def job(tmp_path):
    """(fn_args, settings, build_model) of one training, its resume root under tmp_path."""
    root = _inputs(str(tmp_path / "inputs"))
    settings = settings_lib.from_dict(dict(SETTINGS, resume_root=str(tmp_path / "resume")))
    return _fn_args(root), settings, _module(tmp_path / "module.py")


def _identity(fn_args, settings, build_model):
    return resume.identity_of(fn_args, run_fn.run_settings(fn_args, settings), build_model)


def _folder(fn_args, settings, build_model):
    run = run_fn.run_settings(fn_args, settings)
    return resume.resume_directory_of(fn_args, run, build_model)


def _another_value(name, spec, current, settings):
    """Another value of the setting ``name`` that the declaration allows, with ``settings``'
    other values (tried in turn; the first the settings accept)."""
    if spec.choices is not None:
        candidates = [c for c in spec.choices if c != current]
    elif spec.kind is bool:
        candidates = [not current]
    elif spec.kind is int:
        low = int(spec.minimum if spec.minimum is not None else 0)
        candidates = [current + 1, current - 1] if current is not None else [low + 1, low + 2]
    elif spec.kind is float:
        candidates = [current * 2, current / 2] if current else [0.5, 0.05, 2.0]
    else:  # a free string: a plain one, a budget, a schedule starting at the settings' K
        k = settings.accum_steps
        candidates = [f"{current}_other" if current else "other", "512MiB", f"0:{k},10:{2 * k}"]
    if spec.optional and current is not None:
        candidates.append(None)
    for value in candidates:
        try:
            return dataclasses.replace(settings, **{name: value})
        except SettingError:
            continue
    raise AssertionError(f"no other valid value of {name} among {candidates}")


@pytest.mark.parametrize("name", settings_lib.field_names())
def test_every_setting_but_the_folders_location_and_cadence_is_part_of_the_identity(job, name):
    fn_args, settings, build_model = job
    changed = _another_value(name, specs(type(settings))[name], getattr(settings, name), settings)
    before, after = (_folder(fn_args, s, build_model) for s in (settings, changed))
    if name == "resume_root":  # where the folders are: the same digest under another root
        assert os.path.basename(before) == os.path.basename(after) and before != after
    elif name in NOT_IDENTITY:
        assert before == after, f"{name} moved the resume folder"
    else:
        assert before != after, f"{name} changed and the run would resume the old checkpoint"
        line = resume.changes(*(_identity(fn_args, s, build_model) for s in (settings, changed)))
        assert f"the setting {name} changed" in line


def test_the_settings_left_out_of_the_identity_are_the_folders_location_and_cadence():
    names = set(settings_lib.field_names())
    assert set(NOT_IDENTITY) <= names and set(IDENTITY) <= names  # all parametrized above
    assert not set(NOT_IDENTITY) & set(IDENTITY)
    assert set(resume.NOT_IDENTITY) == set(NOT_IDENTITY), (
        f"left out of the identity: {sorted(resume.NOT_IDENTITY)}, "
        f"expected only {sorted(NOT_IDENTITY)}"
    )


def test_the_hyperparameters_are_part_of_the_identity(job, tmp_path):
    fn_args, settings, build_model = job
    root = os.path.dirname(os.path.dirname(os.path.dirname(fn_args.model_run_dir)))
    tuned = [_fn_args(root, hyperparameters={"learning_rate": lr}) for lr in (0.1, 0.2)]
    first, second = (_folder(f, settings, build_model) for f in tuned)
    assert first != second
    line = resume.changes(*(_identity(f, settings, build_model) for f in tuned))
    assert line == 'the hyperparameters changed ({"learning_rate": 0.1} -> {"learning_rate": 0.2})'


@pytest.mark.parametrize("part", sorted(FILE_PARTS))
def test_each_input_files_content_is_part_of_the_identity(job, part):
    fn_args, settings, build_model = job
    before = _identity(fn_args, settings, build_model)
    root = os.path.dirname(os.path.dirname(os.path.dirname(fn_args.model_run_dir)))
    path = os.path.join(root, FILE_PARTS[part])
    with open(path, "r+b") as f:  # one byte, the size kept
        f.seek(500)
        f.write(b"\xff")
    after = _identity(fn_args, settings, build_model)
    assert resume.checkpoints.resume_directory("r/T/m/1", before) != (
        resume.checkpoints.resume_directory("r/T/m/1", after)
    )
    assert resume.changes(before, after).startswith(
        f"{resume._NAMES[part]} changed (fingerprint {before[part][:8]}.. -> {after[part][:8]}..)"
    )


def test_the_model_codes_content_is_part_of_the_identity_not_its_path(job, tmp_path):
    fn_args, settings, build_model = job
    first, before = (
        _folder(fn_args, settings, build_model),
        _identity(fn_args, settings, build_model),
    )
    elsewhere = tmp_path / "image" / "other_name.py"  # a new image, the same code
    elsewhere.parent.mkdir()
    assert _folder(fn_args, settings, _module(elsewhere)) == first
    edited = _module(tmp_path / "module.py", version=2)  # a rebuilt image, one line changed
    assert _folder(fn_args, settings, edited) != first
    line = resume.changes(before, _identity(fn_args, settings, edited))
    assert line == f"the model code changed ({before['code'][:8]}.. -> " + (
        f"{_identity(fn_args, settings, edited)['code'][:8]}..)"
    )


@pytest.mark.parametrize(
    "edit",
    [dict(width=16, scale=1), dict(width=32, scale=1), dict(width=16, scale=2)],
    ids=["unchanged", "a_module_constant", "a_helper_function"],
)
def test_the_whole_model_module_is_part_of_the_identity_not_only_build_model(job, tmp_path, edit):
    # The edit is outside build_model (a constant it reads, a helper it calls): hashing
    # build_model's own source would resume the old checkpoint with another model.
    fn_args, settings, _ = job

    def module(name, **values):
        path = tmp_path / name
        path.write_text(HELPER_MODULE.format(**values))
        return user_module.load_build_model(exec_properties={"module_file": str(path)})

    first = module("model.py", width=16, scale=1)
    before, folder = _identity(fn_args, settings, first), _folder(fn_args, settings, first)
    # Another file name (the identity is the content's, not the path's: the test above): the
    # same path rewritten within a second, at the same size, can be loaded from Python's stale
    # bytecode cache (seen under TFX 1.21's module loader).
    edited = module("model_edited.py", **edit)
    assert inspect.getsource(edited) == inspect.getsource(first)  # build_model itself as it was
    assert edited({})["units"] == edit["width"] * edit["scale"]  # the module loaded again
    if edit == dict(width=16, scale=1):
        assert _folder(fn_args, settings, edited) == folder
        return
    after = _identity(fn_args, settings, edited)
    assert _folder(fn_args, settings, edited) != folder, "the old checkpoint would be resumed"
    assert resume.changes(before, after) == (
        f"the model code changed ({before['code'][:8]}.. -> {after['code'][:8]}..)"
    )


def test_the_ga_tfx_version_is_part_of_the_identity(job, monkeypatch):
    fn_args, settings, build_model = job
    before = _identity(fn_args, settings, build_model)
    monkeypatch.setattr(ga_tfx, "__version__", before["ga_tfx"] + ".post1", raising=False)
    after = _identity(fn_args, settings, build_model)
    assert resume.changes(before, after) == (
        f"the ga-tfx version changed ({before['ga_tfx']} -> {before['ga_tfx']}.post1)"
    )


@pytest.mark.parametrize("length", ["train_steps", "eval_steps"])
def test_the_runs_length_and_evaluation_are_part_of_the_identity(job, length):
    fn_args, settings, build_model = job
    longer = types.SimpleNamespace(**vars(fn_args))
    setattr(longer, length, getattr(fn_args, length) * 2)
    assert _folder(fn_args, settings, build_model) != _folder(longer, settings, build_model)


def test_a_job_submitted_again_with_new_uris_for_the_same_content_resumes(job, tmp_path):
    # Vertex and open-source KFP give a resubmitted job new output URIs: the same files under
    # another root, another execution's model_run_dir, the module file elsewhere.
    fn_args, settings, build_model = job
    root = os.path.dirname(os.path.dirname(os.path.dirname(fn_args.model_run_dir)))
    copy = shutil.copytree(root, str(tmp_path / "job-2" / "outputs"))
    again = _fn_args(copy, execution="9")
    (tmp_path / "job-2" / "module.py").write_text(MODULE.format(1))
    code = _module(tmp_path / "job-2" / "module.py")
    assert _folder(again, settings, code) == _folder(fn_args, settings, build_model)


def test_a_large_gzip_shard_changed_anywhere_is_seen_through_its_trailer(tmp_path):
    # Files over WHOLE_BYTES are sampled; a gzip stream's last 8 bytes are the CRC-32 and the
    # length of all its uncompressed bytes: a change between the samples is still seen.
    data = np.random.default_rng(0).bytes(3 * content.WHOLE_BYTES)  # incompressible
    path = tmp_path / "shard.gz"
    path.write_bytes(gzip.compress(data, mtime=0))
    before = content.file_digest(str(path))
    middle = len(data) // 2 + content.BLOCK_BYTES // 2  # not in a sampled block
    changed = data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :]
    path.write_bytes(gzip.compress(changed, mtime=0))
    assert path.stat().st_size == len(gzip.compress(data, mtime=0))  # the same size
    assert content.file_digest(str(path)) != before


def _checkpoint_in(folder):
    tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), folder, 2).save()


def _open(fn_args, settings, build_model, caplog):
    """The resume folder a run opens (taking its lock and releasing it) and the lines it logs."""
    caplog.clear()
    run = run_fn.run_settings(fn_args, settings)
    with caplog.at_level(logging.WARNING):
        with resume.resume_folder(fn_args, run, build_model, None) as lock:
            folder = lock.folder
    return folder, [r.getMessage() for r in caplog.records if "ga-tfx:" in r.getMessage()]


CHANGES = {
    "data": "the training examples changed (fingerprint ",
    "module file": "the model code changed (",
    "one setting": "the setting shuffle_seed changed (0 -> 1)",
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_job_starts_over_saying_why_in_one_line(job, tmp_path, caplog, change):
    fn_args, settings, build_model = job
    first, lines = _open(fn_args, settings, build_model, caplog)
    assert lines == []  # nothing to resume, nothing to say
    _checkpoint_in(first)  # the first job was preempted after a checkpoint
    if change == "data":
        with open(
            os.path.join(fn_args.train_files[0][:-1], "data_tfrecord-00000-of-00002.gz"), "ab"
        ) as f:
            f.write(b"more")
    elif change == "module file":
        build_model = _module(tmp_path / "module.py", version=2)
    else:
        settings = dataclasses.replace(settings, shuffle_seed=1)
    folder, lines = _open(fn_args, settings, build_model, caplog)
    assert folder != first and tf.train.latest_checkpoint(folder) is None
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ga-tfx: starting over, not resuming {first}: {CHANGES[change]}")


def test_the_same_job_submitted_again_resumes_its_folder_silently(job, caplog):
    fn_args, settings, build_model = job
    first, _ = _open(fn_args, settings, build_model, caplog)
    _checkpoint_in(first)
    root = os.path.dirname(os.path.dirname(os.path.dirname(fn_args.model_run_dir)))
    folder, lines = _open(_fn_args(root, execution="2"), settings, build_model, caplog)
    assert folder == first and tf.train.latest_checkpoint(folder) is not None
    assert lines == []
    assert resume.read_record(folder)["identity"] == _identity(fn_args, settings, build_model)
