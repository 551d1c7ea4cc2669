"""The hardware contract and the gateware that implements it.

``isa`` (instruction encoding), ``regmap`` (control/status registers), ``numerics`` (the integer
arithmetic every target reproduces), ``geometry`` (the array shape a program is planned for) and
``costs`` (the cycle cost of the engines, shared by the planners and the estimator) are plain
Python definitions; ``gateware/`` is the Amaranth processor built from them. Nothing here imports
the compiler, the targets or the build flow.
"""
