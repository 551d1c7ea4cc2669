"""One case of a campaign: network ``index`` of ``seed`` quantized, compiled and run on the three
targets, which must agree bit for bit.

* the golden model: ``dlproc.targets.golden.run.run_int8``, layer by layer on the quantized network;
* the ISA simulator: the compiled program on ``dlproc.targets.isasim`` (``Workflow`` target golden);
* the RTL: the same program on the Verilated processor (``Workflow`` target sim).

Every hardware output tensor is compared byte for byte (the RTL and the ISA simulator against
the golden model), and the float outputs of the two program targets against each other. A case
that does not agree carries what reproduces it: the quantized network (``.dlq`` bytes) and the
input batch, so the driver can write them where the user is, whatever machine ran the case.
"""

from __future__ import annotations

import io
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dlproc.errors import DlprocError
from dlproc.regress.generator import network_rng, random_input, random_network

__all__ = ["CaseResult", "run_case", "quantize_case", "FRAMES", "CALIBRATION_FRAMES"]

#: Input frames each case runs (the RTL runs them back to back on one deployed program).
FRAMES = 2
CALIBRATION_FRAMES = 8


@dataclass
class CaseResult:
    """What one case found. ``status``: "ok", "mismatch" (the targets disagree) or "error" (a
    stage raised: the generator made something the tool chain refuses, or a target failed)."""

    seed: int
    index: int
    status: str
    layers: int = 0
    ops: list[str] = field(default_factory=list)
    rtl_cycles: int | None = None
    seconds: float = 0.0
    detail: str = ""
    #: the reproducer of a failing case: the quantized network and the input (not in the JSONL)
    dlq: bytes | None = None
    x: np.ndarray | None = None

    def record(self) -> dict[str, Any]:
        """The JSON-able part (one line of the results file)."""
        out = asdict(self)
        out.pop("dlq")
        out.pop("x")
        return out


def quantize_case(seed: int, index: int, config: Any, kind: str = "full") -> tuple[Any, tuple[int, int, int]]:
    """The quantized network of case ``index`` (calibrated on its own random data) and its input
    shape (C, H, W)."""
    from dlproc.quant import Quantizer

    net = random_network(seed, index, config, kind)
    q = Quantizer(net)
    rng = network_rng(seed, index)
    calib = rng.uniform(-1.0, 1.0, (CALIBRATION_FRAMES, *q.input_shape)).astype(np.float32)
    q.calibrate(calib)
    return q.quantize(), tuple(q.input_shape)


def _first_difference(name: str, a: np.ndarray, b: np.ndarray, what: str) -> str:
    where = np.argwhere(np.asarray(a) != np.asarray(b))
    first = tuple(int(v) for v in where[0])
    return (f"{what}: output {name!r} differs in {len(where)} of {np.asarray(a).size} values, first at {first}: "
            f"{np.asarray(a)[first]} vs {np.asarray(b)[first]}")


def run_case(seed: int, index: int, config: Any, fault: Callable[[Any, Any], None] | None = None,
             kind: str = "full") -> CaseResult:
    """Run case ``index`` of campaign ``seed`` on ``config``'s processor. ``fault(sim, compiled)``
    is called on the RTL's simulator after the network is loaded (fault injection for tests)."""
    from dlproc.targets.golden.run import run_int8
    from dlproc.targets.workflow import Workflow

    start = time.monotonic()
    result = CaseResult(seed, index, "ok")
    qnet = x = None
    try:
        qnet, in_shape = quantize_case(seed, index, config, kind)
        result.layers = len(qnet.layers) - 1
        result.ops = sorted({layer.op for layer in qnet.layers if layer.op != "input"})
        x = random_input(seed, index, in_shape, FRAMES)
        ref = run_int8(qnet, qnet.quantize_input(x), collect=True)
        isa_wf = Workflow(qnet, config, target="golden")
        cn = isa_wf.compile()
        y_isa = isa_wf.predict(x, display=False)
        rtl_wf = Workflow(cn, config, target="sim")
        try:
            if fault is not None:
                rtl_wf.deploy()
                fault(rtl_wf.machine, cn)
            y_rtl, prof = rtl_wf.predict(x, profile=True, display=False)
            result.rtl_cycles = int(prof.total_cycles) if getattr(prof, "total_cycles", None) else None
        finally:
            rtl_wf.close()
        problems = []
        for t in cn.outputs:
            for what, got in (("ISA simulator vs golden model", isa_wf.last_hw_values[t.name]),
                              ("RTL vs golden model", rtl_wf.last_hw_values[t.name])):
                if not np.array_equal(got, ref[t.name]):
                    problems.append(_first_difference(t.name, got, ref[t.name], what))
        if not np.array_equal(np.asarray(y_isa), np.asarray(y_rtl)):
            problems.append("RTL vs ISA simulator: the float outputs differ")
        if problems:
            result.status = "mismatch"
            result.detail = "; ".join(problems)
    except Exception as exc:  # noqa: BLE001 - a campaign exists to find crashes too
        result.status = "error"
        result.detail = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, DlprocError):
            result.detail += "\n" + traceback.format_exc(limit=6)
    result.seconds = round(time.monotonic() - start, 3)
    if result.status != "ok" and qnet is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "net.dlq"
            qnet.save(path)
            result.dlq = path.read_bytes()
        result.x = x
    return result


def save_reproducer(result: CaseResult, directory: Path, config: Any, command: str) -> Path:
    """Write a failing case's network, input, configuration and rerun command under
    ``directory/case-<seed>-<index>/``."""
    case_dir = Path(directory) / f"case-{result.seed}-{result.index}"
    case_dir.mkdir(parents=True, exist_ok=True)
    if result.dlq is not None:
        (case_dir / "net.dlq").write_bytes(result.dlq)
    if result.x is not None:
        buf = io.BytesIO()
        np.save(buf, result.x)
        (case_dir / "input.npy").write_bytes(buf.getvalue())
    config.save(case_dir / "config.toml")
    (case_dir / "README.txt").write_text(
        f"Case {result.index} of campaign seed {result.seed}: {result.status}\n{result.detail}\n\n"
        f"Rerun it alone:\n  {command}\n\nOr by hand: net.dlq (the quantized network), input.npy (the float "
        f"input batch), config.toml (the processor):\n"
        f"  dlproc compile {case_dir / 'net.dlq'} --config {case_dir / 'config.toml'} -o {case_dir / 'net.dlnet'}\n"
        f"  dlproc predict {case_dir / 'net.dlnet'} --input {case_dir / 'input.npy'} --target sim "
        f"--compare golden -o {case_dir / 'y.npy'}\n")
    return case_dir
