"""Every subcommand given a missing file, a file of the wrong kind, or a configuration for another
board says so in one line naming the file and what was expected, with exit code 2 (issue 20).

Each case runs ``dlproc.cli.main`` in this process: an exception escaping ``main`` (a traceback
for the user) fails the test as an error, so the cases check both the message and its absence.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dlproc.cli import main
from dlproc.config import ProcessorConfig

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "dlproc" / "data" / "models" / "digits.onnx"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """One file of each kind the commands read, and some that are none of them."""
    d = tmp_path_factory.mktemp("bad_input")
    out = {"onnx": DIGITS}
    np.save(d / "x.npy", np.zeros((1, 1, 8, 8), np.float32))
    out["npy"] = d / "x.npy"
    (d / "garbage.onnx").write_bytes(b"\x00\x01 this is not a protobuf \xff" * 8)
    out["garbage_onnx"] = d / "garbage.onnx"
    (d / "notes.txt").write_text("just some text\n")
    out["text"] = d / "notes.txt"
    (d / "half.toml").write_text("[conv]\nConvThreadNumber = \n")
    out["bad_toml"] = d / "half.toml"
    ProcessorConfig.preset("arria10soc_int8").save(d / "a10.toml")
    out["a10_config"] = d / "a10.toml"
    (d / "profile.json").write_text("[1, 2")
    out["bad_json"] = d / "profile.json"
    (d / "empty.onnx").write_bytes(b"")
    out["empty"] = d / "empty.onnx"
    (d / "folder.onnx").mkdir()
    out["folder"] = d / "folder.onnx"
    out["missing"] = d / "does_not_exist.onnx"
    out["missing_net"] = d / "does_not_exist.dlnet"
    out["missing_npy"] = d / "does_not_exist.npy"
    out["missing_toml"] = d / "does_not_exist.toml"
    out["out_dir"] = d
    return out


def _cases() -> list[tuple[str, list[str], str]]:
    """(name, argv with {kind} placeholders, what the one-line error must mention)."""
    return [
        # stats / quantize / compile / estimate read a model.
        ("stats missing", ["stats", "{missing}"], "{missing}"),
        ("stats npy", ["stats", "{npy}"], "{npy}"),
        ("stats garbage", ["stats", "{garbage_onnx}"], "{garbage_onnx}"),
        ("stats text", ["stats", "{text}"], "{text}"),
        ("stats empty", ["stats", "{empty}"], "{empty}"),
        ("stats folder", ["stats", "{folder}"], "{folder}"),
        ("stats compiled net", ["stats", "{net}"], "{net}"),
        ("quantize missing", ["quantize", "{missing}", "-o", "{out_dir}/q.dlq"], "{missing}"),
        ("quantize npy", ["quantize", "{npy}", "-o", "{out_dir}/q.dlq"], "{npy}"),
        ("quantize calibration missing", ["quantize", "{onnx}", "--calibration", "{missing_npy}", "-o",
                                          "{out_dir}/q.dlq"], "{missing_npy}"),
        ("quantize calibration text", ["quantize", "{onnx}", "--calibration", "{text}", "-o", "{out_dir}/q.dlq"],
         "{text}"),
        ("compile missing", ["compile", "{missing}", "--preset", "de10nano_int8", "-o", "{out_dir}/n.dlnet"],
         "{missing}"),
        ("compile garbage", ["compile", "{garbage_onnx}", "--preset", "de10nano_int8", "-o", "{out_dir}/n.dlnet"],
         "{garbage_onnx}"),
        ("compile config missing", ["compile", "{onnx}", "--config", "{missing_toml}", "-o", "{out_dir}/n.dlnet"],
         "{missing_toml}"),
        ("compile config is a model", ["compile", "{onnx}", "--config", "{onnx}", "-o", "{out_dir}/n.dlnet"],
         "{onnx}"),
        ("compile config broken toml", ["compile", "{onnx}", "--config", "{bad_toml}", "-o", "{out_dir}/n.dlnet"],
         "{bad_toml}"),
        ("estimate missing", ["estimate", "{missing}", "--preset", "de10nano_int8"], "{missing}"),
        ("estimate text", ["estimate", "{text}", "--preset", "de10nano_int8"], "{text}"),
        ("estimate config is data", ["estimate", "{onnx}", "--config", "{npy}"], "{npy}"),
        # predict / report read a compiled network.
        ("predict net missing", ["predict", "{missing_net}", "--input", "{npy}", "-o", "{out_dir}/y.npy"],
         "{missing_net}"),
        ("predict net is a model", ["predict", "{onnx}", "--input", "{npy}", "-o", "{out_dir}/y.npy"], "{onnx}"),
        ("predict net for another configuration", ["predict", "{net}", "--preset", "arria10soc_int8", "--input",
                                                   "{npy}", "-o", "{out_dir}/y.npy"], "was compiled for configuration"),
        ("predict input missing", ["predict", "{net}", "--input", "{missing_npy}", "-o", "{out_dir}/y.npy"],
         "{missing_npy}"),
        ("predict input is text", ["predict", "{net}", "--input", "{text}", "-o", "{out_dir}/y.npy"], "{text}"),
        ("report net missing", ["report", "{missing_net}", "--preset", "de10nano_int8", "-o", "{out_dir}/r.html"],
         "{missing_net}"),
        ("report net is data", ["report", "{npy}", "--preset", "de10nano_int8", "-o", "{out_dir}/r.html"], "{npy}"),
        ("report profile broken", ["report", "{net}", "--preset", "de10nano_int8", "--profile", "{bad_json}", "-o",
                                   "{out_dir}/r.html"], "{bad_json}"),
        # generate / build / agent / explore / config read a configuration.
        ("generate config missing", ["generate", "--config", "{missing_toml}", "-o", "{out_dir}/p.v"],
         "{missing_toml}"),
        ("generate config is data", ["generate", "--config", "{npy}", "-o", "{out_dir}/p.v"], "{npy}"),
        ("build config missing", ["build", "--config", "{missing_toml}", "-o", "{out_dir}/b", "--no-synth"],
         "{missing_toml}"),
        ("build config for another board", ["build", "--config", "{a10_config}", "--board", "de10-nano", "-o",
                                            "{out_dir}/b", "--no-synth"], "does not fit the 5CSEBA6U23I7 (de10-nano)"),
        ("build preset for another board", ["build", "--preset", "arria10soc_int8", "--board", "de10-nano", "-o",
                                            "{out_dir}/b", "--no-synth"], "does not fit the 5CSEBA6U23I7 (de10-nano)"),
        ("agent config missing", ["agent", "--sim", "--token", "t0ken", "--config", "{missing_toml}"], "{missing_toml}"),
        ("explore config missing", ["explore", "{onnx}", "--board", "de10-nano", "--sweep", "conv.ConvThreadNumber=16", "--config", "{missing_toml}"],
         "{missing_toml}"),
        ("explore config is a model", ["explore", "{onnx}", "--board", "de10-nano", "--sweep", "conv.ConvThreadNumber=16", "--config", "{onnx}"], "{onnx}"),
        ("config show missing", ["config", "show", "--config", "{missing_toml}"], "{missing_toml}"),
        ("config show broken toml", ["config", "show", "--config", "{bad_toml}"], "{bad_toml}"),
    ]


@pytest.fixture(scope="module")
def compiled_net(files) -> Path:
    net = files["out_dir"] / "digits.dlnet"
    assert main(["compile", str(DIGITS), "--calibration", "digits", "--preset", "de10nano_int8", "-o", str(net)]) == 0
    return net


@pytest.mark.parametrize("name, argv, mention", _cases(), ids=[c[0] for c in _cases()])
def test_bad_input_is_one_line_with_exit_code_2(name, argv, mention, files, compiled_net, capsys):
    table = {k: str(v) for k, v in files.items()} | {"net": str(compiled_net)}
    args = [a.format(**table) for a in argv]
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2, f"{name}: exit code {code}, stderr {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"{name}: the error takes {len(lines)} lines:\n{err}"
    command = args[0]
    assert re.match(rf"dlproc {command}: error: ", lines[0]), lines[0]
    expected = mention.format(**table)
    assert expected in lines[0], f"{name}: the error does not name {expected!r}: {lines[0]}"
