"""Differential campaigns: random networks on the RTL, the ISA simulator and the golden model,
spread over Ray workers (``dlproc regress``).

* :mod:`dlproc.regress.generator` -- the random networks, reproducible from (seed, index);
* :mod:`dlproc.regress.case` -- one network on the three targets, and its reproducer;
* :mod:`dlproc.regress.campaign` -- the campaign on Ray: retries, streaming results, resume.
"""
