"""A small Amaranth DUT with the processor's top-level port contract, for the simulation infrastructure.

It lets the native harness, the build cache and the cocotb Avalon benches be tested independently
of the real processor: a CSR register file (word addressed, read latency 1) and a DMA copy engine
that moves LEN bytes from SRC to DST over the Avalon-MM burst master in bursts of BURST beats,
applying BE_MASK as the byteenable of every write beat, and raises irq when done. A source or
destination range outside [DMA_BASE, DMA_LIMIT) sets the error flag without any bus transaction,
like the real processor's DMA window.
"""

from __future__ import annotations

from amaranth import Array, Module, Signal
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

FIXTURE_ID = 0xD15EC0DE
MAX_BURST = 8

# Word addresses of the fixture's registers.
REG_ID, REG_CTRL, REG_STATUS, REG_SRC, REG_DST, REG_LEN, REG_BURST = range(7)
REG_DMA_BASE, REG_DMA_LIMIT, REG_SCRATCH, REG_CYCLES, REG_BE_MASK = range(7, 12)
CTRL_START, CTRL_IRQ_EN = 1, 2
STATUS_BUSY, STATUS_DONE, STATUS_ERROR = 1, 2, 4
RESET_VALUES = {REG_ID: FIXTURE_ID, REG_CTRL: 0, REG_STATUS: 0, REG_BURST: 4, REG_DMA_LIMIT: 0xFFFFFFFF,
                REG_SCRATCH: 0x5A5A0000, REG_CYCLES: 0}


def csr_signature(addr_bits: int) -> wiring.Signature:
    return wiring.Signature({
        "address": In(addr_bits), "read": In(1), "write": In(1), "writedata": In(32), "readdata": Out(32),
    })


def mem_signature(data_bits: int, burst_bits: int) -> wiring.Signature:
    return wiring.Signature({
        "address": Out(32), "burstcount": Out(burst_bits), "read": Out(1), "write": Out(1),
        "writedata": Out(data_bits), "byteenable": Out(data_bits // 8),
        "waitrequest": In(1), "readdata": In(data_bits), "readdatavalid": In(1),
    })


class FixtureTop(wiring.Component):
    def __init__(self, data_bits: int = 64, addr_bits: int = 5, burst_bits: int = 5) -> None:
        self.data_bits = data_bits
        super().__init__({
            "csr": Out(csr_signature(addr_bits)),
            "mem": Out(mem_signature(data_bits, burst_bits)),
            "irq": Out(1),
        })

    def elaborate(self, platform):  # noqa: ANN001 - Amaranth signature
        m = Module()
        nbytes = self.data_bits // 8
        regs = {name: Signal(32, name=name.lower(), init=RESET_VALUES.get(addr, 0))
                for name, addr in (("SRC", REG_SRC), ("DST", REG_DST), ("LEN", REG_LEN), ("BURST", REG_BURST),
                                   ("DMA_BASE", REG_DMA_BASE), ("DMA_LIMIT", REG_DMA_LIMIT),
                                   ("SCRATCH", REG_SCRATCH), ("CYCLES", REG_CYCLES))}
        be_mask = Signal(nbytes, init=(1 << nbytes) - 1)
        irq_en = Signal()
        busy = Signal()
        done = Signal()
        error = Signal()
        start = Signal()

        # CSR slave: writes take effect at the edge; reads are registered (latency 1).
        csr = self.csr
        m.d.comb += start.eq(csr.write & (csr.address == REG_CTRL) & csr.writedata[0])
        with m.If(csr.write):
            with m.Switch(csr.address):
                with m.Case(REG_CTRL):
                    m.d.sync += irq_en.eq(csr.writedata[1])
                with m.Case(REG_STATUS):
                    m.d.sync += [done.eq(done & ~csr.writedata[1]), error.eq(error & ~csr.writedata[2])]
                with m.Case(REG_BE_MASK):
                    m.d.sync += be_mask.eq(csr.writedata)
                for name, addr in ((n, a) for n, a in (("SRC", REG_SRC), ("DST", REG_DST), ("LEN", REG_LEN),
                                                       ("BURST", REG_BURST), ("DMA_BASE", REG_DMA_BASE),
                                                       ("DMA_LIMIT", REG_DMA_LIMIT), ("SCRATCH", REG_SCRATCH))):
                    with m.Case(addr):
                        m.d.sync += regs[name].eq(csr.writedata)
        with m.If(csr.read):
            with m.Switch(csr.address):
                with m.Case(REG_ID):
                    m.d.sync += csr.readdata.eq(FIXTURE_ID)
                with m.Case(REG_CTRL):
                    m.d.sync += csr.readdata.eq(irq_en << 1)
                with m.Case(REG_STATUS):
                    m.d.sync += csr.readdata.eq(busy | (done << 1) | (error << 2))
                with m.Case(REG_BE_MASK):
                    m.d.sync += csr.readdata.eq(be_mask)
                for name, addr in (("SRC", REG_SRC), ("DST", REG_DST), ("LEN", REG_LEN), ("BURST", REG_BURST),
                                   ("DMA_BASE", REG_DMA_BASE), ("DMA_LIMIT", REG_DMA_LIMIT),
                                   ("SCRATCH", REG_SCRATCH), ("CYCLES", REG_CYCLES)):
                    with m.Case(addr):
                        m.d.sync += csr.readdata.eq(regs[name])
                with m.Default():
                    m.d.sync += csr.readdata.eq(0)
        m.d.comb += self.irq.eq(irq_en & (done | error))

        # DMA copy engine.
        mem = self.mem
        src = Signal(32)
        dst = Signal(32)
        remaining = Signal(32)
        beats = Signal(range(MAX_BURST + 1))
        index = Signal(range(MAX_BURST + 1))
        buf = Array(Signal(self.data_bits, name=f"buf{i}") for i in range(MAX_BURST))
        burst = Signal(range(MAX_BURST + 1))
        m.d.comb += burst.eq(regs["BURST"])
        with m.If(busy):
            m.d.sync += regs["CYCLES"].eq(regs["CYCLES"] + 1)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(start):
                    m.d.sync += [src.eq(regs["SRC"]), dst.eq(regs["DST"]), remaining.eq(regs["LEN"]),
                                 busy.eq(1), done.eq(0), error.eq(0), regs["CYCLES"].eq(0)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                length = remaining
                bad = ((src < regs["DMA_BASE"]) | (src + length > regs["DMA_LIMIT"]) |
                       (dst < regs["DMA_BASE"]) | (dst + length > regs["DMA_LIMIT"]) |
                       (regs["BURST"] == 0) | (regs["BURST"] > MAX_BURST))
                with m.If(bad):
                    m.d.sync += [error.eq(1), busy.eq(0)]
                    m.next = "IDLE"
                with m.Elif(remaining == 0):
                    m.d.sync += [done.eq(1), busy.eq(0)]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "NEXT"
            with m.State("NEXT"):
                # Beats in this burst: BURST, or fewer for the tail of the transfer.
                left = remaining // nbytes
                with m.If(left < burst):
                    m.d.sync += beats.eq(left)
                with m.Else():
                    m.d.sync += beats.eq(burst)
                m.d.sync += index.eq(0)
                m.next = "READ"
            with m.State("READ"):
                m.d.comb += [mem.read.eq(1), mem.address.eq(src), mem.burstcount.eq(beats)]
                with m.If(~mem.waitrequest):
                    m.next = "COLLECT"
            with m.State("COLLECT"):
                with m.If(mem.readdatavalid):
                    m.d.sync += [buf[index].eq(mem.readdata), index.eq(index + 1)]
                    with m.If(index + 1 == beats):
                        m.d.sync += index.eq(0)
                        m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [mem.write.eq(1), mem.address.eq(dst), mem.burstcount.eq(beats),
                             mem.writedata.eq(buf[index]), mem.byteenable.eq(be_mask)]
                with m.If(~mem.waitrequest):
                    m.d.sync += index.eq(index + 1)
                    with m.If(index + 1 == beats):
                        step = beats * nbytes
                        m.d.sync += [src.eq(src + step), dst.eq(dst + step), remaining.eq(remaining - step)]
                        with m.If(remaining == step):
                            m.d.sync += [done.eq(1), busy.eq(0)]
                            m.next = "IDLE"
                        with m.Else():
                            m.next = "NEXT"
        return m


def fixture_verilog(data_bits: int = 64, name: str = "fixture_top") -> str:
    """The fixture's Verilog with the contract's flattened port names (csr__address, mem__read, ...)."""
    return verilog.convert(FixtureTop(data_bits), name=name, emit_src=False)


if __name__ == "__main__":
    print(fixture_verilog())


def stub_verilog(data_bits: int = 32, name: str = "stub_top") -> str:
    """A minimal hand-written top with the contract's ports (CSR echo register, idle memory master).

    Used where only the build machinery is under test: it compiles in seconds.
    """
    nbytes = data_bits // 8
    return f"""
module {name}(input clk, input rst,
  input [4:0] csr__address, input csr__read, input csr__write, input [31:0] csr__writedata,
  output reg [31:0] csr__readdata,
  output [31:0] mem__address, output [4:0] mem__burstcount, output mem__read, output mem__write,
  output [{data_bits - 1}:0] mem__writedata, output [{nbytes - 1}:0] mem__byteenable,
  input mem__waitrequest, input [{data_bits - 1}:0] mem__readdata, input mem__readdatavalid,
  output irq);
  reg [31:0] scratch;
  always @(posedge clk) begin
    if (rst) scratch <= 32'h5A5A0000;
    else if (csr__write) scratch <= csr__writedata;
    if (csr__read) csr__readdata <= scratch;
  end
  assign mem__address = 0; assign mem__burstcount = 1; assign mem__read = 0; assign mem__write = 0;
  assign mem__writedata = 0; assign mem__byteenable = 0; assign irq = scratch[31];
endmodule
"""


def blocks_config():
    """The C = 4 configuration with every optional block (adder, segmentation/upsample, LRN,
    softmax, activation table) shared by the RTL tests of those blocks, so they need one Verilator build.

    The buffers are large enough for every layer of ``yolov3-tiny.cfg`` (a 3x3 conv over 512
    channels needs 1,152 INP and 1,152 WGT words for one output block) and still small enough that
    the small test layers need several tiles."""
    from layerprog_cases import small_config

    cfg = small_config(4, inp=(16, 16, 16), out=(16, 16, 4), wgt=16384)
    cfg.set_module_property("conv", "LRNBlockGeneration", True)
    cfg.set_module_property("fc", "SoftmaxBlockGeneration", True)
    cfg.set_module_property("conv", "ActivationTableGeneration", True)
    return cfg
