"""The compute unit: executes the CONV, POOL and FINISH instructions of the program.

It sits between the load and store units of the decoupled access/execute pipeline
(load -> compute -> store) and contains

* the instruction sequencer: takes one 256-bit instruction at a time from ``insn`` (the fetch
  unit's compute queue), waits for and consumes the dependency tokens its ``pop_*`` flags ask for,
  then hands it to an engine;
* the :class:`~dlproc.hardware.gateware.conv.ConvEngine` (C x C MAC array, accumulator memory, drain),
* the :class:`~dlproc.hardware.gateware.pool.PoolEngine`,
* one shared :class:`~dlproc.hardware.gateware.output_stage.OutputStage` whose results go to OUT,
* the optional blocks, generated only when ``hw`` enables them: the
  :class:`~dlproc.hardware.gateware.add.AddEngine` (ADD, ``hw.adder``) and the
  :class:`~dlproc.hardware.gateware.upsample.UpsampleEngine` (UPSAMPLE, ``hw.upsample``), the
  :class:`~dlproc.hardware.gateware.lrn.LrnEngine` (LRNTAB, LRN, ``hw.lrn``) and the
  :class:`~dlproc.hardware.gateware.softmax.SoftmaxEngine` (SMXTAB, SOFTMAX, ``hw.softmax``) and the
  :class:`~dlproc.hardware.gateware.fc.FcEngine` (FC, ``hw.fc``; it shares the WGT read port with the conv
  engine) and the :class:`~dlproc.hardware.gateware.act_table.ActTableEngine` (ACTTAB, ``hw.act_table``,
  which fills the output stage's activation table). Like POOL, their instructions start when everything before them has completed.

Token ports (the core's token counters sit outside; one cycle pulses, ``*_pop`` only while the
matching ``*_valid`` is high):

* ``tok_l2c_valid``/``tok_l2c_pop``  a load->compute token is available / consume it (pop_prev)
* ``tok_s2c_valid``/``tok_s2c_pop``  a store->compute token is available / consume it (pop_next)
* ``tok_c2l_push``  give the load unit a token (push_prev)
* ``tok_c2s_push``  give the store unit a token (push_next)

A push is given when the instruction has *completed*: for CONV and POOL when the last word of
its output has been written to OUT (the flags travel with that word through the output stage),
so a STORE waiting for the token always reads finished data. Because a CONV is handed to the
conv engine as soon as the engine can start it, the next instruction's token wait overlaps the
previous tile's drain. POOL waits until everything before it has completed (it shares the INP
port and the output stage), and CONV waits for a running POOL to finish reading.

FINISH waits until every earlier instruction has completed, gives its own pushes (if any) and
raises ``finished`` (level, until reset). The core sets DONE when ``finished`` is high and the
other units are idle. The unit restarts from its reset state; the core resets it (for example
with ``ResetInserter``) when a run starts.

``busy`` is high while an instruction is executing anywhere in the unit (sequencer dispatching,
an engine working, or results in flight), ``stall`` while the sequencer waits for a token
(both can be high together: a drain may run while the next instruction waits). ``mac_active``
is high in every cycle the MAC array consumes an INP word (C*C MACs), ``fc_mac_active`` in every
cycle the FC engine's lanes multiply a weight slice (``hw.fc_lanes`` MACs; always low without the
FC engine). The core counts both (perf counters MAC_ACTIVE and FC_MAC_ACTIVE).

Errors (sticky ``error`` with an :class:`dlproc.hardware.isa.ErrorCode` in ``error_code``): an opcode
other than CONV/POOL/FINISH and the optional blocks' gives ILLEGAL_OPCODE, an optional block's
opcode when the block was not generated BLOCK_ABSENT; the engines report SRAM_RANGE and
ILLEGAL_FIELD. After an error the unit accepts no further instruction.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from dlproc.hardware import isa

from dlproc.hardware.gateware.act_table import ActTableEngine
from dlproc.hardware.gateware.lrn import LrnEngine
from dlproc.hardware.gateware.engine import (TAG_TO_INP, buffer_addr_bits, inp_word_layout, read_port,
                                             result_addr_bits, wgt_word_layout)
from dlproc.hardware.gateware.conv import CONV_CMD_LAYOUT, ConvEngine
from dlproc.hardware.gateware.add import AddEngine
from dlproc.hardware.gateware.fc import FcEngine
from dlproc.hardware.gateware.output_stage import OutputStage, out_word_layout, prm_word_layout
from dlproc.hardware.gateware.pool import POOL_CMD_LAYOUT, PoolEngine
from dlproc.hardware.gateware.softmax import SoftmaxEngine
from dlproc.hardware.gateware.upsample import UpsampleEngine

__all__ = [
    "ComputeUnit",
    "default_acc_depth",
    "inp_word_layout",
    "wgt_word_layout",
    "prm_word_layout",
    "out_word_layout",
]


#: Optional-block opcodes that write nothing to OUT (completion = their engine is idle again).
_NO_OUTPUT = (isa.Opcode.LRNTAB, isa.Opcode.SMXTAB, isa.Opcode.ACTTAB)


def _any(bits) -> Value:
    """OR of 1-bit values. (``sum(bits).bool()`` would build an adder chain: Yosys maps it to
    carry cells, which put the unit's error and busy summaries on the critical path.)"""
    bits = list(bits)
    return Cat(*bits).any() if bits else Const(0)


def default_acc_depth(hw: isa.HardwareParams) -> int:
    """Accumulator depth (output pixels per CONV) when the caller does not choose one.

    Half of OUT: a tile lands in one half of the double-buffered OUT, so no double-buffered
    program has a larger tile. This is the rule the ISA-level simulator uses as well.
    """
    return int(getattr(hw, "acc_depth", None) or max(1, hw.out_depth // 2))


class ComputeUnit(wiring.Component):
    """CONV / POOL / FINISH execution. See the module docstring for the port protocol.

    Parameters: ``hw`` (buffer depths and C) and ``acc_depth`` (ACC words per bank; default
    :func:`default_acc_depth`). Memory ports follow ``amaranth.lib.memory`` signatures seen from
    the user: read ports ``inp``, ``wgt``, ``prm`` (``addr``/``en`` out, ``data`` in, one cycle
    read latency), write port ``out`` (``addr``/``data``/``en`` out).
    """

    def __init__(self, hw: isa.HardwareParams, acc_depth: int | None = None) -> None:
        self.hw = hw
        self.c = hw.c
        self.acc_depth = default_acc_depth(hw) if acc_depth is None else acc_depth
        self.inp_bits = buffer_addr_bits(hw, "inp")
        self.wgt_bits = buffer_addr_bits(hw, "wgt")
        self.prm_bits = buffer_addr_bits(hw, "prm")
        self.out_bits = buffer_addr_bits(hw, "out")
        super().__init__({
            "insn": In(stream.Signature(isa.INSN_LAYOUT)),
            "inp": Out(read_port(self.inp_bits, inp_word_layout(self.c))),
            "wgt": Out(read_port(self.wgt_bits, wgt_word_layout(self.c))),
            "prm": Out(read_port(self.prm_bits, prm_word_layout(self.c))),
            "out": Out(memory.WritePort.Signature(addr_width=self.out_bits, shape=out_word_layout(self.c),
                                                  granularity=1).flip()),
            # Results of a CONV with to_inp: the buffers give these writes priority over the load
            # unit's (which waits a cycle), see ``Buffers``/``DlprocTop``.
            "inp_w": Out(memory.WritePort.Signature(addr_width=self.inp_bits, shape=inp_word_layout(self.c)).flip()),
            "tok_l2c_valid": In(1),
            "tok_l2c_pop": Out(1),
            "tok_s2c_valid": In(1),
            "tok_s2c_pop": Out(1),
            "tok_c2l_push": Out(1),
            "tok_c2s_push": Out(1),
            "busy": Out(1),
            "stall": Out(1),
            "mac_active": Out(1),
            "fc_mac_active": Out(1),
            "finished": Out(1),
            "error": Out(1),
            "error_code": Out(4),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.conv = conv = ConvEngine(self.hw, self.acc_depth)
        m.submodules.pool = pool = PoolEngine(self.hw, self.acc_depth)
        m.submodules.ostage = ostage = OutputStage(self.c, result_addr_bits(self.hw), conv.ost.tag.shape().width,
                                                   table=self.hw.act_table)
        # Optional blocks exist only when the configuration enables them; an absent block's
        # opcode stops the unit with BLOCK_ABSENT (see the sequencer).
        extra: dict[isa.Opcode, tuple[wiring.Component, stream.Interface]] = {}  # opcode -> (engine, cmd)
        if self.hw.adder:
            m.submodules.add = eng = AddEngine(self.hw)
            extra[isa.Opcode.ADD] = (eng, eng.cmd)
        if self.hw.upsample:
            m.submodules.upsample = eng = UpsampleEngine(self.hw)
            extra[isa.Opcode.UPSAMPLE] = (eng, eng.cmd)
        if self.hw.lrn:
            m.submodules.lrn = eng = LrnEngine(self.hw)
            extra[isa.Opcode.LRN] = (eng, eng.cmd)
            extra[isa.Opcode.LRNTAB] = (eng, eng.tab_cmd)
        if self.hw.softmax:
            m.submodules.softmax = eng = SoftmaxEngine(self.hw)
            extra[isa.Opcode.SOFTMAX] = (eng, eng.cmd)
            extra[isa.Opcode.SMXTAB] = (eng, eng.tab_cmd)
        if self.hw.fc:
            # The FC engine (fc module) runs like POOL: when everything before it has completed.
            m.submodules.fc = eng = FcEngine(self.hw)
            extra[isa.Opcode.FC] = (eng, eng.cmd)
        if self.hw.act_table:
            # ACTTAB (activation table): fills the output stage's table, so it runs like LRNTAB.
            m.submodules.acttab = eng = ActTableEngine(self.hw)
            extra[isa.Opcode.ACTTAB] = (eng, eng.tab_cmd)
            m.d.comb += [ostage.tab_we.eq(eng.tab_we), ostage.tab_addr.eq(eng.tab_addr),
                         ostage.tab_data.eq(eng.tab_data)]
        serial = [pool]  # engines that run only when everything else is done
        for eng, _ in extra.values():
            if eng not in serial:
                serial.append(eng)
        prm_users = [eng for eng in serial if hasattr(eng, "prm")]
        inp_users = [eng for eng in serial if hasattr(eng, "inp")]  # not ACTTAB

        # ---------------------------------------------------------------- shared ports
        # The engines never read INP (or PRM) in the same cycle: the sequencer starts a POOL (or
        # an optional block's instruction) only when every engine is idle and a CONV only when
        # the serial engines are, so a plain "whoever enables" mux is enough. Read data goes to
        # all; the idle ones ignore it.
        inp_addr = conv.inp.addr
        for eng in inp_users:
            inp_addr = Mux(eng.inp.en, eng.inp.addr, inp_addr)
        m.d.comb += [
            self.inp.addr.eq(inp_addr),
            self.inp.en.eq(_any([conv.inp.en, *(eng.inp.en for eng in inp_users)])),
            conv.inp.data.eq(self.inp.data),
            conv.prm.data.eq(self.prm.data),
        ]
        prm_addr = conv.prm.addr
        for eng in prm_users:
            prm_addr = Mux(eng.prm.en, eng.prm.addr, prm_addr)
        m.d.comb += [
            self.prm.addr.eq(prm_addr),
            self.prm.en.eq(_any([conv.prm.en, *(eng.prm.en for eng in prm_users)])),
        ]
        m.d.comb += [eng.inp.data.eq(self.inp.data) for eng in inp_users]
        m.d.comb += [eng.prm.data.eq(self.prm.data) for eng in prm_users]
        wgt_users = [eng for eng in serial if hasattr(eng, "wgt")]  # the FC engine streams WGT too
        if wgt_users:
            wgt_addr = conv.wgt.addr
            for eng in wgt_users:
                wgt_addr = Mux(eng.wgt.en, eng.wgt.addr, wgt_addr)
            m.d.comb += [
                self.wgt.addr.eq(wgt_addr),
                self.wgt.en.eq(_any([conv.wgt.en, *(eng.wgt.en for eng in wgt_users)])),
                conv.wgt.data.eq(self.wgt.data),
            ]
            m.d.comb += [eng.wgt.data.eq(self.wgt.data) for eng in wgt_users]
        else:
            wiring.connect(m, conv.wgt, wiring.flipped(self.wgt))
        # The same argument holds for the output stage: a serial engine's last item entered it
        # before a CONV can even start, and a CONV's drain has ended before a serial one starts.
        for name in ("valid", "acc", "params", "zp_out", "act_min", "act_max", "addr", "tag", "keep", "table"):
            value = Value.cast(getattr(conv.ost, name))
            for eng in serial:
                value = Mux(eng.ost.valid, Value.cast(getattr(eng.ost, name)), value)
            m.d.comb += getattr(ostage.i, name).eq(value)
        # Item tag: bit 0 last word, then the command's tag (push_prev, push_next, to_inp).
        to_inp = ostage.o.tag[1 + TAG_TO_INP]
        m.d.comb += [
            self.out.addr.eq(ostage.o.addr[:self.out_bits]),
            self.out.data.eq(ostage.o.data),
            # One enable per lane: the lanes an item keeps (``keep``, set only by an FC whose
            # outputs start inside a word, and by a held tile's one item) are left as they are.
            self.out.en.eq(Mux(ostage.o.valid & ~to_inp, ~ostage.o.keep, 0)),
            self.inp_w.addr.eq(ostage.o.addr[:self.inp_bits]),
            self.inp_w.data.eq(ostage.o.data),
            self.inp_w.en.eq(ostage.o.valid & to_inp & (ostage.o.keep == 0)),
        ]

        # ---------------------------------------------------------------- completion, tokens
        # Tag of an output-stage item: bit 0 = last word of its instruction, bits 1, 2 = the
        # instruction's push_prev, push_next.
        done_item = ostage.o.valid & ostage.o.tag[0]
        inflight = Signal(3)  # dispatched CONV/POOL instructions whose last word is not in OUT yet
        dispatched = Signal()
        m.d.sync += inflight.eq(inflight + dispatched - done_item)
        finish_push_prev, finish_push_next = Signal(), Signal()
        m.d.comb += [
            self.tok_c2l_push.eq((done_item & ostage.o.tag[1]) | finish_push_prev),
            self.tok_c2s_push.eq((done_item & ostage.o.tag[2]) | finish_push_next),
            self.mac_active.eq(conv.mac_active),
        ]
        if isa.Opcode.FC in extra:
            m.d.comb += self.fc_mac_active.eq(extra[isa.Opcode.FC][0].mac_active)

        # ---------------------------------------------------------------- sequencer
        ir = Signal(isa.INSN_LAYOUT)
        hdr = ir.header
        own_error = Signal()
        own_code = Signal(4)
        finished = Signal()
        engines = [conv, *serial]
        error = _any([own_error, *(eng.error for eng in engines)])
        error_code = own_code
        for eng in reversed(engines):
            error_code = Mux(eng.error, eng.error_code, error_code)
        m.d.comb += [
            self.error.eq(error),
            self.error_code.eq(Mux(own_error, own_code, error_code)),
            self.finished.eq(finished),
        ]
        serial_busy = _any([eng.busy for eng in serial])
        all_done = (inflight == 0) & ~conv.busy & ~serial_busy

        conv_fields = [n for n, _ in CONV_CMD_LAYOUT if n != "tag"]
        pool_fields = [n for n, _ in POOL_CMD_LAYOUT if n != "tag"]
        m.d.comb += [getattr(conv.cmd.payload, n).eq(getattr(ir.conv, n)) for n in conv_fields]
        m.d.comb += [getattr(pool.cmd.payload, n).eq(getattr(ir.pool, n)) for n in pool_fields]
        m.d.comb += [
            conv.cmd.payload.tag.eq(Cat(hdr.push_prev, hdr.push_next, ir.conv.to_inp)),
            pool.cmd.payload.tag.eq(hdr.push_prev | (hdr.push_next << 1)),
        ]
        for op, (eng, cmd) in extra.items():
            view = getattr(ir, op.name.lower())
            fields = [spec.name for spec in isa.INSTRUCTION_CLASSES[op].field_specs()]
            m.d.comb += [getattr(cmd.payload, n).eq(getattr(view, n)) for n in fields]
            if "tag" in cmd.payload.shape().members:
                m.d.comb += cmd.payload.tag.eq(hdr.push_prev | (hdr.push_next << 1))

        with m.FSM(name="sequencer") as fsm:
            with m.State("FETCH"):
                m.d.comb += self.insn.ready.eq(~error & ~finished)
                with m.If(self.insn.valid & self.insn.ready):
                    m.d.sync += ir.eq(self.insn.payload)
                    m.next = "TOKENS"
            with m.State("TOKENS"):
                have = ((~hdr.pop_prev | self.tok_l2c_valid) & (~hdr.pop_next | self.tok_s2c_valid))
                m.d.comb += self.stall.eq(~have)
                with m.If(have & ~error):
                    m.d.comb += [self.tok_l2c_pop.eq(hdr.pop_prev), self.tok_s2c_pop.eq(hdr.pop_next)]
                    m.next = "EXEC"
            with m.State("EXEC"):
                with m.Switch(hdr.opcode):
                    with m.Case(isa.Opcode.CONV):
                        # wait_writes: every earlier CONV's last item is written (inflight counts
                        # dispatched instructions whose last word is not yet in its buffer).
                        m.d.comb += conv.cmd.valid.eq(~serial_busy & ~error & (~ir.conv.wait_writes | (inflight == 0)))
                        with m.If(conv.cmd.valid & conv.cmd.ready):
                            m.d.comb += dispatched.eq(1)
                            m.next = "FETCH"
                    with m.Case(isa.Opcode.POOL):
                        m.d.comb += pool.cmd.valid.eq(all_done & ~error)
                        with m.If(pool.cmd.valid & pool.cmd.ready):
                            m.d.comb += dispatched.eq(1)
                            m.next = "FETCH"
                    for op, (eng, cmd) in extra.items():
                        with m.Case(op):
                            m.d.comb += cmd.valid.eq(all_done & ~error)
                            with m.If(cmd.valid & cmd.ready):
                                if op in _NO_OUTPUT:
                                    m.next = "QUIET"
                                else:
                                    m.d.comb += dispatched.eq(1)
                                    m.next = "FETCH"
                    absent = [op for op in isa.OPTIONAL_BLOCKS if op not in extra]
                    if absent:
                        with m.Case(*absent):
                            with m.If(~error):
                                m.d.sync += [own_error.eq(1), own_code.eq(isa.ErrorCode.BLOCK_ABSENT)]
                            m.next = "DONE"
                    with m.Case(isa.Opcode.FINISH):
                        with m.If(all_done & ~error):
                            m.d.comb += [finish_push_prev.eq(hdr.push_prev),
                                         finish_push_next.eq(hdr.push_next)]
                            m.d.sync += finished.eq(1)
                            m.next = "DONE"
                    with m.Default():
                        with m.If(~error):
                            m.d.sync += [own_error.eq(1), own_code.eq(isa.ErrorCode.ILLEGAL_OPCODE)]
                        m.next = "DONE"
            with m.State("QUIET"):
                # An instruction without OUT results (LRNTAB) has completed when its engine is
                # idle again; its pushes are given then, as FINISH gives its own.
                with m.If(~serial_busy & ~error):
                    m.d.comb += [finish_push_prev.eq(hdr.push_prev), finish_push_next.eq(hdr.push_next)]
                    m.next = "FETCH"
            with m.State("DONE"):
                pass

        m.d.comb += self.busy.eq(fsm.ongoing("EXEC") | fsm.ongoing("QUIET") | conv.busy | serial_busy | (inflight != 0))
        return m
