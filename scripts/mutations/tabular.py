"""Seeded bugs in the any-CSV path (pipelines/): each rule of the dialect, the data plan, the leak
rule, the data check and its messages.
"""

from .mutation import DIALECT, Mutation

MUTATIONS = [
    Mutation(
        "data_check.empty_split_passes",
        "pipelines/common/statistics_check.py",
        "        if not counts[split]:\n",
        "        if False:\n",
        ("tests/test_bad_data.py", "-k", "empty_split"),
    ),
    Mutation(
        "data_check.anomalies_pass",
        "pipelines/common/statistics_check.py",
        "    if problems:\n",
        "    if False:\n",
        ("tests/test_bad_data.py", "-k", "gate_check"),
    ),
    Mutation(
        "plan.identifier_rule_off",
        "pipelines/tabular/column_rules.py",
        "if distinct >= IDENTIFIER_MIN_DISTINCT and distinct >= IDENTIFIER_DISTINCT_FRACTION"
        " * present:",
        "if False:",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "plan.codes_are_quantities",
        "pipelines/tabular/column_rules.py",
        "            and (stats.max - stats.min) < CODE_MAX_RELATIVE_SPREAD * size\n",
        "            and False\n",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "plan.no_timestamps",
        "pipelines/tabular/column_rules.py",
        "            if whole and low <= stats.min and stats.max <= high:\n",
        "            if False:\n",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "plan.almost_empty_kept",
        "pipelines/tabular/column_rules.py",
        "if feature is None or present < max(1, MIN_PRESENT_FRACTION * rows):",
        "if feature is None or present < 1:",
        ("tests/test_data_plan.py",),
    ),
    Mutation(
        "tabular.not_clipped",
        "pipelines/tabular/generic.py",
        "parts = [tf.clip_by_value((x - median) / scale, -CLIP, CLIP)]",
        "parts = [(x - median) / scale]",
        ("tests/test_tabular_features.py",),
    ),
    Mutation(
        "tabular.scaled_by_the_iqr_itself",
        "pipelines/tabular/generic.py",
        "scale = tf.where(iqr > 0, iqr / 1.349, tf.where(std > 0, std, 1.0))",
        "scale = tf.where(iqr > 0, iqr, tf.where(std > 0, std, 1.0))",
        ("tests/test_tabular_features.py",),
    ),
    Mutation(
        "tabular.one_columns_quantiles_for_all",
        "pipelines/tabular/generic.py",
        "tf.reshape(boundaries[i], [-1]),",
        "tf.reshape(boundaries[0], [-1]),",
        ("tests/test_tabular_transform.py", "-k", "shared_analyzers"),  # issue 53: fast
    ),
    Mutation(  # issue 53: one column's minimum used for all (the slow Beam test saw it alone)
        "tabular.one_columns_minimum_for_all",
        "pipelines/tabular/generic.py",
        "            low[i],\n",
        "            low[0],\n",
        ("tests/test_tabular_transform.py", "-k", "shared_analyzers"),
    ),
    Mutation(
        "tabular.one_columns_variance_for_all",
        "pipelines/tabular/generic.py",
        "            variance[i],\n",
        "            variance[0],\n",
        ("tests/test_tabular_transform.py", "-k", "shared_analyzers"),  # issue 53: fast
    ),
    Mutation(
        "csv.delimiter_not_sniffed",
        DIALECT,
        "            best, best_cells = candidate, widths[0]\n",
        "            pass\n",
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.decimal_comma_never",
        DIALECT,
        'decimal = "," if comma and delimiter != "," else "."',
        'decimal = "."',
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.thousands_mark_kept",
        DIALECT,
        'cell = cell.replace(".", "").replace(",", ".")',
        'cell = cell.replace(",", ".")',
        ("tests/test_csv_dialect.py", "-k", "decimal_mark"),
    ),
    Mutation(
        "csv.only_empty_cells_missing",
        DIALECT,
        "return MISSING_TOKENS | frozenset(self.csv_missing)",
        'return frozenset(("",)) | frozenset(self.csv_missing)',
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.row_numbers_kept",
        DIALECT,
        "row_numbers = row_numbers and names[0].lower() in ROW_NUMBER_NAMES",
        "row_numbers = False",
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.any_first_column_is_row_numbers",
        DIALECT,
        "row_numbers = number in starts if starts else number == str(expected)",
        "row_numbers = True",
        ("tests/test_csv_dialect.py", "-k", "row_numbers"),
    ),
    Mutation(
        "csv.byte_order_mark_kept",
        DIALECT,
        'return _read(files, reading, "utf-8-sig", opener)',
        'return _read(files, reading, "utf-8", opener)',
        ("tests/test_csv_dialect.py",),
    ),
    Mutation(
        "csv.no_cp1252_fallback",
        DIALECT,
        'return _read(files, reading, "cp1252", opener)',
        "raise",
        ("tests/test_csv_dialect.py", "-k", "encoding"),
    ),
    Mutation(
        "csv.files_not_compared",
        DIALECT,
        "elif names != header:",
        "elif False:",
        ("tests/test_csv_dialect.py", "-k", "agree"),
    ),
    Mutation(
        "csv.example_gen_ignores_the_dialect",
        "pipelines/tabular/csv_example_gen.py",
        "            dialect = csv_dialect.read(files, reading, _opener)\n",
        "            dialect = csv_dialect.read(files, csv_dialect.CsvReading("
        "csv_delimiter='comma', csv_decimal='point', csv_row_numbers='keep'), _opener)\n",
        ("tests/test_csv_example_gen.py",),
    ),
    Mutation(
        "csv.label_columns_not_closest_first",
        "pipelines/tabular/generic.py",
        "return [repr(n) for n in sorted(names, key=lambda n: -likeness(n))]",
        "return [repr(n) for n in names]",
        ("tests/test_csv_dialect.py", "-k", "label_check"),
    ),
    Mutation(
        "csv.empty_split_blamed_on_size",
        "pipelines/common/statistics_check.py",
        "    if unlabeled:\n",
        "    if False:\n",
        ("tests/test_bad_data.py", "-k", "empty_split"),
    ),
    Mutation(
        "leaks.bar_too_low",
        "pipelines/tabular/leaks.py",
        "LEAK_SHARE = 0.1  #",
        "LEAK_SHARE = 0.5  #",
        ("tests/test_leaks.py",),
    ),
    Mutation(
        "leaks.never_reported",
        "pipelines/tabular/leaks.py",
        "if error <= LEAK_SHARE * baseline:",
        "if error < 0:",
        ("tests/test_leaks.py",),
    ),
    Mutation(
        "leaks.numbers_as_categories",
        "pipelines/tabular/leaks.py",
        "    if not numeric:\n",
        "    if True:\n",
        ("tests/test_leaks.py",),
    ),
    Mutation(
        "leaks.excluded_columns_kept",
        "pipelines/tabular/data_plan.py",
        "        if feature.name in exclude:\n",
        "        if False:\n",
        ("tests/test_data_plan.py", "-k", "excluded"),
    ),
    Mutation(
        "csv.int64_by_length",  # a 19-digit integer above int64's maximum typed int
        DIALECT,
        "(len(cell) < 19 or _fits_int64(cell))",
        "(len(cell) < 20 or _fits_int64(cell))",
        ("tests/test_csv_dialect.py", "-k", "int64"),
    ),
    Mutation(
        "plan_check.emptied_split_blamed_on_size",  # not on the label that emptied it
        "pipelines/tabular/plan_check.py",
        "effective_batch_size, unlabeled=unlabeled, label=label",
        "effective_batch_size, label=label",
        ("tests/test_bad_data.py", "-k", "emptied_by_the_label"),  # issue 53: fast
    ),
]
