"""The package has no import circle, counting imports deferred into functions (issue 22)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_import_circle_in_dlproc():
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "import_graph.py"), str(ROOT / "dlproc")],
                         capture_output=True, text=True, check=True).stdout
    assert "CIRCLE" not in out, out


def test_the_checker_sees_a_circle(tmp_path):
    pkg = tmp_path / "dlproc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from dlproc import b\n")
    (pkg / "b.py").write_text("from dlproc.a import f\n")
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "import_graph.py"), str(pkg)],
                         capture_output=True, text=True, check=True).stdout
    assert "CIRCLE ['dlproc.a', 'dlproc.b']" in out


def test_no_module_imports_another_modules_private_names():
    """No ``from m import _name`` between modules (issue 22): what one module uses of another is
    public, named in the other's ``__all__`` or at least without the underscore."""
    import ast

    found = []
    for top in ("dlproc", "boards", "sim", "firmware", "tests", "benchmarks", "examples"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if ".venv" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
                    found += [f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {a.name}"
                              for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, "\n".join(found)
