"""The any-CSV path: ``ga-tfx run --data-root DIR --label COLUMN`` on a CSV of your own.

How a CSV is read (:mod:`.csv_dialect`, :mod:`.csv_example_gen`), its rows without a label
dropped (:mod:`.labeled_examples`), what each column is (:mod:`.data_plan`, :mod:`.leaks`,
checked and summarised by :mod:`.plan_check`), the generic user module (:mod:`.generic`:
Transform's ``preprocessing_fn`` and the model, through :mod:`.planned_transform`) and the
trivial baseline it must beat (:mod:`.baseline`). The pipeline that composes them is
:mod:`ga_tfx.pipelines.pipeline`; the shipped digits' code is :mod:`ga_tfx.pipelines.digits`.
"""
