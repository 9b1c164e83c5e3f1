"""store/manifest_rule.py: which data files a compaction made redundant, and why."""

from __future__ import annotations

from msgcask.store.manifest_rule import redundant_files

UNFINISHED = "an unfinished compaction's copy: every file it replaced is here"


def test_a_copy_whose_victims_are_all_here_is_left_out_and_its_victims_kept() -> None:
    assert redundant_files({1, 2, 3}, [3], {3: [1, 2]}.__getitem__) == {3: UNFINISHED}


def test_a_copy_with_a_victim_gone_leaves_out_the_victims_still_here() -> None:
    found = redundant_files({2, 3}, [3], {3: [1, 2]}.__getitem__)
    assert found == {2: "replaced by compacted file 3"}


def test_an_unfinished_copy_named_by_a_later_one_is_left_out_as_unfinished() -> None:
    # Copy 3 never finished (files 1 and 2 are here): it is left out as that,
    # and its victims stay, whatever later copy names it.
    manifests = {3: [1, 2], 5: [3, 4]}
    found = redundant_files({1, 2, 3, 5}, [3, 5], manifests.__getitem__)
    assert found == {3: UNFINISHED}


def test_a_copy_whose_manifest_cannot_be_read_leaves_nothing_out() -> None:
    assert redundant_files({1, 2, 3}, [3], {3: None}.__getitem__) == {}
