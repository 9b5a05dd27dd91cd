"""What every pipeline part stands on: the pieces both :mod:`ga_tfx.pipelines` and
:mod:`ga_tfx.pipelines.tabular` use, importing nothing else of ``ga_tfx.pipelines``.

:mod:`.csv_dir` (a data directory's CSV files), :mod:`.statistics_check` (the data check of a
pipeline's statistics and anomalies: empty splits, anomalous columns, in one line) and
:mod:`.user_log` (the logger the ``ga-tfx`` console shows). The ``tabular/`` package below
``pipelines/`` imports these, never the modules above it.
"""
