"""docs/guide.md runs as written: every ```sh and ```python block of the guide, in order, in a fresh
folder, and each documented output (the ```text block after a command) appears in the real output
(tests/guide_commands.py). Also: the README lists every subcommand. The guide's processor is a 4 x 4
MAC array, whose Verilator build the RTL tests share (about a minute the first time)."""

from __future__ import annotations

import re

import pytest

from dlproc.cli import COMMAND_MODULES

from guide_commands import GUIDE, REPO, check, prepare, run, steps

pytestmark = pytest.mark.slow


def test_readme_lists_every_subcommand_with_one_line():
    text = (REPO / "README.md").read_text()
    block = text[text.index("## Command line"):]
    for name in COMMAND_MODULES:
        assert re.search(rf"^dlproc {name} ", block, re.M), f"README does not list dlproc {name}"
    # The two commands stay at the top, as .ci/run reads them.
    assert text.index("<!-- main-command -->") < text.index("<!-- test-command -->") < text.index("## What is here")


def test_guide_extraction_and_matching():
    md = "x\n```sh\necho a\n```\n\n```text\na\n...\nc\n```\n```python\nprint(1)\n```\n"
    found = steps(md)
    assert [(s.lang, s.code, s.expected) for s in found] == [("sh", "echo a", ["a", "...", "c"]),
                                                            ("python", "print(1)", None)]
    assert check(["a", "...", "c"], "a\nb\nc\n") is None
    assert check(["c", "a"], "a\nb\nc\n") == "a"  # order matters
    assert check(["built in 1.5 s"], "built in 17.2 s") is None  # durations are not compared


def test_guide_commands_run_and_print_what_the_guide_shows(tmp_path):
    prepare(tmp_path)
    found = steps(GUIDE.read_text())
    assert len(found) >= 12 and sum(s.expected is not None for s in found) >= 10
    for step in found:
        proc = run(step, tmp_path)
        assert proc.returncode == 0, f"{step.code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-3000:]}"
        if step.expected is not None:
            missing = check(step.expected, proc.stdout)
            assert missing is None, f"{step.code}\nthe guide shows {missing!r}, not in the output:\n{proc.stdout}"
    guide = tmp_path / "build" / "guide"
    for name in ("report.html", "report_cycles.png", "report_estimate_vs_rtl.png", "explore.html",
                 "explore_pareto.png", "rtl/dlproc_top.v", "board/build.sh", "y_board.npy"):
        assert (guide / name).is_file(), name
