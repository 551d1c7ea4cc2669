"""The model zoo: the networks people deploy, as float ONNX models with random weights at their
published shapes (``dlproc zoo list``, ``dlproc zoo export NAME -o FILE.onnx``).

Each entry names its source and the parameter and multiply-accumulate totals published for it;
``tests/frontends/test_zoo.py`` checks that ``dlproc stats`` of the built model matches them
within 1 % (the published figures are rounded to three digits, and a batch normalization folded
into its convolution leaves one bias per channel where the published count has the
normalization's scale and shift).

* ResNet-18, ResNet-50: torchvision's ``resnet18``/``resnet50`` (He et al. 2016, v1.5: the
  stride on the bottleneck's 3x3), 224x224; torchvision's model table: 11.69 M / 25.56 M
  parameters, 1.81 / 4.09 GFLOPS (torchvision counts multiply-accumulates).
* VGG-16: torchvision's ``vgg16`` (Simonyan and Zisserman 2015), 224x224: 138.36 M, 15.47 G.
* AlexNet: the BVLC Caffe model (Krizhevsky et al. 2012, with its two LRN layers and grouped
  conv2/4/5), 227x227: 60.97 M parameters, 724 M MACs.
* SqueezeNet 1.1: torchvision's ``squeezenet1_1``, 224x224: 1.24 M, 0.35 G (ceil-mode pools).
* MobileNet v1 (Howard et al. 2017, width 1.0, 224x224): 4.2 M parameters, 569 M MACs (table 8).
* MobileNet v2 (Sandler et al. 2018, width 1.0, 224x224; inverted residuals, linear
  bottlenecks, ReLU6): 3.5 M parameters, 300 M MACs (table 6; torchvision: 3.50 M, 0.30 G).
* YOLOv3-tiny: Darknet's ``yolov3-tiny.cfg`` at 416x416 (conv + batch norm + leaky ReLU, the
  stride-1 2x2 max pool, route and upsample, two 255-channel heads): 8.86 M parameters,
  5.57 BFLOPs as Darknet prints it, i.e. 2.79 G MACs.
* GoogLeNet: :mod:`dlproc.models.googlenet` (7.0 M, 1.58 G).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlproc.errors import DlprocError
from dlproc.models.graph import OnnxGraph

__all__ = ["ZooEntry", "ZOO", "zoo_entry", "build_zoo_model"]


@dataclass(frozen=True)
class ZooEntry:
    name: str
    description: str
    input_size: int  #: the published input height and width
    params: float  #: the published parameter count (as rounded where it is published)
    macs: float  #: the published multiply-accumulates per image (as rounded where it is published)
    source: str
    builder: Callable[[int, int], object]  #: (input size, seed) -> onnx.ModelProto
    min_size: int = 32  #: the smallest input it builds at

    def build(self, size: int | None = None, seed: int = 0):
        size = self.input_size if size is None else int(size)
        if size < self.min_size:
            raise DlprocError(f"{self.name} needs an input of at least {self.min_size}x{self.min_size}, not {size}")
        return self.builder(size, seed)


# ---- ResNet ------------------------------------------------------------------------------------
def _resnet(name: str, bottleneck: bool, blocks: tuple[int, ...]) -> Callable[[int, int], object]:
    def build(size: int, seed: int):
        g = OnnxGraph(name, (3, size, size), seed)
        x = g.conv("conv1", "data", 64, 7, stride=2, pad=3, bias=False, bn=True)
        x = g.maxpool("maxpool", x, 3, 2, (1, 1, 1, 1))
        cin = 64
        for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
            for i in range(n):
                stride = 2 if stage > 1 and i == 0 else 1
                p = f"layer{stage}_{i}"
                cout = width * 4 if bottleneck else width
                if bottleneck:
                    y = g.conv(f"{p}_conv1", x, width, 1, bias=False, bn=True)
                    y = g.conv(f"{p}_conv2", y, width, 3, stride=stride, bias=False, bn=True)
                    y = g.conv(f"{p}_conv3", y, cout, 1, bias=False, bn=True, act=None)
                else:
                    y = g.conv(f"{p}_conv1", x, width, 3, stride=stride, bias=False, bn=True)
                    y = g.conv(f"{p}_conv2", y, width, 3, bias=False, bn=True, act=None)
                short = x
                if stride != 1 or cin != cout:
                    short = g.conv(f"{p}_downsample", x, cout, 1, stride=stride, pad=0, bias=False, bn=True,
                                   act=None)
                x = g.add(f"{p}_add", y, short, act="relu")
                cin = cout
        x = g.global_avgpool("avgpool", x)
        return g.model([g.fc("fc", x, 1000)])

    return build


# ---- VGG-16 ------------------------------------------------------------------------------------
def _vgg16(size: int, seed: int):
    g = OnnxGraph("vgg16", (3, size, size), seed)
    x = "data"
    for stage, (n, width) in enumerate(((2, 64), (2, 128), (3, 256), (3, 512), (3, 512)), start=1):
        for i in range(n):
            x = g.conv(f"conv{stage}_{i + 1}", x, width, 3)
        x = g.maxpool(f"pool{stage}", x, 2, 2)
    side = size // 32
    x = g.fc("fc6", x, 4096, cin=512 * side * side, act="relu")
    x = g.fc("fc7", x, 4096, act="relu")
    return g.model([g.fc("fc8", x, 1000)])


# ---- AlexNet (BVLC Caffe) -------------------------------------------------------------------------
def _alexnet(size: int, seed: int):
    g = OnnxGraph("alexnet", (3, size, size), seed)
    x = g.conv("conv1", "data", 96, 11, stride=4, pad=0)
    x = g.maxpool("pool1", g.lrn("norm1", x), 3, 2)
    x = g.conv("conv2", x, 256, 5, pad=2, groups=2)
    x = g.maxpool("pool2", g.lrn("norm2", x), 3, 2)
    x = g.conv("conv3", x, 384, 3)
    x = g.conv("conv4", x, 384, 3, groups=2)
    x = g.conv("conv5", x, 256, 3, groups=2)
    x = g.maxpool("pool5", x, 3, 2)
    side = ((((size - 11) // 4 + 1 - 3) // 2 + 1 - 3) // 2 + 1 - 3) // 2 + 1
    x = g.fc("fc6", x, 4096, cin=256 * side * side, act="relu")
    x = g.fc("fc7", x, 4096, act="relu")
    return g.model([g.softmax("prob", g.fc("fc8", x, 1000))])


# ---- SqueezeNet 1.1 -------------------------------------------------------------------------------
def _squeezenet(size: int, seed: int):
    g = OnnxGraph("squeezenet1_1", (3, size, size), seed)

    def fire(name: str, x: str, squeeze: int, expand: int) -> str:
        s = g.conv(f"{name}_squeeze", x, squeeze, 1)
        return g.concat(f"{name}_concat", [g.conv(f"{name}_expand1x1", s, expand, 1),
                                           g.conv(f"{name}_expand3x3", s, expand, 3)])

    x = g.conv("conv1", "data", 64, 3, stride=2, pad=0)
    x = g.maxpool("pool1", x, 3, 2, ceil=True)
    x = fire("fire3", fire("fire2", x, 16, 64), 16, 64)
    x = g.maxpool("pool3", x, 3, 2, ceil=True)
    x = fire("fire5", fire("fire4", x, 32, 128), 32, 128)
    x = g.maxpool("pool5", x, 3, 2, ceil=True)
    for i, (sq, ex) in enumerate(((48, 192), (48, 192), (64, 256), (64, 256)), start=6):
        x = fire(f"fire{i}", x, sq, ex)
    x = g.conv("conv10", x, 1000, 1)
    return g.model([g.global_avgpool("pool10", x)])


# ---- MobileNets ----------------------------------------------------------------------------------
_V1 = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1), (512, 1),
       (512, 1), (1024, 2), (1024, 1))
#: (expansion t, channels c, repeats n, first stride s): table 2 of the MobileNet v2 paper.
_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _mobilenet_v1(size: int, seed: int):
    g = OnnxGraph("mobilenet_v1", (3, size, size), seed)
    x = g.conv("conv0", "data", 32, 3, stride=2, bias=False, bn=True)
    for i, (cout, stride) in enumerate(_V1, start=1):
        cin = g.channels[x]
        x = g.conv(f"conv{i}_dw", x, cin, 3, stride=stride, groups=cin, bias=False, bn=True)
        x = g.conv(f"conv{i}_pw", x, cout, 1, bias=False, bn=True)
    x = g.global_avgpool("avgpool", x)
    return g.model([g.fc("fc", x, 1000)])


def _mobilenet_v2(size: int, seed: int):
    g = OnnxGraph("mobilenet_v2", (3, size, size), seed)
    x = g.conv("conv0", "data", 32, 3, stride=2, bias=False, bn=True, act="relu6")
    block = 0
    for t, c, n, s in _V2:
        for i in range(n):
            stride = s if i == 0 else 1
            cin = g.channels[x]
            p = f"block{block}"
            y = x if t == 1 else g.conv(f"{p}_expand", x, cin * t, 1, bias=False, bn=True, act="relu6")
            hidden = g.channels[y]
            y = g.conv(f"{p}_dw", y, hidden, 3, stride=stride, groups=hidden, bias=False, bn=True, act="relu6")
            y = g.conv(f"{p}_project", y, c, 1, bias=False, bn=True, act=None)  # the linear bottleneck
            x = g.add(f"{p}_add", x, y) if stride == 1 and cin == c else y
            block += 1
    x = g.conv("conv_last", x, 1280, 1, bias=False, bn=True, act="relu6")
    x = g.global_avgpool("avgpool", x)
    return g.model([g.fc("classifier", x, 1000)])


# ---- YOLOv3-tiny ----------------------------------------------------------------------------------
def _yolov3_tiny(size: int, seed: int):
    g = OnnxGraph("yolov3_tiny", (3, size, size), seed)

    def cbl(name: str, x: str, cout: int, k: int) -> str:  # Darknet's conv + batch norm + leaky
        return g.conv(name, x, cout, k, bias=False, bn=True, act="leaky")

    x = "data"
    for i, width in enumerate((16, 32, 64, 128, 256)):
        x = cbl(f"conv{2 * i}", x, width, 3)
        if i == 4:
            route8 = x
        x = g.maxpool(f"pool{2 * i + 1}", x, 2, 2)
    x = cbl("conv10", x, 512, 3)
    x = g.maxpool("pool11", x, 2, 1, (0, 0, 1, 1))  # Darknet's size-2 stride-1 pool keeps the size
    x = cbl("conv12", x, 1024, 3)
    route13 = cbl("conv13", x, 256, 1)
    head1 = g.conv("conv15", cbl("conv14", route13, 512, 3), 255, 1, act=None)
    y = g.upsample("upsample19", cbl("conv18", route13, 128, 1), 2)
    y = g.concat("route20", [y, route8])
    head2 = g.conv("conv22", cbl("conv21", y, 256, 3), 255, 1, act=None)
    return g.model([head1, head2])


ZOO: dict[str, ZooEntry] = {e.name: e for e in (
    ZooEntry("googlenet", "GoogLeNet (Inception v1) with LRN, BVLC/ONNX zoo topology", 224, 7.0e6, 1.58e9,
             "Szegedy et al. 2014 (about 1.5 G multiply-adds); BVLC googlenet 7.0 M, 1.58 G", lambda size, seed: _googlenet(size, seed), 32),
    ZooEntry("resnet18", "ResNet-18 (torchvision resnet18)", 224, 11.69e6, 1.81e9,
             "torchvision model table", _resnet("resnet18", False, (2, 2, 2, 2))),
    ZooEntry("resnet50", "ResNet-50 v1.5 (torchvision resnet50)", 224, 25.56e6, 4.09e9,
             "torchvision model table", _resnet("resnet50", True, (3, 4, 6, 3))),
    ZooEntry("vgg16", "VGG-16 (torchvision vgg16)", 224, 138.36e6, 15.47e9, "torchvision model table",
             _vgg16),
    ZooEntry("alexnet", "AlexNet with LRN and grouped convolutions (BVLC Caffe)", 227, 60.97e6, 724e6,
             "Krizhevsky et al. 2012; BVLC bvlc_alexnet", _alexnet, 67),
    ZooEntry("squeezenet1_1", "SqueezeNet 1.1 (torchvision squeezenet1_1)", 224, 1.24e6, 0.35e9,
             "torchvision model table", _squeezenet),
    ZooEntry("mobilenet_v1", "MobileNet v1, width 1.0", 224, 4.2e6, 569e6,
             "Howard et al. 2017, table 8 (4.2 M, 569 M)", _mobilenet_v1),
    ZooEntry("mobilenet_v2", "MobileNet v2, width 1.0 (inverted residuals, linear bottlenecks)", 224, 3.5e6, 300e6, "Sandler et al. 2018, table 6; torchvision mobilenet_v2 (3.50 M, 0.30 G)", _mobilenet_v2),
    ZooEntry("yolov3_tiny", "YOLOv3-tiny (Darknet yolov3-tiny.cfg)", 416, 8.86e6, 2.79e9,
             "Darknet yolov3-tiny.cfg (5.571 BFLOPs)", _yolov3_tiny, 64),
)}


def _googlenet(size: int, seed: int):
    from dlproc.models.googlenet import googlenet_onnx

    return googlenet_onnx(seed=seed, size=size)


def zoo_entry(name: str) -> ZooEntry:
    key = name.strip().lower().replace("-", "_")
    if key not in ZOO:
        raise DlprocError(f"no zoo network {name!r}: the zoo has {', '.join(ZOO)}")
    return ZOO[key]


def build_zoo_model(name: str, size: int | None = None, seed: int = 0, path: str | Path | None = None):
    """The ``onnx.ModelProto`` of zoo network ``name`` (saved to ``path`` if given)."""
    import onnx

    model = zoo_entry(name).build(size, seed)
    if path is not None:
        onnx.save(model, str(path))
    return model
