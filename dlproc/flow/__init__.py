"""The build flow: generated headers and docs, Verilog, synthesis, board projects and firmware.

``codegen`` writes the C headers and docs from the hardware contract, ``toolchain`` finds
Verilator/Yosys/Quartus, ``synth`` runs Yosys, ``build`` drives a board recipe (``dlproc.boards``)
into a project, and ``firmware`` compiles the ARM-side runtime (``dlproc.firmware``).
"""
