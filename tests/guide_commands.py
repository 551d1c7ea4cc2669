"""The commands of docs/guide.md, extracted from the Markdown as .ci/run extracts the README's.

A step is a ```sh (run with bash) or ```python block; the ```text block that directly follows it
is the step's documented standard output. ``check`` accepts the real output when every documented
line appears in it in order (a ``...`` line elides any number of lines; durations such as
``15.1 s`` and the elapsed-time prefixes are not compared), so the guide shows the real output and
cannot rot.

    python tests/guide_commands.py --update    # run the guide in a fresh folder, rewrite its outputs
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "guide.md"
FENCE = re.compile(r"^```(\w*)\s*$")
#: Outputs longer than this are shown as their head, "...", and their tail.
MAX_LINES, HEAD, TAIL = 40, 28, 8


@dataclass
class Step:
    lang: str  #: "sh" or "python"
    code: str
    expected: list[str] | None  #: the documented output lines, None when the guide shows none
    out_span: tuple[int, int] | None  #: line range of the output block's body in the guide


def steps(text: str) -> list[Step]:
    lines = text.splitlines()
    blocks: list[tuple[str, int, int]] = []  # (language, first body line, end line (the closing fence))
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append((m.group(1), i + 1, j))
            i = j + 1
            continue
        i += 1
    result = []
    for k, (lang, lo, hi) in enumerate(blocks):
        if lang not in ("sh", "python"):
            continue
        expected, span = None, None
        if k + 1 < len(blocks) and blocks[k + 1][0] == "text":
            nlo, nhi = blocks[k + 1][1], blocks[k + 1][2]
            # Only blank lines between the command and its output block.
            if all(not l.strip() for l in lines[hi + 1:nlo - 1]):
                expected, span = lines[nlo:nhi], (nlo, nhi)
        result.append(Step(lang, "\n".join(lines[lo:hi]), expected, span))
    return result


def _normal(line: str) -> str:
    line = re.sub(r"\d+(\.\d+)? ?s\b", "<t>s", line.rstrip())
    # A number printed in exponent form is a float far from 1 (the smallest softmax output, say),
    # whose last printed digit moves with the machine's float rounding: compare four digits.
    line = re.sub(r"\b\d\.\d+e[-+]\d+\b", lambda m: f"{float(m.group(0)):.3e}", line)
    return re.sub(r"\s+", " ", line).strip()


def check(expected: list[str], actual: str) -> str | None:
    """None if ``expected`` (with ``...`` elisions) matches ``actual`` in order, else the first
    documented line not found."""
    got = [_normal(l) for l in actual.splitlines()]
    pos = 0
    for line in expected:
        want = _normal(line)
        if want in ("...", ""):
            continue
        while pos < len(got) and got[pos] != want:
            pos += 1
        if pos == len(got):
            return line
        pos += 1
    return None


def run(step: Step, cwd: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="120")
    if step.lang == "sh":
        argv = ["bash", "-euo", "pipefail", "-c", step.code]
    else:
        argv = [sys.executable, "-c", step.code]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def shown(stdout: str) -> list[str]:
    lines = [l.rstrip() for l in stdout.rstrip("\n").splitlines()]
    if len(lines) > MAX_LINES:
        lines = lines[:HEAD] + ["..."] + lines[-TAIL:]
    return lines


def prepare(cwd: Path) -> None:
    """What a reader has: the repository's examples next to the working folder."""
    link = cwd / "examples"
    if not link.exists():
        link.symlink_to(REPO / "examples")


def update(path: Path = GUIDE) -> None:
    text = path.read_text()
    lines = text.splitlines()
    with tempfile.TemporaryDirectory(prefix="dlproc-guide-") as tmp:
        cwd = Path(tmp)
        prepare(cwd)
        replacements = []
        for step in steps(text):
            proc = run(step, cwd)
            print(f"--- {step.code.splitlines()[0][:100]}  (exit {proc.returncode})", file=sys.stderr)
            if proc.returncode:
                sys.exit(f"step failed:\n{step.code}\n{proc.stdout}\n{proc.stderr}")
            if step.out_span is not None:
                replacements.append((step.out_span, shown(proc.stdout)))
    for (lo, hi), new in reversed(replacements):
        lines[lo:hi] = new
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(__doc__)
    update()
