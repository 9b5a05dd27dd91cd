"""How the CSV files of a data root are written (their dialect), decided once from the files.

Tables reach people as R's ``write.csv`` wrote them (quoted header names, ``NA``, the row
names as an unnamed first column), as Excel saved them (``;`` separators and ``,`` decimals in
much of Europe, a UTF-8 byte-order mark, CRLF lines, cp1252 text), as pandas' ``to_csv`` wrote
them (the index as an unnamed first column) or as a database exported them (``NULL``, ``\\N``).
:func:`read` reads every file of a data root once and decides, for all of them together:

* the **encoding**: UTF-8 with or without a byte-order mark, UTF-16 with one, else cp1252;
* the **delimiter**: the one of ``, ; tab |`` that splits the first lines into the same number
  of cells, more than one (ties: the earlier in that list);
* the **decimal mark**: ``,`` where the delimiter is not ``,``, numbers are written ``3,14``
  (``1.234,5`` with a thousands mark) and none ``3.14``; else ``.``;
* the **header**: names unquoted and stripped; an unnamed column is named ``column_<n>``
  (1-based); two columns of one (non-empty) name are an error;
* **missing values**: a cell that is empty or, stripped, one of :data:`MISSING_TOKENS` (pandas'
  default set plus ``\\N``, ``NULL``, ``None``...) is missing, in number and text columns alike,
  never a category; the tokens seen are counted;
* **row numbers**: a first column that is unnamed or named like an index
  (:data:`ROW_NUMBER_NAMES`) and holds 1..n or 0..n-1 (in each file) is left out;
* each column's **type**: ``int`` when every value is a 64-bit integer, ``float`` when every
  value is a number in the decimal mark, ``string`` otherwise, ``empty`` with no value at all
  (what TFX's CSV reader infers, after the rules above).

Every file must have the same columns; the error names the file and the difference. Each
``auto`` of :class:`CsvReading` (the ``--csv-*`` flags) can be overridden where the guess can
be wrong. :meth:`Dialect.describe` is the data summary's line; :func:`records` gives a file's
rows as typed values (``None``: missing). Standard library only (the CLI's pre-check and the
ExampleGen executor, :mod:`ga_tfx.pipelines.tabular.csv_example_gen`, both call :func:`read`).
"""

from ga_tfx._schema import Settings, setting

import codecs
import csv
import dataclasses
import io
import itertools
import re
from typing import IO, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

# pandas' default missing-value strings (read_csv's na_values) plus what databases export.
MISSING_TOKENS = frozenset(
    ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND")
    + ("1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")
    + ("\\N", "NONE", "none", "Null", "NAN", "na", "#NULL!", "?")
)
DELIMITERS = (",", ";", "\t", "|")
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
DECIMAL_NAMES = {".": "point", ",": "comma"}
SNIFF_LINES = 100  # the first lines of the first file decide the delimiter
# A first column of row numbers is unnamed or has one of these names (lower case).
ROW_NUMBER_NAMES = frozenset(("", "rownames", "row.names", "row_names", "unnamed: 0", "index"))
INT, FLOAT, STRING, EMPTY = "int", "float", "string", "empty"
_INT = re.compile(r"[+-]?\d+")
_DOT_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity)", re.I)
_COMMA_NUMBER = re.compile(r"[+-]?(\d{1,3}(\.\d{3})+|\d+),\d+([eE][+-]?\d+)?")
_DOT_FRACTION = re.compile(r"[+-]?\d*\.\d+([eE][+-]?\d+)?")  # 3.14, .5 ...
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(\.\d{3})+")  # ... but not 1.234 (a thousands mark?)
_INT64 = 2**63


@dataclasses.dataclass(frozen=True)
class CsvReading(Settings):
    """How to read the CSV files of ``--data-root``: each ``auto`` is decided from the files."""

    csv_delimiter: str = setting(
        "auto",
        kind=str,
        choices=("auto",) + tuple(DELIMITER_NAMES.values()),
        help="the cell separator (auto: the one of comma, semicolon, tab, pipe that splits "
        "the first lines into as many cells as the header)",
    )
    csv_decimal: str = setting(
        "auto",
        kind=str,
        choices=("auto",) + tuple(DECIMAL_NAMES.values()),
        help="the decimal mark (auto: comma where the separator is not a comma and the numbers "
        "are written 3,14, never 3.14; else point)",
    )
    csv_missing: Tuple[str, ...] = setting(
        (),
        kind=str,
        many=True,
        empty=True,
        help="more cell values that mean 'missing', beside an empty cell, NA, N/A, NaN, "
        "null, NULL, None, #N/A, \\N and pandas' other defaults",
    )
    csv_row_numbers: str = setting(
        "auto",
        kind=str,
        choices=("auto", "keep"),
        help="auto: a first column that is unnamed (or named rownames, index, Unnamed: 0) and "
        "holds 1..n or 0..n-1 is row numbers and left out; keep: it is a column like the others",
    )
    csv_encoding: str = setting(
        "auto",
        kind=str,
        help="the files' text encoding, e.g. utf-8, cp1252, latin-1 (auto: UTF-8 with or "
        "without a byte-order mark, UTF-16 with one, else cp1252)",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.csv_encoding != "auto":
            try:
                codecs.lookup(self.csv_encoding)
            except LookupError:
                raise ValueError(
                    f"csv_encoding {self.csv_encoding!r} is not a text encoding Python knows "
                    "(allowed: auto, or a codec name such as utf-8, cp1252, latin-1)."
                ) from None

    @property
    def missing(self) -> frozenset:
        return MISSING_TOKENS | frozenset(self.csv_missing)


@dataclasses.dataclass(frozen=True)
class Dialect:
    """The dialect of a data root's CSV files, and what reading them found.

    Attributes:
      delimiter, decimal: the cell separator and the decimal mark.
      encoding: the codec the files are read with; ``bom``: the first file starts with a
        byte-order mark; ``crlf``: its lines end in CR LF; ``quoted_header``: its header names
        are quoted.
      header: the header's names as read (unquoted, stripped), every column.
      columns: the columns that become features (the row-number column left out, unnamed ones
        named), with ``types`` (``int``, ``float``, ``string``, ``empty``) and ``present``
        (cells with a value) by column.
      row_numbers: whether the first column is row numbers, left out.
      missing_seen: ``(token, cells)`` of the missing-value tokens met, most cells first
        (``""``: empty cells).
      rows: data rows (blank lines not counted).
    """

    delimiter: str
    decimal: str
    encoding: str
    bom: bool
    crlf: bool
    quoted_header: bool
    header: Tuple[str, ...]
    columns: Tuple[str, ...]
    types: Tuple[str, ...]
    present: Tuple[int, ...]
    row_numbers: bool
    missing_seen: Tuple[Tuple[str, int], ...]
    rows: int

    def describe(self) -> str:
        """The data summary's line, e.g. ``csv: semicolon-separated, decimal comma, UTF-8 with
        a byte-order mark, CRLF lines, quoted header; missing: NA 3278, empty 12; row numbers
        (first column, unnamed) left out``."""
        name = self.encoding.replace("utf_8_sig", "utf-8").replace("utf-8-sig", "utf-8")
        parts = [
            f"{DELIMITER_NAMES[self.delimiter]}-separated",
            f"decimal {DECIMAL_NAMES[self.decimal]}",
            name.upper() if name.lower().startswith("utf") else name,
        ]
        parts[-1] += " with a byte-order mark" if self.bom else ""
        parts += ["CRLF lines"] * self.crlf + ["quoted header"] * self.quoted_header
        line = "csv: " + ", ".join(parts)
        if self.missing_seen:
            line += "; missing: " + ", ".join(
                f"{token or 'empty'} {cells}" for token, cells in self.missing_seen
            )
        if self.row_numbers:
            first = repr(self.header[0]) if self.header[0] else "unnamed"
            line += f"; row numbers (first column, {first}) left out"
        named = [c for c, h in zip(self.columns, self.header[self.row_numbers :]) if c != h]
        if named:
            line += f"; unnamed columns named {', '.join(named)}"
        return line


Opener = Callable[[str], IO[bytes]]


def _open_binary(path: str) -> IO[bytes]:
    return open(path, "rb")


def read(files: Sequence[str], reading: CsvReading = CsvReading(), opener: Opener = _open_binary):
    """The :class:`Dialect` of ``files`` (one data root), read once in full.

    ``ValueError`` (one line, naming the file and line) for: an empty file, a header with two
    columns of one name, files whose columns differ, a row with another number of cells, text
    that is not in the encoding given.
    """
    if reading.csv_encoding != "auto":
        return _read(files, reading, reading.csv_encoding, opener)
    with opener(files[0]) as f:
        start = f.read(4)
    if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return _read(files, reading, "utf-16", opener)
    try:
        return _read(files, reading, "utf-8-sig", opener)
    except UnicodeDecodeError:
        return _read(files, reading, "cp1252", opener)  # Excel's on Windows: any byte decodes


def _text(path: str, encoding: str, opener: Opener) -> io.TextIOWrapper:
    return io.TextIOWrapper(opener(path), encoding=encoding, newline="")


def _delimiter(first_lines: List[str], reading: CsvReading) -> str:
    if reading.csv_delimiter != "auto":
        return {name: mark for mark, name in DELIMITER_NAMES.items()}[reading.csv_delimiter]
    lines = [line for line in first_lines if line.strip()]
    best, best_cells = ",", 1
    for candidate in DELIMITERS:
        widths = [len(cells) for cells in csv.reader(lines, delimiter=candidate)]
        widths = widths[:-1] if len(widths) > 2 else widths  # the last may be cut short
        if widths and widths[0] > best_cells and all(w == widths[0] for w in widths):
            best, best_cells = candidate, widths[0]
    return best


def _names(header: List[str], path: str) -> List[str]:
    names = [name.strip() for name in header]
    seen: Dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen and name:  # unnamed ones (Excel's trailing separators) are numbered
            raise ValueError(
                f"{path}: the header names two columns {name!r} (columns {seen[name] + 1} and "
                f"{index + 1}): each column needs a name of its own."
            )
        seen[name] = index
    return names


class _Column:
    """What the pass learns of one column."""

    def __init__(self):
        self.present = 0
        self.ints = self.dot = self.comma = True  # every value so far parses so
        self.comma_numbers = self.dot_fractions = 0

    def add(self, cell: str) -> None:
        self.present += 1
        if self.ints and not (_INT.fullmatch(cell) and (len(cell) < 19 or _fits_int64(cell))):
            self.ints = False
        if self.dot and not _DOT_NUMBER.fullmatch(cell):
            self.dot = False
        comma = _COMMA_NUMBER.fullmatch(cell)
        self.comma_numbers += bool(comma)
        if _DOT_FRACTION.fullmatch(cell) and not _THOUSANDS.fullmatch(cell):
            self.dot_fractions += 1
        if self.comma and not (comma or _INT.fullmatch(cell) or _THOUSANDS.fullmatch(cell)):
            self.comma = False

    def type(self, decimal: str) -> str:
        if not self.present:
            return EMPTY
        if self.ints:
            return INT
        return FLOAT if (self.dot if decimal == "." else self.comma) else STRING


def _fits_int64(cell: str) -> bool:
    return -_INT64 <= int(cell) < _INT64


def _read(files, reading: CsvReading, encoding: str, opener: Opener) -> Dialect:
    missing = reading.missing
    with _text(files[0], encoding, opener) as f:
        first = list(itertools.islice(f, SNIFF_LINES))
    if not first or not first[0].strip():
        raise ValueError(f"{files[0]} is empty: expected a header line, then data rows.")
    delimiter = _delimiter(first, reading)
    header: Optional[List[str]] = None
    columns: List[_Column] = []
    seen: Dict[str, int] = {}
    row_numbers = reading.csv_row_numbers == "auto"
    expected: Optional[int] = None  # the next row number
    rows = 0
    for path in files:
        with _text(path, encoding, opener) as f:
            reader = csv.reader(f, delimiter=delimiter)
            names = _names(next(reader, []), path)
            if not names or names == [""]:
                raise ValueError(f"{path} is empty: expected a header line, then data rows.")
            if header is None:
                header, columns = names, [_Column() for _ in names]
                row_numbers = row_numbers and len(names) > 1
                row_numbers = row_numbers and names[0].lower() in ROW_NUMBER_NAMES
            elif names != header:
                raise ValueError(f"{path}: {_difference(names, header)} than {files[0]}.")
            starts = {"0", "1"} if expected is None else {"0", "1", str(expected)}
            before = rows
            for cells in reader:
                if not cells or (len(cells) == 1 and not cells[0].strip()):
                    continue  # a blank line
                if len(cells) != len(header):
                    raise ValueError(
                        f"{path}, line {reader.line_num}: {len(cells)} cells, expected "
                        f"{len(header)} (one per column of the header, read as "
                        f"{DELIMITER_NAMES[delimiter]}-separated; --csv-delimiter sets another)."
                    )
                rows += 1
                if row_numbers:  # 0.. or 1.. in each file, or going on from the last file
                    number = cells[0].strip()
                    row_numbers = number in starts if starts else number == str(expected)
                    expected, starts = (int(number) + 1 if row_numbers else None), set()
                for column, cell in zip(columns, cells):
                    cell = cell.strip()
                    if cell in missing:
                        seen[cell] = seen.get(cell, 0) + 1
                    else:
                        column.add(cell)
            if rows == before:
                raise ValueError(f"{path} has a header but no data rows.")
    assert header is not None
    decimal = {name: mark for mark, name in DECIMAL_NAMES.items()}.get(reading.csv_decimal, "auto")
    if decimal == "auto":
        comma = sum(c.comma_numbers for c in columns) and not sum(c.dot_fractions for c in columns)
        decimal = "," if comma and delimiter != "," else "."
    kept = slice(1 if row_numbers and rows else 0, None)
    names = [name or f"column_{i + 1}" for i, name in enumerate(header)]
    with opener(files[0]) as f:
        start = f.read(4)
    return Dialect(
        delimiter=delimiter,
        decimal=decimal,
        encoding=encoding,
        bom=start.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)),
        crlf=first[0].endswith("\r\n"),
        quoted_header=first[0].lstrip("\ufeff").startswith('"'),
        header=tuple(header),
        columns=tuple(names[kept]),
        types=tuple(c.type(decimal) for c in columns[kept]),
        present=tuple(c.present for c in columns[kept]),
        row_numbers=kept.start == 1,
        missing_seen=tuple(sorted(seen.items(), key=lambda item: (-item[1], item[0]))),
        rows=rows,
    )


def _difference(names: List[str], header: List[str]) -> str:
    extra = [n for n in names if n not in header]
    lacking = [n for n in header if n not in names]
    if extra or lacking:
        return "its columns differ: " + "; ".join(
            part
            for part in (
                f"it has {extra} more" if extra else "",
                f"it lacks {lacking}" if lacking else "",
            )
            if part
        )
    return f"its columns are in another order ({names})"


def value(cell: str, kind: str, decimal: str):
    """One cell (stripped, not missing) as the column's type: int, float or str."""
    if kind == INT:
        number = int(cell)
        if not -_INT64 <= number < _INT64:
            raise ValueError(f"{cell!r} does not fit a 64-bit integer.")
        return number
    if kind == FLOAT:
        if decimal == ",":
            cell = cell.replace(".", "").replace(",", ".")
        return float(cell)
    return cell


def records(
    path: str, dialect: Dialect, reading: CsvReading = CsvReading(), opener: Opener = _open_binary
) -> Iterator[List[object]]:
    """The rows of one file of ``dialect``'s data root: one value per column of
    ``dialect.columns`` (int, float or str by its type; ``None``: missing)."""
    missing = reading.missing
    first = 1 if dialect.row_numbers else 0
    kinds = dialect.types
    with _text(path, dialect.encoding, opener) as f:
        reader = csv.reader(f, delimiter=dialect.delimiter)
        next(reader, None)
        for cells in reader:
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            row: List[object] = []
            for cell, kind in zip(cells[first:], kinds):
                cell = cell.strip()
                row.append(None if cell in missing else value(cell, kind, dialect.decimal))
            yield row
