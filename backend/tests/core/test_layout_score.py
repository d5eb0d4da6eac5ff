# SPDX-License-Identifier: Apache-2.0
"""The layout candidates' figures alone (app.domain.layout_candidates), on cases the route tests do not
reach: blocks that straddle a line at an unaligned address, a jump whose edges are not all exact-derived,
a function with no hot code, and the score's nulls."""

from app.domain.layout_candidates import figures, hot_lines, score, taken_share
from app.protocol.proto import pb

TAKEN, FT, TC = pb.EDGE_KIND_TAKEN, pb.EDGE_KIND_FALLTHROUGH, pb.EDGE_KIND_TAIL_CALL
EXACT, ESTIMATED = pb.EDGE_LABEL_EXACT_DERIVED, pb.EDGE_LABEL_ESTIMATED
# Catalog blocks: [offset, size, instructions, [[kind, target, name], ...]].
CODE = [
    [0x00, 0x20, 4, [[pb.SUCCESSOR_KIND_FALLTHROUGH, 0x20, ""], [pb.SUCCESSOR_KIND_TAKEN, 0x40, ""]]],
    [0x20, 0x20, 4, [[pb.SUCCESSOR_KIND_FALLTHROUGH, 0x40, ""]]],
    [0x40, 0x08, 1, [[pb.SUCCESSOR_KIND_TAIL_CALL, 0, "next"]]],
]


def test_hot_lines_counts_every_line_a_block_straddles():
    # 0x1030..0x104f crosses from line 0x40 into 0x41; 0x1050..0x1057 stays in 0x41.
    assert hot_lines(0x1030, [(0x00, 0x20), (0x20, 0x08)], 64) == 2
    assert hot_lines(0x1000, [(0x00, 0x20), (0x20, 0x08)], 64) == 1
    assert hot_lines(0x103F, [(0x00, 0x02)], 64) == 2
    assert hot_lines(0x1000, [(0x00, 0)], 64) == 0


def test_taken_share_needs_every_jump_edge_exact():
    edges = [(0x00, 0x20, FT, EXACT, 30), (0x00, 0x40, TAKEN, EXACT, 10), (0x40, -1, TC, EXACT, 40)]
    assert taken_share(edges, {0x00, 0x40}) == (50 / 80, 80)
    assert taken_share([*edges[:2], (0x40, -1, TC, ESTIMATED, 40)], {0x00, 0x40}) == (None, 0)
    assert taken_share([], {0x00}) == (None, 0)


def test_figures_of_a_function_at_an_unaligned_address():
    fn = {"address": 0x1030, "blocks": CODE}
    f = figures(fn, {0x00: 5, 0x40: 1}, "samples", {"size_bytes": 32768, "line_bytes": 64, "ways": 8}, None)
    # Hot: 0x1030..0x104f and 0x1070..0x1077: lines 0x40, 0x41; 40 bytes; both blocks end in a jump.
    assert (f["hot_blocks"], f["hot_bytes"], f["hot_jumps"], f["hot_lines"], f["minimum_lines"]) == (2, 40, 2, 2, 1)
    assert f["branch_density"] == 2 * 64 / 40 and f["l1i_lines"] == 512 and f["taken_share"] is None
    assert score(0.5, f) == 0.5 * 2 * (2 * 64 / 40)


def test_no_hot_code_or_no_geometry_gives_nulls_not_numbers():
    fn = {"address": 0x1000, "blocks": CODE}
    cold = figures(fn, {}, "samples", {"size_bytes": 32768, "line_bytes": 64, "ways": 8}, None)
    assert (cold["hot_bytes"], cold["branch_density"], score(0.1, cold)) == (0, None, None)
    blind = figures(fn, {0x00: 1}, "samples", None, None)
    assert (blind["hot_lines"], blind["l1i_share"], score(0.1, blind)) == (None, None, None)
    assert (
        score(None, figures(fn, {0x00: 1}, "samples", {"size_bytes": 32768, "line_bytes": 64, "ways": 8}, None)) is None
    )
