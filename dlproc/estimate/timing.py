"""The estimator's timing parameters: the configuration's sizes and the gateware's handshake
latencies (measured once on the Verilated processor with micro-programs), in one frozen object
that every part of the cycle model reads."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

from dlproc.errors import DlprocError
from dlproc.hardware import isa


class EstimateError(DlprocError):
    """The estimator cannot time a program (it deadlocks, or the input is not a network)."""


# --------------------------------------------------------------------------------------------
# Timing parameters
# --------------------------------------------------------------------------------------------
def gateware_default(obj: Any, name: str, fallback: int) -> int:
    """A keyword default of a gateware constructor, so the model follows the gateware's choice."""
    try:
        return int(inspect.signature(obj).parameters[name].default)
    except (KeyError, TypeError, ValueError):
        return fallback


@dataclass(frozen=True)
class TimingParams:
    """Everything the cycle model needs. Build it with :meth:`from_config`.

    The ``*_offset``/``*_period`` fields are the handshake latencies of the gateware's state
    machines (measured on the RTL, see the module docstring); the rest follows from the
    configuration.
    """

    c: int
    bus_bytes: int
    clock_mhz: float
    ddr_rate: float  #: beats per cycle the DDR sustains (DDRBytesPerCycle / bus bytes, <= 1)
    ddr_latency: int  #: cycles from an accepted read command to its first beat
    ddr_queue: int  #: read commands the DDR accepts before it holds off further ones
    max_burst: int
    read_credits: int  #: beats of read data the load unit may have requested but not consumed
    fetch_credits: int
    queue_depth: int
    outstanding: int  #: read bursts that may be in flight (arbiter route FIFO and DDR queue)
    acc_stages: int  #: the conv engine's accumulate stage Ss
    ostage_latency: int
    acc_depth: int
    elem_beats: dict[str, int]
    # Measured handshake offsets (cycles).
    planner_period: int = 2  #: check, offer: one burst every 2 cycles at best (BurstPlanner)
    fetch_first_request: int = 4  #: cycle of the first fetch command (its READ state)
    fetch_to_queue: int = 3  #: last beat of an instruction -> visible at the head of its queue
    gate_to_request: int = 7  #: LOAD taken by its gate -> first read command accepted
    load_done: int = 2  #: last beat arrives -> done pulse
    load_restart: int = 1  #: done pulse -> the gate can take the next LOAD
    store_reader_start: int = 5  #: STORE taken -> first OUT word in the beat FIFO
    store_first_grant: int = 6  #: STORE taken -> earliest write grant (planner)
    store_done: int = 2  #: last beat accepted -> done pulse
    store_restart: int = 0  #: done pulse -> the gate can take the next STORE
    mark_period: int = 4
    seq_fetch: int = 1  #: compute sequencer FETCH -> TOKENS
    seq_tokens: int = 1  #: TOKENS (tokens present) -> EXEC
    conv_first_issue: int = 3  #: CONV accepted -> first MAC issue
    conv_drain_gap: int = 2  #: final accumulate write -> drain start
    pool_done: int = 6  #: POOL accepted + planes (:func:`pool_plane_cycles`) -> last output word written
    all_done_gap: int = 1  #: last output word -> the sequencer sees everything complete
    finish_end: int = 4  #: FINISH executes -> CYCLES stops counting
    token_latency: int = 1  #: a push becomes visible to a pop one cycle later
    #: bus cycles without data per read/write burst pair while the arbiter alternates a LOAD and
    #: a STORE (read grant, read command, write grant, first write cycle: 4, of which returning
    #: read data covers about one; measured on the RTL, 4.3 per pair in the steady state of an
    #: LRN layer at C = 4 and 3.5 over GoogLeNet's conv2/norm2; at the bus rate: below it the
    #: DDR's credit bucket hides some, see pair_cycles)
    pair_cycles: float = 3
    fc_lanes: int = 4  #: the FC engine's lanes F (one weight slice of F bytes per cycle)
    #: memory masters (MemoryPorts): 1 shared by all clients; 2 a read port (fetch, load) and a
    #: write port (store), each with its own ``ddr_rate``/``ddr_latency`` (see :class:`Bus`)
    mem_ports: int = 1
    #: two ports: last write beat accepted -> its write response (the harness' DDR model returns it
    #: after DDRLatencyCycles); a STORE completes only when its last response has returned
    write_response_latency: int = 0

    @classmethod
    def from_config(cls, config: Any, *, ddr_queue: int = 8) -> "TimingParams":
        """The parameters of ``config`` (a ProcessorConfig). ``ddr_queue`` is the DDR model's
        command-queue depth (the native harness' default is 8)."""
        hw = isa.HardwareParams.from_config(config)
        from dlproc.hardware.geometry import default_acc_depth

        try:
            from dlproc.hardware.gateware.conv import acc_pipeline_stages
            from dlproc.hardware.gateware.dma import MemoryArbiter
            from dlproc.hardware.gateware.output_stage import LATENCY

            acc_stages = int(acc_pipeline_stages(hw.c))
            arb_outstanding = gateware_default(MemoryArbiter.__init__, "outstanding", 8)
            ostage = int(LATENCY)
        except ImportError:  # pragma: no cover - the gateware is part of the package
            levels = math.ceil(math.log2(hw.c)) if hw.c > 1 else 0
            acc_stages, arb_outstanding, ostage = 3 + math.ceil(levels / 2), 8, 6
        bus = hw.bytes_per_beat
        rate = min(float(config.ddr_bytes_per_cycle), float(bus)) / bus
        return cls(
            c=hw.c, bus_bytes=bus, clock_mhz=float(config.target_frequency_mhz), ddr_rate=rate,
            ddr_latency=max(1, int(config.ddr_latency_cycles)), ddr_queue=ddr_queue, max_burst=hw.max_burst,
            read_credits=hw.read_credits, fetch_credits=2 * hw.max_burst, queue_depth=hw.queue_depth,
            outstanding=min(arb_outstanding, ddr_queue), acc_stages=acc_stages, ostage_latency=ostage,
            acc_depth=int(default_acc_depth(hw)), fc_lanes=hw.fc_lanes, mem_ports=hw.mem_ports,
            write_response_latency=max(1, int(config.ddr_latency_cycles)) if hw.mem_ports == 2 else 0,
            elem_beats={b: hw.elem_beats(b) for b in ("INP", "WGT", "PRM", "OUT")},
        )



_TIMING_CACHE: dict[tuple[str, int], TimingParams] = {}


def timing_for(config: Any, *, ddr_queue: int = 8) -> TimingParams:
    """:meth:`TimingParams.from_config`, memoised per configuration."""
    key = (config.config_hash(), ddr_queue)
    if key not in _TIMING_CACHE:
        _TIMING_CACHE[key] = TimingParams.from_config(config, ddr_queue=ddr_queue)
    return _TIMING_CACHE[key]

