"""``dlproc.frontends.stats`` totals against hand-derived numbers and against Darknet's published figures."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlproc.frontends import load_network, load_onnx
from dlproc.frontends.stats import network_stats
from networks import DARKNET



@functools.lru_cache(maxsize=None)
def _stats(cfg: str, size: tuple[int, int] | None = None):
    return network_stats(load_network(DARKNET / cfg, input_size=size))

# tiny.cfg written out by hand from the cfg text: (Cin, Cout, kernel, output size) of every conv;
# every "pad=1" 1x1 conv pads 1 // 2 = 0 and every 3x3 conv pads 1, so convs keep the size, and each
# size-2 stride-2 maxpool halves it (224 -> 112 -> 56 -> 28 -> 14).
TINY_CONVS = [
    (3, 16, 3, 224), (16, 32, 3, 112),
    (32, 16, 1, 56), (16, 128, 3, 56), (128, 16, 1, 56), (16, 128, 3, 56),
    (128, 32, 1, 28), (32, 256, 3, 28), (256, 32, 1, 28), (32, 256, 3, 28),
    (256, 64, 1, 14), (64, 512, 3, 14), (512, 64, 1, 14), (64, 512, 3, 14), (512, 128, 1, 14),
    (128, 1000, 1, 14),
]
TINY_POOLS = [(16, 112), (32, 56), (128, 28), (256, 14)]  # (channels, output size)


def test_tiny_cfg_totals_match_the_hand_formula():
    macs = sum(co * ci * k * k * s * s for ci, co, k, s in TINY_CONVS)
    params = sum(co * ci * k * k + co for ci, co, k, _ in TINY_CONVS)
    activations = (sum(co * s * s for _, co, _, s in TINY_CONVS) + sum(c * s * s for c, s in TINY_POOLS)
                   + 1000 + 1000)  # global avgpool and softmax outputs
    stats = network_stats(load_network(DARKNET / "tiny.cfg"))
    assert (stats.macs, stats.params, stats.activations) == (macs, params, activations)
    assert stats.macs == 491_524_096 and stats.params == 1_039_912
    assert len(stats.layers) == 22
    assert stats.gop == pytest.approx(2 * macs / 1e9)
    row = stats.layers[5]
    assert (row.name, row.op, row.shape, row.params, row.macs) == (
        "conv_5", "conv", (128, 56, 56), 128 * 16 * 9 + 128, 128 * 56 * 56 * 16 * 9)
    assert [r.macs for r in stats.layers if r.op in ("maxpool", "global_avgpool", "softmax")] == [0] * 6


# Darknet's own operation counts (BFLOPs = 2 x MACs / 1e9, convolutional and connected layers).
# Sourced in this session:
#   * https://pjreddie.com/darknet/tiny-darknet/ table "Ops": AlexNet 2.27 Bn, Tiny Darknet 0.98 Bn.
# Taken from the "Ops" columns of https://pjreddie.com/darknet/imagenet/ (classifiers, at the cfg's
# own input size) and https://pjreddie.com/darknet/yolo/ , /yolov2/ (detectors), as published there:
PUBLISHED_GOP = [
    ("tiny.cfg", None, 0.98),
    ("alexnet.cfg", None, 2.27),
    ("darknet.cfg", None, 0.96),      # "Darknet Reference" at 256x256
    ("extraction.cfg", None, 8.52),
    ("darknet19.cfg", None, 7.29),
    ("darknet53.cfg", None, 18.57),
    ("resnet18.cfg", None, 4.69),
    ("resnet34.cfg", None, 9.52),
    ("resnet50.cfg", None, 9.74),
    ("vgg-16.cfg", None, 30.94),
    ("yolov2-tiny.cfg", None, 5.41),  # "Tiny YOLO" (COCO), 416x416
    ("yolov3-tiny.cfg", None, 5.56),
    ("yolov3.cfg", (608, 608), 140.69),
]


@pytest.mark.parametrize("cfg,size,gop", PUBLISHED_GOP, ids=[p[0] for p in PUBLISHED_GOP])
def test_gop_matches_darknets_published_figure(cfg, size, gop):
    stats = _stats(cfg, size)
    # Darknet's shortcut between different shapes samples and pads in place; the importer makes
    # that an explicit 1x1 selection conv (real work for the processor), which Darknet does not count.
    darknet_macs = sum(r.macs for r in stats.layers if not r.name.endswith("_resample"))
    assert round(2 * darknet_macs / 1e9, 2) == gop
    if not cfg.startswith("resnet"):
        assert darknet_macs == stats.macs


def test_darknet19_per_layer_bflops_match_darknets_printout():
    # Darknet's table for darknet19.cfg at 256x256 (pjreddie.com/darknet/imagenet/):
    # "0 conv 32 3 x 3 / 1 256 x 256 x 3 -> 256 x 256 x 32 0.113 BFLOPs", layer 2 0.604, layer 5 0.067.
    rows = {r.name: r for r in _stats("darknet19.cfg").layers}
    assert [round(2 * rows[n].macs / 1e9, 3) for n in ("conv_0", "conv_2", "conv_5", "conv_18")] == \
        [0.113, 0.604, 0.067, 0.604]


def test_yolov3_tiny_per_layer_bflops_at_608_match_darknets_printout():
    # AlexeyAB Darknet's table for yolov3-tiny.cfg at 608x608 (github.com/junxnone/aiwiki issue 52):
    # layer 0 conv 0.319 BF, layer 2 0.852 BF, layer 12 (1024 3x3 at 19x19) 3.407 BF, layer 13 0.189 BF.
    rows = {r.name: r for r in _stats("yolov3-tiny.cfg", (608, 608)).layers}
    assert [round(2 * rows[n].macs / 1e9, 3) for n in ("conv_0", "conv_2", "conv_12", "conv_13")] == \
        [0.319, 0.852, 3.407, 0.189]
    assert rows["maxpool_11"].shape == (512, 19, 19)


def test_vgg16_parameter_count_is_the_well_known_one():
    # VGG-16 has 138,357,544 parameters (e.g. torchvision's VGG16 weights table); darknet's cfg is
    # the same network (weights + biases, no batch norm).
    assert _stats("vgg-16.cfg").params == 138_357_544


def test_cycles_and_frames_per_second():
    net = load_network(DARKNET / "tiny.cfg")
    stats = network_stats(net, macs_per_cycle=576, clock_mhz=150.0)
    expected = sum(math.ceil(co * ci * k * k * s * s / 576) for ci, co, k, s in TINY_CONVS)
    assert stats.cycles == expected
    assert stats.frames_per_second == pytest.approx(150e6 / expected)
    assert all(r.cycles == math.ceil(r.macs / 576) for r in stats.layers)


def test_onnx_grouped_conv_and_fc_macs():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="dw", group=4, pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1),
    ]
    inits = [numpy_helper.from_array(np.zeros((8, 1, 3, 3), np.float32), "w"),
             numpy_helper.from_array(np.zeros((10, 8), np.float32), "fw"),
             numpy_helper.from_array(np.zeros(10, np.float32), "fb")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    stats = network_stats(load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])))
    rows = {r.name: r for r in stats.layers}
    # Output 5x5 (stride 2, pad 1), 8 channels, each reading 4 / 4 = 1 input channel x 3 x 3.
    assert rows["dw"].macs == 8 * 5 * 5 * 1 * 9 and rows["dw"].params == 8 * 9 + 8
    assert rows["fc"].macs == 80 and rows["fc"].params == 90 and rows["gap"].macs == 0
    assert stats.activations == 8 * 25 + 8 + 10
