"""Host side of the board flow: a client of the dlproc board agent (``firmware/agent``).

    from dlproc.targets.board import Target
    board = Target("de10-nano", "board://192.168.1.50:7474", token="...")
    info = board.connect()                         # HELLO: the processor's identity and limits
    board.deploy(netfile.to_bytes(cn))             # the agent validates and places the network
    result = board.run_frame(packed_input)         # one frame: output region bytes + profile
    y, prof = board.predict(cn, x, profile=True)   # float NCHW batch, as Workflow.predict

The agent runs the same C runtime as ``dlproc-run`` (on the HPS, or on this machine with the
simulated processor: ``dlproc agent --sim``). The wire protocol is in ``docs/firmware.md`` and
``firmware/agent/dlproc_proto.h``; this module is its only Python implementation.

``run(netfile_bytes, input_bytes) -> (output_bytes, profile)`` is the one-call form that
``Workflow`` uses: it deploys only when the network differs from the one deployed last.
"""

from __future__ import annotations

import hashlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from dlproc.errors import DlprocError

__all__ = ["DEFAULT_PORT", "BOARDS", "TargetError", "AgentError", "AgentInfo", "DeployInfo", "RunProfile",
           "RunResult", "BoardTarget", "Target", "parse_address"]

DEFAULT_PORT = 7474
BOARDS = ("de10-nano", "arria10-soc", "sim")

MAGIC = 0x41504C44
VERSION = 1
HEADER = struct.Struct("<IHHII")  # magic, version, type, length, seq
HELLO, INFO, DEPLOY, RUN, BYE = 1, 2, 3, 4, 5
OK, ERROR, RESULT = 0x81, 0x82, 0x83
TOKEN_MAX = 256
INFO_STRUCT = struct.Struct("<IIIIQ9IIQQQQ16s")
DEPLOY_STRUCT = struct.Struct("<QQQQQQIIIIQ")
RESULT_HEAD = struct.Struct("<QQIIII")
PERF_NAMES = ("FETCH_BUSY", "LOAD_BUSY", "LOAD_STALL", "COMPUTE_BUSY", "COMPUTE_STALL", "STORE_BUSY", "STORE_STALL",
              "MEM_RD_BEATS", "MEM_WR_BEATS", "MEM_WAIT")
#: Runtime/agent status codes (dlproc_status in firmware/include/dlproc_rt.h).
STATUS_NAMES = {0: "OK", 1: "E_ARG", 2: "E_NOMEM", 3: "E_FORMAT", 4: "E_VERSION", 5: "E_CONFIG", 6: "E_HW",
                7: "E_RANGE", 8: "E_STATE", 9: "E_TIMEOUT", 10: "E_PROC", 11: "E_HAL", 12: "E_INPUT", 20: "E_AUTH",
                21: "E_PROTO", 22: "E_TOO_BIG"}
#: Replies the client accepts, bounded so that a broken or hostile agent cannot make it allocate
#: without limit: the largest is RUN's result (profile + output region).
MAX_REPLY = 1 << 30
assert INFO_STRUCT.size == 112 and DEPLOY_STRUCT.size == 72 and RESULT_HEAD.size == 32


class TargetError(DlprocError):
    """The board cannot be reached or broke the protocol."""


class AgentError(TargetError):
    """The agent refused a request; ``code_name`` is the runtime status (E_CONFIG, E_TIMEOUT...)."""

    def __init__(self, code: int, hw_error: int, message: str):
        self.code = code
        self.code_name = STATUS_NAMES.get(code, f"E_{code}")
        self.hw_error = hw_error
        self.message = message
        super().__init__(f"board agent: {self.code_name}: {message}")


@dataclass(frozen=True)
class AgentInfo:
    """What HELLO/INFO report: the processor behind the agent and the agent's limits."""

    protocol: int
    runtime: int
    id: int
    version: int
    config_hash64: int
    c: int
    mem_bytes: int
    max_burst: int
    queue_depth: int
    inp_depth: int
    wgt_depth: int
    prm_depth: int
    out_depth: int
    profile_depth: int
    dma_phys: int
    dma_size: int
    max_net_bytes: int
    max_input_bytes: int
    hal: str


@dataclass(frozen=True)
class DeployInfo:
    """Where the deployed network lives: offsets from ``base``, the DRAM address it runs at, which
    differs from ``compiled_base`` when the runtime relocated it into the board's DMA region."""

    base: int
    end: int
    input_offset: int
    input_size: int
    output_offset: int
    output_size: int
    insn_count: int
    n_layers: int
    n_profile: int
    compiled_base: int


@dataclass(frozen=True)
class RunProfile:
    """The hardware's counters for one frame: CYCLES, the MARK values, the unit counters."""

    cycles: int
    wall_us: int
    fetched: int
    marks: list[int]
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    output: bytes  #: the OutputResultOffset region
    profile: RunProfile


def parse_address(address: str) -> tuple[str, int]:
    """``board://HOST[:PORT]`` or ``HOST[:PORT]`` -> (host, port); the port defaults to 7474."""
    text = str(address).strip()
    if text.startswith("board://"):
        text = text[len("board://"):]
    elif "://" in text:
        raise TargetError(f"target address {address!r}: only board://HOST[:PORT] is understood")
    text = text.rstrip("/")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = text, ""
    if not host or any(ch in host for ch in "/[] "):
        raise TargetError(f"target address {address!r} has no valid host; expected board://HOST[:PORT]")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise TargetError(f"target address {address!r}: the port must be 1..65535")
    return host, int(port_text)


class BoardTarget:
    """A connection to a board agent (see the module docstring)."""

    def __init__(self, board: str, address: str, token: str, *, timeout_s: float = 120.0,
                 run_timeout_us: int = 0) -> None:
        if board not in BOARDS:
            raise TargetError(f"unknown board {board!r}; boards: {', '.join(BOARDS)}")
        raw = token.encode() if isinstance(token, str) else bytes(token or b"")
        if not 0 < len(raw) <= TOKEN_MAX:
            raise TargetError(f"the agent token must be 1..{TOKEN_MAX} bytes (give --token)")
        self.board = board
        self.host, self.port = parse_address(address)
        self._token = raw
        self.timeout_s = timeout_s
        self.run_timeout_us = int(run_timeout_us)
        self._sock: socket.socket | None = None
        self._seq = 0
        self.info: AgentInfo | None = None
        self._deployed: bytes | None = None  # sha256 of the deployed file
        self.deploy_info: DeployInfo | None = None
        self.last_result: RunResult | None = None

    @property
    def uri(self) -> str:
        return f"board://{self.host}:{self.port}"

    # -- connection -----------------------------------------------------------------------------
    def connect(self) -> AgentInfo:
        """Open the connection and authenticate (idempotent); returns the agent's info."""
        if self._sock is not None and self.info is not None:
            return self.info
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as exc:
            raise TargetError(f"cannot reach the board agent at {self.uri}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.info = self._parse_info(self._request(HELLO, self._token, OK))
        return self.info

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._send(BYE, b"")
            except (OSError, TargetError):
                pass
            self._sock.close()
        self._sock = None
        self.info = None
        self._deployed = None

    def __enter__(self) -> "BoardTarget":
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------------
    def query_info(self) -> AgentInfo:
        self.connect()
        self.info = self._parse_info(self._request(INFO, b"", OK))
        return self.info

    def check_network(self, cn: Any) -> None:
        """Refuse, before uploading, a compiled network for another configuration than the board's."""
        info = self.connect()
        if int(cn.hash64) != info.config_hash64:
            from dlproc.compiler.netfile import ConfigMismatchError
            raise ConfigMismatchError(
                f"the processor behind {self.uri} has configuration hash {info.config_hash64:016x}, the network "
                f"{cn.name!r} was compiled for {int(cn.hash64):016x}; recompile it for the board's configuration")

    def deploy(self, netfile_bytes: bytes) -> DeployInfo:
        """Upload a compiled-network file; the agent validates it and writes instructions and weights."""
        info = self.connect()
        data = bytes(netfile_bytes)
        if len(data) > info.max_net_bytes:
            raise TargetError(f"the compiled network is {len(data)} bytes; the agent at {self.uri} accepts at most "
                              f"{info.max_net_bytes}")
        self._deployed = None
        payload = self._request(DEPLOY, data, OK)
        if len(payload) != DEPLOY_STRUCT.size:
            raise TargetError(f"the agent's DEPLOY reply has {len(payload)} bytes, expected {DEPLOY_STRUCT.size}")
        v = DEPLOY_STRUCT.unpack(payload)
        self.deploy_info = DeployInfo(*v[:9], v[10])
        self._deployed = hashlib.sha256(data).digest()
        return self.deploy_info

    def run_frame(self, input_bytes: bytes, timeout_us: int | None = None) -> RunResult:
        """Run one packed input frame (the InputDataOffset image) on the deployed network.

        ``timeout_us`` is processor time (simulated time on a simulated board); 0 or None is the
        agent's default."""
        info = self.connect()
        data = bytes(input_bytes)
        if len(data) > info.max_input_bytes:
            raise TargetError(f"the input frame is {len(data)} bytes; the agent accepts at most {info.max_input_bytes}")
        t = self.run_timeout_us if timeout_us is None else int(timeout_us)
        if not 0 <= t < 1 << 32:
            raise TargetError(f"run timeout {t} us is out of range (0..{(1 << 32) - 1})")
        self.last_result = self._parse_result(self._request(RUN, struct.pack("<I", t) + data, RESULT))
        return self.last_result

    def mem_read(self, addr: int, n: int) -> bytes:
        """``n`` bytes at DRAM address ``addr`` from the last frame's output region -- what
        ``NativeSim.mem_read`` returns after a run, so host code written for the sim target can
        read the outputs of a board run unchanged. Addresses are those of the compiled network
        (``cn.base + offset``) even if the board relocated it; outside the region is an error."""
        dep, res = self.deploy_info, self.last_result
        if dep is None or res is None:
            raise TargetError("no frame has run on the board yet")
        start = dep.compiled_base + dep.output_offset
        lo = addr - start
        if lo < 0 or n < 0 or lo + n > len(res.output):
            raise TargetError(f"[{addr:#x}, +{n}) is outside the output region the board returned "
                              f"[{start:#x}, +{len(res.output)})")
        return res.output[lo:lo + n]

    def run(self, netfile_bytes: bytes, input_bytes: bytes) -> tuple[bytes, RunProfile]:
        """Deploy (only if this network is not the one deployed last) and run one frame."""
        if self._deployed != hashlib.sha256(bytes(netfile_bytes)).digest():
            self.deploy(netfile_bytes)
        result = self.run_frame(input_bytes)
        return result.output, result.profile

    def predict(self, cn: Any, x: Any, profile: bool = False) -> Any:
        """Workflow.predict on this board: float32 NCHW batch in, float outputs (and the profile) out."""
        import numpy as np

        from dlproc.compiler import netfile
        from dlproc.targets import host
        from dlproc.targets.profiler import layer_cycles

        xf = host.check_input(cn, x)
        self.check_network(cn)
        blob = netfile.to_bytes(cn)
        geom = host.geometry(cn)
        xq = host.fold_batch(cn, host.quantize_input(cn, xf))
        hw = {t.name: np.empty((len(xq),) + tuple(t.shape), dtype=np.int8) for t in cn.outputs}
        total = 0
        prof = None
        for i in range(len(xq)):
            _, prof = self.run(blob, host.pack_frame(geom, xq[i]))
            total += prof.cycles
            for t in cn.outputs:
                raw = self.mem_read(cn.base + t.offset, host.tensor_nbytes(geom, t.shape))
                hw[t.name][i] = host.unpack_tensor(geom, raw, tuple(t.shape))
        self.last_hw_values = hw
        outputs = host.run_software_layers(cn, hw)
        result = outputs[cn.network_outputs[0]] if len(outputs) == 1 else outputs
        if not profile:
            return result
        marks = [0] * max(1, len(cn.profile))
        for entry in cn.profile:
            if entry.index < len(prof.marks):
                marks[entry.index] = prof.marks[entry.index]
        return result, layer_cycles(cn, marks, prof.cycles, f"board {self.board}", len(xq), total)

    # -- wire -------------------------------------------------------------------------------------
    def _send(self, mtype: int, payload: bytes) -> int:
        if self._sock is None:
            raise TargetError("not connected to the board agent")
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        try:
            self._sock.sendall(HEADER.pack(MAGIC, VERSION, mtype, len(payload), self._seq) + payload)
        except OSError as exc:
            self._drop()
            raise TargetError(f"lost the connection to the board agent at {self.uri}: {exc}") from None
        return self._seq

    def _recv_exact(self, n: int) -> bytes:
        assert self._sock is not None
        chunks, have = [], 0
        while have < n:
            try:
                chunk = self._sock.recv(min(n - have, 1 << 20))
            except OSError as exc:
                self._drop()
                raise TargetError(f"lost the connection to the board agent at {self.uri}: {exc}") from None
            if not chunk:
                self._drop()
                raise TargetError(f"the board agent at {self.uri} closed the connection")
            chunks.append(chunk)
            have += len(chunk)
        return b"".join(chunks)

    def _request(self, mtype: int, payload: bytes, expect: int) -> bytes:
        seq = self._send(mtype, payload)
        magic, version, rtype, length, rseq = HEADER.unpack(self._recv_exact(HEADER.size))
        if magic != MAGIC or version != VERSION or rseq != seq or length > MAX_REPLY:
            self._drop()
            raise TargetError(f"the board agent at {self.uri} sent a malformed reply (magic {magic:#x}, version "
                              f"{version}, seq {rseq} for {seq}, {length} bytes)")
        body = self._recv_exact(length)
        if rtype == ERROR:
            if len(body) < 12:
                raise TargetError("the board agent sent a truncated ERROR reply")
            code, hw_error, n = struct.unpack_from("<III", body)
            err = AgentError(code, hw_error, body[12:12 + n].decode(errors="replace"))
            if code in (20, 21, 22):  # authentication / protocol errors: the agent has closed
                self._drop()
            raise err
        if rtype != expect:
            self._drop()
            raise TargetError(f"the board agent answered message type {mtype} with type {rtype:#x}")
        return body

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self.info = None
        self._deployed = None

    @staticmethod
    def _parse_info(payload: bytes) -> AgentInfo:
        if len(payload) != INFO_STRUCT.size:
            raise TargetError(f"the agent's info block has {len(payload)} bytes, expected {INFO_STRUCT.size}")
        v = INFO_STRUCT.unpack(payload)
        hal = v[-1].split(b"\0", 1)[0].decode(errors="replace")
        # v: protocol, runtime, id, version, hash, 9 params, reserved, dma_phys, dma_size, max_net, max_input, hal
        return AgentInfo(*v[:14], v[15], v[16], v[17], v[18], hal)

    @staticmethod
    def _parse_result(payload: bytes) -> RunResult:
        if len(payload) < RESULT_HEAD.size:
            raise TargetError("the agent's RESULT reply is truncated")
        cycles, wall_us, fetched, n_prof, n_perf, _ = RESULT_HEAD.unpack_from(payload)
        at = RESULT_HEAD.size
        need = at + 8 * n_prof + 4 * n_perf + 8
        if need > len(payload):
            raise TargetError("the agent's RESULT reply is truncated")
        marks = list(struct.unpack_from(f"<{n_prof}Q", payload, at))
        at += 8 * n_prof
        perf = struct.unpack_from(f"<{n_perf}I", payload, at)
        at += 4 * n_perf
        (out_len,) = struct.unpack_from("<Q", payload, at)
        at += 8
        if at + out_len != len(payload):
            raise TargetError(f"the agent's RESULT reply announces {out_len} output bytes but carries "
                              f"{len(payload) - at}")
        counters = {PERF_NAMES[i] if i < len(PERF_NAMES) else f"COUNTER_{i}": int(p) for i, p in enumerate(perf)}
        return RunResult(payload[at:], RunProfile(cycles, wall_us, fetched, marks, counters))


def Target(board: str, address: str, token: str, **kwargs: Any) -> BoardTarget:  # noqa: N802 - MATLAB-style name
    """``Target(board, address, token)``: a board agent target (``address`` is board://HOST[:PORT])."""
    return BoardTarget(board, address, token, **kwargs)
