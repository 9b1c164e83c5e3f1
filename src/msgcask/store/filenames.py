"""The one pair of functions that build and parse every data-file name.

Names are the file id zero-padded to ten digits, so lexical order is numeric
order and ``ls`` shows files in the order they were created.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

DATA_SUFFIX = ".log"
INDEX_DIR = "index"
LOCK_FILE = "LOCK"
_DATA_NAME = re.compile(r"([0-9]{10})\.log")
MAX_FILE_ID = 2**32 - 1


def data_file_name(file_id: int) -> str:
    """Return the name of data file ``file_id`` (``0000000042.log``)."""
    if not 0 < file_id <= MAX_FILE_ID:
        raise ValueError(f"file id out of range: {file_id}")
    return f"{file_id:010d}{DATA_SUFFIX}"


def parse_data_file_name(name: str) -> int | None:
    """Return the file id a data-file name encodes, or None if it is not one."""
    match = _DATA_NAME.fullmatch(name)
    if match is None:
        return None
    file_id = int(match.group(1))
    return file_id if 0 < file_id <= MAX_FILE_ID else None


def data_file_ids(names: Iterable[str]) -> list[int]:
    """The file ids of the data-file names among ``names``, in order."""
    return sorted(i for i in map(parse_data_file_name, names) if i is not None)
