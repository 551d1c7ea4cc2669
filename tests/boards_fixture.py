"""Helpers of the board tests: the processor's Verilog and a Tcl interpreter with recording stubs.

``processor_verilog(config)`` is the real ``dlproc.hardware.gateware.generate_verilog`` output. While the
gateware top level is not yet convertible, ``contract_verilog`` stands in for it *in the tests of
the file generators only*: a port list exactly as the team contract defines ``dlproc_top``
(it contains no logic and is never used for synthesis or shipped).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

STUBS = Path(__file__).with_name("boards_tcl_stubs.tcl")


def contract_verilog(data_width: int, csr_address_bits: int = 6, burstcount_bits: int = 5,
                     memory_ports: int = 1) -> str:
    w = data_width
    if memory_ports == 1:
        mem_names = ("mem__address, mem__burstcount, mem__read, mem__write, mem__writedata, mem__byteenable,\n"
                     "  mem__waitrequest, mem__readdata, mem__readdatavalid")
        mem_decls = f"""  output [31:0] mem__address;
  output [{burstcount_bits - 1}:0] mem__burstcount;
  output mem__read;
  output mem__write;
  output [{w - 1}:0] mem__writedata;
  output [{w // 8 - 1}:0] mem__byteenable;
  input mem__waitrequest;
  input [{w - 1}:0] mem__readdata;
  input mem__readdatavalid;
"""
    else:  # MemoryPorts = 2: read-only mem, write-only mem1
        mem_names = ("mem__address, mem__burstcount, mem__read, mem__waitrequest, mem__readdata, mem__readdatavalid,\n"
                     "  mem1__address, mem1__burstcount, mem1__write, mem1__writedata, mem1__byteenable, "
                     "mem1__waitrequest, mem1__writeresponsevalid, mem1__response")
        mem_decls = f"""  output [31:0] mem__address;
  output [{burstcount_bits - 1}:0] mem__burstcount;
  output mem__read;
  input mem__waitrequest;
  input [{w - 1}:0] mem__readdata;
  input mem__readdatavalid;
  output [31:0] mem1__address;
  output [{burstcount_bits - 1}:0] mem1__burstcount;
  output mem1__write;
  output [{w - 1}:0] mem1__writedata;
  output [{w // 8 - 1}:0] mem1__byteenable;
  input mem1__waitrequest;
  input mem1__writeresponsevalid;
  input [1:0] mem1__response;
"""
    return f"""module dlproc_top(clk, rst, csr__address, csr__read, csr__write, csr__writedata, csr__readdata,
  {mem_names}, irq);
  input clk;
  input rst;
  input [{csr_address_bits - 1}:0] csr__address;
  input csr__read;
  input csr__write;
  input [31:0] csr__writedata;
  output [31:0] csr__readdata;
{mem_decls}  output irq;
endmodule
"""


def processor_verilog(config) -> tuple[str, bool]:
    """(Verilog, real): the real processor when the gateware converts, else the contract port list."""
    try:
        from dlproc.hardware.gateware import generate_verilog
    except ImportError:
        return contract_verilog(config.memory_data_width, memory_ports=config.memory_ports), False
    return generate_verilog(config), True


def run_tcl(script: Path, cwd: Path | None = None, argv: list[str] | None = None) -> list[list[str]]:
    """Execute ``script`` with tclsh against the recording stubs; returns every recorded call as
    [command, arg, ...] (the stubs write one JSON array per line)."""
    if shutil.which("tclsh") is None:
        pytest.skip("tclsh is not installed")
    log = (cwd or script.parent) / f".{script.name}.calls.jsonl"
    if log.exists():
        log.unlink()
    proc = subprocess.run(
        ["tclsh", str(STUBS), str(log), str(script), *(argv or [])],
        cwd=cwd or script.parent, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, f"tclsh failed on {script.name}:\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def calls_of(calls: list[list[str]], command: str) -> list[list[str]]:
    return [c[1:] for c in calls if c[0] == command]
