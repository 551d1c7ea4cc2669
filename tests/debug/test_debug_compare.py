"""predict --compare golden: a corrupted weight byte in the RTL's DRAM is located in the layer that
reads it, with the coordinates and values of the first differing elements (RTL, C = 4 build)."""

from __future__ import annotations

import numpy as np
import pytest

from dlproc.compiler import netfile
from dlproc.hardware import isa
from dlproc.cli import main
from dlproc.compiler import compile_network
from dlproc.debug.compare import TRACE_MARGIN, compare
from dlproc.targets.golden.run import run_int8
from dlproc.quant import Quantizer, digits_dataset
from dlproc.quant.data import DIGITS_MODEL

from layerprog_cases import small_config

pytestmark = pytest.mark.slow
CFG = small_config(4)


@pytest.fixture(scope="module")
def digits():
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    qnet = q.quantize()
    x, _ = digits_dataset("heldout")
    return qnet, compile_network(qnet, CFG), x[:3]


def _first_weight_load(cn, layer_name):
    layer = cn.layer(layer_name)
    insns = isa.decode_program(cn.instructions)[layer.insn_first:layer.insn_first + layer.insn_count]
    return next(i for i in insns if isinstance(i, isa.Load) and i.buf == isa.Buf.WGT)


def test_healthy_rtl_agrees(digits):
    _, cn, x = digits
    result = compare(cn, x, CFG)
    assert result.equal and result.divergence is None and "agree bit for bit on all 3" in result.format()



def fst_time_range(path) -> tuple[int, int]:
    """(start time, end time) from an FST file's header block (fstapi: block type 0, then the
    section length, start time and end time as big-endian 64-bit integers)."""
    head = path.read_bytes()[:25]
    assert head[0] == 0, "not an FST header block"
    return int.from_bytes(head[9:17], "big"), int.from_bytes(head[17:25], "big")

def test_a_corrupted_conv2_weight_is_found_in_conv2(digits, tmp_path):
    qnet, cn, x = digits
    load = _first_weight_load(cn, "conv2")

    def corrupt(sim):
        word = bytearray(sim.mem_read(load.dram_addr, 4))
        word[0] ^= 0x7F  # one int8 weight of conv2's first weight word
        sim.mem_write(load.dram_addr, bytes(word))

    result = compare(cn, x, CFG, tamper=corrupt, trace=tmp_path / "conv2.fst")
    assert not result.equal
    div = result.divergence
    assert (div.frame, div.layer, div.op, div.index) == (0, "conv2", "conv", 2)  # conv1, pool1 still agree
    assert div.shape == (16, 8, 8) and 0 < div.count <= 8 * 8  # one weight: at most one output channel
    assert len({c for c, _, _ in div.coords}) == 1
    # The golden values reported are the layer-level golden model's conv2 output.
    ref = run_int8(qnet, qnet.quantize_input(x), collect=True)["conv2"][0]
    assert div.golden == [int(ref[c]) for c in div.coords]
    assert all(g != r for g, r in zip(div.golden, div.rtl))
    assert 0 < div.window[0] < div.window[1]
    # The waveform (a tracing build) holds conv2's cycle window and TRACE_MARGIN cycles each side,
    # not the prefix run before it.
    assert div.trace == tmp_path / "conv2.fst"
    lo, hi = div.trace_time
    assert hi - lo == 2 * (div.window[1] - div.window[0])
    first, last = fst_time_range(div.trace)
    assert lo - 2 * TRACE_MARGIN <= first <= lo and hi <= last + 2 <= hi + 2 * TRACE_MARGIN + 2, (first, last, lo, hi)
    text = result.format()
    assert "layer 'conv2' (conv" in text and f"[c={div.coords[0][0]}, h={div.coords[0][1]}" in text


def test_compare_bad_arguments_exit_2(tmp_path, capsys, digits):
    _, cn, x = digits
    net = netfile.save(cn, tmp_path / "d.dlnet")
    np.save(tmp_path / "x.npy", x)
    base = ["predict", str(net), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")]
    assert main(base + ["--compare", "golden"]) == 2
    assert "needs --target sim, not golden" in capsys.readouterr().err
    assert main(base + ["--target", "sim", "--compare", "golden", "--trace", "w.vcd"]) == 2
    assert "must end in .fst" in capsys.readouterr().err
    assert main(base + ["--target", "sim", "--trace", "w.fst"]) == 2
    assert "--trace FILE.fst goes with --compare golden" in capsys.readouterr().err
