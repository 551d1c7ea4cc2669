"""The native harness's simulation wrapper and clock schedule (sim/build.py, sim/native/harness.cpp).

The wrapper samples ``rst`` and the CSR inputs on a strobe so Verilator does not re-evaluate the
logic they feed on every ``eval()``; the harness skips the falling-edge ``eval()`` only when the
generated model shows that no output depends combinationally on an input. Cycle-exactness of the
schedule on real designs is covered by the fixture tests (test_sim_native.py) and the processor
tests (test_sim_native_top.py, test_rtl_layers.py), which pin cycle counts.
"""

from __future__ import annotations

import re

import pytest

from dlproc.sim.build import SimBuildError, build_native, harness_wrapper
from dlproc.sim.harness import NativeSim

import sim_fixture as fx


def _ports(wrapper: str) -> dict[str, str]:
    return {m.group(3): m.group(1) + (m.group(2) or "") for m in
            re.finditer(r"^\s*(input|output)\s*(\[\d+:0\])?\s*(\w+);", wrapper, re.M)}


def test_wrapper_takes_widths_from_ansi_and_yosys_tops():
    ansi = _ports(harness_wrapper(fx.stub_verilog(32), "stub_top", 4))
    assert ansi["csr__address"] == "input[4:0]" and ansi["mem__readdata"] == "input[31:0]"
    assert ansi["mem__byteenable"] == "output[3:0]" and ansi["in_strobe"] == "input"
    yosys = _ports(harness_wrapper(fx.fixture_verilog(64), "fixture_top", 8))
    assert yosys["mem__writedata"] == "output[63:0]" and yosys["mem__burstcount"].startswith("output[")
    assert set(ansi) == set(yosys)


def test_wrapper_rejects_a_top_without_the_contract_ports():
    with pytest.raises(SimBuildError, match="has no module 'nope'"):
        harness_wrapper(fx.stub_verilog(32), "nope", 4)
    broken = fx.stub_verilog(32).replace("mem__burstcount", "mem__bc")
    with pytest.raises(SimBuildError, match="no port 'mem__burstcount'"):
        harness_wrapper(broken, "stub_top", 4)


def _schedule(result) -> int:
    text = (result.directory / "obj" / "dl_schedule.h").read_text()
    return int(re.search(r"#define DL_SETTLE_EVAL (\d)", text).group(1))


@pytest.mark.slow
def test_settle_eval_only_when_an_output_depends_on_an_input():
    registered = fx.stub_verilog(32, name="sched_reg_top")
    assert _schedule(build_native(registered, "sched_reg_top", 4, config_hash="schedule-test")) == 0
    # irq now follows readdatavalid combinationally: the DDR side must see the settled value.
    combinational = fx.stub_verilog(32, name="sched_comb_top").replace(
        "assign irq = scratch[31];", "assign irq = scratch[31] | mem__readdatavalid;")
    result = build_native(combinational, "sched_comb_top", 4, config_hash="schedule-test")
    assert _schedule(result) == 1
    sim = NativeSim.from_verilog(combinational, top="sched_comb_top", mem_bytes=4, bytes_per_cycle=4, latency=3,
                                 ddr_size=1 << 16, config_hash="schedule-test")
    before = sim.cycles
    assert sim.csr_read(0) == 0x5A5A0000 and not sim.irq
    sim.csr_write(0, 0x80000001)
    assert sim.csr_read(0) == 0x80000001 and sim.irq
    assert sim.cycles == before + 3          # read, write, read: one bus cycle each
