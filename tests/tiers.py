"""Tests moved to the slow tier to keep the fast tier near 3 minutes on 2 cores.

Each entry is a pattern over pytest node ids (``file.py::test_name[param]``) where ``*``
matches anything and every other character (brackets included) stands for itself;
``tests/conftest.py`` marks every matching test ``slow`` at collection (:func:`is_slow`).
Every claim keeps at least one fast test: what moves here is a second optimizer, policy,
replica count or front-end of a claim whose first case stays fast. The whole suite (both
tiers) runs in CI.
"""

SLOW = (
    # every Keras optimizer: SGD with momentum stays fast (Adam: see the end of this list)
    *(
        f"test_equivalence.py::test_every_optimizer_matches_big_batch[{name}]"
        for name in (
            "sgd",
            "sgd_nesterov",
            "adamw",
            "nadam",
            "adamax",
            "rmsprop_momentum",
            "adagrad",
            "adadelta",
            "ftrl",
            "legacy_adam",
            "legacy_sgd_momentum",
            "lion",
            "adafactor",
        )
    ),
    "test_equivalence.py::test_sample_weight_and_class_weight[adam]",
    "test_equivalence.py::test_ema_counts_updates_not_micro_steps[adam]",
    "test_equivalence.py::test_sparse_embedding_gradients_match_big_batch[adam]",
    "test_equivalence.py::test_sparse_embedding_gradients_match_big_batch[adagrad]",
    "test_equivalence.py::test_gradient_clipping_sees_the_accumulated_gradient[clip1]",
    "test_equivalence.py::test_gradient_clipping_sees_the_accumulated_gradient[clip2]",
    "test_equivalence.py::test_multi_input_multi_output_with_loss_weights*",
    # window policies and executions: "apply" stays fast; "drop" too where it is the claim (the
    # policies' definitions; train_on_batch's "its batch is one window, whatever the policy",
    # which "apply" cannot break)
    "test_windows.py::test_partial_window_policies_match_their_big_batch_definition[carry]",
    *(
        f"test_windows.py::{name}[{policy}*"
        for name in (
            "test_several_windows_per_execution_match_their_big_batch_definition",
            "test_data_that_ends_inside_an_execution_ends_the_window_by_the_policy",
        )
        for policy in ("drop", "carry")
    ),
    "test_windows.py::test_train_on_batch_treats_its_batch_as_one_window[apply]",
    "test_windows.py::test_train_on_batch_treats_its_batch_as_one_window[carry]",
    "test_pacing.py::*[drop]",
    "test_pacing.py::*[carry]",
    "test_checkpoint_and_save.py::test_crash_and_resume_with_backup_and_restore[carry]",
    # gradient-accumulator compat: one-device SGD cases stay fast
    "test_compat_gradient_accumulator.py::*two_replicas*",
    "test_compat_gradient_accumulator.py::*mixed_precision*",
    "test_compat_gradient_accumulator.py::*save_and_load*",
    "test_compat_gradient_accumulator.py::*[adam]",
    "test_compat_usage_table.py::*",
    # the Keras contract on 2 replicas
    "test_keras_contract.py::*mirrored*",
    # second cases of two-replica comparisons (one stays fast per module)
    "test_distribution.py::test_mirrored_two_replicas_match_single_device[embedding*",
    "test_batchnorm.py::test_mirrored_strategy_two_replicas_equals_single_device",
    "test_grad_norm_metric.py::*[mirrored]",
    "test_noise_scale.py::test_two_replicas_give_an_estimate_from_one_micro_batch_per_window",
    # the core's front-ends: fit stays fast for every transform and schedule
    "test_front_ends.py::test_each_transform_matches_big_batch_in_every_front_end[*-optimizer_wrapper]",
    "test_front_ends.py::test_each_transform_matches_big_batch_in_every_front_end[*-training_loop]",
    "test_noise_scale.py::*[optimizer_wrapper-1]",
    "test_noise_scale.py::*[training_loop-1]",
    "test_schedules.py::test_a_piecewise_schedule_is_big_batch_training_window_by_window[adam*",
    "test_schedules.py::test_a_piecewise_schedule_is_big_batch_training_window_by_window[*-none-*",
    "test_schedules.py::test_a_piecewise_schedule_on_two_replicas",
    # mixed precision: float16 with momentum stays fast
    "test_mixed_precision.py::*[adam]",
    "test_mixed_precision.py::*[mixed_bfloat16*",
    # the Trainer and the Tuner: one run each of the executor and the search stays fast
    "test_trainer_component.py::test_a_piecewise_accum_schedule_trains_each_window_as_its_own_big_batch",
    "test_trainer_component.py::test_a_memory_budget_sets_the_micro_batch_and_keeps_the_effective_batch",
    "test_trainer_component.py::test_serving_signature_answers_like_the_trained_in_memory_model",
    "test_tuning.py::test_a_nan_trial_and_an_out_of_memory_trial_fail_alone_and_the_search_goes_on",
    "test_optimizer_saving.py::*mirrored*",
    "test_trainer_serving.py::*",  # the executor test checks the export; values: slow
    # second replicas, policies and cases (the first stays fast)
    "test_training_loop.py::*[mirrored_2*",
    "test_distribution.py::test_mirrored_two_replicas_match_single_device*",
    "test_keras_contract.py::test_wrapped_train_step_matches_its_big_batch_run[*-nesterov]",
    "test_keras_contract.py::test_wrapped_train_step_matches_its_big_batch_run[*-adam]",
    "test_keras_contract.py::test_run_eagerly_runs_every_micro_batch_eagerly[drop]",
    "test_keras_contract.py::test_run_eagerly_runs_every_micro_batch_eagerly[carry]",
    "test_batchnorm.py::test_engine_window_statistics_equal_one_keras_update_per_window[*_first]",
    "test_schedules.py::test_a_piecewise_schedule_is_big_batch_training_window_by_window[*-optimizer_wrapper]",
    "test_schedules.py::test_a_piecewise_schedule_is_big_batch_training_window_by_window[*-training_loop]",
    # a real out-of-memory error costs 10 s of the allocator's retries: fit's recovery
    # mid-window stays fast (one real OOM in every environment's fast tier), the others move
    "test_noise_scale.py::*[fit-2]",
    "test_tuning.py::"
    "test_a_trial_out_of_memory_at_its_first_step_is_retried_at_half_the_micro_batch",
    # more second cases
    "test_mixed_precision.py::test_skipped_windows_leave_no_trace_in_later_updates*",
    "test_mixed_precision.py::*[mixed_float16-0.0]",
    "test_pacing.py::test_an_explicit_steps_per_execution_is_honoured_exactly[8]",
    "test_pacing.py::test_several_workers_run_the_compiled_windows",
    "test_preemption.py::test_checkpoints_by_wall_time_whichever_comes_first",
    "test_optimizer_compile.py::*[*-mirrored]",
    "test_optimizer_distributed.py::*[sgd_nesterov_built_first]",
    "test_optimizer_saving.py::*[adam-one_device]",
    "test_grad_norm_metric.py::*[drop]",
    # a second test of a claim another fast test already checks (about 85 s of the fast tier's
    # 654 s, measured with the CPUs shared)
    # AGC once per update under fit: test_front_ends.py's [agc-fit] stays fast
    "test_agc.py::test_model_agc_acts_once_on_the_accumulated_gradient",
    # Adam under fit: test_equivalence.py::test_subclassed_model_matches_big_batch trains with it
    "test_equivalence.py::test_every_optimizer_matches_big_batch[adam]",
    # a paced fit has the weights of one window per call, bit for bit: the cheaper
    # test_auto_paces_also_where_a_callback_watches_batches stays fast (and
    # test_the_progress_bar_does_not_stop_pacing shows that an unwatched fit paces)
    "test_pacing.py::test_an_unwatched_fit_runs_several_windows_per_call_with_the_same_weights*",
    # the optimizer wrapper's pending window in a checkpoint: test_optimizer_compile.py's
    # test_compile_keeps_a_pending_window_across_fit_calls_and_checkpoints stays fast
    "test_optimizer_api.py::test_checkpoint_mid_window_resumes_exactly",
    # jit_compile: test_jit_compile_matches_plain_big_batch_xla_training stays fast
    "test_keras_contract.py::test_jit_compile_with_train_step_model",
    # the wrapper on 2 replicas: test_optimizer_distributed.py's [adam_built_in_strategy_run]
    # stays fast; flush and AGC/clipping on one device stay fast (test_optimizer_api.py)
    "test_optimizer_compile.py::test_flush_after_fit_applies_the_pending_window[mirrored]",
    "test_optimizer_distributed.py::"
    "test_agc_and_global_clipnorm_act_once_per_update_on_the_all_reduced_gradient",
    # several windows per call of the Trainer's checkpoint: one window per call stays fast
    # (test_checkpoints_every_n_updates_and_at_the_end, the SIGTERM test)
    "test_preemption.py::test_several_windows_per_call_are_each_counted_and_resume_exactly",
    # the wrapper saved in the Keras format: its SavedModel case stays fast
    # (test_optimizer_saving.py's [sgd_momentum-one_device])
    "test_optimizer_compile.py::"
    "test_keras_format_save_and_load_keep_the_wrapper_and_its_pending_window",
    # compat: the "agc" spelling stays fast (it kills both compat AGC mutations); clipnorm stays
    "test_compat_gradient_accumulator.py::*agc_clips_the_accumulated_gradient*[use_agc]",
    "test_compat_gradient_accumulator.py::*clipping_keywords_clip_the_accumulated_gradient[clip1]",
    "test_compat_gradient_accumulator.py::*clipping_keywords_clip_the_accumulated_gradient[clip2]",
    # second optimizers: SGD with momentum (custom loop), SGD Nesterov (TrainingLoop) stay fast
    "test_optimizer_api.py::test_custom_loop_matches_big_batch[adam]",
    "test_training_loop.py::test_matches_big_batch_with_uneven_and_partial_windows[one_device-adam]",
)


def is_slow(node_id: str) -> bool:
    """Whether the test ``node_id`` (relative to tests/) is listed in :data:`SLOW`."""
    import re

    for pattern in SLOW:
        regex = ".*".join(re.escape(part) for part in pattern.split("*"))
        if re.fullmatch(regex, node_id):
            return True
    return False
