# SPDX-License-Identifier: Apache-2.0
"""app.storage.stacks.build_tree, the flame graph's merge of a range's paths, against the plainest reference: per
root-first prefix of every path, the samples of the paths through it (total) and ending at it (self),
per side. Random paths that share prefixes (as call stacks do), a path that is a prefix of another, the
empty path, two sides, and a tree folded to fewer nodes."""

import random
from array import array
from collections import defaultdict

import pytest

from app.storage.stacks import build_tree


def _paths(rng: random.Random, count: int) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    while len(out) < count:
        rooted = [rng.randrange(8)]
        for _ in range(rng.randrange(7)):
            rooted.append(rng.randrange(1 << 32) if rng.random() < 0.05 else rng.randrange(6))
        out[array("I", reversed(rooted)).tobytes()] = rng.randint(1, 50)
    out[b""] = 3  # a stack without frames counts at the root
    return out


def _reference(sides: list[dict[bytes, int]]) -> dict[tuple, tuple[list[int], list[int]]]:
    ref: dict[tuple, tuple[list[int], list[int]]] = defaultdict(lambda: ([0] * len(sides), [0] * len(sides)))
    for si, side in enumerate(sides):
        for packed, count in side.items():
            path = array("I")
            path.frombytes(packed)
            rooted = tuple(reversed(path))
            for d in range(len(rooted) + 1):
                ref[rooted[:d]][0][si] += count
            ref[rooted][1][si] += count
    return dict(ref)


def _by_prefix(tree: dict) -> dict[tuple, tuple[list[int], list[int]]]:
    prefix: list[tuple] = []
    out = {}
    for i, (fi, p) in enumerate(zip(tree["frame"], tree["parent"], strict=True)):
        assert p < i, "pre-order: a parent comes before its children"
        prefix.append(prefix[p] + (fi,) if p >= 0 else ())
        out[prefix[i]] = ([t[i] for t in tree["total"]], [s[i] for s in tree["self"]])
    assert len(out) == len(prefix), "one node per prefix"
    return out


@pytest.mark.parametrize("nsides", [1, 2])
def test_tree_holds_every_prefix_with_its_samples_children_heaviest_first(nsides):
    rng = random.Random(nsides)
    sides = [_paths(rng, 400) for _ in range(nsides)]
    tree = build_tree(sides)
    assert tree["folded"] == 0
    assert _by_prefix(tree) == _reference(sides)
    weight = [sum(t[i] for t in tree["total"]) for i in range(len(tree["frame"]))]
    kids: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(tree["parent"]):
        if p >= 0:
            kids[p].append(i)
    for k in kids.values():
        assert [weight[i] for i in k] == sorted((weight[i] for i in k), reverse=True)


def test_a_tree_over_the_limit_keeps_the_heaviest_nodes_and_folds_the_rest_into_their_parents():
    rng = random.Random(7)
    sides = [_paths(rng, 400), _paths(rng, 300)]
    full = _reference(sides)
    tree = build_tree(sides, max_nodes=100)
    kept = _by_prefix(tree)
    assert len(kept) == 100
    lightest_kept = min(sum(t) for t, _ in kept.values())
    assert all(sum(t) <= lightest_kept for prefix, (t, _) in full.items() if prefix not in kept)
    for prefix, (total, own) in kept.items():
        assert total == full[prefix][0], "a kept node keeps its total"
        # Its self samples now include the totals of its children that were folded.
        gone = [full[c][0] for c in full if len(c) == len(prefix) + 1 and c[:-1] == prefix and c not in kept]
        assert own == [full[prefix][1][s] + sum(g[s] for g in gone) for s in range(2)]
    assert tree["folded"] == sum(sum(t) for c, (t, _) in full.items() if c not in kept and c[:-1] in kept)


def test_empty_ranges_are_a_root_alone():
    assert build_tree([{}, {}]) == {"frame": [-1], "parent": [-1], "total": [[0], [0]], "self": [[0], [0]], "folded": 0}
