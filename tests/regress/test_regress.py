"""dlproc regress (issue 21): the random networks, one case on the three targets, and campaigns on
a local two-worker Ray cluster: streaming results, a killed worker, resume after an interruption,
a configuration that cannot be built, a mismatch saved as a reproducer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dlproc.cli import main
from dlproc.config import ProcessorConfig
from dlproc.regress.campaign import FAULT_ENV
from dlproc.regress.case import run_case
from dlproc.regress.generator import random_network

from sim_fixture import blocks_config

pytestmark = pytest.mark.xdist_group("regress")  # one Ray cluster at a time on the 2-core machine


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("regress") / "blocks.toml"
    blocks_config().save(path)
    return path


def _records(path: Path) -> dict[int, dict]:
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "dlproc regress results"
    recs = [json.loads(line) for line in lines[1:]]
    by_index = {r["index"]: r for r in recs}
    assert len(by_index) == len(recs), "a case was recorded twice"
    return by_index


def _regress(config_file: Path, *args: str) -> int:
    return main(["regress", "--config", str(config_file), "--workers", "2", *args])


def test_networks_are_reproducible_and_follow_the_configuration():
    cfg = blocks_config()
    a, b = random_network(7, 3, cfg), random_network(7, 3, cfg)
    assert [l.name for l in a.layers] == [l.name for l in b.layers]
    for la, lb in zip(a.layers, b.layers):
        for k, v in la.params.items():
            np.testing.assert_array_equal(v, lb.params[k])
    assert [l.op for l in random_network(7, 4, cfg).layers] != [l.op for l in a.layers] or \
        not np.array_equal(random_network(7, 4, cfg).layers[1].params["weight"], a.layers[1].params["weight"])
    ops, convs = set(), set()
    for i in range(120):
        for layer in random_network(1, i, cfg).layers:
            ops.add(layer.op)
            if layer.op == "conv":
                g, d = layer.attrs["groups"], layer.attrs["dilation"][0]
                convs.add("depthwise" if g > 1 and g == layer.shape.c else "grouped" if g > 1 else "plain")
                convs.add(f"dilation {d}")
                convs.add(f"stride {layer.attrs['stride'][0]}")
    assert {"conv", "maxpool", "avgpool", "add", "concat", "fc", "lrn", "upsample", "softmax", "act",
            "global_avgpool"} <= ops
    assert {"depthwise", "grouped", "plain", "dilation 2", "stride 2"} <= convs
    # Without the optional blocks, the networks use none of them.
    plain = ProcessorConfig.preset("de10nano_int8")
    plain.set_module_property("conv", "LRNBlockGeneration", False)
    plain.set_module_property("conv", "SegmentationBlockGeneration", False)
    plain.set_module_property("adder", "ModuleGeneration", False)
    used = {l.op for i in range(60) for l in random_network(1, i, plain).layers}
    assert not used & {"lrn", "upsample", "add"}


def test_one_case_agrees_on_the_three_targets_and_a_fault_is_caught():
    cfg = blocks_config()
    ok = run_case(5, 2, cfg)
    assert ok.status == "ok", ok.detail
    assert ok.rtl_cycles and ok.rtl_cycles > 100 and ok.layers >= 3

    def corrupt(sim, cn):
        from dlproc.hardware import isa

        load = next(i for i in isa.decode_program(cn.instructions) if isinstance(i, isa.Load) and i.buf == isa.Buf.WGT)
        sim.mem_write(load.dram_addr, bytes([sim.mem_read(load.dram_addr, 1)[0] ^ 0x40]))

    bad = run_case(5, 2, cfg, corrupt)
    assert bad.status == "mismatch" and "RTL vs golden model" in bad.detail
    assert "ISA simulator vs golden model" not in bad.detail
    assert bad.dlq and bad.x is not None and bad.x.shape[0] == 2


def test_campaign_of_40_on_two_workers(config_file, tmp_path, capsys):
    results = tmp_path / "r.jsonl"
    assert _regress(config_file, "--count", "40", "--seed", "11", "--results", str(results), "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["networks"], summary["mismatches"], summary["errors"], summary["workers"]) == (40, 0, 0, 2)
    recs = _records(results)
    assert sorted(recs) == list(range(40))
    assert all(r["status"] == "ok" and r["rtl_cycles"] > 0 for r in recs.values())


def test_a_killed_worker_is_retried_and_every_network_counted_once(config_file, tmp_path, capsys, monkeypatch):
    flag = tmp_path / "kill-once"
    flag.write_text("")
    monkeypatch.setenv(FAULT_ENV, f"kill:4:{flag}")
    results = tmp_path / "r.jsonl"
    assert _regress(config_file, "--count", "10", "--seed", "12", "--results", str(results), "--json") == 0
    assert not flag.exists()  # the worker running case 4 did kill itself
    recs = _records(results)
    assert sorted(recs) == list(range(10)) and recs[4]["status"] == "ok"
    assert json.loads(capsys.readouterr().out)["networks"] == 10


def test_resume_finishes_with_the_results_of_an_uninterrupted_campaign(config_file, tmp_path, capsys):
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    assert _regress(config_file, "--count", "12", "--seed", "13", "--results", str(whole)) == 0
    lines = whole.read_text().splitlines()
    part.write_text("\n".join(lines[:6]) + "\n" + lines[6][:17])  # five cases and a torn line, as after a kill
    capsys.readouterr()
    assert _regress(config_file, "--count", "12", "--seed", "13", "--results", str(part), "--resume", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["skipped"] == 5 and summary["networks"] == 12
    strip = lambda r: {k: r[k] for k in ("index", "status", "layers", "ops", "rtl_cycles")}  # noqa: E731
    assert {i: strip(r) for i, r in _records(part).items() if i in range(12)} == \
        {i: strip(r) for i, r in _records(whole).items()}
    # Another campaign's file is refused, not mixed.
    assert _regress(config_file, "--count", "12", "--seed", "14", "--results", str(part), "--resume") == 2
    assert "holds campaign seed 13" in capsys.readouterr().err


def test_ctrl_c_keeps_what_finished(config_file, tmp_path):
    results = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "dlproc", "regress", "--config", str(config_file), "--workers", "2",
           "--count", "400", "--seed", "15", "--results", str(results)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not results.exists() or len(results.read_text().splitlines()) < 6):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err, err
    recs = _records(results)
    assert 5 <= len(recs) < 400 and all(r["status"] == "ok" for r in recs.values())


def test_a_configuration_that_cannot_be_built_fails_once(tmp_path, capsys, monkeypatch):
    cfg = blocks_config()
    cfg.set_property("DDRLatencyCycles", 41)  # a configuration hash no earlier build has
    path = tmp_path / "unbuildable.toml"
    cfg.save(path)
    monkeypatch.setenv("CXX", "/bin/false")  # a compiler that fails: the build cannot start
    monkeypatch.setenv("DLPROC_BUILD_DIR", str(tmp_path / "cache"))
    results = tmp_path / "r.jsonl"
    assert main(["regress", "--config", str(path), "--workers", "2", "--count", "20", "--results",
                 str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("cannot be built") == 1 and len(err.strip().splitlines()) == 1, err
    assert not results.exists() or len(results.read_text().splitlines()) <= 1


def test_a_mismatch_is_saved_as_a_reproducer_that_reruns(config_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "corrupt:3")
    results = tmp_path / "r.jsonl"
    assert _regress(config_file, "--count", "6", "--seed", "16", "--results", str(results), "--json") == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["mismatches"] == 1 and [f["index"] for f in summary["failures"]] == [3]
    case = Path(summary["failures"][0]["reproducer"])
    assert case == tmp_path / "regress-failures" / "case-16-3"
    assert {"net.dlq", "input.npy", "config.toml", "README.txt"} <= {p.name for p in case.iterdir()}
    rerun = summary["failures"][0]["rerun"].split()
    assert rerun[:2] == ["dlproc", "regress"] and "--index" in rerun
    monkeypatch.delenv(FAULT_ENV)
    assert main(rerun[1:] + ["--json"]) == 0  # without the fault, case 3 agrees
    assert json.loads(capsys.readouterr().out)["status"] == "ok"


def test_bad_options_exit_2(config_file, capsys):
    assert _regress(config_file, "--resume") == 2
    assert "--resume needs --results" in capsys.readouterr().err
    assert _regress(config_file, "--count", "0") == 2
    assert "at least one network" in capsys.readouterr().err
