"""The CSV files of a data directory (standard library only): the first check of every run."""

import os
from typing import List


def csv_files(data_root: str, holds: str) -> List[str]:
    """The ``.csv`` files in ``data_root``, sorted; ``ValueError`` naming the directory when it
    does not exist or holds none. ``holds`` says what it must hold (for the message)."""
    if not os.path.isdir(data_root):
        raise ValueError(
            f"Data directory {data_root!r} does not exist (or is not a "
            f"directory); it must hold {holds}."
        )
    files = sorted(
        os.path.join(data_root, name) for name in os.listdir(data_root) if name.endswith(".csv")
    )
    if not files:
        raise ValueError(f"Data directory {data_root!r} holds no .csv file.")
    return files
