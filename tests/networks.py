"""Where the tests find the real Darknet network descriptions.

The ``.cfg`` files (and Darknet's YOLO license) are kept in ``tests/data/darknet``, so a clone of
the repository tests them on its own, wherever it is checked out.
"""

from __future__ import annotations

from pathlib import Path

DARKNET = Path(__file__).resolve().parent / "data" / "darknet"
