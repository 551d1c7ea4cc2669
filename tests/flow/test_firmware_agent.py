"""The board agent end to end: ``dlproc agent --sim`` (the C agent with the simulation HAL, built
with AddressSanitizer/UBSan here so that any memory error kills it) serves the real compiled digits
network to ``dlproc.targets.board.Target`` over loopback. Outputs must equal the golden model bit for bit,
and bad input -- wrong token, truncated upload, oversized message, a network for another
configuration, a run that times out, garbage -- must get a clear error while the agent keeps serving.
A hypothesis fuzzer throws malformed message sequences at it."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlproc.targets.board import AgentError, Target, TargetError
from dlproc.targets.workflow import Workflow

from firmware_fixture import CFG, TOKEN, decode_outputs, digits, packed_frames

pytestmark = pytest.mark.slow  # starts the simulated processor (the first run builds it)

MAX_NET = 1 << 20
MAX_INPUT = 1 << 16
HEADER = struct.Struct("<IHHII")
MAGIC = 0x41504C44
READY_TIMEOUT_S = 900  # includes a first Verilator build on a loaded two-core machine


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agent")
    cfg_path = folder / "config.toml"
    CFG.save(cfg_path)
    log = open(folder / "agent.log", "w+")
    cmd = [sys.executable, "-m", "dlproc", "agent", "--sim", "--config", str(cfg_path), "--port", "0",
           "--token", TOKEN, "--max-net-bytes", str(MAX_NET), "--max-input-bytes", str(MAX_INPUT),
           "--idle-timeout-s", "3", "--sanitize"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT_S)
    if not line or "listening on" not in line[0]:
        proc.kill()
        log.seek(0)
        pytest.fail(f"the agent did not start: {line} {log.read()[-3000:]}")
    port = int(line[0].split("listening on ")[1].split()[0].rsplit(":", 1)[1])
    yield {"port": port, "proc": proc, "log": folder / "agent.log"}
    alive = proc.poll() is None
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    log.close()
    text = (folder / "agent.log").read_text()
    assert alive, f"the agent died during the tests:\n{text[-3000:]}"
    assert "AddressSanitizer" not in text and "runtime error" not in text, text[-3000:]


def target(agent, token=TOKEN):
    return Target("sim", f"board://127.0.0.1:{agent['port']}", token, timeout_s=60)


def raw(agent) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", agent["port"]), timeout=30)
    return s


def msg(mtype: int, payload: bytes = b"", seq: int = 1, length: int | None = None) -> bytes:
    return HEADER.pack(MAGIC, 1, mtype, len(payload) if length is None else length, seq) + payload


def read_reply(s: socket.socket) -> tuple[int, bytes]:
    head = b""
    while len(head) < 16:
        chunk = s.recv(16 - len(head))
        if not chunk:
            raise EOFError("closed")
        head += chunk
    _, _, rtype, length, _ = HEADER.unpack(head)
    body = b""
    while len(body) < length:
        chunk = s.recv(length - len(body))
        if not chunk:
            raise EOFError("closed in body")
        body += chunk
    return rtype, body


def error_of(body: bytes) -> tuple[int, str]:
    code, _hw, n = struct.unpack_from("<III", body)
    return code, body[12:12 + n].decode()


def closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except OSError:
        return True


def assert_serving(agent) -> None:
    """A fresh, correct client still gets a bit-exact result."""
    d = digits()
    with target(agent) as t:
        out, prof = t.run(d.blob, packed_frames(d.cn)[0])
    golden = Workflow(d.cn, target="golden")
    golden.predict(d.x[:1])
    np.testing.assert_array_equal(decode_outputs(d.cn, out)["fc"], golden.last_hw_values["fc"][0])
    assert prof.cycles > 0


# -- the normal path ----------------------------------------------------------------------------
def test_predict_over_the_agent_matches_golden(agent):
    d = digits()
    with target(agent) as t:
        info = t.info
        assert info.config_hash64 == CFG.hash64 and info.c == CFG.conv_c and info.hal == "sim"
        assert info.max_net_bytes == MAX_NET and info.max_input_bytes == MAX_INPUT
        y, prof = t.predict(d.cn, d.x, profile=True)
        dep = t.deploy_info
    golden = Workflow(d.cn, target="golden")
    g = golden.predict(d.x)
    np.testing.assert_array_equal(y, g)
    for name, value in golden.last_hw_values.items():
        np.testing.assert_array_equal(t.last_hw_values[name], value)
    assert dep.insn_count == d.cn.insn_count and dep.end == d.cn.memory_map.end
    assert prof.frames == len(d.x) and prof.last_frame_cycles > 0
    assert [layer.cycles > 0 for layer in prof.layers] == [True] * len(d.cn.profile)
    assert sum(layer.cycles for layer in prof.layers) <= prof.last_frame_cycles


def test_run_api_and_profile_counters(agent):
    d = digits()
    frames = packed_frames(d.cn)
    with target(agent) as t:
        out1, p1 = t.run(d.blob, frames[1])
        out2, p2 = t.run(d.blob, frames[1])  # same network: no second deploy
        assert out1 == out2 and p1.marks == p2.marks and p1.cycles == p2.cycles
        assert len(p1.marks) == len(d.cn.profile) and p1.marks == sorted(p1.marks) and p1.marks[-1] <= p1.cycles
        assert p1.fetched == d.cn.insn_count and set(p1.counters) >= {"COMPUTE_BUSY", "MEM_RD_BEATS", "MEM_WAIT"}
        assert p1.counters["COMPUTE_BUSY"] > 0
        out_region = next(r for r in d.cn.memory_map.to_list() if r["name"] == "OutputResultOffset")
        assert t.deploy_info.output_offset == out_region["offset"] and len(out1) == out_region["size"]
        assert t.mem_read(d.cn.base + out_region["offset"] + 16, 8) == out1[16:24]
        with pytest.raises(TargetError, match="outside the output region"):
            t.mem_read(d.cn.base, 4)


def test_relocated_network(agent):
    """A network compiled for the boards' window 0x30000000 runs in the simulated DDR at 0."""
    from dlproc.compiler import netfile
    from dlproc.compiler import compile_network

    d = digits()
    cn = compile_network(d.qnet, CFG, base=0x30000000)
    with target(agent) as t:
        y = t.predict(cn, d.x[:2])
        assert t.deploy_info.compiled_base == 0x30000000 and t.deploy_info.base == 0
        assert netfile.to_bytes(cn) != d.blob
    np.testing.assert_array_equal(y, Workflow(d.cn, target="golden").predict(d.x[:2]))


def test_workflow_with_a_board_target(agent):
    """Workflow(cn, target="board://127.0.0.1:PORT", token=...) end to end, bit-exact with golden."""
    d = digits()
    uri = f"board://127.0.0.1:{agent['port']}"
    wf = Workflow(d.cn, target=uri, token=TOKEN)
    try:
        y, prof = wf.predict(d.x, profile=True, display=False)
    finally:
        wf.close()
    golden = Workflow(d.cn, target="golden")
    np.testing.assert_array_equal(y, golden.predict(d.x))
    assert prof.last_frame_cycles > 0 and all(layer.cycles > 0 for layer in prof.layers)


def test_predict_cli_with_a_board_target(agent, tmp_path, capsys, monkeypatch):
    """`dlproc predict NET --target board://HOST:PORT --token T --json` writes the golden outputs."""
    import json

    from dlproc.compiler import netfile
    from dlproc.cli import main

    monkeypatch.delenv("DLPROC_AGENT_TOKEN", raising=False)
    d = digits()
    net, x, y = tmp_path / "digits.dlnet", tmp_path / "x.npy", tmp_path / "y.npy"
    netfile.save(d.cn, net)
    np.save(x, d.x[:3])
    uri = f"board://127.0.0.1:{agent['port']}"
    assert main(["predict", str(net), "--input", str(x), "--target", uri, "--token", TOKEN,
                 "--profile", "--json", "-o", str(y)]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["output"] == str(y) and doc["profile"]["total"]["cycles"] > 0
    np.testing.assert_array_equal(np.load(y), Workflow(d.cn, target="golden").predict(d.x[:3]))
    assert main(["predict", str(net), "--input", str(x), "--target", uri, "-o", str(y)]) == 2
    assert "needs the agent's token" in capsys.readouterr().err


# -- bad input: a clear error, and the agent keeps serving ----------------------------------------
def test_wrong_token(agent):
    with pytest.raises(AgentError, match="E_AUTH: wrong token"):
        target(agent, token="not-the-token").connect()
    s = raw(agent)
    s.sendall(msg(2))  # INFO before HELLO
    rtype, body = read_reply(s)
    assert rtype == 0x82 and error_of(body) == (20, "authenticate first: the first message must be HELLO with the token")
    assert closed(s)
    assert_serving(agent)


def test_oversized_messages(agent):
    s = raw(agent)
    s.sendall(msg(1, TOKEN.encode()))
    assert read_reply(s)[0] == 0x81
    s.sendall(msg(3, length=MAX_NET + 1))  # the payload is never sent: the header alone is refused
    rtype, body = read_reply(s)
    code, text = error_of(body)
    assert rtype == 0x82 and code == 22 and str(MAX_NET + 1) in text and str(MAX_NET) in text
    assert closed(s)
    s = raw(agent)
    s.sendall(msg(1, b"x" * 300))  # a token longer than any token
    code, text = error_of(read_reply(s)[1])
    assert code == 22
    with target(agent) as t:
        with pytest.raises(TargetError, match="accepts at most"):
            t.deploy(bytes(MAX_NET + 1))
    assert_serving(agent)


def test_truncated_upload_and_vanishing_clients(agent):
    blob = digits().blob
    s = raw(agent)
    s.sendall(msg(1, TOKEN.encode()))
    read_reply(s)
    s.sendall(msg(3, blob[: len(blob) // 2], length=len(blob)))
    s.close()
    assert_serving(agent)
    s = raw(agent)  # a client that sends a run and leaves without reading the result
    s.sendall(msg(1, TOKEN.encode()) + msg(3, blob, seq=2) + msg(4, struct.pack("<I", 0) + packed_frames(digits().cn)[0], 3))
    s.close()
    s = raw(agent)  # half a header
    s.sendall(msg(1, TOKEN.encode())[:7])
    s.close()
    time.sleep(0.5)
    assert_serving(agent)
    log = agent["log"].read_text()
    assert f"client went away during a {len(blob)}-byte message" in log
    assert "inside a message header (7 of 16 bytes)" in log


def test_idle_client_is_dropped(agent):
    silent = raw(agent)
    start = time.monotonic()
    assert_serving(agent)  # waits at most the 3 s idle timeout for the silent client
    assert time.monotonic() - start < 30
    assert closed(silent)


def test_network_for_another_configuration(agent):
    other = digits("other")
    d = digits()
    with target(agent) as t:
        with pytest.raises(Exception, match="recompile"):
            t.check_network(other.cn)  # refused on the host, before any upload
        with pytest.raises(AgentError) as info:
            t.deploy(other.blob)  # and by the runtime on the board
        assert info.value.code_name == "E_CONFIG"
        assert f"{other.cn.hash64:016x}" in info.value.message and f"{CFG.hash64:016x}" in info.value.message
        with pytest.raises(AgentError, match="E_STATE: no network is deployed"):
            t.run_frame(packed_frames(d.cn)[0])
        t.deploy(d.blob)  # the same connection goes on
        assert len(t.run_frame(packed_frames(d.cn)[0]).output) > 0


def test_corrupted_file_and_wrong_input(agent):
    d = digits()
    bad = bytearray(d.blob)
    bad[len(bad) // 2] ^= 0x10
    with target(agent) as t:
        with pytest.raises(AgentError, match="E_FORMAT: compiled network rejected: the checksum of section"):
            t.deploy(bytes(bad))
        t.deploy(d.blob)
        with pytest.raises(AgentError, match="E_INPUT"):
            t.run_frame(b"\0" * 10)
        assert t.run_frame(packed_frames(d.cn)[0]).profile.cycles > 0


def test_run_that_times_out(agent):
    d = digits()
    frame = packed_frames(d.cn)[2]
    with target(agent) as t:
        t.deploy(d.blob)
        with pytest.raises(AgentError) as info:
            t.run_frame(frame, timeout_us=5)  # 1000 cycles at 200 MHz: far too short
        assert info.value.code_name == "E_TIMEOUT" and "aborted" in info.value.message
        good = t.run_frame(frame)  # the processor was aborted cleanly and runs again
    golden = Workflow(d.cn, target="golden")
    golden.predict(d.x[2:3])
    np.testing.assert_array_equal(decode_outputs(d.cn, good.output)["fc"], golden.last_hw_values["fc"][0])


def test_garbage_and_unknown_types(agent):
    for data, code in ((b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 21), (msg(99), 21), (msg(1, b""), 21)):
        s = raw(agent)
        s.sendall(data)
        rtype, body = read_reply(s)
        assert rtype == 0x82 and error_of(body)[0] == code
        assert closed(s)
    assert_serving(agent)


# -- fuzzing ---------------------------------------------------------------------------------------
_types = st.sampled_from([0, 1, 2, 3, 4, 5, 6, 0x81, 0x82, 0xFFFF])
_lengths = st.one_of(st.integers(0, 64), st.sampled_from([MAX_NET, MAX_NET + 1, MAX_INPUT + 4, 0xFFFFFFFF]))
_chunk = st.one_of(
    st.binary(max_size=48),
    st.builds(lambda t, n, p: HEADER.pack(MAGIC, 1, t, n, 7) + p[:n], _types, _lengths, st.binary(max_size=64)),
    st.builds(lambda m, v, t, n: HEADER.pack(m, v, t, n, 1), st.integers(0, 2**32 - 1), st.integers(0, 3), _types,
              _lengths),
    st.just(msg(1, TOKEN.encode())),
    st.builds(lambda p: msg(3, p), st.binary(max_size=200)),
    st.builds(lambda t, p: msg(4, struct.pack("<I", t) + p), st.integers(0, 2**32 - 1), st.binary(max_size=64)),
)


@settings(max_examples=int(os.environ.get("DLPROC_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(_chunk, min_size=1, max_size=6), st.booleans())
def test_fuzzed_message_sequences(agent, chunks, read_back):
    s = raw(agent)
    s.settimeout(20)
    try:
        for chunk in chunks:
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        if read_back:
            replies = 0
            while replies < 50:
                rtype, body = read_reply(s)
                assert rtype in (0x81, 0x82, 0x83)
                if rtype == 0x82:
                    code, text = error_of(body)
                    assert code in (1, 3, 4, 5, 7, 8, 9, 10, 12, 20, 21, 22) and text
                replies += 1
    except (EOFError, OSError):  # the agent may close first: that is allowed
        pass
    finally:
        s.close()
    assert agent["proc"].poll() is None, "the agent died"
    s = raw(agent)
    s.sendall(msg(1, TOKEN.encode()))
    assert read_reply(s)[0] == 0x81
    s.close()


def test_agent_command_errors():
    from dlproc.cli import main

    assert main(["agent", "--preset", "de10nano_int8", "--token", "t"]) == 2  # no --sim
    env_token = os.environ.pop("DLPROC_AGENT_TOKEN", None)
    try:
        assert main(["agent", "--sim", "--preset", "de10nano_int8"]) == 2  # no token
    finally:
        if env_token is not None:
            os.environ["DLPROC_AGENT_TOKEN"] = env_token
    with pytest.raises(TargetError, match="board://HOST"):
        Target("sim", "http://x", "t")
    with pytest.raises(TargetError, match="port"):
        Target("sim", "board://x:99999", "t")
    with pytest.raises(TargetError, match="unknown board"):
        Target("zynq", "board://x", "t")
    with pytest.raises(TargetError, match="cannot reach"):
        Target("sim", "board://127.0.0.1:1", "t").connect()
