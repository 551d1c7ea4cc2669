"""Fold Amaranth's register processes into enable and reset flip-flop cells, for the simulators.

Amaranth 0.5 writes every register as two RTLIL objects: a combinational ``process`` that computes
the next value into a temporary wire, and a plain ``$dff`` cell that loads it::

    process $1157                              cell $dff $1158
      assign $438 [31:0] \\l3_acc0 [31:0]        connect \\D $438 [31:0]
      switch \\i__valid [0]                      connect \\Q \\l3_acc0
        case 1'1                              end
          assign $438 [31:0] \\i__acc [127:96]
      end
    end

Yosys's Verilog backend keeps that shape: an ``always @*`` block computing ``$438`` and an
``always @(posedge clk) l3_acc0 <= $438;``. Verilator evaluates every ``always @*`` block in every
cycle and stores its result, then copies it into the register at the clock edge, so each register
costs a few instructions per simulated cycle even while its block is idle and nothing changes.

A register whose process is *flat*, a default assignment followed by single-bit ``if``s that each
assign the whole value, is exactly a flip-flop with a clock enable and a synchronous reset:

* default = the register itself (hold): the ``if``s are the enable, the value the one they pick;
* trailing ``if``s that all assign the same constant (the domain reset, a ``ResetInserter``'s
  clear) are the synchronous reset, which wins over everything before it;
* a register loaded part by part (``with m.If(valid[i]): r[lane i].eq(...)``, the ADD engine's
  lanes) becomes one flip-flop per part, if the parts tile it exactly.

:func:`fold_register_processes` rewrites such pairs into one ``$dffe``, ``$sdff`` or ``$sdffe``
cell (plus ``$mux``/``$reduce_or`` cells when more than one ``if`` sets the value). Yosys then
writes ``always @(posedge clk) if (srst) q <= c; else if (en) q <= d;``, and Verilator evaluates
``d`` only inside that ``if``: a pipeline register that loads only with a valid item costs nothing
in the cycles without one (on ``de10nano_int8``: 11 % less code executed per simulated cycle,
and the native harness 6-10 % faster in alternating processes; docs/simulation.md "Speed").

The rewrite is a pure re-expression of the same next-state function: every register keeps its
name, width, initial value and clock, and its next value is the same function of the same
signals (``tests/hardware/test_gateware_regfold.py`` proves this with Yosys's equivalence checker). Any
process or cell that does not match the pattern exactly is left as it was. It is applied to the
Verilog for simulation and for Quartus (:func:`dlproc.hardware.gateware.rtlil_to_verilog`); synthesis
with Yosys reads the unmodified RTLIL and infers the same enables and resets itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import takewhile

__all__ = ["FoldStats", "fold_register_processes"]

D, Q, CLK = "\\D", "\\Q", "\\CLK"  # the flip-flop cells' port names, as RTLIL writes them
_CONST = re.compile(r"^\d+'[01]+$")
_ONE_BIT = re.compile(r"^\S+ \[\d+\]$")  # a single bit of a wire, as Amaranth writes switch subjects
_TARGET = re.compile(r"^(\$\S+) \[(\d+)(?::(\d+))?\]$")  # a slice of a temporary wire
_ASSIGN = re.compile(r"^assign (\S+ \[[\d:]+\]) (.+)$")


@dataclass
class FoldStats:
    """How many registers became which flip-flop cell; ``kept`` processes were left alone."""

    dff: int = 0
    dffe: int = 0
    sdff: int = 0
    sdffe: int = 0
    kept: int = 0

    @property
    def folded(self) -> int:
        return self.dff + self.dffe + self.sdff + self.sdffe


@dataclass
class _Item:
    """One top-level statement of a module: its attribute lines and its own lines."""

    attrs: list[str]
    lines: list[str]

    @property
    def head(self) -> str:
        return self.lines[0].strip()


@dataclass
class _FlatProcess:
    """``target = default; if (s1) target = v1; ...`` with the whole target assigned each time."""

    wire: str
    width: int
    default: str
    branches: list[tuple[str, str]] = field(default_factory=list)  # (1-bit condition, value)
    #: per branch, the part of the target it assigns: (msb, lsb), or None for the whole
    parts: list[tuple[int, int] | None] = field(default_factory=list)


def fold_register_processes(rtlil_text: str) -> tuple[str, FoldStats]:
    """Rewrite the flat register processes of an Amaranth RTLIL text into flip-flop cells."""
    stats = FoldStats()
    out: list[str] = []
    module: list[str] | None = None
    for line in rtlil_text.split("\n"):
        if module is None:
            if line.startswith("module "):
                module = [line]
            else:
                out.append(line)
        else:
            module.append(line)
            if line == "end":
                out.extend(_ModuleFolder(module, stats).fold())
                module = None
    if module is not None:  # an unterminated module: not Amaranth's output, leave it to Yosys
        out.extend(module)
    return "\n".join(out), stats


def _split_items(body: list[str]) -> list[_Item]:
    """Group a module's lines into top-level statements (two-space indent)."""
    items: list[_Item] = []
    attrs: list[str] = []
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith("  attribute "):
            attrs.append(line)
            i += 1
            continue
        if line.startswith("  cell ") or line.startswith("  process "):
            j = i + 1
            while body[j] != "  end":
                j += 1
            items.append(_Item(attrs, body[i:j + 1]))
            i = j + 1
        else:
            items.append(_Item(attrs, [line]))
            i += 1
        attrs = []
    if attrs:
        items.append(_Item(attrs, []))
    return items


def _parse_flat_process(item: _Item) -> _FlatProcess | None:
    body = [line.strip() for line in item.lines[1:-1]]
    if not body or any(line.startswith("attribute ") for line in body):
        return None
    first = _ASSIGN.match(body[0])
    if not first:
        return None
    target = _TARGET.match(first.group(1))
    if not target:
        return None
    hi, lo = int(target.group(2)), int(target.group(3) or target.group(2))
    if lo != 0:
        return None
    proc = _FlatProcess(target.group(1), hi + 1, first.group(2))
    rest = body[1:]
    while rest:
        if len(rest) < 4 or not rest[0].startswith("switch ") or rest[1] != "case 1'1" or rest[3] != "end":
            return None
        cond = rest[0][len("switch "):]
        assign = _ASSIGN.match(rest[2])
        part = _TARGET.match(assign.group(1)) if assign else None
        if not _ONE_BIT.match(cond) or not part or part.group(1) != proc.wire:
            return None
        msb, lsb = int(part.group(2)), int(part.group(3) or part.group(2))
        proc.branches.append((cond, assign.group(2)))
        proc.parts.append(None if (msb, lsb) == (hi, 0) else (msb, lsb))
        rest = rest[4:]
    return proc


def _cell_fields(item: _Item) -> tuple[dict[str, str], dict[str, str]]:
    params: dict[str, str] = {}
    conns: dict[str, str] = {}
    for line in item.lines[1:-1]:
        words = line.strip().split(" ", 2)
        if len(words) == 3 and words[0] == "parameter":
            params[words[1]] = words[2]
        elif len(words) == 3 and words[0] == "connect":
            conns[words[1]] = words[2]
    return params, conns


def _slice(name: str, msb: int, lsb: int) -> str:
    return f"{name} [{lsb}]" if msb == lsb else f"{name} [{msb}:{lsb}]"


def _whole(name: str, width: int) -> str:
    return _slice(name, width - 1, 0)


def _trailing_resets(branches: list[tuple[str, str]]) -> tuple[int, str]:
    """How many trailing branches load one and the same constant, and that constant.

    They are the synchronous reset: the domain reset and START's clear, which Amaranth applies
    last, so they win over every branch before them.
    """
    count, value = 0, ""
    for _, loaded in reversed(branches):
        if not _CONST.match(loaded) or value not in ("", loaded):
            break
        count, value = count + 1, loaded
    return count, value


class _ModuleFolder:
    """Folds the registers of one module; new cells and wires are numbered within it."""

    def __init__(self, lines: list[str], stats: FoldStats) -> None:
        self.header = lines[0]
        self.items = _split_items(lines[1:-1])
        self.stats = stats
        self.new_wires: list[str] = []
        self.new_cells: list[list[str]] = []
        self.or_cache: dict[tuple[str, ...], str] = {}
        self.serial = 0
        self.uses: dict[str, int] = {}
        for item in self.items:
            for line in item.lines:
                for token in line.split():
                    self.uses[token] = self.uses.get(token, 0) + 1
        self.wire_width: dict[str, int] = {}
        self.wire_item: dict[str, int] = {}
        for index, item in enumerate(self.items):
            words = item.head.split() if item.lines else []
            if len(words) >= 4 and words[0] == "wire" and words[1] == "width":
                self.wire_width[words[-1]] = int(words[2])
                self.wire_item[words[-1]] = index

    def fresh(self, width: int) -> str:
        self.serial += 1
        name = f"$dlfold${self.serial}"
        self.new_wires.append(f"  wire width {width} {name}")
        return name

    def any_of(self, conds: list[str]) -> str:
        """A 1-bit signal that is high when any of ``conds`` is (shared within the module)."""
        if len(conds) == 1:
            return conds[0]
        key = tuple(conds)
        if key not in self.or_cache:
            name = self.fresh(1)
            self.new_cells.append([
                f"  cell $reduce_or {name}$or",
                "    parameter \\A_SIGNED 0",
                f"    parameter \\A_WIDTH {len(conds)}",
                "    parameter \\Y_WIDTH 1",
                # RTLIL concatenations list the most significant part first; the order is
                # irrelevant for an OR.
                f"    connect \\A {{ {' '.join(reversed(conds))} }}",
                f"    connect \\Y {name} [0]",
                "  end",
            ])
            self.or_cache[key] = _whole(name, 1)
        return self.or_cache[key]

    def select(self, first: str, branches: list[tuple[str, str]], width: int) -> str:
        """``first``, overridden by each later branch whose condition holds (the last one wins)."""
        value = first
        for cond, choice in branches:
            name = self.fresh(width)
            self.new_cells.append([
                f"  cell $mux {name}$mux",
                f"    parameter \\WIDTH {width}",
                f"    connect \\A {value}",
                f"    connect \\B {choice}",
                f"    connect \\S {cond}",
                f"    connect \\Y {_whole(name, width)}",
                "  end",
            ])
            value = _whole(name, width)
        return value

    def fold(self) -> list[str]:
        dff_by_d: dict[str, int] = {}
        for index, item in enumerate(self.items):
            if item.lines and item.head.startswith("cell $dff "):
                _, conns = _cell_fields(item)
                if D in conns:
                    dff_by_d[conns[D]] = index
        dropped: set[int] = set()
        for index, item in enumerate(self.items):
            if not (item.lines and item.head.startswith("process ")):
                continue
            proc = _parse_flat_process(item)
            target = _whole(proc.wire, proc.width) if proc else None
            cell_index = dff_by_d.get(target) if target else None
            fold = self._fold_parts if proc and any(proc.parts) else self._fold_one
            if proc is None or cell_index is None or not fold(proc, self.items[cell_index], cell_index):
                self.stats.kept += 1
                continue
            dropped.add(index)
            dropped.add(self.wire_item[proc.wire])
        lines = [self.header, *self.new_wires]
        for index, item in enumerate(self.items):
            if index not in dropped:
                lines.extend(item.attrs)
                lines.extend(item.lines)
        for cell in self.new_cells:
            lines.extend(cell)
        lines.append("end")
        return lines

    def _register_of(self, proc: _FlatProcess, cell: _Item) -> tuple[str, str] | None:
        """The flip-flop's Q and clock if it and ``proc`` are exactly one Amaranth register."""
        params, conns = _cell_fields(cell)
        q, clk = conns.get(Q, ""), conns.get(CLK)
        if (params.get("\\WIDTH") != str(proc.width) or self.wire_width.get(proc.wire) != proc.width
                or self.wire_width.get(q) != proc.width or clk is None
                or params.get("\\CLK_POLARITY") != "1"):
            return None
        # The temporary must be used only by its process and this flip-flop: declaration, one
        # assignment per branch plus the default, and the D connection.
        if self.uses.get(proc.wire, 0) != 3 + len(proc.branches):
            return None
        return q, clk

    def _fold_one(self, proc: _FlatProcess, cell: _Item, cell_index: int) -> bool:
        register = self._register_of(proc, cell)
        if register is None:
            return False
        q, clk = register
        holds = proc.default == _whole(q, proc.width)
        count, reset_value = _trailing_resets(proc.branches)
        if holds and count == len(proc.branches):
            if not proc.branches:
                return False
            count -= 1  # "hold, or load a constant": the first of them is an enable, not a reset
        split = len(proc.branches) - count
        branches, resets = proc.branches[:split], [cond for cond, _ in proc.branches[split:]]
        if holds:
            enable = self.any_of([cond for cond, _ in branches])
            data = self.select(branches[0][1], branches[1:], proc.width)
        else:
            enable = None
            data = self.select(proc.default, branches, proc.width)
        srst = self.any_of(resets) if resets else None
        kind, body = _flip_flop(cell.head.split()[2], proc.width, clk, data, q, enable, srst, reset_value)
        self.items[cell_index] = _Item(cell.attrs, body)
        setattr(self.stats, kind[1:], getattr(self.stats, kind[1:]) + 1)
        return True

    def _fold_parts(self, proc: _FlatProcess, cell: _Item, cell_index: int) -> bool:
        """A register loaded part by part (one lane per ``if``): one flip-flop cell per part.

        The default must hold the register; ``if``s that assign all of it must come last and load
        one constant (the reset and clear). The parts must tile the register exactly.
        """
        register = self._register_of(proc, cell)
        if register is None or proc.default != _whole(register[0], proc.width):
            return False
        q, clk = register
        # The branches that assign the whole register must be the trailing reset ones.
        whole_tail = len(list(takewhile(lambda part: part is None, reversed(proc.parts))))
        first_reset = len(proc.parts) - whole_tail
        count, reset_value = _trailing_resets(proc.branches[first_reset:])
        if count != whole_tail or None in proc.parts[:first_reset]:
            return False
        branches = list(zip(proc.parts[:first_reset], proc.branches[:first_reset]))
        resets = [cond for cond, _ in proc.branches[first_reset:]]
        parts = sorted({part for part, _ in branches}, key=lambda part: part[1])
        bounds = [lsb for _, lsb in parts] + [proc.width]
        if bounds[0] != 0 or any(msb + 1 != bounds[k + 1] for k, (msb, _) in enumerate(parts)):
            return False  # overlapping parts, or bits no branch assigns
        srst = self.any_of(resets) if resets else None
        digits = reset_value.split("'", 1)[1] if resets else ""
        body: list[str] = []
        for msb, lsb in parts:
            loads = [branch for part, branch in branches if part == (msb, lsb)]
            width = msb - lsb + 1
            data = self.select(loads[0][1], loads[1:], width)
            value = f"{width}'{digits[proc.width - 1 - msb:proc.width - lsb]}" if resets else ""
            kind, cell_lines = _flip_flop(f"{cell.head.split()[2]}$part{lsb}", width, clk, data,
                                          _slice(q, msb, lsb), self.any_of([cond for cond, _ in loads]),
                                          srst, value)
            body += cell_lines
        self.items[cell_index] = _Item(cell.attrs, body)
        setattr(self.stats, kind[1:], getattr(self.stats, kind[1:]) + 1)
        return True


def _flip_flop(name: str, width: int, clk: str, data: str, q: str, enable: str | None,
               srst: str | None, reset_value: str) -> tuple[str, list[str]]:
    """The RTLIL lines of a ``$dff``/``$dffe``/``$sdff``/``$sdffe`` cell, and its type."""
    kind = ("$sdffe" if enable else "$sdff") if srst else ("$dffe" if enable else "$dff")
    body = [f"  cell {kind} {name}", f"    parameter \\WIDTH {width}", "    parameter \\CLK_POLARITY 1"]
    if enable:
        body.append("    parameter \\EN_POLARITY 1")
    if srst:
        body += ["    parameter \\SRST_POLARITY 1", f"    parameter \\SRST_VALUE {reset_value}"]
    body += [f"    connect {CLK} {clk}", f"    connect {D} {data}", f"    connect {Q} {q}"]
    if enable:
        body.append(f"    connect \\EN {enable}")
    if srst:
        body.append(f"    connect \\SRST {srst}")
    body.append("  end")
    return kind, body

