"""First-divergence debugging: run a compiled network on the golden model and on the RTL, and on a
mismatch name the first operation (hardware layer, in program order) whose output differs.

The compiler reuses activation buffers (liveness-based placement), so after a whole run most
intermediate tensors are overwritten and a final DRAM comparison cannot say where a divergence
began. Instead, for layer k in program order, both targets run the *prefix* of the program that
ends with layer k's last instruction, followed by a FINISH; layer k's output is then still in DRAM
(its address is the lowest address its STOREs write) and is compared element by element. The
first layer whose output differs is the first divergence; its cycle window on the RTL is
[cycles of prefix k-1, cycles of prefix k].

    from dlproc.debug.compare import compare
    result = compare(cn, x, config, tamper=lambda sim: sim.mem_write(addr, b"\\x7f"))
    print(result.format())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dlproc.hardware import isa
from dlproc.targets import host
from dlproc.errors import SimulationError

__all__ = ["Divergence", "CompareResult", "compare"]

#: How many differing elements a report lists.
SHOW = 8


@dataclass
class Divergence:
    frame: int
    layer: str
    op: str
    index: int  #: position among the hardware layers, in program order
    insn_range: tuple[int, int]
    shape: tuple[int, int, int]  #: (C, H, W)
    coords: list[tuple[int, int, int]]  #: first differing (c, h, w), in C order
    golden: list[int]
    rtl: list[int]
    count: int  #: differing elements
    window: tuple[int, int]  #: RTL cycles [start, end) of the layer in its prefix run
    trace: Path | None = None  #: the FST of the layer's window
    trace_time: tuple[int, int] | None = None  #: the layer's window in the FST's time (half cycles)

    def format(self) -> str:
        c, h, w = self.shape
        lines = [f"first divergence: frame {self.frame}, operation {self.index} in program order: layer "
                 f"{self.layer!r} ({self.op}, instructions {self.insn_range[0]}..{self.insn_range[1] - 1})",
                 f"  {self.count} of {c * h * w} output elements differ (shape C x H x W = {c} x {h} x {w}); first:"]
        for (cc, hh, ww), g, r in zip(self.coords, self.golden, self.rtl):
            lines.append(f"    [c={cc}, h={hh}, w={ww}]  golden {g:4d}  rtl {r:4d}")
        lines.append(f"  RTL cycle window of the layer: {self.window[0]:,}..{self.window[1]:,}")
        if self.trace is not None and self.trace_time is not None:
            lines.append(f"  waveform: {self.trace} (this layer's cycles and {TRACE_MARGIN} on each side; the layer "
                         f"is FST time {self.trace_time[0]:,}..{self.trace_time[1]:,}, in half cycles)")
        return "\n".join(lines)


@dataclass
class CompareResult:
    frames: int
    equal: bool
    outputs: Any  #: the RTL's network outputs (as Workflow.predict returns them)
    divergence: Divergence | None = None
    notes: list[str] = field(default_factory=list)

    def format(self) -> str:
        if self.equal:
            return f"RTL and golden model agree bit for bit on all {self.frames} frame(s)"
        text = "RTL and golden model DIFFER\n" + (self.divergence.format() if self.divergence else "")
        return "\n".join([text] + self.notes)


def _hw_layers(cn: Any) -> list[Any]:
    return sorted((l for l in cn.layers if l.hw and l.insn_count), key=lambda l: l.insn_first)


def _run_prefix(machine: Any, cn: Any, insns: list[isa.Instruction], end: int, frame: bytes, sim: bool) -> int:
    """Run instructions [0, end) + FINISH on ``machine`` with ``frame`` as input; the RTL's cycles."""
    mm = cn.memory_map
    lo, hi = cn.base, cn.base + mm.end
    machine.mem_write(mm.addr("InputDataOffset"), frame)
    prog = isa.encode_program(insns[:end] + [isa.Finish()])
    base = mm.addr("InstructionDataOffset")
    machine.mem_write(base, prog)
    count = len(prog) // isa.INSN_BYTES
    if not sim:
        machine.run(None, insn_base=base, count=count, dma_base=lo, dma_limit=hi)
        return 0
    res = machine.run_program(base, count, lo, hi, max_cycles=50_000_000)
    if not res.ok:
        raise SimulationError(f"the RTL stopped with error code {res.error_code} running the program up to "
                              f"instruction {end - 1}")
    return res.hw_cycles


def _layer_output(machine: Any, geom: Any, insns: list[isa.Instruction], layer: Any) -> np.ndarray:
    stores = [i for i in insns[layer.insn_first:layer.insn_first + layer.insn_count] if isinstance(i, isa.Store)]
    if not stores:
        raise SimulationError(f"layer {layer.name!r} has no STORE: its output cannot be compared")
    shape = tuple(layer.shape)
    raw = machine.mem_read(min(s.dram_addr for s in stores), host.tensor_nbytes(geom, shape))
    return host.unpack_tensor(geom, raw, shape)


def _first_divergence(cn: Any, config: Any, frame_index: int, frame: bytes, tamper: Callable | None,
                      trace: Path | None) -> Divergence | None:
    from dlproc.targets.isasim import Machine
    from dlproc.sim.harness import NativeSim

    geom = host.geometry(cn)
    insns = list(isa.decode_program(cn.instructions))
    size = cn.base + cn.memory_map.end
    golden = Machine(config, dram_size=size)
    rtl = NativeSim(config, ddr_size=max(1 << 20, -(-size // (1 << 20)) * (1 << 20)))
    try:
        for target in (golden, rtl):
            for addr, data in cn.dram_image():
                target.mem_write(addr, data)
        if tamper is not None:
            tamper(rtl)
        start = 0
        for index, layer in enumerate(_hw_layers(cn)):
            end = layer.insn_first + layer.insn_count
            _run_prefix(golden, cn, insns, end, frame, sim=False)
            cycles = _run_prefix(rtl, cn, insns, end, frame, sim=True)
            g = _layer_output(golden, geom, insns, layer)
            r = _layer_output(rtl, geom, insns, layer)
            diff = np.argwhere(g != r)
            if len(diff):
                coords = [tuple(int(v) for v in d) for d in diff[:SHOW]]
                div = Divergence(frame_index, layer.name, layer.op, index, (layer.insn_first, end),
                                 tuple(layer.shape), coords, [int(g[c]) for c in coords], [int(r[c]) for c in coords],
                                 len(diff), (start, cycles))
                if trace is not None:
                    div.trace_time = _write_trace(cn, config, insns, end, frame, tamper, (start, cycles), trace)
                    div.trace = trace
                return div
            start = cycles
        return None
    finally:
        rtl.close()


#: Cycles of the trace before and after the layer's window, so that the layer's first instruction
#: arriving and its last STORE's response show too.
TRACE_MARGIN = 32


def _write_trace(cn: Any, config: Any, insns: list[isa.Instruction], end: int, frame: bytes,
                 tamper: Callable | None, window: tuple[int, int], path: Path) -> tuple[int, int]:
    """The FST of the divergent layer's cycle window: a tracing build runs the prefix that ends
    with the layer, dumping only the layer's cycles (plus :data:`TRACE_MARGIN` each side). Returns
    the layer's window in FST time (half cycles of the simulation clock)."""
    from dlproc.sim.harness import NativeSim

    size = cn.base + cn.memory_map.end
    mm = cn.memory_map
    path.parent.mkdir(parents=True, exist_ok=True)
    with NativeSim(config, fst=path, ddr_size=max(1 << 20, -(-size // (1 << 20)) * (1 << 20)), reset=False) as sim:
        sim.trace_window(0, 0)  # nothing until the window, not even the reset
        sim.reset()
        for addr, data in cn.dram_image():
            sim.mem_write(addr, data)
        if tamper is not None:
            tamper(sim)
        sim.mem_write(mm.addr("InputDataOffset"), frame)
        prog = isa.encode_program(insns[:end] + [isa.Finish()])
        base = mm.addr("InstructionDataOffset")
        sim.mem_write(base, prog)
        sim.start(base, len(prog) // isa.INSN_BYTES, cn.base, cn.base + mm.end)
        # The processor's cycle counter starts with START, the CSR write that has just completed:
        # cycle c of the program is cycle ``started + c`` of the simulation's clock, to within
        # two cycles (measured: 1,678 simulation cycles from START to the interrupt for a program
        # whose CYCLES reads 1,676), which the margin covers.
        started = sim.cycles
        sim.trace_window(max(0, started + window[0] - TRACE_MARGIN), started + window[1] + TRACE_MARGIN)
        sim.run(50_000_000)
        sim.flush_trace()
    return 2 * (started + window[0]), 2 * (started + window[1])


def compare(cn: Any, x: Any, config: Any = None, *, tamper: Callable[[Any], None] | None = None,
            trace: str | Path | None = None) -> CompareResult:
    """Run the float batch ``x`` on the golden model and the RTL; on a mismatch locate the first
    divergent layer of the first differing frame. ``tamper(sim)`` is called on the RTL's
    NativeSim after the network is loaded (fault injection for tests)."""
    from dlproc.targets.workflow import Workflow

    config = config or cn.processor_config()
    gold = Workflow(cn, config, target="golden")
    rtl = Workflow(cn, config, target="sim")
    try:
        gold.predict(x)
        if tamper is not None:
            rtl.deploy()
            tamper(rtl.machine)  # the same NativeSim the predict runs on
        y = rtl.predict(x)
    finally:
        rtl.close()
    frames = len(next(iter(gold.last_hw_values.values())))
    bad = [i for i in range(frames)
           if any(not np.array_equal(gold.last_hw_values[t.name][i], rtl.last_hw_values[t.name][i]) for t in cn.outputs)]
    if not bad:
        return CompareResult(frames, True, y)
    i = bad[0]
    xq = host.fold_batch(cn, host.quantize_input(cn, host.check_input(cn, x)))
    frame = host.pack_frame(host.geometry(cn), xq[i])
    div = _first_divergence(cn, config, i, frame, tamper, Path(trace) if trace else None)
    result = CompareResult(frames, False, y, div)
    result.notes.append(f"{len(bad)} of {frames} frame(s) differ in the network outputs")
    if div is None:
        result.notes.append("every layer's output agrees when run as a program prefix: the difference comes "
                            "from the run of the whole program (overlap between layers)")
    return result
