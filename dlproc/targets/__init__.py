"""Where a compiled program runs: the golden model, the ISA simulator, the RTL simulation and boards.

``golden/`` is the NumPy reference of every operation; ``isasim`` executes the instruction stream
on a functional model of the processor; ``workflow`` runs a compiled network on one of the targets
(golden, ISA simulator, the Verilator build in ``dlproc.sim``, or a board through ``board``);
``host`` is what the host does around a run and ``profiler`` turns hardware counters into tables.
"""
