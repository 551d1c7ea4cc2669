"""Benchmark: torchvision's classifiers as ``torch.onnx.export`` writes them, through dlproc.

    python benchmarks/bench_torchvision.py [--models a,b,...] [--rtl a,b,...|all] [--json] [--write]
    python benchmarks/bench_torchvision.py --from-json      # re-render docs/torchvision.md

Needs the optional ``[torch]`` extra (``pip install -e '.[torch]'``: torch and torchvision); CI
does not install it. For every model (random weights, eval mode), exported with
``torch.onnx.export(model, x, f, opset_version=17, dynamo=False)`` (the TorchScript exporter,
whose graphs are the ones users bring):

* at 224x224: ``dlproc stats`` (MACs, parameters) and ``dlproc estimate`` on ``de10nano_int8``
  and ``arria10soc_int8``, or the one-line error that stops them;
* at 64x64: quantized with 8 random calibration images, the int8 logits of the golden model
  against ONNX Runtime's float logits on 2 other random images (SQNR in dB); with ``--rtl``, one
  frame on the Verilated C = 4 configuration (``rtl_config``), bit for bit against the golden
  model, with its cycles.

Figures are cycle counts and ratios (stable); the seconds column is wall-clock and noisy.
``--write`` writes the table to ``docs/torchvision.md`` (generated, naming the command) and the
rows to ``docs/torchvision.json``. ``UNSUPPORTED`` lists models the processor cannot express
(LayerNorm, attention); their rows give the one-line error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dlproc.compiler import compile_network
from dlproc.config import ProcessorConfig
from dlproc.errors import DlprocError
from dlproc.estimate import estimate_compiled
from dlproc.estimate.performance import synthetic_quantize
from dlproc.frontends.onnx import load_onnx
from dlproc.frontends.stats import network_stats

PRESETS = ("de10nano_int8", "arria10soc_int8")

#: torchvision classification models up to about 5 G MACs at 224x224 (issue 23's list).
MODELS = (
    "alexnet", "resnet18", "resnet34", "resnet50", "resnext50_32x4d", "vgg11", "vgg16", "squeezenet1_1",
    "googlenet", "densenet121", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0",
    "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "shufflenet_v2_x1_0", "mnasnet1_0",
    "regnet_x_400mf", "regnet_y_400mf",
)

#: Models that need what the processor cannot express (listed with their error in docs/torchvision.md).
UNSUPPORTED = ("convnext_tiny", "vit_b_16", "swin_t")

ROOT = Path(__file__).resolve().parents[1]


def export(name: str, size: int) -> bytes:
    """The model's ONNX bytes at ``size`` x ``size`` (random weights, eval mode, opset 17)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, **kwargs).eval()
    buf = io.BytesIO()
    # The exporter prints its TorchScript graph when it fails; keep stdout for the table.
    with torch.no_grad(), contextlib.redirect_stdout(sys.stderr):
        torch.onnx.export(model, torch.zeros(1, 3, size, size), buf, opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["logits"])
    return buf.getvalue()


def rtl_config() -> ProcessorConfig:
    """C = 4 with every block a torchvision classifier needs (activation table, multiply, LRN off)."""
    cfg = ProcessorConfig()
    cfg.set_module_property("conv", "ConvThreadNumber", 16)
    cfg.set_module_property("conv", "ActivationTableGeneration", True)
    cfg.set_module_property("conv", "WeightMemorySize", 1 << 18)
    return cfg


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300]


def exported(name: str, size: int, row: dict) -> bytes | None:
    """``export``, or None with the exporter's one-line error in the row (torch's own limits:
    AlexNet's adaptive pool cannot upsample a 1x1 map at 64x64, for example)."""
    try:
        return export(name, size)
    except Exception as exc:  # the exporter raises many types; the row records what it said
        row[f"export_{size}"] = f"{type(exc).__name__}: {first_line(exc)}"
        return None


def imported(data: bytes, row: dict, key: str):
    """The IR network of ONNX bytes, or None with the importer's one-line error in ``row[key]``
    (the file is named after the model, so the error names it too)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{row['model']}.onnx"
        path.write_bytes(data)
        try:
            return load_onnx(path)
        except DlprocError as exc:
            row[key] = first_line(exc).replace(f"{tmp}/", "")
            return None


def at_224(name: str, row: dict) -> None:
    data = exported(name, 224, row)
    net = None if data is None else imported(data, row, "import_224")
    if net is None:
        return
    st = network_stats(net)
    row["macs"], row["params"] = int(st.macs), int(st.params)
    qnet = synthetic_quantize(net)
    for preset in PRESETS:
        cfg = ProcessorConfig.preset(preset)
        try:
            row[f"estimate_{preset}"] = estimate_compiled(compile_network(qnet, cfg), cfg).cycles
        except DlprocError as exc:
            row[f"estimate_{preset}"] = first_line(exc)


def at_64(name: str, row: dict, rtl: bool) -> None:
    import onnxruntime as ort

    from dlproc.quant import Quantizer
    from dlproc.targets.golden.run import run_int8

    data = exported(name, 64, row)
    net = None if data is None else imported(data, row, "import_64")
    if net is None:
        return
    rng = np.random.default_rng(1)
    cal = rng.uniform(-1, 1, (8, 3, 64, 64)).astype(np.float32)
    x = rng.uniform(-1, 1, (2, 3, 64, 64)).astype(np.float32)
    cfg = rtl_config()
    try:
        q = Quantizer(net, config=cfg)
        q.calibrate(cal)
        qnet = q.quantize()
    except DlprocError as exc:
        row["quantize_64"] = first_line(exc)
        return
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ref = np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))]).reshape(len(x), -1)
    out = qnet.outputs[0]
    got = qnet.dequantize(out, run_int8(qnet, qnet.quantize_input(x))[out]).reshape(len(x), -1)
    row["sqnr_db_64"] = round(float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((got - ref) ** 2), 1e-30))), 1)
    if not rtl:
        return
    from dlproc.cluster.verify import rtl_frame

    try:
        cn = compile_network(qnet, cfg)
        row["rtl_cycles_64"], row["bit_exact_64"] = rtl_frame(qnet, cn, cfg)
    except DlprocError as exc:
        row["rtl_64"] = first_line(exc)


def _cell(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.1f}"
    return "error (below)"


def markdown(rows: list[dict], command: str) -> str:
    """docs/torchvision.md: the table, then every error of the rows in full."""
    head = ["model", "G MACs", "M params", "de10nano_int8 est. cycles", "arria10soc_int8 est. cycles",
            "int8 SQNR @64 (dB)", "RTL cycles @64 (C = 4)", "bit-exact"]
    keys = ["estimate_de10nano_int8", "estimate_arria10soc_int8", "sqnr_db_64", "rtl_cycles_64", "bit_exact_64"]
    out = ["# torchvision's classifiers through dlproc", "",
           f"Generated by `{command}` (`benchmarks/bench_torchvision.py`; random weights, eval mode, "
           "`torch.onnx.export(..., opset_version=17, dynamo=False)`). Estimates are the cycle model's "
           "(`dlproc estimate`) at 224x224; SQNR is the golden model's int8 logits against ONNX Runtime's "
           "float logits at 64x64 (8 random calibration images, 2 test images); RTL is one 64x64 frame on the "
           "Verilated C = 4 configuration `rtl_config()`, compared bit for bit with the golden model.", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = []
    for row in rows:
        macs = f"{row['macs'] / 1e9:.2f}" if "macs" in row else ""
        params = f"{row['params'] / 1e6:.1f}" if "params" in row else ""
        out.append("| " + " | ".join([row["model"], macs, params] + [_cell(row, k) for k in keys]) + " |")
        for key, value in row.items():
            if isinstance(value, str) and key != "model":
                notes.append(f"- **{row['model']}** ({key}): {value}")
    if notes:
        out += ["", "## Errors", ""] + notes
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS + UNSUPPORTED))
    ap.add_argument("--rtl", default="", help="models to run on the RTL at 64x64 (comma-separated, or 'all')")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write", action="store_true", help="write docs/torchvision.md and docs/torchvision.json")
    ap.add_argument("--from-json", action="store_true", help="re-render docs/torchvision.md from docs/torchvision.json")
    args = ap.parse_args()
    command = "python benchmarks/bench_torchvision.py --write" + (f" --rtl {args.rtl}" if args.rtl else "")
    if args.from_json:
        rows = json.loads((ROOT / "docs" / "torchvision.json").read_text())
        (ROOT / "docs" / "torchvision.md").write_text(markdown(rows, command))
        return 0
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:
        print("bench_torchvision needs torch and torchvision: pip install -e '.[torch]'", file=sys.stderr)
        return 2
    models = [m for m in args.models.split(",") if m]
    rtl = set(models) if args.rtl == "all" else {m for m in args.rtl.split(",") if m}
    rows = []
    for name in models:
        start = time.monotonic()
        row: dict = {"model": name}
        at_224(name, row)
        at_64(name, row, name in rtl)
        row["seconds"] = round(time.monotonic() - start, 1)
        rows.append(row)
        if not args.json:
            print(json.dumps(row), flush=True)
    if args.write:
        (ROOT / "docs" / "torchvision.md").write_text(markdown(rows, command))
        (ROOT / "docs" / "torchvision.json").write_text(json.dumps(rows, indent=1) + "\n")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
