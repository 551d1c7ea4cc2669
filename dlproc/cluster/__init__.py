"""Work past one machine, on Ray: the engine (:mod:`dlproc.cluster.engine`: an embedded local
cluster or an existing one), RTL batches spread over workers (:mod:`dlproc.cluster.batch`:
``dlproc predict --workers/--address``) and the RTL check of exploration's best candidates
(:mod:`dlproc.cluster.verify`: ``dlproc explore --verify-rtl K``). The differential campaign
``dlproc regress`` (:mod:`dlproc.regress`) runs on the same engine.

Ray is an optional dependency (``pip install -e '.[cluster]'``), imported only here and only by
the commands that ask for workers.
"""
