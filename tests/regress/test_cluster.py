"""Batches and exploration on Ray workers (issue 21): predict's frames spread over a local two-worker
cluster give exactly the single-machine result; explore --verify-rtl K simulates the best
candidates' RTL."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlproc.cli import main
from dlproc.quant import Quantizer, digits_dataset
from dlproc.quant.data import DIGITS_MODEL
from dlproc.targets.workflow import Workflow

from layerprog_cases import small_config

pytestmark = pytest.mark.xdist_group("regress")


@pytest.fixture(scope="module")
def digits():
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    x, _ = digits_dataset("heldout")
    return q.quantize(), x[:10]


@pytest.mark.parametrize("target", ["golden", "sim"])
def test_a_batch_on_two_workers_equals_one_machine(digits, target):
    qnet, x = digits
    cfg = small_config(4)
    one = Workflow(qnet, cfg, target=target)
    y1, p1 = one.predict(x, profile=True, display=False)
    one.close()
    two = Workflow(one.compiled, cfg, target=target, workers=2)
    y2, p2 = two.predict(x, profile=True, display=False)
    np.testing.assert_array_equal(y1, y2)
    for name, values in one.last_hw_values.items():
        np.testing.assert_array_equal(values, two.last_hw_values[name])
    assert p1.total_cycles == p2.total_cycles and p1.frames == p2.frames == 10
    assert [l.cycles for l in p1.layers] == [l.cycles for l in p2.layers]


def test_predict_workers_and_board_target_exclude_each_other(digits, tmp_path, capsys):
    qnet, x = digits
    np.save(tmp_path / "x.npy", x)
    from dlproc.compiler import compile_network, netfile

    net = netfile.save(compile_network(qnet, small_config(4)), tmp_path / "d.dlnet")
    code = main(["predict", str(net), "--input", str(tmp_path / "x.npy"), "--target", "board://localhost:1",
                 "--token", "t", "--workers", "2", "-o", str(tmp_path / "y.npy")])
    assert code == 2 and "board:// target runs them itself" in capsys.readouterr().err


def test_explore_verify_rtl_checks_the_best_candidate(tmp_path, capsys):
    base = tmp_path / "small.toml"
    small_config(4).save(base)
    code = main(["explore", str(DIGITS_MODEL), "--board", "de10-nano", "--config", str(base),
                 "--sweep", "conv.ConvThreadNumber=16", "--verify-rtl", "1", "--workers", "2",
                 "-o", str(tmp_path / "p.png"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    (check,) = out["verified"]
    assert check["assignments"] == {"conv.ConvThreadNumber": "16"} and check["bit_exact"] is True
    assert check["rtl_cycles"] > 0 and abs(check["estimate_error"]) < 0.05


def test_explore_workers_need_verify_rtl(capsys):
    assert main(["explore", str(DIGITS_MODEL), "--board", "de10-nano", "--sweep", "conv.ConvThreadNumber=16",
                 "--workers", "2"]) == 2
    assert "go with --verify-rtl" in capsys.readouterr().err
