"""dlproc: an open generator of a parameterized int8 deep-learning inference processor for FPGAs.

The package is organised by the parts of the product (see ``docs/architecture.md``):
``config`` (ProcessorConfig), ``ir`` and ``frontends`` (networks), ``golden`` (the bit-exact NumPy
reference), ``quant`` (the quantizer), ``isa``/``regmap`` (the single source of truth for the
instruction set and registers), ``gateware`` (Amaranth), ``sim`` helpers, and the CLI.
"""

__version__ = "0.1.0"
