"""Cycle costs of the engines that both the planners and the estimator need.

The pool planner chooses its tiles with the same per-plane cost the estimator charges, so the two
cannot drift apart; it lives here, below both, because it describes the pool engine
(``gateware/pool.py``) and nothing else.
"""

from __future__ import annotations

from dlproc.hardware import isa

__all__ = ["pool_plane_reads", "pool_plane_cycles", "dw_walk"]


def pool_plane_reads(insn: isa.Pool) -> int:
    """INP words the pool engine reads for one plane: every needed window column once per output
    row (kh words each): kw columns for a row's first output, ``min(stride_x, kw)`` for the others."""
    n_new = min(insn.stride_x, insn.kw)
    return insn.out_h * insn.kh * (insn.kw + (insn.out_w - 1) * n_new)


def pool_plane_cycles(insn: isa.Pool) -> int:
    """Cycles of one plane of a POOL in the pool engine (``gateware/pool.py``), PLANE_PRM to the
    next plane's PLANE_PRM (exact when the column walk is never held by the 64-column buffer,
    i.e. always unless kw > kh * min(stride_x, kw), where the window walk is the bottleneck anyway).

    The column walk reads one word per cycle; column results are foldable 4 cycles after their
    last word; the window walk folds kw columns per output, one per cycle, in output order, so its
    last fold is at ``max_j(R_j + 3 + (N - 1 - j) * kw)`` after the sweep starts (R_j = words read
    through output j, N outputs); then 4 cycles of pipeline and the state change. ``R_j - j*kw``
    is linear in ox and in oy, so the maximum is at a corner of the output plane.
    """
    kh, kw, ow, oh = insn.kh, insn.kw, insn.out_w, insn.out_h
    n_new = min(insn.stride_x, kw)
    row = kh * kw + (ow - 1) * kh * n_new  # words read per output row

    def slack(oy: int, ox: int) -> int:  # R_j - j*kw for output j = (oy, ox)
        return oy * row + kh * kw + ox * kh * n_new - (oy * ow + ox) * kw

    worst = max(slack(oy, ox) for oy in {0, oh - 1} for ox in {0, ow - 1})
    start = 2 if insn.mode == isa.PoolMode.AVG else 1  # PLANE_PRM (and PRM_WAIT)
    return start + 3 + worst + (oh * ow - 1) * kw + 5


def dw_walk(insn: isa.Conv) -> tuple[int, int]:
    """(cycles from a depthwise CONV's first INP read to its last, rows of its last strip) in the
    conv engine's depthwise walk (``gateware/conv.py``, "Depthwise").

    Per strip of R_s output rows the walk reads every column it needs, (out_w - 1) * stride_x + kw
    of them, of h_s = (R_s - 1) * stride_y + kh words each, one word per cycle. The strip's rows
    are evaluated one per cycle after each output column completes, while the next column loads;
    only the first column of a strip can be shorter than the previous strip's evaluations, and
    its last word then waits for them: max(0, R_prev - h_s) cycles."""
    cols = (insn.out_w - 1) * insn.stride_x + insn.kw
    rows = [min(insn.dw_rows, insn.out_h - r0) for r0 in range(0, insn.out_h, insn.dw_rows)]
    heights = [(r - 1) * insn.stride_y + insn.kh for r in rows]
    cycles = cols * sum(heights)
    cycles += sum(max(0, prev - h) for prev, h in zip(rows, heights[1:]))
    return cycles, rows[-1]
