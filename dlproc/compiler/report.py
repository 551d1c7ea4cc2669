"""The compile log, in the spirit of MATLAB's ``compile`` output.

1. the target configuration, 2. optimizations (fusions, folding, concat), 3. the layer list with
(HW Layer)/(SW Layer) and a notice per SW layer, 4. one "Compiling layer group" line per group,
5. the external memory map.
"""

from __future__ import annotations

from typing import Any

__all__ = ["compile_report"]


def compile_report(cn: Any) -> str:
    lines = [f"### Compiling network {cn.name!r} for the dlproc processor (C = {cn.c}, {cn.bus_bytes * 8}-bit memory, "
             f"{cn.clock_mhz:g} MHz, configuration {cn.config_hash[:12]})"]
    optim = [n for n in cn.notes if "fused" in n or "folding" in n or "concat" in n]
    if optim:
        lines.append("### Optimizing network:")
        lines.extend(f"    {n}" for n in optim)
    lines.append("### The network includes the following layers:")
    width = max(len(layer.name) for layer in cn.layers) + 2
    for k, layer in enumerate(cn.layers, 1):
        tag = "(HW Layer)" if layer.hw else "(SW Layer)"
        shape = "x".join(str(v) for v in (layer.shape[1], layer.shape[2], layer.shape[0]))
        lines.append(f"    {k:>3}   '{layer.name}'{'':<{max(1, width - len(layer.name))}}{layer.op:<15}"
                     f"{shape:<14}{tag}")
    for notice in cn.notices:
        lines.append(f"Notice: {notice}")
    for group in cn.groups:
        lines.append(f"### Compiling layer group: {group[0]}>>{group[-1]} ...")
        lines.append(f"### Compiling layer group: {group[0]}>>{group[-1]} ... complete.")
    lines.append("")
    lines.append(cn.memory_map.table())
    lines.append("")
    lines.append(f"### Network compilation complete: {cn.insn_count} instructions, "
                 f"{len(cn.profile)} profiled layer group(s).")
    return "\n".join(lines)
