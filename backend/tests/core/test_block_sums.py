# SPDX-License-Identifier: Apache-2.0
"""The closed blocks' sums a backend process keeps for flame graphs (app.storage.stacks.BlockSums): one
version per host, block and filter, so a block renewed again and again by late batches (bench/flame's
hour sent in two minutes; an agent's spool sent after a reconnect) does not fill the bound with sums of
versions nobody can read; the rollup task stops summing at half the bound, so that filled it and left
every later first view reading its blocks."""

from array import array
from datetime import UTC, datetime, timedelta

from app.storage.stacks import BlockSums, StackFilter, _Sums

BLOCK = datetime(2026, 1, 1, tzinfo=UTC)


def sums(n: int) -> _Sums:
    return _Sums(array("q", range(n)), array("q", [1] * n), {}, {})


def test_a_newer_version_replaces_the_older_and_an_older_one_is_not_kept():
    kept = BlockSums(limit=1000)
    flt, other = StackFilter(), StackFilter(comm="cat")
    for version in range(1, 200):  # a block renewed by 199 late batches, summed after each
        kept.put(("h", 10, BLOCK, version, flt), sums(10))
    kept.put(("h", 10, BLOCK + timedelta(minutes=10), 1, flt), sums(10))
    kept.put(("h", 10, BLOCK, 5, other), sums(10))  # another filter's sums are its own
    assert kept.kept == 30 and len(kept.entries) == 3
    assert kept.get(("h", 10, BLOCK, 199, flt)) is not None
    assert kept.get(("h", 10, BLOCK, 198, flt)) is None
    # A view that read the block under an older version than the one kept (a late batch came meanwhile)
    # keeps nothing: the newer sums stay.
    kept.put(("h", 10, BLOCK, 150, flt), sums(10))
    assert kept.get(("h", 10, BLOCK, 150, flt)) is None and kept.get(("h", 10, BLOCK, 199, flt)) is not None
    assert kept.kept == 30


def test_the_bound_still_drops_the_least_recently_used():
    kept = BlockSums(limit=25)
    flt = StackFilter()
    for m in range(3):
        kept.put(("h", 1, BLOCK + timedelta(minutes=m), 1, flt), sums(10))
    assert kept.kept == 20 and kept.get(("h", 1, BLOCK, 1, flt)) is None
    kept.put(("h", 1, BLOCK, 2, flt), sums(10))  # its version row was dropped with it: kept again
    assert kept.get(("h", 1, BLOCK, 2, flt)) is not None and kept.kept == 20
    assert set(kept.versions) == {("h", 1, BLOCK + timedelta(minutes=m), flt) for m in (0, 2)}
