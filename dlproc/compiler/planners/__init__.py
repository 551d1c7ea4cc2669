"""Per-engine planners: how one layer is cut into tiles and turned into instructions.

One module per engine, named as the engine is everywhere (``gateware/conv.py``, the conv golden
op, the conv estimator term): ``conv``, ``pool``, ``add``, ``upsample``, ``lrn``, ``softmax``,
``fc`` and ``convtranspose`` (conv-engine phases). Each has the layer's integer description
(``ConvLayer`` ...), its weight/parameter images and ``plan_<engine>``, which needs only DRAM
addresses. Below them: ``packing`` (the DRAM layout), ``tiling`` (tiles and receptive fields) and
``schedule`` (steps, the instruction emitter and the cost model). The network compiler
(``dlproc.compiler.layeremit``) and the single-layer builder (``dlproc.compiler.layerprog``) both
call the planners.

How a layer becomes a program (``docs/programs.md`` has the full story):

* **Layout.** A tensor (C, H, W) is stored as channel blocks of C lanes: element (cb, y, x) is one
  buffer word (C int8 lanes) at ``base + ((cb*H + y)*W + x) * pitch``, ``pitch`` = the word size
  rounded up to bus beats. Weights are stored per output block in the order CONV reads them
  (input block, ky, kx), one C x C word each; parameters are one PRM word per output block.
* **Tiling.** The output is cut into tiles of th x tw pixels (one CONV computes one output block
  of one tile, so a tile must fit the accumulator and an OUT slot); the input tile is the output
  tile's receptive field, halo included. Output blocks are grouped so that a group's weights fit
  a WGT slot. A small cost model (:func:`~dlproc.compiler.planners.schedule.estimate_steps`) picks the tile size, the group size and the
  loop order (tiles outer: input loaded once, weights once per tile unless resident; groups outer:
  weights loaded once, input once per group).
* **Padding** is inserted by LOAD's pad fields where a tile touches the border, with
  ``pad_value = zp_in`` for conv and average pool and -128 for max pool.
* **Double buffering and tokens.** INP and (streamed) WGT/PRM alternate between the two halves of
  their buffer, OUT between up to four slots. Every step's loads wait (C2L) exactly for the step
  that last read the slot they overwrite, every CONV waits (L2C) for its step's loads and (S2C)
  for the STORE that drained its OUT slot, every STORE waits (C2S) for its CONV. The stream is
  emitted with every token producer before its consumer, so it cannot deadlock for any queue
  depth, and the loads of step k+1 come before the CONVs of step k so that they overlap.
"""
