"""Text that every board project's Quartus files share, whichever the board.

The recipes differ in their pins, their HPS system and their flow steps (Quartus Standard runs
``quartus_map`` and the HPS SDRAM pin script; Quartus Pro runs ``quartus_syn`` and splits the
bitstream), but the wrapper module, the heartbeat LED, the pin assignments, the check that the
PLL makes the configured clock and the preamble of ``build.sh`` are the same text. They are
written here once so that a fix to one (say, a Tcl quoting rule) reaches both boards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dlproc.boards.common.recipe import Pin, tcl_quote

__all__ = ["top_module", "heartbeat", "pin_assignments", "pll_period_check", "build_script_preamble"]


def top_module(comments: Sequence[str], top: str, system: str, ports: Sequence[str], connections: Sequence[str],
               body: Sequence[str]) -> str:
    """The top-level wrapper: ``ports`` (declarations with their trailing commas), the Platform
    Designer system instantiated as ``u0`` with ``connections``, then ``body``. The last port and
    the last connection lose their comma here, so the callers can build both lists uniformly."""
    ports = [*ports[:-1], ports[-1].rstrip(",")]
    connections = [*connections[:-1], connections[-1].rstrip(",")]
    return "\n".join([
        *comments,
        "`default_nettype none",
        f"module {top} (",
        *ports,
        ");",
        f"  {system} u0 (",
        *connections,
        "  );",
        "",
        *body,
        "endmodule",
        "`default_nettype wire",
        "",
    ])


def heartbeat(comments: Sequence[str], clock: str, counter_bits: int, terminal_count: int, leds: str,
              led_count: int) -> list[str]:
    """Verilog that toggles the first of ``leds`` every ``terminal_count + 1`` cycles of ``clock``
    (1 Hz when that is half the clock frequency) and holds the others off: the sign that the FPGA
    is configured and its clock runs, before any software has started."""
    b = counter_bits
    return [
        *comments,
        f"  reg [{b - 1}:0] blink_count = {b}'d0;",
        "  reg        blink = 1'b0;",
        f"  always @(posedge {clock}) begin",
        f"    if (blink_count == {b}'d{terminal_count}) begin",
        f"      blink_count <= {b}'d0;",
        "      blink <= ~blink;",
        "    end else begin",
        f"      blink_count <= blink_count + {b}'d1;",
        "    end",
        "  end",
        f"  assign {leds} = {{{led_count - 1}'d0, blink}};",
    ]


def pin_assignments(pins: Iterable[Pin]) -> list[str]:
    """``.qsf`` lines placing each pin and, where it has one, giving its I/O standard."""
    lines: list[str] = []
    for pin in pins:
        lines.append(f"set_location_assignment PIN_{pin.location} -to {tcl_quote(pin.port)}")
        if pin.io_standard:
            lines.append(f"set_instance_assignment -name IO_STANDARD {tcl_quote(pin.io_standard)} "
                         f"-to {tcl_quote(pin.port)}")
    return lines


def pll_period_check(pll: str) -> list[str]:
    """SDC lines that warn (critical warning in the timing report) when no clock of the PLL
    instance ``pll`` has the period the configuration asks for (``dlproc_target_period_ns``): a
    PLL whose settings drifted from TargetFrequency would otherwise pass timing at another speed."""
    return [
        "set dlproc_found 0",
        f"foreach_in_collection dlproc_clk [get_clocks -nowarn {{*{pll}*}}] {{",
        "    if {abs([get_clock_info -period $dlproc_clk] - $dlproc_target_period_ns) < 0.01} {",
        "        set dlproc_found 1",
        "    }",
        "}",
        "if {!$dlproc_found} {",
        f"    post_message -type critical_warning \"dlproc: no {pll} clock with period $dlproc_target_period_ns ns\"",
        "}",
    ]


def build_script_preamble(title: str, usage: str, tools: Sequence[str], edition: str) -> list[str]:
    """The start of ``build.sh``: strict mode, Quartus found on PATH or through
    ``QUARTUS_ROOTDIR``, every tool of the flow checked before the first one runs (a flow that
    stops after ten minutes for a missing tool wastes the ten minutes), and the IP search path."""
    return [
        "#!/usr/bin/env bash",
        title,
        usage,
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        'if [ -n "${QUARTUS_ROOTDIR:-}" ]; then',
        '  export PATH="$QUARTUS_ROOTDIR/bin:$QUARTUS_ROOTDIR/sopc_builder/bin:$QUARTUS_ROOTDIR/../qsys/bin:$PATH"',
        "fi",
        f"for tool in {' '.join(tools)}; do",
        f'  command -v "$tool" >/dev/null || {{ echo "build.sh: $tool not found (install Quartus Prime {edition}, '
        'set QUARTUS_ROOTDIR)" >&2; exit 127; }',
        "done",
        'SEARCH="$PWD/ip/dlproc,\\$"',
        "",
    ]
