"""The processor's top-level ports, read from its Verilog.

The Platform Designer component and the tests take the port names and widths from the generated
Verilog itself rather than from a second description, so the component can never disagree with
the RTL. :func:`processor_ports` also checks the contract of the team (clk, rst, the ``csr__*``
Avalon-MM slave, the ``mem__*`` burst master, irq) and says what is missing or wrong. A processor
with ``MemoryPorts = 2`` has a read-only ``mem__*`` master (fetch, load) and a write-only
``mem1__*`` master (store, with the write responses ``writeresponsevalid``/``response``) instead
of the one read/write ``mem__*``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlproc.errors import ConfigError

__all__ = ["VerilogPort", "ProcessorPorts", "parse_module_ports", "processor_ports", "TOP_MODULE"]

TOP_MODULE = "dlproc_top"


@dataclass(frozen=True)
class VerilogPort:
    name: str
    direction: str  #: "input", "output" or "inout"
    width: int


_MODULE = re.compile(r"^\s*module\s+(\\?[\w$]+)\s*(?:#\s*\(.*?\))?\s*\((.*?)\)\s*;", re.S | re.M)
_DECL = re.compile(r"(?<![\w$])(input|output|inout)\s+(?:wire\s+|reg\s+)?(?:signed\s+)?(?:\[(\d+)\s*:\s*(\d+)\]\s*)?"
                   r"([\w$]+(?:\s*,\s*[\w$]+)*)\s*;")


def parse_module_ports(verilog: str, module: str) -> list[VerilogPort]:
    """Ports of ``module`` in port-list order (Verilog-2001 declarations inside the body, the form
    Amaranth writes, or ANSI declarations in the header)."""
    for match in _MODULE.finditer(verilog):
        if match.group(1).lstrip("\\") != module:
            continue
        header = match.group(2)
        end = verilog.find("endmodule", match.end())
        body = verilog[match.end(): end if end >= 0 else len(verilog)]
        decls: dict[str, VerilogPort] = {}
        ansi = re.findall(r"(input|output|inout)\s+(?:wire\s+|reg\s+)?(?:signed\s+)?(?:\[(\d+)\s*:\s*(\d+)\]\s*)?"
                          r"([\w$]+)", header)
        for direction, msb, lsb, name in ansi:
            decls[name] = VerilogPort(name, direction, _width(msb, lsb))
        for decl in _DECL.finditer(body):
            direction, msb, lsb, names = decl.groups()
            for name in re.split(r"\s*,\s*", names.strip()):
                decls[name] = VerilogPort(name, direction, _width(msb, lsb))
        order = [n.strip() for n in re.split(r",", re.sub(r"(input|output|inout|wire|reg|signed|\[[^\]]*\])", " ",
                                                          header)) if n.strip()]
        missing = [n for n in order if n not in decls]
        if missing:
            raise ConfigError(f"Verilog module {module}: ports without a declaration: {', '.join(missing)}")
        return [decls[n] for n in order]
    raise ConfigError(f"the generated Verilog has no module named {module!r}")


def _width(msb: str | None, lsb: str | None) -> int:
    return 1 if not msb else abs(int(msb) - int(lsb)) + 1


@dataclass(frozen=True)
class ProcessorPorts:
    """The checked port list of ``dlproc_top`` with the widths the board integration needs."""

    ports: tuple[VerilogPort, ...]

    def port(self, name: str) -> VerilogPort:
        for p in self.ports:
            if p.name == name:
                return p
        raise KeyError(name)

    def interface(self, prefix: str) -> list[VerilogPort]:
        """Ports of an interface, e.g. ``interface("csr")`` -> csr__address, csr__read, ..."""
        return [p for p in self.ports if p.name.startswith(prefix + "__")]

    @property
    def csr_address_bits(self) -> int:
        return self.port("csr__address").width

    @property
    def csr_span_bytes(self) -> int:
        return 4 << self.csr_address_bits

    @property
    def memory_ports(self) -> int:
        """1 (one read/write master ``mem``) or 2 (read-only ``mem``, write-only ``mem1``)."""
        return 2 if any(p.name.startswith("mem1__") for p in self.ports) else 1

    @property
    def memory_interfaces(self) -> tuple[str, ...]:
        """The Avalon-MM master interfaces: ``("mem",)`` or ``("mem", "mem1")``."""
        return ("mem",) if self.memory_ports == 1 else ("mem", "mem1")

    @property
    def mem_data_width(self) -> int:
        return self.port("mem__readdata").width

    @property
    def burstcount_bits(self) -> int:
        return self.port("mem__burstcount").width

    @property
    def max_burst(self) -> int:
        return 1 << (self.burstcount_bits - 1)


#: name -> (direction, width or None when it depends on the configuration)
_CONTRACT = {
    "clk": ("input", 1), "rst": ("input", 1), "irq": ("output", 1),
    "csr__address": ("input", None), "csr__read": ("input", 1), "csr__write": ("input", 1),
    "csr__writedata": ("input", 32), "csr__readdata": ("output", 32),
    "mem__address": ("output", 32), "mem__burstcount": ("output", None), "mem__read": ("output", 1),
    "mem__write": ("output", 1), "mem__writedata": ("output", None), "mem__byteenable": ("output", None),
    "mem__waitrequest": ("input", 1), "mem__readdata": ("input", None), "mem__readdatavalid": ("input", 1),
}
#: The same with two memory masters (MemoryPorts = 2): ``mem`` reads only, ``mem1`` writes only.
_CONTRACT_TWO_PORTS = {
    **{k: v for k, v in _CONTRACT.items() if k not in ("mem__write", "mem__writedata", "mem__byteenable")},
    "mem1__address": ("output", 32), "mem1__burstcount": ("output", None), "mem1__write": ("output", 1),
    "mem1__writedata": ("output", None), "mem1__byteenable": ("output", None), "mem1__waitrequest": ("input", 1),
    # Write responses (one per burst): a STORE completes when its last one returned.
    "mem1__writeresponsevalid": ("input", 1), "mem1__response": ("input", 2),
}


def processor_ports(verilog: str, data_width: int | None = None, memory_ports: int | None = None) -> ProcessorPorts:
    """Parse ``dlproc_top`` and check it against the team contract (and ``data_width``, the
    configuration's MemoryDataWidth, and ``memory_ports``, its MemoryPorts, when given)."""
    ports = parse_module_ports(verilog, TOP_MODULE)
    by_name = {p.name: p for p in ports}
    two = any(p.name.startswith("mem1__") for p in ports)
    contract = _CONTRACT_TWO_PORTS if two else _CONTRACT
    wdata = "mem1__writedata" if two else "mem__writedata"
    wbe = "mem1__byteenable" if two else "mem__byteenable"
    problems = []
    for name, (direction, width) in contract.items():
        port = by_name.get(name)
        if port is None:
            problems.append(f"missing port {name}")
        elif port.direction != direction:
            problems.append(f"{name} is an {port.direction}, the contract says {direction}")
        elif width is not None and port.width != width:
            problems.append(f"{name} is {port.width} bits, the contract says {width}")
    if not problems:
        w = by_name[wdata].width
        if data_width is not None and w != data_width:
            problems.append(f"{wdata} is {w} bits but MemoryDataWidth is {data_width}")
        if by_name["mem__readdata"].width != w:
            problems.append(f"mem__readdata and {wdata} differ in width")
        if by_name[wbe].width * 8 != w:
            problems.append(f"{wbe} is {by_name[wbe].width} bits, expected {w // 8}")
        if two and by_name["mem1__burstcount"].width != by_name["mem__burstcount"].width:
            problems.append("mem__burstcount and mem1__burstcount differ in width")
    if memory_ports is not None and memory_ports != (2 if two else 1):
        problems.append(f"the Verilog has {2 if two else 1} memory master(s) but MemoryPorts is {memory_ports}")
    extra = [p.name for p in ports if p.name not in contract]
    if extra:
        problems.append(f"ports outside the contract: {', '.join(extra)}")
    if problems:
        raise ConfigError(f"{TOP_MODULE} does not match the board integration contract: " + "; ".join(problems))
    return ProcessorPorts(tuple(ports))
