"""``EngineCommand``, the engines' shared command intake (Amaranth simulator): the handshake, the
registered command, and the verdicts of its field and range checks one cycle after the accept,
with the exact boundary of a range check and ILLEGAL_FIELD before SRAM_RANGE."""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data
from amaranth.sim import Simulator

from dlproc.hardware import isa
from dlproc.hardware.gateware.engine import EngineCommand

LAYOUT = data.StructLayout({"base": unsigned(12), "count": unsigned(12), "size": unsigned(4)})
DEPTH = 100


def _intake() -> EngineCommand:
    return EngineCommand(LAYOUT, illegal=lambda f: (f.count == 0) | (f.size > 9),
                         ranges=[(lambda f: f.base + f.count, DEPTH)])


def _run(commands: list[dict], enable_at: set[int]) -> list[dict]:
    """Offers the commands one after the other; returns what the intake shows in each cycle."""
    dut = _intake()
    seen: list[dict] = []

    async def bench(ctx):
        queue = list(commands)
        for cycle in range(3 * len(commands) + 4):
            ctx.set(dut.cmd.valid, bool(queue))
            if queue:
                ctx.set(dut.cmd.payload, queue[0])
            ctx.set(dut.enable, cycle in enable_at)
            took = bool(ctx.get(dut.take))
            assert bool(ctx.get(dut.cmd.ready)) == (cycle in enable_at)
            assert took == (bool(queue) and cycle in enable_at)
            fields = ctx.get(dut.fields)
            seen.append(dict(cycle=cycle, take=took, base=fields.base, count=fields.count,
                             illegal=ctx.get(dut.illegal), out_of_range=ctx.get(dut.out_of_range),
                             fault=ctx.get(dut.fault), code=ctx.get(dut.code)))
            await ctx.tick()
            if took:
                queue.pop(0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_verdicts_one_cycle_after_the_accept_and_held() -> None:
    commands = [
        dict(base=90, count=10, size=3),   # ends exactly at the depth: in range
        dict(base=90, count=11, size=3),   # one word beyond: SRAM_RANGE
        dict(base=0, count=0, size=3),     # ILLEGAL_FIELD
        dict(base=95, count=10, size=12),  # both: ILLEGAL_FIELD wins
    ]
    accepts = [1, 4, 7, 10]
    seen = _run(commands, set(accepts))
    expected = [(0, 0, isa.ErrorCode.SRAM_RANGE), (0, 1, isa.ErrorCode.SRAM_RANGE),
                (1, 0, isa.ErrorCode.ILLEGAL_FIELD), (1, 1, isa.ErrorCode.ILLEGAL_FIELD)]
    for k, (cmd, at) in enumerate(zip(commands, accepts)):
        assert seen[at]["take"]
        # The check cycle (at + 1) and the one after see the registered command and verdicts.
        for cycle in (at + 1, at + 2):
            s = seen[cycle]
            assert (s["base"], s["count"]) == (cmd["base"], cmd["count"])
            illegal, beyond, code = expected[k]
            assert (s["illegal"], s["out_of_range"]) == (illegal, beyond), (k, s)
            assert s["fault"] == (illegal | beyond)
            if s["fault"]:
                assert s["code"] == code
    # Nothing is taken while enable is low.
    assert [s["cycle"] for s in seen if s["take"]] == accepts
