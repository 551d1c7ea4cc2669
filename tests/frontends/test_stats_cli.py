"""``dlproc stats``: table, --json, cycles and frames/s, shipped network names, errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from dlproc.cli import main
from networks import DARKNET


# tiny.cfg totals, derived by hand in test_stats_networks.py.
TINY_MACS, TINY_PARAMS, TINY_ACTIVATIONS = 491_524_096, 1_039_912, 3_459_440


def _run(*args):
    return subprocess.run([sys.executable, "-m", "dlproc", "stats", *args], capture_output=True, text=True)


def test_json_has_exactly_layers_and_total(capsys):
    assert main(["stats", str(DARKNET / "tiny.cfg"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"layers", "total"}
    total = data["total"]
    assert (total["params"], total["activations"], total["macs"]) == (TINY_PARAMS, TINY_ACTIVATIONS, TINY_MACS)
    assert total["gop"] == 2 * TINY_MACS / 1e9
    assert len(data["layers"]) == 22
    assert data["layers"][0] == {"index": 0, "name": "conv_0", "op": "conv", "shape": [16, 224, 224],
                                 "params": 16 * 27 + 16, "activations": 16 * 224 * 224,
                                 "macs": 16 * 224 * 224 * 27}
    assert sum(row["macs"] for row in data["layers"]) == TINY_MACS


def test_table_lists_layers_and_totals(capsys):
    assert main(["stats", str(DARKNET / "tiny.cfg")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:4] == ["layer", "name", "type", "output"]
    conv0 = out[2].split()
    assert conv0[:3] == ["0", "conv_0", "conv"] and " ".join(conv0[3:8]) == "224 x 224 x 16"
    assert conv0[8:11] == ["448", "802,816", "21,676,032"]
    total = next(line for line in out if line.startswith("total"))
    assert total.split() == ["total", f"{TINY_PARAMS:,}", f"{TINY_ACTIVATIONS:,}", f"{TINY_MACS:,}", "0.983"]
    assert "GOP per frame (2 x MACs / 1e9): 0.983" in out


def test_cycles_and_fps_with_a_mac_rate_and_clock(capsys):
    assert main(["stats", "tiny.cfg", "--macs-per-cycle", "64", "--clock-mhz", "100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cycles = sum(math.ceil(row["macs"] / 64) for row in data["layers"])
    assert [row["cycles"] for row in data["layers"]] == [math.ceil(row["macs"] / 64) for row in data["layers"]]
    assert data["total"]["cycles"] == cycles and cycles >= TINY_MACS / 64
    assert abs(data["total"]["frames_per_second"] - 100e6 / cycles) < 1e-9


def test_input_size_changes_the_counts(capsys):
    assert main(["stats", "tiny.cfg", "--input-size", "112,112", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # Every conv output has a quarter of the pixels at half the resolution (sizes stay even to 7x7).
    assert data["total"]["macs"] == TINY_MACS // 4
    assert data["layers"][-1]["shape"] == [1000, 1, 1]


def test_bare_shipped_name_resolves_to_the_package_copy(capsys):
    assert main(["stats", "tiny.cfg", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["macs"] == TINY_MACS
    shipped = Path(__file__).resolve().parents[2] / "dlproc" / "data" / "networks"
    assert (shipped / "tiny.cfg").read_text() == (DARKNET / "tiny.cfg").read_text()
    assert "public domain" in (shipped / "LICENSE").read_text()


def test_user_errors_exit_2_without_traceback():
    missing = _run("no_such_net.cfg")
    assert missing.returncode == 2 and "no_such_net.cfg: no such file" in missing.stderr
    assert "shipped: tiny.cfg" in missing.stderr
    clock = _run("tiny.cfg", "--clock-mhz", "100")
    assert clock.returncode == 2 and "--clock-mhz needs --macs-per-cycle" in clock.stderr
    size = _run("tiny.cfg", "--input-size", "big")
    assert size.returncode == 2 and "is not H,W" in size.stderr
    for proc in (missing, clock, size):
        assert "Traceback" not in proc.stderr
