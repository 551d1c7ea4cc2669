"""``NativeSim``: the Verilated processor plus a C++ DDR model, driven from Python through ctypes.

Python only calls in per transaction (load memory, poke a register, run until the interrupt); the
clock loop, the Avalon-MM handshakes and the DDR timing live in ``native/harness.cpp`` and
``native/ddr.cpp``, so whole programs run at Verilator speed.

    from dlproc.config import ProcessorConfig
    from dlproc.sim.harness import NativeSim

    sim = NativeSim(ProcessorConfig.preset("de10nano_int8"))
    sim.mem_write(0x1000, program_bytes)
    sim.csr_write(regmap.INSN_BASE, 0x1000)
    ...
    cycles = sim.run(max_cycles=1_000_000)     # until irq; raises SimTimeout at the limit

The build (Verilog generation + Verilator + g++) is cached on disk by content, see ``sim/build.py``;
the Verilog of a configuration is also memoised within the process.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlproc.errors import SimulationError
from dlproc.sim.build import BuildResult, build_native
from dlproc.sim.hugetext import HugeText, move_text_to_huge_pages

__all__ = ["NativeSim", "SimTimeout", "DdrStats", "ProgramResult", "ABI_VERSION", "RUN_IRQ", "RUN_TIMEOUT",
           "RUN_DDR_ERROR"]

ABI_VERSION = 3
RUN_IRQ, RUN_TIMEOUT, RUN_DDR_ERROR, RUN_DONE = 0, 1, 2, 3
_STATUS_NAMES = {RUN_IRQ: "irq", RUN_TIMEOUT: "timeout", RUN_DDR_ERROR: "ddr_error", RUN_DONE: "done"}
DEFAULT_DDR_SIZE = 64 << 20
DEFAULT_RESET_CYCLES = 4


class SimTimeout(SimulationError):
    """``run`` reached its cycle limit without an interrupt."""


@dataclass(frozen=True)
class DdrStats:
    """Traffic counted by the DDR model since creation or :meth:`NativeSim.clear_ddr_stats`.

    The harness has one DDR model per memory port (port 0 ``mem``, port 1 ``mem1``, used by a
    ``MemoryPorts = 2`` processor for its writes); :meth:`NativeSim.ddr_stats` sums the ports
    unless asked for one. Summed, ``wait_cycles`` counts a cycle once per port that waited.
    """

    read_cmds: int
    write_cmds: int
    read_beats: int
    write_beats: int
    read_bytes: int
    write_bytes: int       # bytes with byteenable set
    wait_cycles: int       # cycles in which a request was held off by waitrequest
    busy_cycles: int       # read or write beats on the data bus
    write_responses: int = 0  # write responses returned (port 1 only: the two-port write master)


@dataclass(frozen=True)
class ProgramResult:
    """The outcome of :meth:`NativeSim.run_program`: cycles from START to the interrupt."""

    cycles: int            # harness cycles from the START write to irq
    hw_cycles: int         # the processor's own CYCLES counter (START to DONE/ERROR)
    status: int            # STATUS register
    error_code: int        # STATUS.ERROR_CODE (0 = none)
    ddr: DdrStats          # both memory ports together
    ddr_ports: tuple[DdrStats, ...] = ()  # per port (port 0, port 1)

    @property
    def ok(self) -> bool:
        return self.error_code == 0 and bool(self.status & 2)


_U64 = ctypes.c_uint64
_lib_lock = threading.Lock()
_libs: dict[Path, ctypes.CDLL] = {}
_huge_text: dict[Path, HugeText] = {}
_verilog_cache: dict[str, str] = {}


def _load(path: Path) -> ctypes.CDLL:
    """Load a harness library once per process and declare its C signatures."""
    with _lib_lock:
        if path in _libs:
            return _libs[path]
        lib = ctypes.CDLL(str(path))
        # Before any of its code runs (see sim/hugetext.py for why and how).
        try:
            _huge_text[path] = move_text_to_huge_pages(path)
        except OSError as exc:
            raise SimulationError(f"{path}: moving the harness code onto huge pages failed ({exc}); "
                                  "set DLPROC_NATIVE_HUGETEXT=0 to keep it where it was loaded") from exc
        sig: dict[str, tuple[Any, list[Any]]] = {
            "dl_abi_version": (ctypes.c_int32, []),
            "dl_mem_bytes": (ctypes.c_uint32, []),
            "dl_has_trace": (ctypes.c_int32, []),
            "dl_create": (ctypes.c_void_p, [_U64, _U64, ctypes.c_double, ctypes.c_uint32, ctypes.c_uint32,
                                            ctypes.c_uint32, ctypes.c_char_p]),
            "dl_free": (None, [ctypes.c_void_p]),
            "dl_trace_flush": (None, [ctypes.c_void_p]),
            "dl_trace_window": (None, [ctypes.c_void_p, _U64, _U64]),
            "dl_reset": (None, [ctypes.c_void_p, ctypes.c_uint32]),
            "dl_mem_write": (ctypes.c_int32, [ctypes.c_void_p, _U64, ctypes.c_void_p, _U64]),
            "dl_mem_read": (ctypes.c_int32, [ctypes.c_void_p, _U64, ctypes.c_void_p, _U64]),
            "dl_csr_write": (None, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]),
            "dl_csr_read": (ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_uint32]),
            "dl_irq": (ctypes.c_int32, [ctypes.c_void_p]),
            "dl_cycles": (_U64, [ctypes.c_void_p]),
            "dl_run": (ctypes.c_int32, [ctypes.c_void_p, _U64, ctypes.POINTER(_U64)]),
            "dl_step": (ctypes.c_int32, [ctypes.c_void_p, _U64, ctypes.POINTER(_U64)]),
            "dl_ddr_ports": (ctypes.c_uint32, []),
            "dl_ddr_stats": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(_U64)]),
            "dl_ddr_clear_stats": (None, [ctypes.c_void_p]),
            "dl_ddr_error": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32]),
            "dl_ddr_outstanding": (_U64, [ctypes.c_void_p]),
            "dl_ddr_outstanding_responses": (_U64, [ctypes.c_void_p]),
            "dl_ddr_set_write_error": (None, [ctypes.c_void_p, _U64, _U64, ctypes.c_uint32]),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        if lib.dl_abi_version() != ABI_VERSION:
            raise SimulationError(f"{path} has harness ABI {lib.dl_abi_version()}, expected {ABI_VERSION}; "
                                  "delete the build cache folder and rebuild")
        _libs[path] = lib
        return lib


def processor_verilog(config: Any) -> str:
    """The Verilog of ``config``, cached in the process and on disk.

    Generating the Verilog of a preset takes tens of seconds, far longer than loading a cached
    Verilator build, so the text is kept under ``<build root>/verilog/`` keyed by the configuration
    hash and a digest of every source file that shapes the gateware (see
    :func:`gateware_sources_digest`): a cached ``NativeSim`` starts without running Amaranth.
    """
    from dlproc.sim.build import build_root

    key = f"{config.config_hash()[:24]}-{gateware_sources_digest()[:24]}"
    if key in _verilog_cache:
        return _verilog_cache[key]
    path = build_root() / "verilog" / f"dlproc_top-{key}.v"
    if path.exists():
        text = path.read_text()
    else:
        from dlproc.hardware.gateware import generate_verilog  # imported late: the gateware is heavy

        text = generate_verilog(config)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)  # atomic, so a parallel reader never sees half a file
    _verilog_cache[key] = text
    return text


def gateware_sources_digest() -> str:
    """sha256 over the Python sources that determine the generated Verilog, and Amaranth's version.

    That is the ``dlproc.hardware.gateware`` package plus the modules it takes its definitions from (ISA,
    register map, numerics, configuration). Over-approximating is safe: at worst a cache miss.
    """
    import hashlib
    from importlib import metadata

    import dlproc.hardware

    package = Path(dlproc.hardware.__file__).resolve().parents[1]
    files = sorted((package / "hardware").rglob("*.py"))
    files += [package / name for name in ("config.py", "errors.py")]
    digest = hashlib.sha256(metadata.version("amaranth").encode())
    for file in files:
        digest.update(file.relative_to(package).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def _field(regmap: Any, reg: str, name: str) -> int:
    return regmap.REG[reg].field(name).mask


class NativeSim:
    """A Verilated processor with a DDR model; see the module docstring.

    ``config`` is a :class:`dlproc.config.ProcessorConfig`; the bus width, DDR bytes per cycle and
    read latency (of each memory port, see :class:`DdrStats`) come from it (``ddr_bytes_per_cycle``/``ddr_latency_cycles`` override them without
    a rebuild). Port 1 returns a write response per write burst ``ddr_write_response_latency``
    cycles after its last beat (default: the read latency, DDRLatencyCycles); a two-port
    processor's STOREs complete only then. ``fst`` (or ``vcd``) names a waveform file to write (a separate,
    slower build). ``ddr_base``/``ddr_size`` place the modelled memory in the byte address space;
    an access outside it stops :meth:`run` with a :class:`SimulationError`.
    """

    def __init__(self, config: Any, fst: str | Path | None = None, *, vcd: str | Path | None = None,
                 ddr_base: int = 0, ddr_size: int = DEFAULT_DDR_SIZE, queue_depth: int = 8,
                 ddr_bytes_per_cycle: float | None = None, ddr_latency_cycles: int | None = None,
                 ddr_write_response_latency: int | None = None, reset: bool = True) -> None:
        # The DDR timing is a run-time parameter of the model: overriding it (for sensitivity
        # studies) reuses the build, whereas changing it in the config changes the config hash.
        self.config = config
        bpc = config.ddr_bytes_per_cycle if ddr_bytes_per_cycle is None else ddr_bytes_per_cycle
        latency = config.ddr_latency_cycles if ddr_latency_cycles is None else ddr_latency_cycles
        self._setup(processor_verilog(config), top="dlproc_top", mem_bytes=config.memory_data_bytes,
                    bytes_per_cycle=float(bpc), latency=int(latency),
                    write_response_latency=int(latency if ddr_write_response_latency is None
                                               else ddr_write_response_latency),
                    config_hash=config.config_hash(), fst=fst, vcd=vcd, ddr_base=ddr_base, ddr_size=ddr_size,
                    queue_depth=queue_depth, reset=reset)

    @classmethod
    def from_verilog(cls, verilog: str, *, top: str, mem_bytes: int, bytes_per_cycle: float, latency: int,
                     config_hash: str = "", fst: str | Path | None = None, vcd: str | Path | None = None,
                     ddr_base: int = 0, ddr_size: int = DEFAULT_DDR_SIZE, queue_depth: int = 8,
                     write_response_latency: int | None = None, reset: bool = True) -> "NativeSim":
        """A harness around any Verilog top level with the contract's ports (e.g. a test fixture)."""
        sim = cls.__new__(cls)
        sim.config = None
        sim._setup(verilog, top=top, mem_bytes=mem_bytes, bytes_per_cycle=bytes_per_cycle, latency=latency,
                   write_response_latency=latency if write_response_latency is None else write_response_latency,
                   config_hash=config_hash, fst=fst, vcd=vcd, ddr_base=ddr_base, ddr_size=ddr_size,
                   queue_depth=queue_depth, reset=reset)
        return sim

    def _setup(self, verilog: str, *, top: str, mem_bytes: int, bytes_per_cycle: float, latency: int,
               write_response_latency: int, config_hash: str, fst: str | Path | None, vcd: str | Path | None,
               ddr_base: int, ddr_size: int, queue_depth: int, reset: bool) -> None:
        self._handle = None
        if fst is not None and vcd is not None:
            raise ValueError("give either fst= or vcd=, not both")
        if write_response_latency < 0:
            # (0 behaves as 1, like the read latency: a response comes after the burst's last beat)
            raise ValueError(f"the write response latency must be >= 0 cycles, not {write_response_latency}")
        if bytes_per_cycle <= 0:
            raise ValueError(f"bytes_per_cycle must be > 0, not {bytes_per_cycle}")
        if ddr_size <= 0 or ddr_base < 0 or ddr_base % mem_bytes or ddr_size % mem_bytes:
            raise ValueError(f"DDR model base 0x{ddr_base:x} / size {ddr_size} must be non-negative multiples "
                             f"of the {mem_bytes}-byte bus")
        trace_path = Path(fst if fst is not None else vcd) if (fst or vcd) else None
        trace = "fst" if fst is not None else ("vcd" if vcd is not None else None)
        self.build: BuildResult = build_native(verilog, top, mem_bytes, config_hash=config_hash, trace=trace)
        self._lib = _load(self.build.artifact)
        #: whether the model's code runs from huge pages (sim/hugetext.py), and why not
        self.huge_text: HugeText = _huge_text[self.build.artifact]
        if self._lib.dl_mem_bytes() != mem_bytes:
            raise SimulationError(f"harness library was built for a {self._lib.dl_mem_bytes()}-byte bus, "
                                  f"not {mem_bytes}")
        self.mem_bytes = mem_bytes
        self.ddr_base = ddr_base
        self.ddr_size = ddr_size
        self.trace_path = trace_path
        path_arg = str(trace_path).encode() if trace_path else None
        self._handle = self._lib.dl_create(ddr_base, ddr_size, float(bytes_per_cycle), int(latency),
                                           int(queue_depth), int(write_response_latency), path_arg)
        if not self._handle:
            raise SimulationError(f"could not create the simulation (DDR model of {ddr_size} bytes)")
        self.last_status = "none"
        if reset:
            self.reset()

    # ---- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the model (and close the waveform file); the object is unusable afterwards."""
        if getattr(self, "_handle", None):
            self._lib.dl_free(self._handle)
            self._handle = None

    def __enter__(self) -> "NativeSim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: ctypes may already be gone
            pass

    def _h(self) -> int:
        if not self._handle:
            raise SimulationError("this NativeSim was closed")
        return self._handle

    def reset(self, cycles: int = DEFAULT_RESET_CYCLES) -> None:
        """Hold ``rst`` for ``cycles`` cycles; DDR contents are kept, outstanding commands dropped."""
        self._lib.dl_reset(self._h(), int(cycles))

    # ---- memory -----------------------------------------------------------------------------------
    def _check_range(self, addr: int, n: int) -> None:
        if addr < self.ddr_base or n < 0 or addr + n > self.ddr_base + self.ddr_size:
            raise SimulationError(f"DDR access [0x{addr:x}, 0x{addr + n:x}) is outside the modelled memory "
                                  f"[0x{self.ddr_base:x}, 0x{self.ddr_base + self.ddr_size:x})")

    def mem_write(self, addr: int, data: bytes | bytearray | memoryview | Any) -> None:
        """Copy bytes (or any buffer, e.g. a contiguous numpy array) into the DDR model, in zero cycles."""
        view = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else memoryview(data)
        n = view.nbytes
        self._check_range(addr, n)
        if n == 0:
            return
        buf = (ctypes.c_char * n).from_buffer_copy(view) if view.readonly else (ctypes.c_char * n).from_buffer(view)
        if self._lib.dl_mem_write(self._h(), addr, ctypes.addressof(buf), n) != 0:
            raise SimulationError(f"mem_write at 0x{addr:x} ({n} bytes) failed")

    def mem_read(self, addr: int, n: int) -> bytes:
        """Read ``n`` bytes from the DDR model, in zero cycles."""
        self._check_range(addr, n)
        buf = ctypes.create_string_buffer(max(n, 1))
        if n and self._lib.dl_mem_read(self._h(), addr, buf, n) != 0:
            raise SimulationError(f"mem_read at 0x{addr:x} ({n} bytes) failed")
        return buf.raw[:n]

    # ---- CSR ----------------------------------------------------------------------------------------
    def csr_write(self, word_addr: int, value: int) -> None:
        """One Avalon write cycle on the CSR slave (word address)."""
        self._lib.dl_csr_write(self._h(), int(word_addr), int(value) & 0xFFFFFFFF)

    def csr_read(self, word_addr: int) -> int:
        """One Avalon read on the CSR slave (read latency 1: two cycles in total)."""
        return int(self._lib.dl_csr_read(self._h(), int(word_addr)))

    # ---- running ------------------------------------------------------------------------------------
    @property
    def cycles(self) -> int:
        """Clock cycles simulated since creation (reset and CSR accesses included)."""
        return int(self._lib.dl_cycles(self._h()))

    @property
    def irq(self) -> bool:
        return bool(self._lib.dl_irq(self._h()))

    def _raise_ddr_error(self) -> None:
        msg = ctypes.create_string_buffer(512)
        code = self._lib.dl_ddr_error(self._h(), msg, 512)
        raise SimulationError(f"the DDR model flagged a bad access (code {code}): {msg.value.decode()}")

    def run(self, max_cycles: int, *, raise_on_timeout: bool = True) -> int:
        """Clock until ``irq`` is high after a cycle, or ``max_cycles`` ran; return the cycles run.

        At least one cycle runs. A DDR model error raises :class:`SimulationError`; reaching the
        limit raises :class:`SimTimeout` unless ``raise_on_timeout`` is False (then ``last_status``
        is ``"timeout"``).
        """
        if max_cycles <= 0:
            raise ValueError(f"max_cycles must be positive, not {max_cycles}")
        ran = _U64(0)
        status = self._lib.dl_run(self._h(), int(max_cycles), ctypes.byref(ran))
        self.last_status = _STATUS_NAMES.get(status, str(status))
        if status == RUN_DDR_ERROR:
            self._raise_ddr_error()
        if status == RUN_TIMEOUT and raise_on_timeout:
            raise SimTimeout(f"no interrupt within {max_cycles} cycles (total cycles {self.cycles})")
        return int(ran.value)

    def step(self, n: int = 1) -> None:
        """Clock exactly ``n`` cycles regardless of the interrupt."""
        ran = _U64(0)
        status = self._lib.dl_step(self._h(), int(n), ctypes.byref(ran))
        if status == RUN_DDR_ERROR:
            self._raise_ddr_error()

    # ---- DDR statistics -----------------------------------------------------------------------------
    @property
    def ddr_ports(self) -> int:
        """DDR models (memory ports) the harness has; a one-port top leaves port 1 quiet."""
        return int(self._lib.dl_ddr_ports())

    def ddr_stats(self, port: int | None = None) -> DdrStats:
        """Traffic of memory port ``port`` (0 or 1), or of both together (``None``)."""
        if port is not None and not 0 <= port < self.ddr_ports:
            raise ValueError(f"port must be None or 0..{self.ddr_ports - 1}, not {port!r}")
        arr = (_U64 * 9)()
        self._lib.dl_ddr_stats(self._h(), -1 if port is None else int(port), arr)
        return DdrStats(*(int(v) for v in arr))

    def clear_ddr_stats(self) -> None:
        self._lib.dl_ddr_clear_stats(self._h())

    @property
    def ddr_error(self) -> tuple[int, str] | None:
        """The first DDR model error as ``(code, message)``, or None."""
        msg = ctypes.create_string_buffer(512)
        code = self._lib.dl_ddr_error(self._h(), msg, 512)
        return (int(code), msg.value.decode()) if code else None

    @property
    def ddr_outstanding_beats(self) -> int:
        return int(self._lib.dl_ddr_outstanding(self._h()))

    @property
    def ddr_outstanding_responses(self) -> int:
        """Write bursts accepted on port 1 whose write response has not been returned yet."""
        return int(self._lib.dl_ddr_outstanding_responses(self._h()))

    def set_write_error(self, lo: int, hi: int, response: int = 2) -> None:
        """Port 1 answers write bursts starting in [lo, hi) with ``response`` and writes nothing.

        ``response`` is an Avalon-MM response code: 2 SLVERR or 3 DECODEERROR
        (:class:`dlproc.hardware.gateware.avalon.Response`); ``hi <= lo`` turns the error range off.
        """
        if response not in (2, 3):
            raise ValueError(f"response must be 2 (SLVERR) or 3 (DECODEERROR), not {response!r}")
        self._lib.dl_ddr_set_write_error(self._h(), int(lo), int(hi), int(response))

    # ---- whole programs (processor register map) ------------------------------------------------
    def start(self, insn_base: int, insn_count: int, dma_base: int = 0, dma_limit: int = 1 << 32,
              irq: bool = True) -> None:
        """Program INSN_BASE/INSN_COUNT/DMA window and write CTRL.START (processor top only)."""
        from dlproc.hardware import regmap

        self.csr_write(regmap.offset("CTRL"), _field(regmap, "CTRL", "ACK"))
        self.csr_write(regmap.offset("INSN_BASE"), insn_base)
        self.csr_write(regmap.offset("INSN_COUNT"), insn_count)
        self.csr_write(regmap.offset("DMA_BASE"), dma_base)
        self.csr_write(regmap.offset("DMA_LIMIT"), min(dma_limit, 0xFFFFFFFF))
        ctrl = _field(regmap, "CTRL", "START") | (_field(regmap, "CTRL", "IRQ_EN") if irq else 0)
        self.csr_write(regmap.offset("CTRL"), ctrl)

    def run_program(self, insn_base: int, insn_count: int, dma_base: int = 0, dma_limit: int = 1 << 32, *,
                    max_cycles: int = 10_000_000) -> ProgramResult:
        """Start a program already in DDR and run to the interrupt; errors are reported, not raised."""
        from dlproc.hardware import regmap

        self.clear_ddr_stats()
        self.start(insn_base, insn_count, dma_base, dma_limit)
        cycles = self.run(max_cycles)
        status = self.csr_read(regmap.offset("STATUS"))
        code_field = regmap.REG["STATUS"].field("ERROR_CODE")
        lo = self.csr_read(regmap.offset("CYCLES_LO"))
        hi = self.csr_read(regmap.offset("CYCLES_HI"))
        return ProgramResult(cycles=cycles, hw_cycles=(hi << 32) | lo, status=status,
                             error_code=(status & code_field.mask) >> code_field.lsb, ddr=self.ddr_stats(),
                             ddr_ports=tuple(self.ddr_stats(p) for p in range(self.ddr_ports)))

    def run_layer_program(self, prog: Any, *, max_cycles: int = 10_000_000) -> tuple[Any, ProgramResult]:
        """Run a :class:`dlproc.compiler.layerprog.LayerProgram`; return (decoded output, result)."""
        self.mem_write(prog.dram_base, prog.image)
        result = self.run_program(prog.insn_base, prog.insn_count, prog.dma_base, prog.dma_limit,
                                  max_cycles=max_cycles)
        out = prog.read_output(self.mem_read(prog.output_addr, prog.output_bytes), base=prog.output_addr)
        return out, result

    def flush_trace(self) -> None:
        self._lib.dl_trace_flush(self._h())

    def trace_window(self, first_cycle: int, end_cycle: int | None = None) -> None:
        """Write only the cycles [first_cycle, end_cycle) of :attr:`cycles` to the waveform (all of
        them by default): the window around a divergence instead of the whole run."""
        if first_cycle < 0 or (end_cycle is not None and end_cycle < first_cycle):
            raise ValueError(f"trace window [{first_cycle}, {end_cycle}) is empty or negative")
        self._lib.dl_trace_window(self._h(), int(first_cycle), (1 << 63) if end_cycle is None else int(end_cycle))
