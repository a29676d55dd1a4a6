"""How a routed-experts layer splits a chunk of (token, expert) pairs into tiles: the static sizes both LLM
builders give the layer (`model.MoE`, `direct`), computed from the pair and expert counts alone."""

from __future__ import annotations

# Copying one expert's weights (a GATHER) costs about as much as multiplying this many rows by them (measured on
# the 32-expert benchmark model: tiles of 8, 24, 64 and 128 rows gave 1159, 1483, 1551 and 1293 tokens/s; with a
# first tile per expert read in place, 32 rows, the optimum this constant gives, was also the fastest measured).
_EXPERT_COPY_ROWS = 64


def expert_tiles(assignments: int, experts: int, rows: int) -> int:
    """The most tiles of `rows` rows that `assignments` (token, expert) pairs over `experts` experts can fill,
    each expert's pairs in tiles of their own: ceil((assignments + experts * (rows - 1)) / rows)."""
    return -(-(assignments + experts * (rows - 1)) // rows)


def expert_tile_rows(assignments: int, experts: int) -> int:
    """Whether a routed chunk is worth sorting into tiles: 1 when each assignment should gather its own expert's
    weights (a token alone), else the rows per tile that minimise the weight copies plus the rows multiplied
    over the most tiles the chunk can fill, all tiles gathered."""
    return min(range(1, 65), key=lambda rows: (expert_tiles(assignments, experts, rows) * (_EXPERT_COPY_ROWS + rows),
                                               rows))


def overflow_tiles(assignments: int, rows: int) -> int:
    """The most tiles of `rows` rows that the pairs past each expert's first `rows` can fill, each expert's in
    tiles of their own. With E' experts overflowing by m_e >= 1 pairs each, sum(ceil(m_e / rows)) <=
    (sum(m_e) + E' (rows - 1)) / rows <= (assignments - E' rows + E' (rows - 1)) / rows, at most
    (assignments - 1) / rows."""
    return (assignments - 1) // rows


def first_tile_rows(assignments: int, experts: int) -> int:
    """The rows of each expert's first tile, read against the expert's weights in place: every expert computes
    that many rows whatever its share, and the pairs past them go to gathered overflow tiles of as many rows.
    Chosen to minimise the rows multiplied plus the weight copies, over multiples of 8 (the matrix kernels'
    column blocks)."""
    candidates = range(8, max(8, min(assignments, 128)) + 1, 8)
    return min(candidates, key=lambda rows: (experts * rows + overflow_tiles(assignments, rows)
                                             * (_EXPERT_COPY_ROWS + rows), rows))
