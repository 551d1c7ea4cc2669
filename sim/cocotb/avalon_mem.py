"""A cocotb Avalon-MM memory slave with randomized timing and protocol checks.

It sits behind the processor's pipelined burst master (ports ``<prefix>address``, ``burstcount``,
``read``, ``write``, ``writedata``, ``byteenable``, ``waitrequest``, ``readdata``,
``readdatavalid``) and, unlike a fixed-timing model, it randomizes everything the master must
tolerate:

* ``waitrequest`` is asserted at random (probability ``wait_prob``) and whenever
  ``max_outstanding`` read commands are in flight;
* each read command's latency is drawn from ``latency`` (inclusive range, cycles from acceptance
  to the first beat), and each further beat gets a random bubble with probability ``gap_prob``;
* a master with write responses (``writeresponsevalid`` and ``response``: the write master
  ``mem1__`` of a ``MemoryPorts = 2`` processor) gets one response per write burst, in burst
  order, at most one per cycle, a random ``response_latency`` (inclusive range, default
  ``latency``) after the burst's last beat was accepted. The response is OKAY (0) unless the
  burst starts inside ``error_range`` (``(lo, hi)``, settable): then it is ``error_response``
  (2 SLVERR, 3 DECODEERROR) and the burst's data is dropped. ``responses`` records
  ``(cycle driven, burst address, code)`` for every response.

It checks the master's side of the protocol and records every violation in ``errors`` (the bench
asserts the list is empty): a request held under ``waitrequest`` must stay asserted and unchanged;
no read may start inside a write burst; ``burstcount`` must be 1..``max_burst``; addresses must be
bus aligned and inside ``[base, base + len(memory))``; ``read`` and ``write`` are never high
together. Every accepted command is appended to ``commands`` as ``(kind, address, burstcount)``.

The model drives its outputs right after a rising edge, so the DUT samples them at the next edge,
like a registered slave. Read data is taken from memory when the command is accepted (commands are
executed in order).

A read-only master (``read`` without ``write``/``writedata``/``byteenable``) or a write-only one
(``write`` without ``read``/``readdata``/``readdatavalid``), as a ``MemoryPorts = 2`` processor has
(``mem__`` reads, ``mem1__`` writes), is served by one model per port over one shared
``memory``: the signals a port lacks read as 0 and are not driven.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import cocotb
from cocotb.triggers import RisingEdge

__all__ = ["AvalonMemoryModel", "Command"]


@dataclass(frozen=True)
class Command:
    kind: str          # "read" or "write"
    address: int
    burstcount: int


class AvalonMemoryModel:
    def __init__(self, dut, prefix: str, clock, reset, memory: bytearray, *, base: int = 0,
                 rng: random.Random | None = None, wait_prob: float = 0.3, latency: tuple[int, int] = (1, 12),
                 gap_prob: float = 0.2, max_outstanding: int = 4, max_burst: int | None = None,
                 response_latency: tuple[int, int] | None = None) -> None:
        self.sig = {name: getattr(dut, prefix + name, None) for name in (
            "address", "burstcount", "read", "write", "writedata", "byteenable",
            "waitrequest", "readdata", "readdatavalid", "writeresponsevalid", "response")}
        for required in ("address", "burstcount", "waitrequest"):
            if self.sig[required] is None:
                raise AttributeError(f"the DUT has no {prefix}{required}")
        if self.sig["read"] is None and self.sig["write"] is None:
            raise AttributeError(f"{prefix}: neither read nor write")
        self.clock, self.reset = clock, reset
        self.memory, self.base = memory, base
        data = self.sig["writedata"] if self.sig["writedata"] is not None else self.sig["readdata"]
        self.bus_bytes = len(data) // 8
        self.rng = rng or random.Random(0)
        self.wait_prob, self.latency, self.gap_prob = wait_prob, latency, gap_prob
        self.max_outstanding = max_outstanding
        self.max_burst = max_burst or (1 << (len(self.sig["burstcount"]) - 1))
        self.errors: list[str] = []
        self.commands: list[Command] = []
        self.read_beats = self.write_beats = self.wait_cycles = 0
        self._beats: deque[tuple[int, int]] = deque()   # (ready cycle, data) in return order
        self._cmds_in_flight: deque[int] = deque()      # last-beat ready cycle per read command
        self._cycle = 0
        self._waiting = True
        self._held: tuple | None = None
        self._wr_addr = 0
        self._wr_left = 0
        self._task = None
        # Write responses (only if the master has writeresponsevalid).
        self.response_latency = response_latency or latency
        self.error_range: tuple[int, int] = (0, 0)
        self.error_response = 2
        self.responses: list[tuple[int, int, int]] = []
        self.last_write_cycle = 0  # cycle in which the last write beat was accepted
        self._pending_responses: deque[tuple[int, int, int]] = deque()  # (ready cycle, address, code)
        self._wr_start = 0
        self._wr_code = 0

    def start(self) -> None:
        self._drive("waitrequest", 1)
        self._drive("readdatavalid", 0)
        self._drive("readdata", 0)
        self._drive("writeresponsevalid", 0)
        self._drive("response", 0)
        self._task = cocotb.start_soon(self._run())

    def _drive(self, name: str, value: int) -> None:
        if self.sig[name] is not None:  # an output of the slave this (write-only) master lacks
            self.sig[name].value = value

    def _get(self, name: str) -> int:
        return 0 if self.sig[name] is None else int(self.sig[name].value)

    # ---- helpers --------------------------------------------------------------------------------
    def _error(self, text: str) -> None:
        if len(self.errors) < 50:
            self.errors.append(f"cycle {self._cycle}: {text}")

    def _check_range(self, kind: str, address: int, burst: int) -> bool:
        if address % self.bus_bytes:
            self._error(f"{kind} address 0x{address:x} not aligned to {self.bus_bytes} bytes")
            return False
        if not 1 <= burst <= self.max_burst:
            self._error(f"{kind} burstcount {burst} outside 1..{self.max_burst}")
            return False
        if address < self.base or address + burst * self.bus_bytes > self.base + len(self.memory):
            self._error(f"{kind} of {burst} beats at 0x{address:x} outside memory "
                        f"[0x{self.base:x}, 0x{self.base + len(self.memory):x})")
            return False
        return True

    def _accept_read(self, address: int, burst: int) -> None:
        self.commands.append(Command("read", address, burst))
        if self._wr_left:
            self._error("read command inside an unfinished write burst")
        if not self._check_range("read", address, burst):
            return
        # A beat with ready cycle r is driven after edge r and sampled by the DUT at edge r + 1, so
        # latency L (>= 1) from the accepting edge means r = accept + L - 1.
        ready = max(self._cycle + self.rng.randint(*self.latency) - 1,
                    (self._beats[-1][0] + 1) if self._beats else 0)
        for i in range(burst):
            if i and self.rng.random() < self.gap_prob:
                ready += self.rng.randint(1, 3)
            offset = address - self.base + i * self.bus_bytes
            data = int.from_bytes(self.memory[offset:offset + self.bus_bytes], "little")
            self._beats.append((ready, data))
            ready += 1
        self._cmds_in_flight.append(ready - 1)

    def _accept_write(self, address: int, burst: int, data: int, byteenable: int) -> None:
        if self._wr_left == 0:
            self.commands.append(Command("write", address, burst))
            if not self._check_range("write", address, burst):
                return
            self._wr_addr, self._wr_left, self._wr_start = address, burst, address
            lo, hi = self.error_range
            self._wr_code = self.error_response if lo <= address < hi else 0
        offset = self._wr_addr - self.base
        raw = data.to_bytes(self.bus_bytes, "little")
        for lane in range(self.bus_bytes):
            if (byteenable >> lane) & 1 and self._wr_code == 0:
                self.memory[offset + lane] = raw[lane]
        self.write_beats += 1
        self.last_write_cycle = self._cycle
        self._wr_addr += self.bus_bytes
        self._wr_left -= 1
        if self._wr_left == 0 and self.sig["writeresponsevalid"] is not None:
            # Driven after edge r, sampled at edge r + 1: latency L from the accepting edge.
            ready = max(self._cycle + self.rng.randint(*self.response_latency) - 1,
                        (self._pending_responses[-1][0] + 1) if self._pending_responses else 0)
            self._pending_responses.append((ready, self._wr_start, self._wr_code))

    # ---- the clocked process ------------------------------------------------------------------------
    async def _run(self) -> None:
        s = self.sig
        while True:
            await RisingEdge(self.clock)
            self._cycle += 1
            if self.reset is not None and int(self.reset.value):
                self._beats.clear()
                self._cmds_in_flight.clear()
                self._pending_responses.clear()
                self._drive("writeresponsevalid", 0)
                self._wr_left = 0
                self._held = None
                self._drive("readdatavalid", 0)
                self._waiting = True
                s["waitrequest"].value = 1
                continue
            rd, wr = self._get("read"), self._get("write")
            if rd and wr:
                self._error("read and write asserted together")
            request = None
            if rd or wr:
                request = (rd, wr, int(s["address"].value), int(s["burstcount"].value),
                           self._get("writedata") if wr else 0, self._get("byteenable") if wr else 0)
            if self._held is not None and request != self._held:
                self._error(f"request changed or dropped under waitrequest: {self._held} -> {request}")
            self._held = None
            if request is not None:
                if self._waiting:
                    self.wait_cycles += 1
                    self._held = request
                elif rd:
                    self._accept_read(request[2], request[3])
                else:
                    self._accept_write(request[2], request[3], request[4], request[5])
            # Read data for the next cycle.
            while self._cmds_in_flight and self._cmds_in_flight[0] < self._cycle:
                self._cmds_in_flight.popleft()
            if self._beats and self._beats[0][0] <= self._cycle:
                _, data = self._beats.popleft()
                s["readdata"].value = data
                s["readdatavalid"].value = 1
                self.read_beats += 1
            else:
                self._drive("readdatavalid", 0)
            # Write response for the next cycle.
            if self._pending_responses and self._pending_responses[0][0] <= self._cycle:
                _, address, code = self._pending_responses.popleft()
                self.responses.append((self._cycle, address, code))
                self._drive("response", code)
                self._drive("writeresponsevalid", 1)
            else:
                self._drive("writeresponsevalid", 0)
            self._waiting = (self.rng.random() < self.wait_prob
                             or len(self._cmds_in_flight) >= self.max_outstanding)
            s["waitrequest"].value = int(self._waiting)
