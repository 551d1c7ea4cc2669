"""The Darknet importer: every cfg in tests/data/darknet, .weights reading, BN folding, errors."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlproc.errors import ModelError
from dlproc.frontends import load_darknet, load_network
from dlproc.frontends.darknet import darknet_weight_count
from dlproc.ir import Activation, Shape
from test_frontend_reference import run_ir
from networks import DARKNET


# Keep only the latest network: big random-weight nets (VGG-16: 0.55 GB) are slow to build, and the
# tests that reuse one run right after each other.
@functools.lru_cache(maxsize=1)
def _shared(cfg: str, size: tuple[int, int] | None = None):
    """A shared cfg imported with random weights."""
    return load_network(DARKNET / cfg, input_size=size)


# -- every shipped cfg ------------------------------------------------------------------------------

# cfg, input size override, input shape, output shapes (C, H, W).
CFGS = [
    ("alexnet.cfg", None, (3, 227, 227), [(1000, 1, 1)]),
    ("darknet.cfg", None, (3, 256, 256), [(1000, 1, 1)]),
    ("darknet19.cfg", None, (3, 256, 256), [(1000, 1, 1)]),
    ("darknet53.cfg", None, (3, 256, 256), [(1000, 1, 1)]),
    ("extraction.cfg", None, (3, 224, 224), [(1000, 1, 1)]),
    ("resnet18.cfg", None, (3, 256, 256), [(1000, 1, 1)]),
    ("resnet34.cfg", None, (3, 256, 256), [(1000, 1, 1)]),
    ("resnet50.cfg", None, (3, 256, 256), [(1000, 1, 1)]),
    ("tiny.cfg", None, (3, 224, 224), [(1000, 1, 1)]),
    ("vgg-16.cfg", None, (3, 224, 224), [(1000, 1, 1)]),
    ("yolov2-tiny.cfg", None, (3, 416, 416), [(425, 13, 13)]),
    ("yolov3-tiny.cfg", (416, 416), (3, 416, 416), [(255, 13, 13), (255, 26, 26)]),
    ("yolov3.cfg", (608, 608), (3, 608, 608), [(255, 19, 19), (255, 38, 38), (255, 76, 76)]),
]


def test_every_shared_cfg_is_covered():
    assert sorted(p.name for p in DARKNET.glob("*.cfg")) == sorted(c[0] for c in CFGS)


@pytest.mark.parametrize("cfg,size,in_shape,out_shapes", CFGS, ids=[c[0] for c in CFGS])
def test_shared_cfg_imports_with_the_right_shapes(cfg, size, in_shape, out_shapes):
    net = _shared(cfg, size)
    assert net.source_format == "darknet" and net.meta["random_weights"] is True
    assert net[net.inputs[0]].shape.as_tuple() == in_shape
    assert [net[o].shape.as_tuple() for o in net.outputs] == out_shapes
    # Darknet numbers every section after [net] from 0; the last section ends the network.
    sections = sum(line.startswith("[") for line in (DARKNET / cfg).read_text().splitlines()) - 1
    indices = [int(l.name.split("_")[1]) for l in net if l.op != "input"]
    assert max(indices) == sections - 1
    assert indices == sorted(indices)


def test_yolov3_heads_are_yolo_layers_with_their_anchors():
    net = _shared("yolov3.cfg", (608, 608))
    heads = [net[o] for o in net.outputs]
    assert [h.name for h in heads] == ["yolo_82", "yolo_94", "yolo_106"]
    assert all(h.op == "yolo" and h.attrs["classes"] == 80 for h in heads)
    assert heads[0].attrs["mask"] == [6, 7, 8] and heads[2].attrs["mask"] == [0, 1, 2]
    assert heads[0].attrs["anchors"][0] == (10.0, 13.0) and len(heads[0].attrs["anchors"]) == 9
    assert heads[0].attrs["options"]["ignore_thresh"] == ".7"
    # route 83 (-4) re-reads conv_79, route 86 (-1, 61) concatenates upsample_85 and shortcut_61.
    assert net["conv_84"].inputs == ["conv_79"]
    assert net["route_86"].op == "concat" and net["route_86"].inputs == ["upsample_85", "shortcut_61"]
    assert net["route_86"].shape == Shape(256 + 512, 38, 38)
    assert net["upsample_85"].attrs == {"scale": 2}


def test_tiny_yolo_size2_stride1_maxpool_keeps_13x13():
    net = _shared("yolov2-tiny.cfg")
    pool = net["maxpool_11"]
    assert pool.attrs == {"kernel": (2, 2), "stride": (1, 1), "pads": (0, 0, 1, 1)}
    assert net[pool.inputs[0]].shape.h == 13 and pool.shape == Shape(512, 13, 13)
    assert net["maxpool_1"].shape == Shape(16, 208, 208)  # size 2 stride 2: (416 + 1 - 2) // 2 + 1
    region = net["region_15"]
    assert region.op == "region" and region.attrs["num"] == 5 and region.attrs["coords"] == 4
    assert region.attrs["anchors"][1] == (1.87446, 2.06253)


def test_alexnet_maxpool_padding_zero_and_dropout_removed():
    net = _shared("alexnet.cfg")
    assert net["conv_0"].shape == Shape(96, 55, 55)  # (227 - 11) // 4 + 1
    assert net["maxpool_1"].shape == Shape(96, 27, 27) and net["maxpool_1"].attrs["pads"] == (0, 0, 0, 0)
    assert "dropout_9" not in net and net["connected_10"].inputs == ["connected_8"]
    assert net["connected_8"].activation == Activation("relu")
    assert net["connected_8"].weight.shape == (4096, 256 * 6 * 6)


def test_resnet_shortcut_between_shapes_is_an_explicit_selection_conv():
    net = _shared("resnet18.cfg")
    resample = [l for l in net if l.name.endswith("_resample")]
    assert resample, "resnet18 has shortcuts between layers of different shapes"
    first = resample[0]
    src = net[first.inputs[0]]
    assert first.attrs["stride"] == (2, 2) and first.attrs["kernel"] == (1, 1)
    assert (src.shape.c, src.shape.h) == (64, 64) and first.shape == Shape(128, 32, 32)
    w = first.weight[:, :, 0, 0]
    np.testing.assert_array_equal(w[:64], np.eye(64))
    np.testing.assert_array_equal(w[64:], 0)
    shortcut = net.consumers(first.name)[0]
    assert shortcut.op == "add" and shortcut.activation == Activation("leaky", alpha=0.1)


def test_vgg_crop_becomes_input_preprocessing():
    net = _shared("vgg-16.cfg")
    assert net["input"].shape == Shape(3, 224, 224)
    pre = net.meta["preprocess"]
    assert pre["center_crop"] == (224, 224) and (pre["scale"], pre["shift"]) == (2.0, -1.0)
    assert net["conv_1"].inputs == ["input"]


def test_input_size_override_and_fixed_seed_weights():
    a = load_network(DARKNET / "tiny.cfg", input_size=(256, 192))
    assert a["conv_0"].shape == Shape(16, 256, 192) and a["conv_19"].shape == Shape(1000, 16, 12)
    b = load_network(DARKNET / "tiny.cfg")
    np.testing.assert_array_equal(a["conv_5"].weight, b["conv_5"].weight)
    assert a.meta["random_seed"] == 0


def test_shipped_network_resolves_by_bare_name():
    net = load_network("tiny.cfg")
    assert Path(net.source_path).parent.name == "networks" and net["softmax_21"].shape == Shape(1000)


# -- .weights ---------------------------------------------------------------------------------------

SMALL_CFG = """\
[net]
height=6
width=6
channels=2

[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
filters=3
size=1
stride=1
pad=1
activation=relu

[dropout]
probability=.5

[connected]
output=5
activation=linear

[softmax]

[cost]
type=sse
"""


def _write_weights(path, arrays, major=0, minor=2):
    seen = np.array([123], "<u8" if major * 10 + minor >= 2 else "<i4")
    with open(path, "wb") as f:
        np.array([major, minor, 0], "<i4").tofile(f)
        seen.tofile(f)
        for a in arrays:
            np.asarray(a, "<f4").tofile(f)


def _raw_small(rng):
    return {
        "b0": rng.standard_normal(4), "s0": rng.random(4) + 0.5, "m0": rng.standard_normal(4),
        "v0": rng.random(4) + 0.2, "w0": rng.standard_normal((4, 2, 3, 3)),
        "b2": rng.standard_normal(3), "w2": rng.standard_normal((3, 4, 1, 1)),
        "b5": rng.standard_normal(5), "w5": rng.standard_normal((5, 3 * 3 * 3)),
    }


def _darknet_forward(raw, x):
    """The small cfg computed the way Darknet does, written out independently of the importer."""
    def conv(x, w, pad):
        xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
        k = w.shape[2]
        h, wd = xp.shape[1] - k + 1, xp.shape[2] - k + 1
        out = np.zeros((w.shape[0], h, wd))
        for ky in range(k):
            for kx in range(k):
                out += np.einsum("oc,chw->ohw", w[:, :, ky, kx], xp[:, ky:ky + h, kx:kx + wd])
        return out
    y = conv(x, raw["w0"], 1)
    y = (y - raw["m0"][:, None, None]) / (np.sqrt(raw["v0"])[:, None, None] + 0.000001)
    y = y * raw["s0"][:, None, None] + raw["b0"][:, None, None]
    y = np.where(y > 0, y, 0.1 * y)
    y = y.reshape(4, 3, 2, 3, 2).max(axis=(2, 4))
    y = np.maximum(conv(y, raw["w2"], 0) + raw["b2"][:, None, None], 0)
    y = raw["w5"] @ y.reshape(-1) + raw["b5"]
    e = np.exp(y - y.max())
    return e / e.sum()


@pytest.mark.parametrize("minor", [1, 2])
def test_weights_are_read_in_darknet_order_and_bn_is_folded(tmp_path, minor):
    cfg = tmp_path / "small.cfg"
    cfg.write_text(SMALL_CFG)
    raw = _raw_small(np.random.default_rng(7))
    order = ["b0", "s0", "m0", "v0", "w0", "b2", "w2", "b5", "w5"]
    _write_weights(tmp_path / "small.weights", [raw[k] for k in order], minor=minor)
    net = load_network(cfg)  # finds small.weights next to the cfg
    assert net.meta["weights"].endswith("small.weights") and "random_weights" not in net.meta
    assert [l.name for l in net] == ["input", "conv_0", "maxpool_1", "conv_2", "connected_4", "softmax_5"]
    assert net.meta["dropped"] == ["cost (layer 6)"]
    assert net["conv_0"].origin[-1] == "batch_normalize (folded)"
    x = np.random.default_rng(3).standard_normal((2, 6, 6))
    got = run_ir(net, {"input": x})["softmax_5"].reshape(-1)
    np.testing.assert_allclose(got, _darknet_forward(raw, x), rtol=1e-5, atol=1e-6)


def test_weights_of_the_wrong_size_say_expected_and_actual_bytes(tmp_path):
    cfg = tmp_path / "small.cfg"
    cfg.write_text(SMALL_CFG)
    raw = _raw_small(np.random.default_rng(7))
    weights = tmp_path / "other.weights"
    _write_weights(weights, list(raw.values())[:-1])
    floats = (4 + 3 * 4 + 4 * 2 * 9) + (3 + 3 * 4) + (5 + 5 * 27)  # conv_0 (bn), conv_2, connected_4
    actual = 20 + 4 * (floats - 5 * 27)
    with pytest.raises(ModelError, match=rf"other\.weights: expected {20 + 4 * floats} bytes .* but the file has "
                                         rf"{actual} bytes"):
        load_darknet(cfg, weights)


def test_yolov3_weights_size_matches_the_published_file():
    # yolov3.weights is 248 007 048 bytes (AlexeyAB/darknet issue #1910: "62 001 762 floats" incl.
    # the header); the importer must expect exactly that many bytes for yolov3.cfg.
    assert 20 + 4 * darknet_weight_count(DARKNET / "yolov3.cfg") == 248_007_048


# -- malformed cfgs -------------------------------------------------------------------------------


@pytest.mark.parametrize("text,message", [
    ("[net]\nheight=8\nwidth=8\nchannels=3\n\n[convolutional]\nfilters=4\nactivation=relu\n[lstm]\n",
     r"bad\.cfg:9: unknown section \[lstm\]; supported sections: .*\[convolutional\]"),
    ("[net]\nheight=8\nwidth=8\nchannels=3\n[convolutional]\nfilters=four\nactivation=relu\n",
     r"bad\.cfg:6: \[convolutional\] filters='four' is not an integer"),
    ("[net]\nheight=8\nwidth=8\nchannels=3\n[convolutional]\nfilters=4\nactivation=lhtan\n",
     r"bad\.cfg:7: \[convolutional\] activation='lhtan' is not supported; supported: linear, relu, leaky"),
    ("[net]\nheight=8\nwidth=8\nchannels=3\n[maxpool]\nsize=2\nstride_x=2\n",
     r"bad\.cfg:7: \[maxpool\] unknown or unsupported key stride_x='2'"),
    ("[net]\nheight=8\nwidth=8\nchannels=3\n[maxpool]\nsize=2\n[route]\nlayers=-1,3\n",
     r"bad\.cfg:8: \[route\] layers refers to layer 3, but layer 1 can only read layers 0..0"),
    ("[net]\nheight=8\nwidth=8\nchannels=3\n[route]\nlayers=-1\ngroups=2\n",
     r"bad\.cfg:7: \[route\] unknown or unsupported key groups='2'"),
    ("height=8\n[net]\n", r"bad\.cfg:1: option 'height=8' before the first \[section\]"),
    ("[convolutional]\nfilters=2\n", r"bad\.cfg: a Darknet cfg must start with a \[net\] section"),
])
def test_malformed_cfg_errors_name_file_and_line(tmp_path, text, message):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(text)
    with pytest.raises(ModelError, match=message):
        load_darknet(cfg)


def test_cli_reports_unknown_section_without_traceback(tmp_path):
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("[net]\nheight=8\nwidth=8\nchannels=3\n[gru]\noutput=4\n")
    proc = subprocess.run([sys.executable, "-m", "dlproc", "stats", str(cfg)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "bad.cfg:5: unknown section [gru]" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_reports_wrong_size_weights_without_traceback(tmp_path):
    cfg = tmp_path / "small.cfg"
    cfg.write_text(SMALL_CFG)
    (tmp_path / "small.weights").write_bytes(b"\0" * 100)
    proc = subprocess.run([sys.executable, "-m", "dlproc", "stats", str(cfg)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "small.weights: expected" in proc.stderr and "the file has 100 bytes" in proc.stderr


def test_darknets_default_activation_is_logistic_a_table_activation(tmp_path):
    """A [convolutional] without activation= uses Darknet's default, logistic: a sigmoid ``act``
    layer after the conv (the activation table)."""
    path = tmp_path / "default.cfg"
    path.write_text("[net]\nheight=8\nwidth=8\nchannels=3\n[convolutional]\nfilters=4\n")
    net = load_darknet(path)
    conv, act = net.layers[1], net.layers[2]
    assert conv.op == "conv" and conv.activation is None
    assert act.op == "act" and act.activation.kind == "sigmoid" and act.inputs == [conv.name]
    assert net.outputs == [act.name]
