"""``dlproc agent --sim --port P --token T (--config F | --preset P)``: the board agent on this machine.

It runs the very C agent that runs on the HPS (``firmware/agent/agent.c`` with the same runtime),
linked with the simulation HAL instead of the Linux one, in front of the Verilated processor of
the chosen configuration. The command builds (or reuses) the native harness and the agent binary,
then *replaces itself* with the agent process, so the process a caller started is the agent:
stopping it (SIGTERM) stops the agent. The token is passed in the environment
(``DLPROC_AGENT_TOKEN``), not on the agent's command line, where other users could read it.

With ``--port 0`` the agent picks a free port; it prints ``dlproc-agent: listening on
ADDR:PORT ...`` on stdout when it accepts connections.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dlproc.errors import DlprocError

DEFAULT_DDR_SIZE = 64 << 20


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run the board agent on this machine with the simulated processor behind it",
        description="Serve compiled networks over TCP like the agent on the board, with the cycle-accurate "
        "Verilator model of the processor behind the same C runtime (simulation HAL). Clients: "
        "dlproc.targets.board.Target / Workflow with board://HOST:PORT.",
    )
    parser.add_argument("--sim", action="store_true", required=False,
                        help="use the simulated processor (required: on a board run the cross-compiled dlproc-agent)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, help="processor configuration file (TOML)")
    source.add_argument("--preset", help="a preset name, e.g. de10nano_int8")
    parser.add_argument("--port", type=int, default=7474, help="TCP port (0 picks a free one; default 7474)")
    parser.add_argument("--bind", default="127.0.0.1", help="IPv4 address to listen on (default 127.0.0.1)")
    parser.add_argument("--token", help="the token clients must present (or set DLPROC_AGENT_TOKEN)")
    parser.add_argument("--ddr-size", type=int, default=DEFAULT_DDR_SIZE,
                        help="bytes of simulated DDR, the DMA region starting at address 0 (default 64 MiB)")
    parser.add_argument("--run-timeout-ms", type=int, default=None,
                        help="processor-time limit of a run when the client gives none (default 10000)")
    parser.add_argument("--max-net-bytes", type=int, default=None, help="largest compiled network accepted")
    parser.add_argument("--max-input-bytes", type=int, default=None, help="largest input frame accepted")
    parser.add_argument("--idle-timeout-s", type=int, default=None, help="drop a client silent for this long")
    parser.add_argument("--sanitize", action="store_true",
                        help="run an AddressSanitizer/UBSan build of the agent (for fuzzing)")
    parser.set_defaults(func=run)


def agent_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """Build what the agent needs and return its command line and environment."""
    from dlproc.config import ProcessorConfig
    from dlproc.errors import ConfigError
    from dlproc.flow.firmware import build_program
    from dlproc.sim.build import build_native
    from dlproc.sim.harness import processor_verilog

    if not args.sim:
        raise DlprocError("dlproc agent serves the simulated processor and needs --sim; on the board run the "
                          "cross-compiled firmware binary dlproc-agent (docs/firmware.md)")
    token = args.token or os.environ.get("DLPROC_AGENT_TOKEN", "")
    if not token:
        raise DlprocError("a token is required: --token T (or the environment variable DLPROC_AGENT_TOKEN)")
    if len(token.encode()) > 256:
        raise DlprocError("the token must be at most 256 bytes")
    if not 0 <= args.port <= 65535:
        raise DlprocError(f"--port {args.port} is not 0..65535")
    if args.preset:
        config = ProcessorConfig.preset(args.preset)
    else:
        if not args.config.is_file():
            raise ConfigError(f"configuration file {args.config} does not exist")
        config = ProcessorConfig.load(args.config)
    bus = config.memory_data_bytes
    if args.ddr_size <= 0 or args.ddr_size % bus or args.ddr_size > 1 << 32:
        raise DlprocError(f"--ddr-size must be a positive multiple of the {bus}-byte bus, at most 4 GiB")
    print(f"dlproc agent: building the simulated processor {config.config_hash()[:16]} (cached after the first "
          "time)...", file=sys.stderr, flush=True)
    harness = build_native(processor_verilog(config), "dlproc_top", bus, config_hash=config.config_hash())
    agent = build_program("dlproc-agent", "sim", sanitize=args.sanitize)
    cmd = [str(agent.artifact), "--bind", args.bind, "--port", str(args.port),
           "--hal", f"lib={harness.artifact}", "--hal", "ddr_base=0", "--hal", f"ddr_size={args.ddr_size}",
           "--hal", f"bytes_per_cycle={float(config.ddr_bytes_per_cycle)}",
           "--hal", f"latency={int(config.ddr_latency_cycles)}",
           "--hal", f"clock_mhz={float(config.target_frequency_mhz)}"]
    for flag, value in (("--run-timeout-ms", args.run_timeout_ms), ("--max-net-bytes", args.max_net_bytes),
                        ("--max-input-bytes", args.max_input_bytes), ("--idle-timeout-s", args.idle_timeout_s)):
        if value is not None:
            cmd += [flag, str(value)]
    env = dict(os.environ, DLPROC_AGENT_TOKEN=token)
    if args.sanitize:
        # The agent is stopped by a signal, so leak reports at exit would only be noise.
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    return cmd, env


def run(args: argparse.Namespace) -> int:
    cmd, env = agent_command(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cmd[0], cmd, env)
    return 0  # not reached
