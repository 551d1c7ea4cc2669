"""Progress bars (dlproc.progress, issue 20): drawn on stderr for the long steps when a person
watches, absent without a terminal, under --json and with DLPROC_PROGRESS=0."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from dlproc import progress
from dlproc.cli import main

DIGITS = Path(__file__).resolve().parents[1] / "dlproc" / "data" / "models" / "digits.onnx"


def test_no_bars_without_a_terminal(monkeypatch, capsys):
    monkeypatch.delenv("DLPROC_PROGRESS", raising=False)
    assert not progress.enabled()  # capsys's stderr is not a terminal
    assert list(progress.track(range(5), "counting")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""


def test_environment_forces_and_quiet_wins(monkeypatch, capsys):
    monkeypatch.setenv("DLPROC_PROGRESS", "1")
    assert progress.enabled()
    with progress.quiet():
        assert not progress.enabled()
    monkeypatch.setenv("DLPROC_PROGRESS", "0")
    assert not progress.enabled()


def test_track_counts_the_parts(monkeypatch, capsys):
    monkeypatch.setenv("DLPROC_PROGRESS", "1")
    assert sum(progress.track(range(7), "adding up", unit="n")) == 21
    err = capsys.readouterr().err
    assert "adding up" in err and "0/7" in err, err  # the total is known from the start


def test_running_shows_the_elapsed_time(monkeypatch, capsys):
    monkeypatch.setenv("DLPROC_PROGRESS", "1")
    with progress.running("a long tool"):
        time.sleep(1.3)
    err = capsys.readouterr().err
    assert "a long tool: 00:01" in err, err


def test_calibration_and_rtl_batches_show_bars(monkeypatch, capsys):
    from dlproc.quant import Quantizer
    from dlproc.targets.workflow import Workflow
    from layerprog_cases import small_config

    monkeypatch.setenv("DLPROC_PROGRESS", "1")
    q = Quantizer(DIGITS)
    x = np.random.default_rng(0).uniform(0, 1, (40, *q.input_shape)).astype(np.float32)
    q.calibrate(x, method="percentile")
    err = capsys.readouterr().err
    assert "calibrating" in err and "pass 1/2" in err and "pass 2/2" in err, err
    wf = Workflow(q.quantize(), small_config(4), target="golden")
    wf.predict(x[:3], display=False)
    err = capsys.readouterr().err
    assert "on golden" in err and "0/3" in err, err


def test_explore_bar_and_its_absence_under_json(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("DLPROC_PROGRESS", "1")
    argv = ["explore", str(DIGITS), "--board", "de10-nano", "--preset", "de10nano_int8",
            "--sweep", "conv.ConvThreadNumber=16,64", "-o", str(tmp_path / "pareto.png")]
    assert main(argv) == 0
    assert "exploring 2 configurations" in capsys.readouterr().err
    assert main(argv + ["--json"]) == 0
    out = capsys.readouterr()
    assert "exploring" not in out.err, out.err
    json.loads(out.out)  # stdout is the JSON and nothing else


@pytest.mark.parametrize("value", ["0", "off"])
def test_switched_off(monkeypatch, capsys, value):
    monkeypatch.setenv("DLPROC_PROGRESS", value)
    list(progress.track(range(3), "nothing to see"))
    assert capsys.readouterr().err == ""
