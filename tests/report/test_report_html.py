"""dlproc report: the figures it plots (against the estimator they come from), the CLI and its
bad input, and the page as Chromium renders it (headless screenshot, decoded images)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from dlproc.compiler import netfile
from dlproc.cli import main
from dlproc.compiler import compile_network
from dlproc.estimate.report import estimate_compiled, layer_breakdown
from dlproc.quant import Quantizer
from dlproc.quant.data import DIGITS_MODEL
from dlproc.report import collect, write_explore_report, write_report

from layerprog_cases import small_config


@pytest.fixture(scope="module")
def digits():
    q = Quantizer(DIGITS_MODEL)
    q.calibrate("digits")
    qnet = q.quantize()
    cfg = small_config(4)
    return qnet, cfg, compile_network(qnet, cfg)


def test_layer_figures_come_from_the_estimator_and_stack_to_the_cycles(digits):
    _, cfg, cn = digits
    data = collect(cn, cfg)
    rep = estimate_compiled(cn, cfg)
    rows = layer_breakdown(cn, rep.timeline)
    assert [l.name for l in data.layers] == [r["layer"] for r in rows] == ["conv1", "pool1", "conv2", "pool2", "fc"]
    assert [l.cycles for l in data.layers] == [r["cycles"] for r in rows]
    assert data.cycles == rep.cycles and data.fps == pytest.approx(rep.fps)
    for l, r in zip(data.layers, rows):
        assert l.compute + l.ddr + l.fixed == pytest.approx(l.cycles)
        assert min(l.compute, l.ddr, l.fixed) >= 0
        assert l.utilization == pytest.approx(r["utilization"])
    conv2 = data.layers[2]
    # conv2 (73,728 MACs on 16 MACs/cycle) is compute-bound: its MAC issue cycles are at least the
    # ideal 4,608 and most of the layer.
    assert conv2.compute >= 73728 / 16 and conv2.compute > 0.8 * conv2.cycles
    assert conv2.intensity and conv2.intensity > 1  # weights and activations fit on chip
    assert data.layers[1].intensity is None  # a pool has no MACs
    assert data.resources.device.name == "5CSEBA6U23I7"  # a generic configuration is shown on the DE10-Nano
    assert any("no board" in n for n in data.notes)


def test_profile_json_gives_estimate_against_rtl(digits):
    _, cfg, cn = digits
    est = {g.name: g.estimate for g in collect(cn, cfg).groups}
    doc = {"output": "y.npy", "profile": {"layers": [{"name": n, "cycles": int(c * 1.25)} for n, c in est.items()],
                                         "total": {"cycles": 12345}}}
    data = collect(cn, cfg, profile=doc)
    for g in data.groups:
        assert g.rtl == int(est[g.name] * 1.25)
        assert g.error == pytest.approx(est[g.name] / int(est[g.name] * 1.25) - 1)
    assert data.rtl_cycles == 12345
    with pytest.raises(Exception, match="match none of the network's profile entries"):
        collect(cn, cfg, profile={"layers": [{"name": "other", "cycles": 5}], "total": {}})
    with pytest.raises(Exception, match="is not the JSON of `dlproc predict --profile --json`"):
        collect(cn, cfg, profile={"layers": 3})


def test_cli_report_writes_html_and_pngs(digits, tmp_path, capsys):
    _, cfg, cn = digits
    net = netfile.save(cn, tmp_path / "d.dlnet")
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"profile": {"layers": [{"name": "conv1", "cycles": 2000}], "total": {"cycles": 9000}}}))
    assert main(["report", str(net), "--profile", str(prof), "-o", str(tmp_path / "r.html")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'r.html'}"
    text = (tmp_path / "r.html").read_text()
    for name in ("cycles", "utilization", "roofline", "estimate_vs_rtl", "resources"):
        png = tmp_path / f"r_{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"id='plot-{name}'" in text
    assert "src='http" not in text and "<link" not in text  # self-contained
    assert len(re.findall(r"src='data:image/png;base64,", text)) == 5


@pytest.mark.parametrize("argv, message", [
    (["report", "missing.dlnet", "-o", "r.html"], "network file 'missing.dlnet' does not exist"),
    (["report", "{net}", "-o", "r.txt"], "must end in .html"),
    (["report", "{net}", "--profile", "{net}", "-o", "r.html"], "is not JSON"),
    (["report", "{net}", "--preset", "de10nano_int8", "-o", "r.html"], "was compiled for configuration"),
    (["predict", "{net}", "--input", "x.npy", "--report", "r.html", "-o", "y.npy"], "--report FILE.html needs --profile"),
])
def test_bad_input_is_one_line_and_exit_2(digits, tmp_path, capsys, monkeypatch, argv, message):
    _, _, cn = digits
    net = netfile.save(cn, tmp_path / "d.dlnet")
    monkeypatch.chdir(tmp_path)
    assert main([a.format(net=net) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_explore_report_has_the_pareto_front(digits, tmp_path):
    from dlproc.estimate.explore import explore

    qnet, cfg, _ = digits
    result = explore(qnet, cfg, {"conv.ConvThreadNumber": ["16", "64"], "fc.FCThreadNumber": ["4", "8"]},
                     device="de10-nano")
    assert result.best is not None and result.best.assignments == {"conv.ConvThreadNumber": "64",
                                                                   "fc.FCThreadNumber": "8"}
    path = write_explore_report(tmp_path / "e.html", result, qnet)
    text = path.read_text()
    assert "id='plot-pareto'" in text and "fastest that fits: conv.ConvThreadNumber=64" in text
    assert (tmp_path / "e_pareto.png").is_file() and (tmp_path / "e_roofline.png").is_file()


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_report_renders_in_headless_chromium(digits, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it when root)")
    from PIL import Image

    _, cfg, cn = digits
    report = write_report(tmp_path / "r.html", cn, cfg)
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "shot.png"
    subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1200,2400", report.as_uri()],
                   check=True, capture_output=True, timeout=120)
    img = np.asarray(Image.open(shot).convert("RGB"))
    assert img.shape[:2] == (2400, 1200)
    assert (img.min(axis=2) < 250).mean() > 0.05, "the screenshot is (nearly) blank"
    # The bars of the cycles and utilization plots are #4c72b0: the plots were drawn, not alt text.
    blue = (np.abs(img.astype(int) - [0x4c, 0x72, 0xb0]).sum(axis=2) < 30).mean()
    assert blue > 0.005, f"plot colour covers only {blue:.4%} of the page"
    # Every image decoded: a copy of the page reports naturalWidth of each <img> into the DOM.
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", "<script>window.addEventListener('load', () => "
                     "document.body.setAttribute('data-widths', [...document.images].map(i => i.naturalWidth)"
                     ".join(',')));</script></body>"))
    dom = subprocess.run(flags + ["--virtual-time-budget=5000", "--dump-dom", probe.as_uri()], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    widths = [int(w) for w in re.search(r'data-widths="([0-9,]*)"', dom).group(1).split(",")]
    assert len(widths) == 4 and all(w > 0 for w in widths), widths
