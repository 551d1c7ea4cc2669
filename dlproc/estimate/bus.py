"""The shared DRAM bus: the reservation calendar of the fetch, load and store units, and the
cycles a LOAD and a STORE lose when they alternate on the one-port arbiter."""

from __future__ import annotations

import bisect
import math

from dlproc.estimate.timing import TimingParams


class Bus:
    """Bandwidth reservations of the three DRAM clients.

    Each client (fetch, load, store) executes one transfer at a time, so its reservations form a
    time-ordered list of segments ``[t0, t1)`` at some rate (beats per cycle). A new transfer of
    one client is served at the rate its own mechanics allow, reduced by what the other clients
    *on the same memory port* have reserved at the same time, so the total of a port never
    exceeds the DDR rate (the DDR serves read data before write beats; a reserved share of the
    bus, ``floor``, made the estimates of DDR-starved configurations too optimistic on the RTL,
    so it is zero). With one port all three clients share it; with two (``MemoryPorts = 2``)
    fetch and load share port 0 and store has port 1 to itself, at the full rate.
    """

    def __init__(self, rate: float, ports: int = 1):
        self.rate = rate
        self.floor = 0.0
        # "mixed" holds the STORE beats that alternate with a LOAD's read bursts (one port only,
        # see _Machine._book_mixed).
        self.port = {"fetch": 0, "load": 0, "store": 0 if ports == 1 else 1, "mixed": 0}
        self.segs: dict[str, tuple[list[float], list[float], list[float]]] = {
            u: ([], [], []) for u in ("fetch", "load", "store")
        }

    def _others(self, client: str, t: float) -> list[tuple[float, float, float]]:
        out = []
        for u, (t0s, t1s, rates) in self.segs.items():
            if u == client or not t1s or self.port[u] != self.port[client]:
                continue
            i = bisect.bisect_right(t1s, t)
            for k in range(i, len(t1s)):
                out.append((t0s[k], t1s[k], rates[k]))
        return out

    def serve(self, client: str, start: float, beats: float, cap: float) -> float:
        """Transfer ``beats`` from ``start`` at up to ``cap`` beats/cycle; returns the end time and
        records the reservation."""
        cap = min(cap, self.rate)
        if beats <= 0:
            return start
        others = self._others(client, start)
        if not others:
            end = start + beats / cap
            self._add(client, start, end, cap)
            return end
        # Piecewise: collect the breakpoints of the other clients' reservations.
        points = sorted({p for s in others for p in (s[0], s[1]) if p > start})
        t = start
        left = beats
        for p in points + [math.inf]:
            used = sum(r for (a, b, r) in others if a <= t < b)
            avail = min(cap, max(self.rate - used, self.floor))
            if avail <= 1e-9:
                t = p
                continue
            if p == math.inf or left <= avail * (p - t):
                end = t + left / avail
                self._add(client, t, end, avail)
                return end
            self._add(client, t, p, avail)
            left -= avail * (p - t)
            t = p
        raise AssertionError("unreachable")

    def _add(self, client: str, t0: float, t1: float, rate: float) -> None:
        if t1 <= t0:
            return
        t0s, t1s, rates = self.segs[client]
        if t1s and t0 < t1s[-1]:
            t0 = t1s[-1]
            if t1 <= t0:
                return
        t0s.append(t0)
        t1s.append(t1)
        rates.append(rate)

    def busy_beats(self, client: str, t0: float, t1: float) -> float:
        """Beats the client moved in [t0, t1)."""
        s0, s1, rates = self.segs[client]
        total = 0.0
        for k in range(bisect.bisect_right(s1, t0), len(s1)):
            if s0[k] >= t1:
                break
            lo, hi = max(s0[k], t0), min(s1[k], t1)
            if hi > lo:
                total += (hi - lo) * rates[k]
        return total



def window_beats(cycles: float, s_avg: float, tp: TimingParams) -> float:
    """Write beats that fit in ``cycles`` of a LOAD's DDR latency window (before its first read
    data), where write bursts of ``s_avg`` beats alternate with its read commands."""
    return max(0.0, cycles) * tp.ddr_rate * s_avg / (s_avg + pair_cycles(tp, s_avg))


def pair_cycles(tp: TimingParams, s_avg: float) -> float:
    """Bus cycles a read/write burst pair of the alternation loses (``pair_cycles``: the
    arbiter's grant and command cycles without data), with write bursts of ``s_avg`` beats.

    Below one beat per cycle the DDR is the bottleneck, not the bus: its credit bucket
    (``sim/native/ddr.cpp``: capped at one beat plus one cycle's worth) fills during those
    cycles, and the next burst spends the credit at the bus rate, one beat per cycle, so it
    catches up ``1 - rate`` beats per cycle. What the bucket can bank and the burst can catch up
    is not lost (at 8 B/cycle on a 16-byte bus nothing is: measured on the RTL, a DMA-bound
    pool's LOAD and the STORE that overlaps it take exactly their beats at the DDR rate); at the
    bus rate nothing can be caught up and the pair loses all its cycles."""
    r = tp.ddr_rate
    if r >= 1.0:
        return tp.pair_cycles
    banked = min(tp.pair_cycles * r, 1.0 + r, (1.0 - r) * s_avg / r)  # beats of DDR credit
    return max(0.0, tp.pair_cycles - banked / r)

