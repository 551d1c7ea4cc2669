"""Board recipes: everything a user with Quartus needs to put the processor on a real board.

Each recipe (``dlproc.boards.de10_nano``, ``dlproc.boards.arria10_soc``) generates, from a
:class:`dlproc.config.ProcessorConfig` and the processor's Verilog, a complete Quartus project:
the processor as a Platform Designer component (``dlproc_hw.tcl``), the HPS system as a Platform
Designer script, the top-level wrapper, pins and I/O standards, SDC timing constraints, the
``.qpf``/``.qsf``, a build script, and the Linux side (device tree, UIO description). See
docs/boards.md.
"""

from __future__ import annotations

from dlproc.boards.common.recipe import BoardRecipe, GeneratedProject

__all__ = ["BoardRecipe", "GeneratedProject", "get_recipe", "BOARD_NAMES"]

BOARD_NAMES = ("de10-nano", "arria10-soc")


def get_recipe(board: str) -> BoardRecipe:
    """The recipe of ``board`` ('de10-nano' or 'arria10-soc')."""
    from dlproc.errors import ConfigError

    key = board.strip().lower() if isinstance(board, str) else board
    if key == "de10-nano":
        from dlproc.boards.de10_nano import DE10NanoRecipe

        return DE10NanoRecipe()
    if key == "arria10-soc":
        from dlproc.boards.arria10_soc import Arria10SoCRecipe

        return Arria10SoCRecipe()
    raise ConfigError(f"unknown board {board!r}: boards with a recipe are {', '.join(BOARD_NAMES)}")
