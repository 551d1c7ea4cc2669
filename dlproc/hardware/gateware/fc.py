"""The FC engine (fc module): batch-1 fully connected layers, one weight slice of F bytes per cycle.

Executes ``dlproc.hardware.isa.Fc`` (semantics there and in ``docs/isa.md``; golden model
``dlproc.targets.golden.ops.fully_connected``). F = ``hw.fc_lanes`` (FCThreadNumber, at most C*C) int8 MAC lanes.

Why this shape: a batch-1 FC layer uses each weight once, so it is bound by the memory port
(B bytes per cycle) and not by MACs. The weights are streamed by the ordinary LOAD unit into the
double-buffered WGT memory (the compiler alternates the two halves and synchronises with the
usual tokens, so the load of tile k+1 overlaps the FC of tile k exactly as for CONV), and the
engine consumes them at F >= B bytes per cycle: one slice of F weights per cycle, the K = C*C // F
slices of a WGT word one after the other. The lanes work on one output at a time (a dot product
of F inputs per cycle and an adder tree), so any C and any power-of-two F fit together and every
output goes to its own lane of a C-lane OUT word through the shared output stage (bias, M/S
requantization, zero point, ReLU clamp: ``docs/numerics.md``).

The input vector does not fit the lanes' needs in INP (C bytes per word, F needed per cycle), so
``load_x`` first copies it into the engine's x buffer: F byte banks of ``fc_in_depth / F`` rows
(fc.InputMemorySize), element i in bank i % F, row i // F. An INP word holds C consecutive
elements; it is written in chunks of min(C, F) lanes, each rotated into place by a barrel rotator
(the banks of a chunk are distinct, so one chunk per cycle). The tiles of one layer reuse the x
buffer (``load_x = 0``).

Pipeline of the dot product (one slice per cycle, no stall):

* issue: WGT word ``wgt_base + s // K`` and x row j are read;
* 1: slice ``s % K`` of the word selected, x lanes of the last slice beyond n_in masked to 0;
* 2: F int8 x int8 products registered;
* adder tree, registered every two levels;
* A: the scalar accumulator: ``acc = (first slice ? bias[o % C] : acc) + tree`` (the addend is
  prepared one stage earlier, so the lane multiplexer is not in front of the adder); after the last
  slice of output o, ``acc`` goes into lane o % C of the block's accumulator word, and the word
  goes to the output stage after lane C-1 or the last output. An instruction's outputs start at
  lane ``lane0`` of its first word, whose lower lanes the output stage's ``keep`` bits leave as
  they are in OUT: a layer whose weights for C outputs do not fit a WGT half (VGG-16's first FC,
  25088 inputs) runs as several instructions per word. The PRM word of the block is read
  when its first item is one stage before A and stays on the port's data while the block passes
  A (no other engine reads PRM during an FC); M, M_neg, S are checked as for CONV.

Cycles: setup 3, copy ``ceil(n_in/C) * ceil(C/F)`` (load_x), then ``n_out * ceil(n_in/F)``, then
the pipeline and the output stage.

Run-time checks: zero sizes, act_min > act_max, n_out > fc_out_max and bad PRM words give
ILLEGAL_FIELD; n_in beyond the x buffer and INP/WGT/PRM/OUT words beyond their depths SRAM_RANGE
(checked per word as it is addressed; nothing is read or written there). The command comes in
through the shared :class:`~dlproc.hardware.gateware.engine.EngineCommand`, which registers the field
check and the x-buffer range for SETUP.

``mac_active`` is high once per weight slice (F MACs), in the products' stage: the compute
unit's ``fc_mac_active``, counted by the core's FC_MAC_ACTIVE performance counter.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, wiring

from dlproc.hardware import isa

from dlproc.hardware.gateware.engine import Engine, TAG_BITS, EngineCommand, table_refused
from dlproc.hardware.gateware.output_stage import REQUANT_LANE, requant_params_ok

__all__ = ["FC_CMD_LAYOUT", "FcEngine", "fc_pipeline_depth"]

FC_CMD_LAYOUT = data.StructLayout(
    {spec.name: spec.shape for spec in isa.Fc.field_specs()} | {"tag": unsigned(TAG_BITS)})


def _tree_stages(f: int) -> int:
    levels = max(0, (f - 1).bit_length())
    return (levels + 1) // 2


def fc_pipeline_depth(f: int) -> int:
    """Cycles from a slice's issue to its accumulate stage A."""
    return 3 + _tree_stages(f)


class FcEngine(Engine):
    """Executes FC commands (``cmd``); see the module docstring."""

    def __init__(self, hw: isa.HardwareParams) -> None:
        self.f = hw.fc_lanes
        super().__init__(hw, {"cmd": FC_CMD_LAYOUT}, ("inp", "wgt", "prm"), mac_active=True)

    def elaborate(self, platform) -> Module:
        m = Module()
        c, f, hw = self.c, self.f, self.hw
        E = isa.ErrorCode
        lf = (f - 1).bit_length()  # log2 F
        k_per = (c * c) // f  # slices per WGT word
        rows = hw.fc_in_depth // f
        error = Signal()
        code = Signal(4)
        m.d.comb += [self.error.eq(error), self.error_code.eq(code)]

        def fail(value: int | Value) -> None:
            with m.If(~error):
                m.d.sync += [error.eq(1), code.eq(value)]

        # ------------------------------------------------------------------ x buffer: F byte banks
        banks_w, banks_r = [], []
        for b in range(f):
            mem = memory.Memory(shape=signed(8), depth=rows, init=[])
            m.submodules[f"x{b}"] = mem
            banks_w.append(mem.write_port())
            banks_r.append(mem.read_port())

        # Accept and check (registered, see engine.py): the field check and the x-buffer range
        # (n_in beyond fc_in_depth) are used in SETUP; INP/WGT/PRM/OUT words are checked as the
        # engine addresses them.
        m.submodules.command = command = EngineCommand(
            FC_CMD_LAYOUT,
            illegal=lambda fl: ((fl.n_in == 0) | (fl.n_out == 0) | (fl.act_min > fl.act_max)
                                | (fl.n_out > hw.fc_out_max) | (fl.lane0 >= c) | table_refused(hw, fl)),
            ranges=[(lambda fl: fl.n_in, hw.fc_in_depth)],
        )
        wiring.connect(m, wiring.flipped(self.cmd), command.cmd)
        a = command.fields
        wide = isa.SRAM_ADDR_BITS + 2
        j_last = Signal(24)  # S - 1, S = ceil(n_in / F) slices per output
        o_last = Signal(16)  # n_out - 1
        rem = Signal(range(f + 1))  # lanes of the last slice
        # Copy state. The sums the copy needs next (the next INP address, the next word's first
        # element) are kept as counters of their own, so that no adder sits in front of a compare
        # or of the INP address.
        g = min(c, f)  # lanes per chunk
        n_chunks = -(-c // g)
        c_addr = Signal(wide)
        c_next = Signal(wide)  # c_addr + 1
        c_elem = Signal(26)  # element index of the current chunk's lane 0
        c_word_next = Signal(26)  # element index of the next word's lane 0
        c_q = Signal(range(max(n_chunks, 2)))
        # Issue state.
        o = Signal(16)
        o_lane = Signal(range(max(c, 2)))
        # The instruction's first PRM/OUT word, whose lanes below lane0 belong to another FC
        # instruction: they are kept (``keep_lo``) when the word is written.
        word0 = Signal()
        keep_lo = Signal(c)
        # The bias of output 0 (lane lane0 of PRM word prm_base), read in SETUP: the first item
        # of the first word takes it from this register rather than through a lane multiplexer
        # on the PRM read data in front of the accumulator's adder, which was the design's
        # critical path (192.8 MHz pre-route on de10nano_int8, against 205.3 without it).
        setup_read = Signal()
        bias0 = Signal(signed(32))
        # PRM and OUT word of the current output block (prm_base + block, out_base + block) as
        # counters: the range checks then compare registers with constants.
        pa = Signal(wide + 1)
        oa = Signal(wide + 1)
        j = Signal(24)
        q = Signal(range(max(k_per, 2)))
        wa = Signal(wide)
        issue = Signal()
        pipe_busy = Signal()

        m.d.comb += [self.prm.en.eq(0), self.inp.en.eq(0), self.wgt.en.eq(0)]
        for bw in banks_w:
            m.d.comb += bw.en.eq(0)

        with m.FSM(name="fc") as fsm:
            with m.State("IDLE"):
                # A new command waits for the previous one's pipeline: its fields are still in use.
                m.d.comb += command.enable.eq(~error & ~pipe_busy)
                with m.If(command.take):
                    m.next = "SETUP"
            with m.State("SETUP"):
                m.d.comb += setup_read.eq(1)
                m.d.sync += [
                    j_last.eq((a.n_in - 1) >> lf), o_last.eq(a.n_out - 1),
                    c_addr.eq(a.inp_base), c_next.eq(a.inp_base + 1), c_elem.eq(0), c_word_next.eq(c),
                    c_q.eq(0), o.eq(0), o_lane.eq(a.lane0), word0.eq(1), pa.eq(a.prm_base), oa.eq(a.out_base),
                    j.eq(0), q.eq(0),
                    wa.eq(a.wgt_base),
                ]
                with m.If(command.fault):  # ILLEGAL_FIELD before SRAM_RANGE
                    fail(command.code)
                    m.next = "IDLE"
                with m.Else():
                    m.next = "SETUP2"
            with m.State("SETUP2"):
                m.d.sync += [rem.eq(a.n_in - (j_last << lf)), keep_lo.eq((Const(1, c + 1) << a.lane0) - 1)]
                with m.Switch(a.lane0):
                    for lane in range(c):
                        with m.Case(lane):
                            m.d.sync += bias0.eq(self.prm.data[lane].bias)
                with m.If(a.load_x):
                    m.next = "COPY_READ"
                with m.Else():
                    m.next = "RUN"
            # ---- x copy: INP word -> chunks of g lanes, rotated into the banks
            with m.State("COPY_READ"):
                with m.If(c_addr >= hw.inp_depth):
                    fail(E.SRAM_RANGE)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += [self.inp.addr.eq(c_addr), self.inp.en.eq(1)]
                    m.next = "COPY_WRITE"
            with m.State("COPY_WRITE"):
                word = self.inp.data
                # The chunk's g lanes (the last chunk of a word may be shorter), zero-extended to F.
                chunk = Signal(data.ArrayLayout(signed(8), f))
                cvalid = Signal(f)
                for t in range(g):
                    lane = Signal(range(c + g), name=f"chunk_lane{t}")
                    m.d.comb += lane.eq(c_q * g + t)
                    m.d.comb += [chunk[t].eq(word.as_value().word_select(lane, 8) if n_chunks > 1 else word[t]),
                                 cvalid[t].eq(lane < c if n_chunks > 1 else 1)]
                for t in range(g, f):  # lanes beyond the chunk: nothing to write
                    m.d.comb += [chunk[t].eq(0), cvalid[t].eq(0)]
                # Rotate left by r = c_elem % F bytes: bank (r + t) % F gets lane t.
                r = c_elem[:lf] if lf else Const(0, 1)
                vals, valid = chunk.as_value(), cvalid
                for bit in range(lf):
                    sh = 1 << bit
                    vals = Mux(r[bit], vals.rotate_left(8 * sh), vals)
                    valid = Mux(r[bit], valid.rotate_left(sh), valid)
                base = c_elem >> lf
                for b in range(f):
                    # Bank b < r holds an element of the next row (b = F-1 never does). The row
                    # limit is compared on ``base`` (base + 1 < rows is base < rows - 1), so the
                    # write enable does not wait for the increment.
                    if lf and b < f - 1:
                        nxt = Const(b, lf + 1) < r
                        row, in_rows = Mux(nxt, base + 1, base), Mux(nxt, base < rows - 1, base < rows)
                    else:
                        row, in_rows = base, base < rows
                    m.d.comb += [banks_w[b].addr.eq(row), banks_w[b].data.eq(vals.word_select(b, 8)),
                                 banks_w[b].en.eq(valid[b] & in_rows)]
                last_chunk = c_q == n_chunks - 1
                more_words = c_word_next < a.n_in
                with m.If(~last_chunk):
                    m.d.sync += [c_q.eq(c_q + 1), c_elem.eq(c_elem + g)]
                with m.Else():
                    m.d.sync += [c_q.eq(0), c_elem.eq(c_word_next), c_word_next.eq(c_word_next + c),
                                 c_addr.eq(c_next), c_next.eq(c_next + 1)]
                    with m.If(more_words):
                        # Read the next word now: its data replaces this one's after this cycle.
                        with m.If(c_next >= hw.inp_depth):
                            fail(E.SRAM_RANGE)
                            m.next = "IDLE"
                        with m.Else():
                            m.d.comb += [self.inp.addr.eq(c_next), self.inp.en.eq(1)]
                    with m.Else():
                        m.next = "RUN"
            # ---- dot products: one slice per cycle
            with m.State("RUN"):
                bad = ((wa >= hw.wgt_depth)
                       | ((j == 0) & ((o_lane == 0) | (o == 0)) & ((pa >= hw.prm_depth) | (oa >= hw.out_depth))))
                with m.If(error):
                    m.next = "IDLE"
                with m.Elif(bad):
                    fail(E.SRAM_RANGE)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += [issue.eq(1), self.wgt.addr.eq(wa), self.wgt.en.eq(1)]
                    with m.If(q == k_per - 1):
                        m.d.sync += [q.eq(0), wa.eq(wa + 1)]
                    with m.Else():
                        m.d.sync += q.eq(q + 1)
                    with m.If(j != j_last):
                        m.d.sync += j.eq(j + 1)
                    with m.Else():
                        m.d.sync += [j.eq(0), o.eq(o + 1)]
                        with m.If(o_lane == c - 1):
                            m.d.sync += [o_lane.eq(0), word0.eq(0), pa.eq(pa + 1), oa.eq(oa + 1)]
                        with m.Else():
                            m.d.sync += o_lane.eq(o_lane + 1)
                        with m.If(o == o_last):
                            m.next = "IDLE"
        for br in banks_r:
            m.d.comb += [br.addr.eq(j), br.en.eq(issue)]

        # ------------------------------------------------------------------ data path
        # Each slice carries its bookkeeping down the pipeline; the PRM/OUT words travel as
        # addresses (checked in RUN, so they fit the ports' widths).
        meta = data.StructLayout({
            "valid": 1, "q": range(max(k_per, 2)), "first": 1, "last_j": 1, "lane": range(max(c, 2)),
            "pa": self.prm_bits, "oa": self.out_bits, "blk_first": 1, "blk_last": 1, "last": 1, "word0": 1,
        })
        m0 = Signal(meta)
        last_o = o == o_last
        last_j = j == j_last
        m.d.comb += [
            m0.valid.eq(issue), m0.q.eq(q), m0.first.eq(j == 0), m0.last_j.eq(last_j),
            m0.lane.eq(o_lane), m0.pa.eq(pa[:self.prm_bits]), m0.oa.eq(oa[:self.out_bits]),
            m0.blk_first.eq((j == 0) & ((o_lane == 0) | (o == 0))), m0.word0.eq(word0),
            m0.blk_last.eq((o_lane == c - 1) | last_o), m0.last.eq(last_o & last_j),
        ]
        depth = fc_pipeline_depth(f)
        pipe = [m0]
        for k in range(1, depth + 1):
            reg = Signal(meta, name=f"fc_m{k}")
            m.d.sync += reg.eq(pipe[-1])
            pipe.append(reg)
        m.d.comb += self.mac_active.eq(pipe[2].valid)

        # Stage 1: select the slice, mask the lanes beyond n_in in the last slice.
        m1 = pipe[1]
        wbytes = self.wgt.data.as_value()
        w1 = Signal(data.ArrayLayout(signed(8), f))
        x1 = Signal(data.ArrayLayout(signed(8), f))
        if k_per > 1:
            sel = wbytes[:8 * f * k_per].word_select(m1.q, 8 * f)
        else:
            sel = wbytes[:8 * f]
        m.d.comb += w1.eq(sel)
        for b in range(f):
            m.d.comb += x1[b].eq(Mux(~m1.last_j | (b < rem), banks_r[b].data, 0))
        w2 = Signal.like(w1)
        x2 = Signal.like(x1)
        # The data path's registers load only with a valid item (the slice's value matters only
        # then), so that they hold still, e.g. while the conv engine drives the shared WGT port;
        # Verilator then skips the products and the adder tree in those cycles.
        with m.If(m1.valid):
            m.d.sync += [w2.eq(w1), x2.eq(x1)]
        # Stage 2 -> 3: products.
        prods = [Signal(signed(16), name=f"fc_p{b}") for b in range(f)]
        with m.If(pipe[2].valid):
            for b in range(f):
                m.d.sync += prods[b].eq(w2[b] * x2[b])
        # Adder tree, registered every two levels (after the products at stage 3).
        level = list(prods)
        n_lv = 0
        stage = 3
        while len(level) > 1:
            nxt = []
            for i in range(0, len(level), 2):
                nxt.append(level[i] + level[i + 1] if i + 1 < len(level) else level[i])
            level = nxt
            n_lv += 1
            if n_lv % 2 == 0 or len(level) == 1:
                regs = []
                for i, v in enumerate(level):
                    r = Signal(signed(16 + n_lv), name=f"fc_t{stage}_{i}")
                    with m.If(pipe[stage].valid):
                        m.d.sync += r.eq(v)
                    regs.append(r)
                level = regs
                stage += 1
        tree = level[0]
        assert stage == depth, (stage, depth)

        # PRM word of a block: read when its first item is one stage before A.
        pre = pipe[depth - 1]
        m.d.comb += [self.prm.addr.eq(Mux(setup_read, a.prm_base, pre.pa)),
                     self.prm.en.eq(setup_read | (pre.valid & pre.blk_first))]
        # Stage A.
        ma = pipe[depth]
        prm_word = self.prm.data
        params_ok = Const(1)
        for lane in range(c):
            params_ok = params_ok & requant_params_ok(prm_word[lane])
        with m.If(ma.valid & ma.blk_first & ~params_ok):
            fail(E.ILLEGAL_FIELD)
        # The scalar accumulator's addend, prepared one stage early: for an output's first slice
        # the bias of its lane, else the running sum that stage A forms in this cycle (the item
        # one stage before A follows the item in A without a gap, as RUN issues every cycle).
        # Only the block's first item cannot have it prepared, since its PRM word arrives in
        # stage A: it takes lane 0's bias from the port, or in the instruction's first word the
        # bias of lane lane0 read in SETUP (``bias0``). This keeps the C-way lane multiplexer and
        # the PRM read data out of the accumulator's carry chain.
        bias_pre = Signal(signed(32))
        with m.Switch(pre.lane):
            for lane in range(c):
                with m.Case(lane):
                    m.d.comb += bias_pre.eq(prm_word[lane].bias)
        addend = Signal(signed(32))
        run = Signal(signed(32))
        first_bias = Mux(ma.word0, bias0, prm_word[0].bias)
        m.d.comb += run.eq(Mux(ma.blk_first, first_bias, addend) + tree)
        with m.If(pre.valid):
            m.d.sync += addend.eq(Mux(pre.first, bias_pre, run))
        accw = Signal(data.ArrayLayout(signed(32), c))
        new_w = Signal(data.ArrayLayout(signed(32), c))
        for lane in range(c):
            base = Mux(ma.blk_first, prm_word[lane].bias, accw[lane])
            m.d.comb += new_w[lane].eq(Mux(ma.last_j & (ma.lane == lane), run, base))
        send = Signal()
        s_acc = Signal(data.ArrayLayout(signed(32), c))
        s_par = Signal(data.ArrayLayout(REQUANT_LANE, c))
        s_addr = Signal(self.out_bits)
        s_last = Signal()
        s_keep = Signal(c)
        m.d.sync += send.eq(0)
        with m.If(ma.valid & ~error):
            m.d.sync += accw.eq(new_w)
            with m.If(ma.last_j & ma.blk_last):
                m.d.sync += [send.eq(1), s_acc.eq(new_w), s_addr.eq(ma.oa), s_last.eq(ma.last),
                             s_keep.eq(Mux(ma.word0, keep_lo, 0))]
                for lane in range(c):
                    m.d.sync += [s_par[lane].mult.eq(prm_word[lane].mult),
                                 s_par[lane].mult_neg.eq(prm_word[lane].mult_neg),
                                 s_par[lane].shift.eq(prm_word[lane].shift)]
        m.d.comb += [
            self.ost.valid.eq(send),
            self.ost.acc.eq(s_acc),
            self.ost.params.eq(s_par),
            self.ost.zp_out.eq(a.zp_out),
            self.ost.act_min.eq(a.act_min),
            self.ost.act_max.eq(a.act_max),
            self.ost.addr.eq(s_addr),
            self.ost.tag.eq(Cat(s_last, a.tag)),
            self.ost.keep.eq(s_keep),
            self.ost.table.eq(a.act_table),
        ]
        m.d.comb += [pipe_busy.eq(Cat(send, *(reg.valid for reg in pipe[1:])).any()),
                     self.busy.eq(~fsm.ongoing("IDLE") | pipe_busy)]
        return m
