"""``Workflow``: MATLAB's ``dlhdl.Workflow`` loop (compile, deploy, predict, profile) in Python.

    from dlproc.targets.workflow import Workflow
    wf = Workflow(qnet, "de10nano_int8", target="sim")   # or target="golden"
    wf.compile()                   # CompiledNetwork (prints the compile log with verbose=True)
    wf.deploy()                    # builds/creates the target and writes instructions + weights
    y = wf.predict(x)              # float32 NCHW batch in, float outputs out
    y, prof = wf.predict(x, profile=True)   # plus the profiler table (printed)

Targets run the *same* instruction stream: ``golden`` is the ISA-level functional simulator
(:mod:`dlproc.targets.isasim`, NumPy, no cycle counts) and ``sim`` the Verilated RTL through the native
harness (:class:`dlproc.sim.harness.NativeSim`, cycle accurate, with the hardware's profile
counters). Around each frame the host quantizes the input with the input scale and zero point,
applies the input transform (first-layer folding), writes it to InputDataOffset, starts the
processor, reads the tensors in OutputResultOffset, dequantizes them and runs the software layers
(softmax, detection heads) in float.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dlproc import progress
from dlproc.hardware import isa, regmap

from dlproc.compiler import netfile
from dlproc.compiler import CompiledNetwork, compile_network
from dlproc.targets import host
from dlproc.errors import CompileError, DlprocError, SimulationError
from dlproc.targets.profiler import MacActivity, ProfileResult, layer_cycles  # noqa: F401 - ProfileResult is what predict returns

__all__ = ["Workflow", "TARGETS", "FrameRun"]

TARGETS = ("golden", "sim")


@dataclass
class FrameRun:
    """One frame on a target: hardware cycles and MARK values (None on the golden target)."""

    cycles: int | None
    marks: list[int] | None
    mac: MacActivity | None = None  #: MAC_ACTIVE / FC_MAC_ACTIVE, where the target reads them


def _resolve_config(config: Any) -> Any:
    from dlproc.config import ProcessorConfig

    if config is None or isinstance(config, ProcessorConfig):
        return config
    text = str(config)
    if text in ProcessorConfig.presets():
        return ProcessorConfig.preset(text)
    path = Path(text)
    if path.is_file():
        return ProcessorConfig.load(path)
    raise CompileError(f"configuration {text!r} is neither a preset ({', '.join(ProcessorConfig.presets())}) nor a "
                       "configuration file")


class Workflow:
    """Compile, deploy and run a quantized network on a target (see the module docstring).

    ``network``: a :class:`dlproc.quant.QuantizedNetwork`, a ``.dlq`` file, a
    :class:`CompiledNetwork` or a ``.dlnet`` file. ``config``: a ProcessorConfig, a preset name or
    a configuration file; it may be omitted for a compiled network (its own configuration is used),
    and a compiled network for another configuration is refused.
    """

    def __init__(self, network: Any, config: Any = None, target: Any = "golden", *, max_cycles: int = 200_000_000,
                 progress: Callable[[int, int], None] | None = None, token: str | None = None,
                 board: str = "de10-nano", workers: int | None = None, address: str | None = None):
        # A board target is the agent on the HPS (or `dlproc agent --sim`): dlproc.targets.board.BoardTarget.
        self._board = None
        if not isinstance(target, str) or target.startswith("board://"):
            from dlproc.targets.board import BoardTarget, Target
            self._board = target if isinstance(target, BoardTarget) else Target(board, target, token or "")
            target = "board"
        elif target not in TARGETS:
            raise DlprocError(f"target {target!r} is not one of {', '.join(TARGETS)} or board://HOST[:PORT]")
        self.target = target
        self.max_cycles = max_cycles
        self.progress = progress
        #: spread predict's frames over this many local Ray workers, or the cluster at ``address``
        self.workers = workers
        self.address = address
        self.qnet = None
        self.compiled: CompiledNetwork | None = None
        if isinstance(network, (str, Path)):
            path = Path(network)
            if path.suffix == ".dlnet":
                network = netfile.load(path)
            else:
                from dlproc.quant import QuantizedNetwork
                network = QuantizedNetwork.load(path)
        if isinstance(network, CompiledNetwork):
            self.compiled = network
            self.config = _resolve_config(config) or network.processor_config()
            netfile.check_config(network, self.config)
        else:
            self.qnet = network
            self.config = _resolve_config(config)
            if self.config is None:
                raise CompileError("a quantized network needs a processor configuration (config=...)")
        self._machine: Any = None
        self._geom = None

    # -- compile / deploy ---------------------------------------------------------------------
    def compile(self, verbose: bool = False, **options: Any) -> CompiledNetwork:
        """Compile the network (a compiled network is only checked against the configuration)."""
        if self.compiled is None or options:
            if self.qnet is None:
                raise CompileError("this workflow holds an already compiled network; options need the quantized one")
            self.compiled = compile_network(self.qnet, self.config, **options)
        if verbose:
            print(self.compiled.report())
        return self.compiled

    def deploy(self) -> None:
        """Create the target and load instructions and weights (compiles first if needed)."""
        cn = self.compiled or self.compile()
        self.close()  # a second deploy starts from a fresh target
        self._geom = host.geometry(cn)
        if self._board is not None:
            self._board.check_network(cn)
            self._board.deploy(netfile.to_bytes(cn))
            self._machine = self._board  # its mem_read serves the output region of the last run
            return
        size = cn.base + cn.memory_map.end
        if self.target == "golden":
            from dlproc.targets.isasim import Machine
            self._machine = Machine(self.config, dram_size=size)
        else:
            from dlproc.sim.harness import NativeSim
            ddr = max(1 << 20, -(-size // (1 << 20)) * (1 << 20))
            self._machine = NativeSim(self.config, ddr_size=ddr)
            hw_hash = (self._machine.csr_read(regmap.offset("CONFIG_HASH_HI")) << 32) | self._machine.csr_read(
                regmap.offset("CONFIG_HASH_LO"))
            if hw_hash != cn.hash64:
                raise netfile.ConfigMismatchError(
                    f"the processor reports configuration hash {hw_hash:016x}, the network was compiled for "
                    f"{cn.hash64:016x}; recompile the network for this processor")
        for addr, data in cn.dram_image():
            self._machine.mem_write(addr, data)

    # -- predict ------------------------------------------------------------------------------
    def predict(self, x: Any, profile: bool = False, display: bool = True) -> Any:
        """Run a float32 NCHW batch; returns the output (a dict for several outputs), and with
        ``profile=True`` also the :class:`ProfileResult` of the last frame (printed if ``display``)."""
        cn = self.compiled or self.compile()
        xf = host.check_input(cn, x)  # before anything runs
        xq = host.fold_batch(cn, host.quantize_input(cn, xf))
        if self.workers is not None or self.address is not None:
            if self.target not in ("golden", "sim"):
                raise DlprocError("workers spread a batch over ISA simulators or RTL simulations; a board runs "
                                  "its frames itself")
            from dlproc.cluster.batch import run_frames

            hw_values, runs = run_frames(run_chunk, cn, self.config, self.target, xq, self.workers, self.address)
        else:
            hw_values, runs = self.run_quantized_frames(xq)
        run = runs[-1] if runs else FrameRun(None, None)
        total = sum(r.cycles for r in runs if r.cycles is not None)
        self.last_hw_values = hw_values
        outputs = host.run_software_layers(cn, hw_values)
        result = outputs[cn.network_outputs[0]] if len(outputs) == 1 else outputs
        if not profile:
            return result
        prof = layer_cycles(cn, run.marks, run.cycles, self.target, len(xq), total if run.cycles is not None else None,
                            run.mac)
        if display:
            print(prof.table())
        return result, prof

    def run_quantized_frames(self, xq: np.ndarray) -> tuple[dict[str, np.ndarray], list[FrameRun]]:
        """Run int8 frames (quantized and folded, as ``predict`` makes them) on this workflow's
        target, deploying first if needed: the hardware output tensors of every frame, and each
        frame's run (cycles, MARK values). ``predict`` is this plus the host's part."""
        cn = self.compiled or self.compile()
        if self._machine is None:
            self.deploy()
        hw_values = {t.name: np.empty((len(xq),) + tuple(t.shape), dtype=np.int8) for t in cn.outputs}
        runs: list[FrameRun] = []
        frames = range(len(xq))
        if len(xq) > 1:
            frames = progress.track(frames, f"{cn.name} on {self.target}", len(xq), "frame")
        for i in frames:
            runs.append(self._run_frame(cn, xq[i]))
            for t in cn.outputs:
                raw = self._machine.mem_read(cn.base + t.offset, host.tensor_nbytes(self._geom, t.shape))
                hw_values[t.name][i] = host.unpack_tensor(self._geom, raw, tuple(t.shape))
            if self.progress:
                self.progress(i + 1, len(xq))
        return hw_values, runs

    def _run_frame(self, cn: CompiledNetwork, frame: np.ndarray) -> FrameRun:
        if self._board is not None:
            r = self._board.run_frame(host.pack_frame(self._geom, frame))
            return FrameRun(r.profile.cycles, list(r.profile.marks))
        mm = cn.memory_map
        self._machine.mem_write(mm.addr("InputDataOffset"), host.pack_frame(self._geom, frame))
        insn_base, count = mm.addr("InstructionDataOffset"), cn.insn_count
        lo, hi = cn.base, cn.base + mm.end
        if self.target == "golden":
            self._machine.run(None, insn_base=insn_base, count=count, dma_base=lo, dma_limit=hi)
            return FrameRun(None, None)
        res = self._machine.run_program(insn_base, count, lo, hi, max_cycles=self.max_cycles)
        if not res.ok:
            try:
                code = isa.ErrorCode(res.error_code).name
            except ValueError:
                code = str(res.error_code)
            at = self._machine.csr_read(regmap.offset("ERR_INSN"))
            raise SimulationError(f"the processor stopped with error {code} at instruction {at} "
                                  f"(STATUS {res.status:#x})")
        marks = [0] * max(1, len(cn.profile))
        for entry in cn.profile:
            self._machine.csr_write(regmap.offset("PROF_INDEX"), entry.index)
            low = self._machine.csr_read(regmap.offset("PROF_DATA_LO"))
            high = self._machine.csr_read(regmap.offset("PROF_DATA_HI"))
            marks[entry.index] = (high << 32) | low
        hw = self._geom.hw
        mac = MacActivity(self._machine.csr_read(regmap.offset("MAC_ACTIVE")),
                          self._machine.csr_read(regmap.offset("FC_MAC_ACTIVE")), hw.fc_lanes if hw.fc else 0)
        return FrameRun(res.hw_cycles, marks, mac)

    @property
    def machine(self) -> Any:
        """The deployed target (``isasim.Machine``, ``NativeSim`` or the board), ``None`` before
        :meth:`deploy`: for inspecting its memory, or injecting a fault in a test."""
        return self._machine

    def close(self) -> None:
        if self._machine is not None and hasattr(self._machine, "close"):
            self._machine.close()
        self._machine = None


def run_chunk(cn_bytes: bytes, config: Any, target: str, frames: np.ndarray) -> tuple[dict[str, np.ndarray],
                                                                                    list[FrameRun]]:
    """Deploy a compiled network (``.dlnet`` bytes) on ``target`` and run int8 frames on it: the
    part of a batch one Ray worker runs (``dlproc.cluster.batch``)."""
    wf = Workflow(netfile.from_bytes(cn_bytes), config, target=target)
    try:
        return wf.run_quantized_frames(frames)
    finally:
        wf.close()
