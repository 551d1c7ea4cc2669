"""The compute engines' durations, one term per engine of ``dlproc/hardware/gateware``: conv,
pool, and the serial engines of the optional blocks (adder, upsample, LRN, softmax, FC).

The machine (:mod:`dlproc.estimate.machine`) decides *when* the compute sequencer hands an
instruction to its engine; these terms say how long the engine then takes. The conv engine keeps
state from tile to tile (the next tile's first tap waits for the previous tile's accumulator
drain), so it is an object; the others are functions of the instruction alone.
"""

from __future__ import annotations

from dlproc.estimate.timing import EstimateError, TimingParams
from dlproc.hardware import isa
from dlproc.hardware.costs import dw_walk, pool_plane_cycles, pool_plane_reads


class ConvTiming:
    """The conv engine (``gateware/conv.py``): ``max(N, 3)`` cycles per tap of a tile of N output
    pixels, the accumulate stage, the ping-pong drain of N cycles and the output-stage latency."""

    def __init__(self, tp: TimingParams):
        self.tp = tp
        self.ready = 0.0  # the conv engine accepts a new command from here on
        self.s_gate = 0.0  # earliest first issue of the next tile (previous tile hand-over)
        self.drain_end = 0.0  # the previous tile's drain has finished reading ACC

    def run(self, insn: isa.Conv, a: float) -> tuple[float, int]:
        """(cycle its last output word is written, MAC issue cycles) of a CONV accepted at ``a``."""
        tp = self.tp
        taps = insn.cin_blocks * insn.kh * insn.kw
        n = insn.out_h * insn.out_w
        per_tap = max(n, 3)
        s = max(a + tp.conv_first_issue, self.s_gate)
        if insn.acc_in:
            # Continuing held partial sums: the first tap reads ACC, after the held tile's drain item.
            s = max(s, self.drain_end)
        if insn.dw:
            # The depthwise walk (one evaluation per output pixel): its evaluations enter the
            # array's stage 2 directly, one cycle ahead of an ordinary issue's INP word.
            reads, last_rows = dw_walk(insn)
            last_issue = s + reads + last_rows - 1
            sweep_end = last_issue + 2
            taps = 1
        elif taps > 1:
            # The second tap reads ACC, so it waits until the previous tile's drain has read it.
            s2 = max(s + per_tap, self.drain_end)
            last_issue = s2 + (taps - 2) * per_tap + n - 1
            sweep_end = s2 + (taps - 1) * per_tap
        else:
            last_issue = s + n - 1
            sweep_end = s + per_tap
        self.ready = sweep_end
        # Hand-over to the next tile: its first tap waits for this tile's final write.
        if insn.dw:
            self.s_gate = last_issue + tp.acc_stages + 2
        else:
            self.s_gate = sweep_end + min(n, 3) + tp.acc_stages - 3 + (1 if taps == 1 else 0)
        drain = max(last_issue + tp.acc_stages + tp.conv_drain_gap, self.drain_end + 1)
        drained = 1 if insn.acc_keep else n  # a held tile drains as one item that writes nothing
        self.drain_end = drain + drained
        return drain + drained + tp.ostage_latency, taps * n


def pool_cycles(insn: isa.Pool) -> int:
    """Engine cycles of a POOL (``gateware/pool.py``): its planes one after the other."""
    return insn.z_size * pool_plane_cycles(insn)


def pool_reads(insn: isa.Pool) -> int:
    """Window reads of a POOL (its work, for the bound classification)."""
    return insn.z_size * pool_plane_reads(insn)


#: LRNTAB: command check and TAB_CHECK before its first PRM read, and the return to IDLE (measured)
LRNTAB_SETUP = 4


def serial_work(insn: isa.Instruction, c: int, fc_lanes: int = 4) -> tuple[int, bool]:
    """(engine cycles, writes OUT) of an optional-block instruction, from the engines' docstrings:
    ADD one word per 2 cycles, UPSAMPLE and LRN one word per cycle, LRNTAB C + 2 cycles per PRM
    word (read, wait, one table entry per lane; ACTTAB the same), SMXTAB one table entry (lane) per cycle, SOFTMAX
    3 * cin_blocks + 65 cycles per pixel."""
    name = type(insn).__name__
    f = insn.__dict__
    if name == "Add":
        return 2 * f["count"], True
    if name == "Upsample":
        return f["out_h"] * f["out_w"] * f["z_size"], True
    if name == "Lrn":
        return f["n_pix"] * f["cin_blocks"] + 12, True
    if name == "Softmax":
        return f["n_pix"] * (3 * f["cin_blocks"] + 65), True
    if name in ("LrnTab", "ActTab"):  # per PRM word: TAB_READ, TAB_WAIT, then one table entry per lane
        return f["count"] * (c + 2) + LRNTAB_SETUP, False
    if name == "SmxTab":
        return f["count"] * c, False
    if name == "Fc":  # dlproc.hardware.gateware.fc: setup 3, x copy, one weight slice of F bytes per cycle
        lanes = fc_lanes
        copy = -(-f["n_in"] // c) * -(-c // lanes) + 1 if f["load_x"] else 0
        return 3 + copy + f["n_out"] * -(-f["n_in"] // lanes), True
    raise EstimateError(f"the estimator has no timing for {name.upper()} instructions")

