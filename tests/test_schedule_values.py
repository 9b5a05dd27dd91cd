"""A schedule is one value (issue 45, item 4): every form users write for ``accum_steps`` becomes
a :class:`ga_tfx.schedules.Schedule` once, when the config is made, with its first K derived
from it; nothing parses schedule text after that. (The windows a schedule gives are checked
against big-batch training at the weight level in ``test_schedules.py``.)"""

from ga_tfx import schedules
from ga_tfx.config import AccumulationConfig, SettingError, resolve

import numpy as np
import pytest

pytestmark = []  # fast tier; library only (no TFX, no TensorFlow needed)


@pytest.mark.parametrize(
    "given, kind, first, text",
    [
        (4, "constant", 4, None),
        (np.int64(3), "constant", 3, None),
        ([(0, 2), (500, 4)], "piecewise", 2, "0:2,500:4"),
        ("0:3,10:6", "piecewise", 3, "0:3,10:6"),
        ("adaptive", "adaptive", 2, "adaptive:2-64"),
        ("adaptive:4-16", "adaptive", 4, "adaptive:4-16"),
        (lambda window: 5, "callable", 5, None),
    ],
)
def test_every_form_of_accum_steps_is_one_schedule_value_with_its_first_k(given, kind, first, text):
    config = AccumulationConfig(accum_steps=given)
    assert config.schedule.kind == kind
    assert config.accum_steps == first == config.schedule.first_accum_steps
    assert type(config.accum_steps) is int
    assert config.accum_schedule == text
    if kind != "callable":  # get_config's dict makes the same config again
        again = AccumulationConfig(**config.to_dict())
        assert again == config and again.schedule == config.schedule


def test_an_adaptive_schedule_starts_at_the_accum_steps_given_beside_it():
    config = AccumulationConfig(accum_steps=8, accum_schedule="adaptive:2-64")
    assert config.schedule == schedules.AdaptiveSchedule(2, 64, start=8)
    assert config.accum_steps == 8 and config.log_noise_scale


def test_schedule_text_is_parsed_when_the_config_is_made_and_never_after(monkeypatch):
    calls = []
    parse = schedules.parse_schedule
    monkeypatch.setattr(
        schedules, "parse_schedule", lambda *a, **k: calls.append(a) or parse(*a, **k)
    )
    config = resolve("test", None, {"accum_steps": "0:2,5:4"})
    made = len(calls)
    assert made >= 1
    for _ in range(3):
        assert config.schedule.pieces == ((0, 2), (5, 4))
        assert config.schedule.kind == "piecewise" and config.schedule.varies
    assert len(calls) == made


def test_micro_batches_of_windows_follow_the_schedule():
    piecewise = schedules.parse_schedule("0:2,3:4")
    assert piecewise.micro_batches(0, 5) == 2 * 3 + 4 * 2
    assert piecewise.micro_batches(2, 4) == 2 + 4
    assert schedules.ConstantSchedule(3).micro_batches(4, 9) == 15
    # Adaptive K is chosen as training goes: the most the windows can take.
    assert schedules.AdaptiveSchedule(2, 16, start=32).micro_batches(0, 3) == 3 * 32
    assert schedules.AdaptiveSchedule(2, 16).micro_batches(0, 3) == 3 * 16


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"accum_steps": [(1, 2)]}, r"accum_steps=\[\(1, 2\)\] is not a schedule: .*window 0"),
        ({"accum_steps": [("a",)]}, r"accum_steps must be an integer >= 1, a list of .* got"),
        ({"accum_steps": "adaptive:8-2"}, r"'adaptive:8-2' is not a schedule: .*MIN <= MAX"),
        ({"accum_steps": 2, "accum_schedule": 5}, r"accum_schedule must be 'FROM:K.*got 5"),
        ({"accum_steps": 4, "accum_schedule": "0:2,5:4"}, r"accum_steps=4 is not the first K"),
        ({"accum_steps": "0:2", "accum_schedule": "0:2"}, r"give accum_schedule or a sch"),
        ({"accum_steps": lambda w: 0}, r"accum_steps\(0\) must be an integer >= 1"),
    ],
)
def test_a_bad_schedule_is_one_error_naming_the_value_and_what_is_allowed(settings, match):
    with pytest.raises(SettingError, match=match) as error:
        resolve("test", None, settings)
    assert "\n" not in str(error.value)


def _trainer_settings(**given):
    from ga_tfx.components.trainer.settings import AccumulationSettings

    return AccumulationSettings(micro_batch_size=8, label_key="y", **given)


def _pipeline_options(**given):
    from ga_tfx.pipelines.options import AccumulationOptions

    return AccumulationOptions(**given)


@pytest.mark.parametrize(
    "make",
    [
        lambda **given: AccumulationConfig(**given),
        _trainer_settings,
        _pipeline_options,
    ],
    ids=["config", "trainer-settings", "pipeline-options"],
)
def test_every_holder_refuses_an_accum_steps_that_is_not_its_schedules_first_k(make):
    # One rule (ga_tfx.schedules.schedule_of), checked when the holder is made, one line
    # naming both values; the Trainer's settings used to fail only in run_fn, the options
    # replaced accum_steps silently.
    with pytest.raises(SettingError) as error:
        make(accum_steps=4, accum_schedule="0:2,5:4")
    message = str(error.value)
    assert "accum_steps=4" in message and "'0:2,5:4'" in message and "K=2" in message
    assert "\n" not in message
    # The first K given as accum_steps: the same schedule, accum_steps is K0.
    made = make(accum_steps=2, accum_schedule="0:2, 5:4")
    assert made.accum_steps == 2 and made.accum_schedule == "0:2,5:4"
    assert made.schedule == schedules.PiecewiseSchedule(((0, 2), (5, 4)))


def test_the_pipelines_accum_steps_left_out_is_the_schedules_first_k_or_4():
    # The declared rule for `--accum-schedule` without `--accum-steps`: a piecewise
    # schedule's first K; an adaptive schedule starts at the default 4; no schedule: 4.
    assert _pipeline_options(accum_schedule="0:2,5:8").accum_steps == 2
    adaptive = _pipeline_options(accum_schedule="adaptive:2-16")
    assert adaptive.accum_steps == 4 and adaptive.schedule.first_accum_steps == 4
    assert _pipeline_options().accum_steps == 4
    assert _pipeline_options().schedule == schedules.ConstantSchedule(4)


def test_a_callable_schedule_has_no_text_and_every_kind_is_asked_one_way():
    callable_schedule = schedules.CallableSchedule(lambda window: 3)
    assert callable_schedule.text is None
    assert schedules.ConstantSchedule(3).text is None
    # Made once: accum_schedule's text is not parsed again by its field's rule.
    config = AccumulationConfig(accum_steps=2, accum_schedule="0:2,5:4")
    assert isinstance(config.schedule, schedules.PiecewiseSchedule)
