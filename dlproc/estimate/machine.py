"""The performance estimator: a cycle model of the processor driven by its instruction stream.

The model replays a program the way the hardware executes it, one *instruction* at a time (never
one cycle at a time), so a GoogLeNet-sized stream takes well under a second:

* **fetch** reads the program in aligned bursts (credit-limited like ``FetchUnit``) and
  dispatches the instructions *in order* into per-unit queues of ``queue_depth`` entries; a full
  queue blocks every later instruction, exactly as in the gateware;
* **load**, **compute** and **store** each execute their queue in order. An instruction starts
  when it is in its queue, its unit is free and the dependency tokens it pops have been pushed
  (the k-th pop of a counter consumes its k-th push, one cycle after the push);
* **DRAM transfers** are planned as the hardware plans them (rows split into bursts of at most
  ``max_burst`` beats that never cross a ``max_burst``-beat boundary) and timed with the DDR
  model of the configuration (``DDRBytesPerCycle``, ``DDRLatencyCycles``) and the harness'
  command-queue depth: read bursts are limited by the planner (2 cycles per burst), by the read
  commands that may be outstanding, and by the read credits; write bursts by the OUT reader and
  the arbiter (one grant cycle per burst). Transfers of the load, store and fetch units share the
  bus bandwidth through a reservation calendar (see :class:`dlproc.estimate.bus.Bus`), on which the units book them
  in time order (the ready instruction with the earliest bus request runs first). A STORE that writes while a
  LOAD is still issuing read commands alternates with it on the arbiter (one write burst between
  two read bursts; the first write burst waits for the read data in flight while holding the
  arbiter, so the read pipeline drains and refills); the LOAD's data phase grows by the write
  beats and the cycles the alternation loses, the STORE by the read beats between its bursts.
  The overlap is decided in the one pass over the program, when both transfers are known
  (whichever of the two comes second on the bus times both, see :func:`_interleave`);
* **CONV/POOL** durations follow the engines' documented behaviour (``gateware/conv.py``,
  ``pool.py``, ``output_stage.py``): ``max(N, 3)`` cycles per tap, the accumulate-stage depth,
  the ping-pong drain of N cycles, the output-stage latency; POOL waits for all earlier compute.

The fixed offsets (cycles between a handshake and the next state) were measured once on the
Verilated processor with micro-programs and are collected in :class:`TimingParams`; everything
that depends on the configuration (C, bus width, buffer depths, burst length, credits, queue
depth, accumulate stages, DDR) is derived from it. ``benchmarks/bench_estimator.py`` compares the
model with the RTL simulation.

Public entry points: :func:`simulate_program` (an instruction stream -> :class:`Timeline`) and
:func:`estimate_performance` (a network or compiled network -> :class:`PerformanceReport`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from dlproc.estimate.bursts import load_bursts, transfer_bursts
from dlproc.estimate.bus import Bus, pair_cycles, window_beats
from dlproc.estimate.engines import ConvTiming, pool_cycles, pool_reads, serial_work
from dlproc.estimate.timing import EstimateError, TimingParams
from dlproc.hardware import isa


@dataclass
class Timeline:
    """The simulated execution of one program (times in cycles from START)."""

    cycles: int  #: what the CYCLES register would read at DONE
    dispatch: list[float]  #: per instruction: dispatched by the fetch unit
    start: list[float]  #: taken by its unit
    end: list[float]  #: completed (CONV/POOL: last word in OUT; LOAD/STORE: last beat)
    unit: list[str]
    marks: dict[int, float]  #: MARK index -> cycle stamp
    mac_cycles: list[float]  #: per instruction: MAC-array issue cycles (CONV) / window reads (POOL)
    dma_beats: list[int]
    bus_rate: float
    c: int

    def work_per_interval(self, bounds: Sequence[float]) -> list[tuple[float, float]]:
        """(compute issue cycles, memory cycles) inside each interval [bounds[k], bounds[k+1]):
        an instruction's work is split over the intervals in proportion to its overlap."""
        n = len(bounds) - 1
        comp = [0.0] * n
        beats = [0.0] * n
        for s, e, mc, b in zip(self.start, self.end, self.mac_cycles, self.dma_beats):
            if (not mc and not b) or not e > s:
                continue
            k = max(0, bisect.bisect_right(bounds, s) - 1)
            while k < n and bounds[k] < e:
                lo, hi = max(s, bounds[k]), min(e, bounds[k + 1])
                if hi > lo:
                    frac = (hi - lo) / (e - s)
                    comp[k] += mc * frac
                    beats[k] += b * frac
                k += 1
        return [(c, m / self.bus_rate) for c, m in zip(comp, beats)]

    def window(self, t0: float, t1: float) -> dict[str, float]:
        """Work inside [t0, t1): compute issue cycles and bus beats (for the bound classification)."""
        comp = 0.0
        beats = 0.0
        for s, e, mc, b in zip(self.start, self.end, self.mac_cycles, self.dma_beats):
            if e <= t0 or s >= t1 or e <= s:
                continue
            frac = (min(e, t1) - max(s, t0)) / (e - s)
            comp += mc * frac
            beats += b * frac
        return {"compute": comp, "memory": beats / self.bus_rate}


class _Tokens:
    """The four token counters as FIFOs of push times (a pop consumes the oldest push)."""

    def __init__(self, latency: int):
        self.latency = latency
        self.pushes: dict[str, list[float]] = {q: [] for q in ("l2c", "c2l", "c2s", "s2c")}
        self.pops: dict[str, int] = {q: 0 for q in self.pushes}

    def ready(self, q: str) -> bool:
        return self.pops[q] < len(self.pushes[q])

    def time(self, q: str) -> float:
        return self.pushes[q][self.pops[q]] + self.latency

    def pop(self, q: str) -> None:
        self.pops[q] += 1

    def push(self, q: str, t: float) -> None:
        self.pushes[q].append(t)


_POPS = {
    "load": (("pop_next", "c2l"),),
    "compute": (("pop_prev", "l2c"), ("pop_next", "s2c")),
    "store": (("pop_prev", "c2s"),),
}
_PUSHES = {
    "load": (("push_next", "l2c"),),
    "compute": (("push_prev", "c2l"), ("push_next", "c2s")),
    "store": (("push_prev", "s2c"),),
}


@dataclass
class _LoadRec:
    """What the load unit needs to book (and re-book) one LOAD's data phase on the bus."""

    t0: float  #: taken by the gate
    t_req: float  #: first read command
    data_start: float  #: first read data (alone)
    span: float  #: data-phase cycles its own mechanics need (alone)
    beats: int
    writer: int  #: SRAM words the writer writes (padding included)
    pre: int  #: padding words before the first data word
    post: int  #: padding words after the last data word
    bubble: float = 0.0  #: extra data-phase cycles from STOREs that alternate with it
    seg0: int = 0  #: its first segment in the bus calendar's "load" list


class _Machine:
    def __init__(self, insns: Sequence[isa.Instruction], tp: TimingParams, insn_base: int):
        self.insns = list(insns)
        self.tp = tp
        self.n = len(self.insns)
        self.bus = Bus(tp.ddr_rate, tp.mem_ports)
        self.tok = _Tokens(tp.token_latency)
        n = self.n
        self.unit = [isa.UNIT_OF_OPCODE.get(i.OPCODE, "compute") for i in self.insns]
        self.dispatch = [math.nan] * n
        self.start = [math.nan] * n
        self.end = [math.nan] * n
        self.mac_cycles = [0.0] * n
        self.dma_beats = [0] * n
        self.dequeue = [math.nan] * n  # the cycle the unit took the instruction out of its queue
        self.queue_pos: dict[str, list[int]] = {"load": [], "compute": [], "store": []}
        for i, u in enumerate(self.unit):
            self.queue_pos[u].append(i)
        self.pops = [tuple(q for flag, q in _POPS[u] if getattr(insn, flag)) for insn, u in zip(self.insns, self.unit)]
        self.pushes = [tuple(q for flag, q in _PUSHES[u] if getattr(insn, flag)) for insn, u in zip(self.insns, self.unit)]
        self.unit_index = [0] * n
        for u, idx in self.queue_pos.items():
            for k, i in enumerate(idx):
                self.unit_index[i] = k
        self.ptr = {"load": 0, "compute": 0, "store": 0}
        self.free = {"load": 0.0, "compute": 0.0, "store": 0.0}
        self.idle = {"load": 0.0, "store": 0.0}  # the unit is idle again (for DONE)
        self.marks: dict[int, float] = {}
        self.insn_base = insn_base
        # Fetch state.
        self.next_fetch = 0
        self._fetch_setup()
        # Compute-unit state.
        self.seq_free = 0.0  # the sequencer can FETCH its next instruction from here on
        self.conv = ConvTiming(tp)
        self.last_done = 0.0  # last output word of any compute instruction written
        self.pool_idle = 0.0
        self.finish_time: float | None = None
        self._runners = {"load": self._run_load, "compute": self._run_compute, "store": self._run_store}
        #: LOAD index -> extra data-phase cycles charged before it ran, by a STORE that knew it
        #: would come (the load unit's next LOAD, its tokens there; see _store_meets_load)
        self.bubbles: dict[int, float] = {}
        self.load_rec: dict[int, _LoadRec] = {}
        self.alt_end: dict[int, float] = {}  # LOAD index -> end of the last STORE alternating with it
        self.store_knew: set[int] = set()  # LOADs a STORE timed itself against before they ran
        self.push_slot: dict[int, list[tuple[str, int]]] = {}  # index -> its token pushes
        self.store_seg: dict[int, tuple[str, int]] = {}  # STORE index -> (bus client, first segment)
        self.store_cap: dict[int, float] = {}  # STORE index -> the write rate its own mechanics allow
        #: (first read request, data start, data end, index, beats) of every LOAD
        self.load_phase: list[tuple[float, float, float, int, int]] = []
        self.load_rate: dict[int, float] = {}  #: LOAD index -> the read rate its own mechanics allow
        self.store_request: list[tuple[float, int]] = []  # (first write request, index) of every STORE

    # ---- fetch --------------------------------------------------------------------------------
    def _fetch_setup(self) -> None:
        tp = self.tp
        self.bpi = max(1, isa.INSN_BYTES // tp.bus_bytes)
        self.ipb = max(1, tp.bus_bytes // isa.INSN_BYTES)
        beats = -(-self.n // self.ipb) if self.ipb > 1 else self.n * self.bpi
        start = self.insn_base // tp.bus_bytes
        mb = tp.max_burst
        self.fetch_bursts: list[tuple[int, int]] = []  # (first beat, length)
        b = 0
        while b < beats:
            length = min(beats - b, mb - (start + b) % mb)
            self.fetch_bursts.append((b, length))
            b += length
        self.burst_of_beat: list[int] = []
        for k, (_, length) in enumerate(self.fetch_bursts):
            self.burst_of_beat.extend([k] * length)
        self.burst_req: list[float] = []
        self.burst_data: list[float] = []
        self.beat_consumed: list[float] = []  # per beat: read out of the fetch FIFO

    def _beat_arrival(self, beat: int) -> float | None:
        """Arrival of program beat ``beat``; issues fetch bursts as credits allow."""
        tp = self.tp
        k = self.burst_of_beat[beat]
        while len(self.burst_req) <= k:
            j = len(self.burst_req)
            first, length = self.fetch_bursts[j]
            t = float(tp.fetch_first_request) if j == 0 else self.burst_req[-1] + tp.planner_period
            # Credits: the beats requested before this burst minus those consumed must leave room.
            need = first + length - tp.fetch_credits  # beats that must have been consumed
            if need > 0:
                if len(self.beat_consumed) < need:
                    return None
                t = max(t, self.beat_consumed[need - 1] + 1)
            self.burst_req.append(t)
            data = self.bus.serve("fetch", t + tp.ddr_latency, length, 1.0)
            self.burst_data.append(data)
        first, length = self.fetch_bursts[k]
        # Beats of a burst arrive back to back; the burst's end time already includes sharing.
        return self.burst_data[k] - (first + length - 1 - beat) / self.tp.ddr_rate

    def _try_dispatch(self) -> bool:
        """Dispatch the next instruction if the data and a queue slot allow it."""
        i = self.next_fetch
        if i >= self.n:
            return False
        tp = self.tp
        u = self.unit[i]
        k = self.unit_index[i]
        room = 0.0
        if k >= tp.queue_depth:
            older = self.queue_pos[u][k - tp.queue_depth]
            if math.isnan(self.dequeue[older]):
                return False
            room = self.dequeue[older] + 1
        last_beat = (i // self.ipb) if self.ipb > 1 else i * self.bpi + self.bpi - 1
        arrival = self._beat_arrival(last_beat)
        if arrival is None:
            return False
        prev = self.dispatch[i - 1] if i else -math.inf
        t = max(arrival + 1, prev + (self.bpi if self.ipb == 1 else 1.0 / self.ipb), room)
        self.dispatch[i] = t
        # The beats of this instruction leave the fetch FIFO as it is assembled.
        while len(self.beat_consumed) <= last_beat:
            self.beat_consumed.append(t - 1)
        self.next_fetch += 1
        return True

    # ---- tokens -------------------------------------------------------------------------------
    def _tokens_ready(self, i: int) -> float | None:
        t = 0.0
        for q in self.pops[i]:
            if not self.tok.ready(q):
                return None
            t = max(t, self.tok.time(q))
        return t

    def _consume(self, i: int) -> None:
        for q in self.pops[i]:
            self.tok.pop(q)

    def _give(self, i: int, t: float) -> None:
        slots = []
        for q in self.pushes[i]:
            slots.append((q, len(self.tok.pushes[q])))
            self.tok.push(q, t)
        self.push_slot[i] = slots

    # ---- units --------------------------------------------------------------------------------
    def _ready(self, u: str) -> tuple[float, int, float, float] | None:
        """(earliest start, index, head, tokens) of unit ``u``'s next instruction, if it can run."""
        idx = self.queue_pos[u]
        p = self.ptr[u]
        if p >= len(idx):
            return None
        i = idx[p]
        if math.isnan(self.dispatch[i]):
            return None
        tok = self._tokens_ready(i)
        if tok is None:
            return None
        head = self.dispatch[i] + self.tp.fetch_to_queue - 2
        if u == "compute":
            start = max(max(head, self.seq_free) + self.tp.seq_fetch, tok) + self.tp.seq_tokens
        else:
            start = max(head, self.free[u], tok) + self._request_offset(i)
        return start, i, head, tok

    def _request_offset(self, i: int) -> float:
        """Cycles from taking a LOAD/STORE to its first bus request (0 for MARK)."""
        insn = self.insns[i]
        tp = self.tp
        if isinstance(insn, isa.Load):
            return float(tp.gate_to_request)
        if isinstance(insn, isa.Store):
            bursts, beats = transfer_bursts(insn, tp.elem_beats["OUT"], tp)
            return max(float(tp.store_first_grant), tp.store_reader_start + min(beats / bursts, beats))
        return 0.0

    def _try_unit(self, u: str) -> bool:
        ready = self._ready(u)
        if ready is None:
            return False
        _, i, head, tok = ready
        self._runners[u](i, head, tok)
        self.ptr[u] += 1
        return True

    def _step_earliest(self) -> bool:
        """Run the one ready instruction (of any unit) that starts first.

        The bus calendar serves transfers in the order they are booked, so the units must book
        them in time order: a LOAD that only waits for its tokens (the next operation's first
        LOADs after a weak join, the next tiles' LOADs) would otherwise be booked before an
        earlier STORE and take the bus from it, which the arbiter never does (it alternates)."""
        best: tuple[float, int, str] | None = None
        for rank, u in enumerate(("load", "compute", "store")):
            ready = self._ready(u)
            if ready is not None and (best is None or (ready[0], rank) < best[:2]):
                best = (ready[0], rank, u)
        if best is None:
            return False
        return self._try_unit(best[2])

    def _run_load(self, i: int, head: float, tok: float) -> None:
        tp = self.tp
        insn: isa.Load = self.insns[i]  # type: ignore[assignment]
        t0 = max(head, self.free["load"], tok)
        self._consume(i)
        self.dequeue[i] = t0
        self.start[i] = t0
        buf = isa.Buf(insn.buf).name
        eb = tp.elem_beats[buf]
        bursts, beats = transfer_bursts(insn, eb, tp)
        # Read mechanics: one burst per planner period; at most `outstanding` commands and
        # `read_credits` beats in flight, each command retired latency + length cycles later.
        avg = beats / bursts
        # A burst is requested only when the credits hold all of its beats: whole bursts fit.
        credits = max(avg, math.floor(tp.read_credits / avg) * avg)
        per_burst = max(tp.planner_period, avg / tp.ddr_rate,
                        (tp.ddr_latency + avg - 1) / tp.outstanding,
                        (tp.ddr_latency + avg) * avg / credits)
        # The first bursts are issued at the planner rate, before the queue limit or the credits
        # bite (whole bursts in the credits: a credit-bound LOAD, e.g. at 80 cycles of latency,
        # requests only those at once).
        head_bursts = min(bursts, tp.outstanding, max(1, math.floor(credits / avg))) - 1
        t_req = t0 + tp.gate_to_request
        issue_span = head_bursts * max(tp.planner_period, avg / tp.ddr_rate) + max(0, bursts - 1 - head_bursts) * per_burst
        # Express the transfer as a rate over the data phase so the bus can share it.
        data_start = t_req + tp.ddr_latency
        span = issue_span + avg / tp.ddr_rate
        own = min(beats / span, tp.ddr_rate) if span > 0 else tp.ddr_rate  # its own read rate
        self.load_rate[i] = own
        # The writer: one SRAM word per cycle, padding included; it starts 4 cycles after t0.
        hp = insn.y_size + insn.pad_top + insn.pad_bottom
        wp = insn.x_size + insn.pad_left + insn.pad_right
        words = insn.z_size * hp * wp
        data_words = insn.x_size * insn.y_size * insn.z_size
        writer = words + data_words * (eb - 1)
        pre = insn.pad_top * wp + insn.pad_left
        post = insn.pad_bottom * wp + insn.pad_right
        rec = _LoadRec(t0=t0, t_req=t_req, data_start=data_start, span=span, beats=beats,
                       writer=writer, pre=pre, post=post)
        self.load_rec[i] = rec
        # STOREs that write while this LOAD still issues read commands alternate with it on the
        # arbiter: the first write burst stalls behind the read data in flight (the read
        # pipeline drains and refills), the others go between its read bursts. The bubble holds
        # their beats and the lost cycles. Whoever of the two comes second on the bus decides
        # the overlap, when both are known: a STORE that comes while this LOAD reads charges it
        # then (_run_store -> _extend_load); a STORE that is still writing now, when this LOAD's
        # first read command comes, charges it here; a STORE that already knew this LOAD would
        # come (the load unit's next LOAD, its tokens there) left its charge in `bubbles`.
        bubble = self.bubbles.get(i)
        if bubble is None and tp.mem_ports == 1 and i not in self.store_knew:
            bubble = self._bubble_from_writing_store(i, rec)
        if bubble is None:
            # A write burst in progress when the first read command is ready holds the arbiter
            # (a write burst is finished before the next command): it pushes the read commands,
            # and the data after them, back. (With two memory ports the write bursts have a
            # master of their own.)
            if tp.mem_ports == 1 and self.bus.busy_beats("store", t_req, t_req + 1) > 0:
                rec.data_start += min(self.bus.busy_beats("store", t_req, data_start), tp.max_burst) / tp.ddr_rate
            rec.seg0 = len(self.bus.segs["load"][0])
            data_end = self.bus.serve("load", rec.data_start, beats, beats / span if span > 0 else tp.ddr_rate)
        else:
            rec.bubble = bubble
            data_end = self._book_bubbled(rec)
        self.load_phase.append((t_req, rec.data_start, data_end, i, beats))
        done = self._load_done(rec, data_end)
        self.end[i] = done
        self.dma_beats[i] = beats
        self.free["load"] = done + tp.load_restart
        self.idle["load"] = done + 1
        self._give(i, done)

    def _load_done(self, rec: _LoadRec, data_end: float) -> float:
        """The done pulse of a LOAD whose last data arrives at ``data_end``: the writer writes one
        SRAM word per cycle (padding included) from 4 cycles after the gate took it."""
        tp = self.tp
        writer_end = max(rec.t0 + 4 + rec.pre, rec.data_start) + (rec.writer - rec.pre)
        return max(data_end + tp.load_done + rec.post, writer_end + tp.load_done)

    def _book_bubbled(self, rec: _LoadRec) -> float:
        """Book the data phase of a LOAD that interleaving STOREs slow by ``rec.bubble`` cycles;
        returns its last data. The bubble holds those STOREs' beats, so the data phase does not
        see them a second time (``_serve_unmixed``)."""
        span = rec.span + rec.bubble
        rec.seg0 = len(self.bus.segs["load"][0])
        return self._serve_unmixed(rec.data_start, rec.beats, rec.beats / span if span > 0 else self.tp.ddr_rate)

    def _extend_load(self, li: int, extra: float) -> None:
        """A STORE that came while LOAD ``li`` reads slows it by ``extra`` cycles: re-book its data
        phase and move its done pulse, its tokens and the load unit's next start.

        The worklist runs instructions in time order, so nothing that follows this LOAD's done
        pulse (its tokens' consumers, the load unit's next LOAD) has run yet: the LOAD that a
        STORE meets is the last one the load unit booked, and its segments end the "load" list."""
        rec = self.load_rec[li]
        t0s, t1s, rates = self.bus.segs["load"]
        del t0s[rec.seg0:], t1s[rec.seg0:], rates[rec.seg0:]
        rec.bubble += extra
        data_end = self._book_bubbled(rec)
        phase = self.load_phase[-1]
        assert phase[3] == li, "a STORE can only slow the last LOAD the load unit booked"
        self.load_phase[-1] = (phase[0], phase[1], data_end, li, phase[4])
        self._move_done(li, "load", self._load_done(rec, data_end), self.tp.load_restart)

    def _move_done(self, i: int, unit: str, done: float, restart: float) -> None:
        """Instruction ``i`` of ``unit`` now ends at ``done``: move its end, the unit's next start
        and the tokens it pushed. None of those tokens has been consumed yet: the worklist runs in
        time order, so nothing after ``i``'s done pulse has run."""
        self.end[i] = done
        self.free[unit] = done + restart
        self.idle[unit] = done + 1
        for q, k in self.push_slot.get(i, ()):
            if k >= self.tok.pops[q]:
                self.tok.pushes[q][k] = done

    def _bubble_from_writing_store(self, i: int, rec: _LoadRec) -> float | None:
        """The bubble of LOAD ``i`` from a STORE that is still writing when its first read
        command comes (one port): from there the arbiter alternates them as for a STORE that
        comes during the LOAD, with the beats the STORE has left. None if no STORE writes then."""
        tp = self.tp
        if not self.store_request:
            return None
        first, si = self.store_request[-1]
        s_end = self.end[si] - tp.store_done
        if not first <= rec.t_req < s_end:
            return None
        s_left = self.bus.busy_beats("store", rec.t_req, s_end)
        if "mixed" in self.bus.segs:
            s_left += self.bus.busy_beats("mixed", rec.t_req, s_end)
        if s_left <= 0:
            return None
        alone = rec.data_start + rec.span
        phases = [(rec.t_req, rec.data_start, alone, i, rec.beats)]
        out: dict[int, float] = {}
        hit = _interleave(self, tp, phases, [rec.t_req], rec.t_req, si, out, s_left=s_left)
        if hit is not None:
            # The STORE's remaining bursts alternate with this LOAD's: it is slowed too.
            self._extend_store(si, rec.t_req, s_left, hit)
            if i in out:
                self.alt_end[i] = self.end[si] - tp.store_done - tp.write_response_latency
        return out.get(i)

    def _extend_store(self, si: int, t: float, left: float, hit: tuple[float, float]) -> None:
        """STORE ``si``, still writing at ``t`` with ``left`` beats to go, alternates from there
        with a LOAD that started then (``hit``: the delay of its next write and the read beats
        between its write bursts, from :func:`_interleave`): re-book its remaining beats where
        that LOAD's bubble does not see them ("mixed") and move its done pulse and tokens. As in
        :meth:`_extend_load`, nothing after its done pulse has run yet (time order)."""
        tp = self.tp
        delay, between = hit
        end = self.end[si] - tp.store_done - tp.write_response_latency
        cap = min(self.store_cap[si], tp.ddr_rate)
        new_end = t + delay + max(left / cap, (left + between) / tp.ddr_rate)
        if new_end <= end:
            return
        client, seg0 = self.store_seg[si]
        t0s, t1s, rates = self.bus.segs[client]
        keep = seg0
        while keep < len(t0s) and t0s[keep] < t:
            t1s[keep] = min(t1s[keep], t)
            keep += 1
        del t0s[keep:], t1s[keep:], rates[keep:]
        self._book_mixed(t, new_end, left / (new_end - t))
        self._move_done(si, "store", new_end + tp.store_done + tp.write_response_latency, tp.store_restart)

    def _book_mixed(self, t0: float, t1: float, rate: float) -> None:
        """Book the write beats of a STORE that interleaves LOADs on the bus, where
        every other transfer sees them but not the LOADs whose bubbles already hold them."""
        self.bus.segs.setdefault("mixed", ([], [], []))
        self.bus._add("mixed", t0, t1, rate)

    def _serve_unmixed(self, start: float, beats: float, cap: float) -> float:
        """Serve a LOAD's data phase on the bus ignoring the interleaving STOREs' beats (its bubble
        holds them)."""
        mixed = self.bus.segs.pop("mixed", None)
        try:
            return self.bus.serve("load", start, beats, cap)
        finally:
            if mixed is not None:
                self.bus.segs["mixed"] = mixed

    def _run_store(self, i: int, head: float, tok: float) -> None:
        tp = self.tp
        insn = self.insns[i]
        t0 = max(head, self.free["store"], tok)
        self._consume(i)
        self.dequeue[i] = t0
        self.start[i] = t0
        if isinstance(insn, isa.Mark):
            self.marks[insn.index] = t0 + 2
            self.end[i] = t0 + 2
            self.free["store"] = t0 + tp.mark_period
            self.idle["store"] = t0 + tp.mark_period
            return
        eb = tp.elem_beats["OUT"]
        bursts, beats = transfer_bursts(insn, eb, tp)  # type: ignore[arg-type]
        avg = beats / bursts
        # The first burst is granted once the reader has put all its beats in the FIFO.
        first = max(t0 + tp.store_first_grant, t0 + tp.store_reader_start + min(avg, beats))
        per_burst = max(tp.planner_period, avg / tp.ddr_rate + 1)
        cap = avg / per_burst
        self.store_request.append((first, i))
        hit, charged = self._store_meets_load(first, i)
        if hit is not None:
            # It interleaves a LOAD that still issues read commands: the arbiter alternates
            # commands, so its write bursts go in that LOAD's bubble (which _store_meets_load
            # just charged it) after the read data in flight, not after the whole LOAD; one read
            # burst of the LOAD goes between two of its write bursts while both have bursts.
            delay, between = hit
            start = first + delay
            end = start + max(beats / min(cap, tp.ddr_rate), (beats + between) / tp.ddr_rate)
            if between > 0:
                self.store_seg[i] = ("mixed", len(self.bus.segs.get("mixed", ([],))[0]))
                self._book_mixed(start, end, beats / (end - start))
            else:  # it waits for the last read data of a LOAD that is not slowed
                self.store_seg[i] = ("store", len(self.bus.segs["store"][0]))
                self.bus._add("store", start, end, beats / (end - start))
        else:
            self.store_seg[i] = ("store", len(self.bus.segs["store"][0]))
            end = self.bus.serve("store", first, beats, cap)
        self.store_cap[i] = cap
        for li in charged:
            self.alt_end[li] = end
        done = end + tp.store_done + tp.write_response_latency  # two ports: wait for the last response
        self.end[i] = done
        self.dma_beats[i] = beats
        self.free["store"] = done + tp.store_restart
        self.idle["store"] = done + 1
        self._give(i, done)

    def _store_meets_load(self, first: float, i: int) -> tuple[tuple[float, float] | None, list[int]]:
        """(delay of its first write, LOAD beats read between its write bursts) of a STORE whose
        first write request at ``first`` meets a LOAD that still reads (one port), or None; and
        the LOADs it slows.

        The units book their transfers in time order (:meth:`_step_earliest`), so every LOAD that
        starts before this STORE is on the calendar, and the STORE and the LOADs it meets are
        timed together, here, when both are known: the LOAD it meets (the last one the load unit
        booked) is slowed now (:meth:`_extend_load`), and the load unit's next LOAD, if the STORE
        goes on alternating with it, gets its charge when it runs (``bubbles``). (Before, the
        bubbles came from a first pass in which the STOREs met the LOADs elsewhere: a pool
        tile's STORE fell into the next LOAD's latency window there, and the LOAD kept that
        bubble in the second pass, where the STORE met it late in its data, nearly harmless.)"""
        tp = self.tp
        if tp.mem_ports != 1 or not self.load_phase:
            return None, []
        phases = self.load_phase[-8:]  # (the LOADs it can still meet are the last ones booked)
        # The load unit's next LOAD, if its tokens are there, starts during this STORE's
        # alternation (the load unit goes on right away): put it on the list as it will start.
        nxt = self._ready("load")
        li = None
        if nxt is not None and isinstance(self.insns[nxt[1]], isa.Load):
            t_l, li = nxt[0], nxt[1]
            load = self.insns[li]
            l_beats = load_bursts(load, tp)[1]
            ds = t_l + tp.ddr_latency
            phases = phases + [(t_l, ds, ds + l_beats / tp.ddr_rate + self.bubbles.get(li, 0.0), li, l_beats)]
            self.load_rate.setdefault(li, tp.ddr_rate)
        out: dict[int, float] = {}
        hit = _interleave(self, tp, phases, [p[0] for p in phases], first, i, out)
        if hit is None:
            return None, []
        for index, extra in out.items():
            if index in self.load_rec:
                self._extend_load(index, extra)
            else:  # the load unit's next LOAD: charged when it runs
                self.bubbles[index] = self.bubbles.get(index, 0.0) + extra
        if li is not None and li in out and li not in self.load_rec:
            self.store_knew.add(li)  # (it timed itself against that LOAD: no second charge)
        return hit, list(out)

    def _run_compute(self, i: int, head: float, tok: float) -> None:
        tp = self.tp
        insn = self.insns[i]
        f = max(head, self.seq_free)
        self.dequeue[i] = f
        x = max(f + tp.seq_fetch, tok) + tp.seq_tokens  # EXEC
        self._consume(i)
        if isinstance(insn, isa.Conv):
            a = max(x, self.conv.ready, self.pool_idle)
            if insn.wait_writes:
                # Dispatched once every earlier instruction's last word is written (the compute
                # unit's in-flight count is zero the cycle after that write).
                a = max(a, self.last_done + 1)
            done, self.mac_cycles[i] = self.conv.run(insn, a)
            self.start[i] = a
            self.end[i] = done
            self.last_done = max(self.last_done, done)
            self.seq_free = a + 1
            self._give(i, done)
        elif isinstance(insn, isa.Pool):
            a = max(x, self.last_done + tp.all_done_gap, self.pool_idle)
            done = a + pool_cycles(insn) + tp.pool_done
            self.start[i] = a
            self.end[i] = done
            self.mac_cycles[i] = pool_reads(insn)
            self.pool_idle = done - tp.ostage_latency + 1
            self.last_done = max(self.last_done, done)
            self.seq_free = a + 1
            self._give(i, done)
        elif not isinstance(insn, isa.Finish):
            # The optional blocks' engines (adder, upsample, LRN, softmax) start, like POOL, when
            # everything before them has completed; their per-word rates are the ones their
            # gateware documents (not validated on the RTL yet, see docs/estimator.md).
            a = max(x, self.last_done + tp.all_done_gap, self.pool_idle)
            work, outputs = serial_work(insn, tp.c, tp.fc_lanes)
            done = a + work + tp.pool_done + (tp.ostage_latency if outputs else 0) - tp.ostage_latency
            self.start[i] = a
            self.end[i] = done
            self.mac_cycles[i] = work
            self.pool_idle = done - tp.ostage_latency + 1
            self.last_done = max(self.last_done, done)
            self.seq_free = a + 1
            self._give(i, done)
        else:  # FINISH
            t = max(x, self.last_done + tp.all_done_gap)
            self.start[i] = t
            self.end[i] = t
            self.finish_time = t
            self.seq_free = t + 1
            self._give(i, t)

    # ---- driver ---------------------------------------------------------------------------------
    def run(self) -> Timeline:
        units = ("load", "compute", "store")
        while True:
            progress = False
            while self._try_dispatch():
                progress = True
            if self._step_earliest():
                progress = True
            if not progress:
                break
        if any(self.ptr[u] < len(self.queue_pos[u]) for u in units):
            waiting = [f"{u} at instruction {self.queue_pos[u][self.ptr[u]]}" for u in units
                       if self.ptr[u] < len(self.queue_pos[u])]
            raise EstimateError("the program deadlocks (waits for tokens nobody gives): " + ", ".join(waiting))
        if self.finish_time is None:
            raise EstimateError("the program has no FINISH (the processor would stop with RAN_OFF_END)")
        return self.timeline()

    def timeline(self) -> Timeline:
        tp = self.tp
        total = max(self.finish_time + 1, self.idle["load"], self.idle["store"]) + tp.finish_end - 1
        return Timeline(
            cycles=int(math.ceil(total)), dispatch=self.dispatch, start=self.start, end=self.end, unit=self.unit,
            marks=self.marks, mac_cycles=self.mac_cycles, dma_beats=self.dma_beats, bus_rate=tp.ddr_rate, c=tp.c,
        )


def simulate_program(config: Any, program: bytes | Iterable[isa.Instruction], *, insn_base: int = 0,
                     timing: TimingParams | None = None) -> Timeline:
    """Time a program (encoded bytes or instruction objects) on ``config``'s processor."""
    if isinstance(program, (bytes, bytearray, memoryview)):
        insns = isa.decode_program(bytes(program))
    else:
        insns = list(program)
    tp = timing or TimingParams.from_config(config)
    return _Machine(insns, tp, insn_base).run()


def _interleave(m: _Machine, tp: TimingParams, phases: Sequence[tuple[float, float, float, int, int]],
                starts: Sequence[float], t: float, si: int, out: dict[int, float],
                s_left: float | None = None) -> tuple[float, float] | None:
    """The STORE ``si`` whose first write request is at ``t`` against the LOAD phases
    ``phases`` (sorted, ``starts`` their first read requests): (delay of its first write, LOAD
    beats read between its write bursts), or None if it meets no LOAD that still reads. The
    LOADs' extra data-phase cycles are added to ``out``. ``s_left``: the STORE was already
    writing at ``t`` (a LOAD's first request) and has that many beats left.

    The mechanism (``gateware/dma.py`` MemoryArbiter, the DDR model of ``sim/native/ddr.h``): the
    one-port arbiter alternates load and store commands when both have a burst ready and
    finishes a write burst before the next command, and the DDR returns read data before it
    accepts write beats. So

    * the first write burst that meets a streaming LOAD's data waits for the read data in flight
      while holding the arbiter (a streaming LOAD keeps all its credits out: its credits in whole
      bursts, at most the outstanding commands' beats): the LOAD's read pipeline drains and has
      to refill (``refill``: the latency, of which the commands in flight cover one
      ``outstanding``-th). It costs the fraction ``full`` of a refill: a LOAD has all its
      credits out a DDR latency after it last alternated with a STORE (``_Machine.alt_end``),
      and a LOAD that started while this STORE was writing never had (its commands alternated
      with the write bursts from its first one);
    * if the LOAD's read bursts are at least as long as the spacing of the read commands that go
      between write bursts, the data of the refill window's commands comes back to back and
      holds the next write burst again: the STORE goes in windows (the window's write beats,
      then that data), and the LOAD loses the held burst's beats and, while it still has data
      to request, a refill per window; otherwise the held burst finishes in the gaps and the
      alternation below follows;
    * after that one write burst goes between two read bursts while both units have bursts to
      issue: the LOAD's data phase is longer by the write beats and by ``pair_cycles`` per pair
      (grants and command cycles without data), and the STORE takes its beats plus the read
      beats between them. Write bursts in the DDR latency window before a LOAD's first data
      alternate with its read commands: the LOAD has only one burst per write burst requested
      when its data comes (not all its credits), and a short LOAD whose remaining read commands
      all go between write bursts gets its last data a DDR latency after the last of them. A
      LOAD whose read commands have all been issued is not slowed: the STORE waits for all of
      its data;
    * a STORE that is still writing when a LOAD's first read command comes alternates with it
      in the same way from there on, with the beats it has left;
    * when the load unit goes on with the next LOAD right away, the STORE's remaining bursts
      alternate with that LOAD's in the same way: that LOAD has nothing in flight when it
      starts, only the bursts requested in its latency window when its first data comes, and
      every later read burst goes between two write bursts.

    A LOAD that its own mechanics (credits, outstanding commands) keep below the bus rate has
    idle bus cycles that take write bursts for free; its charges are reduced by them. The
    interleaved STORE's beats are booked where the LOADs whose bubbles hold them do not see
    them (``_Machine._book_mixed``), so nothing is counted twice.
    """
    refill = tp.ddr_latency * (1 - 1 / tp.outstanding)
    k = bisect.bisect_right(starts, t) - 1
    if k < 0:
        return None
    tr, ds, de, index, beats = phases[k]
    if not tr <= t < de:
        return None
    # A write burst granted while the first read data is still on its way waits for it too.
    left = (de - max(t, ds)) * beats / (de - ds) if de > ds else 0.0
    s_bursts, s_beats = transfer_bursts(m.insns[si], tp.elem_beats["OUT"], tp)
    s_avg = s_beats / s_bursts
    if s_left is not None:  # a STORE already writing when the LOAD came: the beats it has left
        s_beats = s_left
    early = min(float(s_beats), window_beats(ds - t, s_avg, tp))
    rest = s_beats - early
    if rest <= 0:
        return None
    pc = pair_cycles(tp, s_avg)
    period = s_avg / tp.ddr_rate + pc  # one write burst and its pair's overhead
    window = t < ds
    # How full the LOAD's read pipeline is when this STORE meets it (its refill costs that
    # fraction of a refill): a LOAD streams with all its credits out a DDR latency after it last
    # alternated with a STORE; one that started while this STORE was writing never filled it.
    last = m.alt_end.get(index) if s_left is None else math.inf
    full = 1.0 if last is None else min(1.0, max(0.0, (max(t, ds) - last) / tp.ddr_latency))
    if window:
        # In the LOAD's latency window the arbiter alternates its read commands with the
        # STORE's write bursts: the LOAD has one burst requested, then one more per write
        # burst, at most its credits (whole bursts) and the outstanding commands (measured:
        # a 60-beat pool tile LOAD of 9 bursts has 4 in flight when its first data meets the
        # STORE, not all 9). The write burst that meets the first data waits for all of it.
        l_bursts, _ = load_bursts(m.insns[index], tp)
        l_avg = beats / l_bursts
        whole = max(1, math.floor(tp.read_credits / l_avg))
        issued = 1 + (ds - t) / period
        requested = min(float(beats), min(float(l_bursts), whole, tp.outstanding, issued) * l_avg)
        delay = max(0.0, ds - t - early / tp.ddr_rate) + requested / tp.ddr_rate
    else:
        requested = float(tp.read_credits)
        # A streaming LOAD keeps all its read credits out (it requests a burst as soon as the
        # credits hold it, and the DDR returns at most one beat per cycle, so requests run ahead of
        # the data): the DDR serves that data before any write beat, so the write burst waits for
        # all of it (whole bursts of credits, at most the outstanding commands' beats; measured on
        # de10nano: about 64 beats with 40 cycles of latency, not 40). All its read commands
        # issued (at most its credits left): the data in flight is all it has left.
        l_bursts, _ = load_bursts(m.insns[index], tp)
        l_avg = beats / l_bursts
        in_flight = min(max(l_avg, math.floor(tp.read_credits / l_avg) * l_avg), tp.outstanding * l_avg)
        delay = min(left, in_flight) / tp.ddr_rate
    between = 0.0
    between_pairs = 0.0
    while True:
        load = m.insns[index]
        l_bursts, l_beats = load_bursts(load, tp)
        # Read bursts the LOAD still has to request (beyond those it has in flight).
        need = max(0.0, left - requested) * l_bursts / l_beats
        pairs = min(rest / s_avg, need)
        l_avg = l_beats / l_bursts
        # Read commands it issues in a refill window (one per write burst, its credits, the
        # outstanding commands): their data, one burst after the other, leaves the write burst
        # in progress only the cycles between the bursts (the commands' spacing minus a burst).
        n_win = min(max(1, math.floor(tp.read_credits / l_avg)), tp.outstanding, 1 + tp.ddr_latency / period)
        gaps = n_win * max(0.0, period - l_avg / tp.ddr_rate) * tp.ddr_rate
        if pairs > 0 and not window and gaps < s_avg:
            # Streaming, and the read data of a refill window comes back to back: the write burst
            # waits for all the read data in flight (the DDR serves reads first, the arbiter
            # finishes the burst before the next command), so the LOAD's pipeline drains and its
            # next data comes a DDR latency after its next command. In that refill window write
            # bursts alternate with its read commands (`w` write beats), whose data (`chunk`)
            # again holds the write burst then in progress, and so on: the STORE waits for each
            # chunk, the LOAD loses each window. (Measured on de10nano, `plain` c1: 64-74 beats of
            # read data before the first write burst goes on, 32 write beats per window.) When
            # the read bursts are shorter than the commands' spacing, the write burst finishes in
            # the gaps and the alternation settles to one read burst per write burst (below).
            busy = m.load_rate[index] / tp.ddr_rate
            slack = (1.0 - busy) * (de - max(t, ds))
            w = window_beats(tp.ddr_latency, s_avg, tp)
            chunk = n_win * l_avg
            # The write burst that waited for the data in flight finishes before the next command;
            # the LOAD's data stops for those beats and for its refill (a DDR latency).
            b = min(float(rest), s_avg)
            r, nb, lost = float(rest) - b, need * l_avg, 0.0
            lose = b / tp.ddr_rate + tp.ddr_latency
            while r > 0 and nb > 0:
                wrote = min(r, w)
                r -= wrote
                got = min(chunk, nb)
                nb -= got
                if r > 0:  # a full window; the data requested in it holds the burst in progress
                    lost += tp.ddr_latency * tp.ddr_rate - wrote + got
                    b = min(r, s_avg)
                    r -= b
                    if nb > 0:  # (the LOAD refills again only if it has data left to request)
                        lose += b / tp.ddr_rate + tp.ddr_latency
                else:
                    lost += wrote / s_avg * pc * tp.ddr_rate
            # (a LOAD its own mechanics keep below the bus rate has idle cycles that absorb some)
            extra = max(0.0, lose - slack)
            out[index] = out.get(index, 0.0) + extra
            between += lost
            rest = r
        elif pairs > 0:
            # A LOAD that cannot use the whole bus (credit- or latency-bound) loses less: its
            # idle bus cycles take write bursts without delaying its data.
            busy = m.load_rate[index] / tp.ddr_rate
            slack = (1.0 - busy) * (de - max(t, ds))
            once = refill * busy * full if index not in out else 0.0
            if window and pairs >= need:
                # Its last read commands go between the STORE's write bursts: its last data
                # comes a DDR latency after the last of them. And its data phase holds the write
                # bursts that go between its read bursts (a long LOAD's data comes back while
                # the later write bursts go: the two share the one port), as when it streams.
                extra = max(requested / tp.ddr_rate + pairs * period + tp.ddr_latency + l_beats / l_bursts / tp.ddr_rate
                            - (de - ds), pairs * period - slack)
            else:
                extra = max(0.0, pairs * period - slack) + once
            out[index] = out.get(index, 0.0) + max(0.0, extra)
            # The data of a read command issued between two write bursts arrives a DDR latency
            # later: only what arrives before the STORE's last write burst delays it.
            between += max(0.0, pairs * period - tp.ddr_latency) / period * l_beats / l_bursts
            between_pairs += pairs
            rest -= pairs * s_avg
        k += 1
        if rest <= 0 or k >= len(phases) or phases[k][0] > de + tp.ddr_latency:
            break
        tr, ds, de, index, beats = phases[k]
        rest -= window_beats(ds - tr, s_avg, tp)
        left = float(beats)
        # It starts while this STORE writes: it has nothing in flight, and in its latency
        # window its read commands go one between two write bursts (those write bursts are
        # the window's beats above), so it has those bursts requested when its data comes,
        # not all its credits; every later read burst alternates with a write burst.
        cl_bursts, _ = load_bursts(m.insns[index], tp)
        cl_avg = beats / cl_bursts
        issued = 1 + (ds - tr) / period
        requested = min(float(beats), min(float(cl_bursts), max(1, math.floor(tp.read_credits / cl_avg)),
                                          tp.outstanding, issued) * cl_avg)
        window = False
        full = 0.0  # (it starts while this STORE writes: its pipeline never filled)
    if between_pairs > 0:
        between += between_pairs * pc * tp.ddr_rate
    return delay, between


