# SPDX-License-Identifier: Apache-2.0
"""The outlier rule of the fleet's hot code (app.storage.fleet._outliers, session 25) on per-host sums made
here: a function ten times hotter on 2 of 12 hosts is an outlier there, uniform load gives none, a tiny host's
few samples are not an outlier, nor is any host of a group too small for a median; and the rule over a
600-host, 5,000-function group stays cheap beside the ranking."""

import time

import numpy as np

from app.storage import fleet


def _sums(cells: dict[tuple[int, int], int]) -> fleet._Sums:
    """_Sums of {(host, function index): samples}, ordered by host, then function, as _per_host_sums makes them."""
    keys = sorted(cells)
    width = max(f for _h, f in keys) + 1
    return fleet._Sums(
        np.array([h for h, _f in keys], dtype=np.int64),
        np.array([f for _h, f in keys], dtype=np.int64),
        np.array([cells[k] for k in keys], dtype=np.int64),
        np.arange(width, dtype=np.int64) + 1000,
    )


def _pairs(found: fleet._Outliers) -> set[tuple[int, int]]:
    return set(zip(found.function.tolist(), found.host.tolist(), strict=True))


def test_a_function_ten_times_hotter_on_two_of_twelve_hosts_is_listed_there():
    busy = np.full(12, 10_000, dtype=np.int64)
    cells = {}
    for h in range(12):
        cells[(h, 0)] = 2_000  # 20 % everywhere: never an outlier
        cells[(h, 1)] = 1_000 if h in (3, 7) else 100 + h  # 10 % on two hosts, ~1 % on the rest
    found = fleet._outliers(_sums(cells), busy, 0.01)
    assert _pairs(found) == {(1, 3), (1, 7)}
    # Farthest out first: equal shares, then host order.
    assert found.host.tolist() == [3, 7]
    assert found.share.tolist() == [0.1, 0.1]
    assert np.allclose(found.median, 0.0107)  # the median of the 12 shares (106 and 108), the two included
    assert (found.z >= fleet.OUTLIER_MIN_Z).all()


def test_a_function_on_two_hosts_only_is_an_outlier_there_against_a_median_of_zero():
    busy = np.full(12, 10_000, dtype=np.int64)
    cells = {(h, 0): 3_000 for h in range(12)}
    cells[(2, 1)] = cells[(9, 1)] = 500
    found = fleet._outliers(_sums(cells), busy, 0.01)
    assert _pairs(found) == {(1, 2), (1, 9)}
    assert found.median.tolist() == [0.0, 0.0] and np.isinf(found.z).all()


def test_uniform_load_lists_no_outlier():
    rng = np.random.default_rng(7)
    busy = np.full(12, 10_000, dtype=np.int64)
    cells = {(h, f): int(rng.integers(900, 1_100)) for h in range(12) for f in range(8)}
    assert not len(fleet._outliers(_sums(cells), busy, 0.01).function)


def test_a_tiny_host_is_not_an_outlier_nor_a_host_of_a_small_group():
    busy = np.array([10_000] * 11 + [40], dtype=np.int64)  # host 11 is nearly idle
    cells = {(h, 0): 100 for h in range(11)}
    cells[(11, 0)] = 30  # 75 % of the tiny host, 1 % elsewhere: too few samples to say
    assert not len(fleet._outliers(_sums(cells), busy, 0.01).function)
    # Enough samples, but not hot on the host (below min_share): not an outlier either.
    cells = {(h, 0): 1 for h in range(11)} | {(11, 0): 0}
    cells[(5, 0)] = 60  # 0.6 %: above the rest, below min_share
    del cells[(11, 0)]
    assert not len(fleet._outliers(_sums(cells), busy, 0.01).function)
    # Four busy hosts: too few for a median, whatever one of them does.
    cells = {(0, 0): 5_000, (1, 0): 10, (2, 0): 10, (3, 0): 10}
    assert not len(fleet._outliers(_sums(cells), np.full(4, 10_000, dtype=np.int64), 0.01).function)


def test_the_rule_over_600_hosts_and_5000_functions_is_cheap_beside_the_ranking():
    rng = np.random.default_rng(25)
    hosts, functions = 600, 5_000
    # Each host has samples of ~1,500 of the functions (a long tail), a few functions hot on a few hosts.
    per_host = [np.sort(rng.choice(functions, 1_500, replace=False)) for _ in range(hosts)]
    host = np.concatenate([np.full(len(p), h, dtype=np.int64) for h, p in enumerate(per_host)])
    function = np.concatenate(per_host).astype(np.int64)
    samples = rng.geometric(0.01, len(host)).astype(np.int64)
    spikes = rng.choice(len(host), 40, replace=False)
    samples[spikes] *= 100
    sums = fleet._Sums(host, function, samples, np.arange(functions, dtype=np.int64))
    busy = np.bincount(host, weights=samples).astype(np.int64)
    t = time.perf_counter()
    for _ in range(5):
        fleet._rank(sums, busy, 0.01)
    rank_s = (time.perf_counter() - t) / 5
    t = time.perf_counter()
    for _ in range(5):
        found = fleet._outliers(sums, busy, 0.01)
    outlier_s = (time.perf_counter() - t) / 5
    print(
        f"600x5000 ({len(host)} cells): _rank {rank_s * 1000:.1f} ms, _outliers {outlier_s * 1000:.1f} ms, "
        f"{len(found.function)} outliers"
    )
    assert len(found.function) > 0
    assert outlier_s < 0.25
