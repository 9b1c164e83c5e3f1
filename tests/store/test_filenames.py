"""store/filenames.py: the one pair of functions that build and parse data-file names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from msgcask.store.filenames import (
    MAX_FILE_ID,
    data_file_ids,
    data_file_name,
    parse_data_file_name,
)

FILE_IDS = st.integers(1, MAX_FILE_ID)


def test_names_are_zero_padded_to_ten_digits() -> None:
    assert data_file_name(1) == "0000000001.log"
    assert data_file_name(42) == "0000000042.log"
    assert data_file_name(MAX_FILE_ID) == "4294967295.log"


@pytest.mark.parametrize("file_id", [0, -1, MAX_FILE_ID + 1])
def test_out_of_range_ids_have_no_name(file_id: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        data_file_name(file_id)


@pytest.mark.parametrize(
    "name",
    [
        "1.log",  # not padded
        "00000000001.log",  # eleven digits
        "000000001.log",  # nine digits
        "0000000000.log",  # file id 0 is never used
        "4294967296.log",  # beyond u32 (the header holds the id as u32)
        "9999999999.log",
        "0000000001.log.tmp",  # a file not yet published
        "0000000001.LOG",
        "0000000001.dat",
        "0000000001_log",  # the dot is a dot, not any character
        "000000000a.log",
        " 0000000001.log",
        "0000000001.log ",
        "0000000001.log\n",  # `$` in a regex also matches before a final newline
        "\u0660" * 9 + "\u0661.log",  # Arabic-Indic digits: \d matches, int() reads them
        "\uff10" * 9 + "\uff11.log",  # full-width digits
        "index",
        "LOCK",
        "",
    ],
)
def test_other_names_are_not_data_files(name: str) -> None:
    assert parse_data_file_name(name) is None


@given(FILE_IDS)
def test_round_trip(file_id: int) -> None:
    assert parse_data_file_name(data_file_name(file_id)) == file_id


@given(st.lists(FILE_IDS, min_size=2, max_size=30, unique=True))
def test_lexical_order_is_numeric_order(ids: list[int]) -> None:
    # `ls` and sorted(os.listdir()) list files in creation order.
    names = [data_file_name(i) for i in ids]
    assert [parse_data_file_name(n) for n in sorted(names)] == sorted(ids)


def test_data_file_ids_are_the_data_files_among_names_in_id_order() -> None:
    names = ["0000000010.log", "LOCK", "0000000002.log", "index", "0000000003.log.tmp"]
    assert data_file_ids(names) == [2, 10]
