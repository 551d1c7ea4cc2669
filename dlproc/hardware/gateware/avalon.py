"""Avalon-MM signatures of the processor's external ports and of the internal bus clients.

The signatures are written from the *master's* point of view; the CSR slave port of the top level
is therefore ``In(CsrSignature(...))`` and the memory master port ``Out(MemorySignature(...))``
(with ``MemoryPorts = 2``: a read-only ``mem``, :func:`ReadMemorySignature`, and a write-only
``mem1``, :func:`WriteMemorySignature`).
Member names are the Avalon signal names, so the flattened Verilog ports read ``csr__address``,
``mem__waitrequest`` and so on, as the contract requires and as Platform Designer expects.

Protocol summary (Avalon Interface Specifications, memory-mapped):

* CSR: word addresses, fixed read latency 1, no waitrequest: ``readdata`` is valid the cycle after
  ``read`` is asserted; a ``write`` takes effect in the cycle it is asserted.
* Memory: a pipelined burst master. A command (``read`` or the first ``write`` beat, with
  ``address`` and ``burstcount``) and every further write beat are held unchanged while
  ``waitrequest`` is high and are accepted in a cycle where it is low. Read data returns in order,
  one beat per ``readdatavalid``, possibly while further commands are issued. A write burst, once
  started, is finished before any other command is issued. With one master (``MemoryPorts = 1``)
  a write is complete when accepted: the same master/slave pair keeps reads after it in order.
* Write master of a two-port processor (``mem1``): it also has the Avalon write-response
  signals ``writeresponsevalid`` and ``response[1:0]``. The slave returns one response per write
  command (per burst), in command order; ``response`` is :class:`Response`. A write counts as
  complete only when its response has returned, because a write accepted on one port is not
  ordered with a later read on the other port (on the Arria 10 HPS, F2SDRAM2 vs F2SDRAM0).
"""

from __future__ import annotations

import enum

from amaranth.lib.wiring import In, Out, Signature

ADDR_BITS = 32  #: byte addresses on the memory master
#: Write bursts the write master may have issued without their response back (two ports).
WRITE_RESPONSES_OUTSTANDING = 16


class Response(enum.IntEnum):
    """Avalon-MM ``response[1:0]`` encoding (the AXI BRESP/RRESP codes)."""

    OKAY = 0
    RESERVED = 1
    SLVERR = 2  #: the slave (or, behind an AXI bridge, the HPS SDRAM controller) failed the write
    DECODEERROR = 3  #: no slave at the address (the interconnect's default slave answered)


def burst_bits(max_burst: int) -> int:
    """Width of ``burstcount`` for bursts of 1..max_burst beats (Avalon: log2(max) + 1)."""
    return max_burst.bit_length()


def CsrSignature(addr_bits: int) -> Signature:
    """Avalon-MM CSR interface, master's view (the processor is the slave: use ``In(...)``)."""
    return Signature(
        {
            "address": Out(addr_bits),
            "read": Out(1),
            "write": Out(1),
            "writedata": Out(32),
            "readdata": In(32),
        }
    )


def MemorySignature(data_width: int, max_burst: int) -> Signature:
    """Avalon-MM pipelined burst memory interface, master's view (use ``Out(...)`` on the master)."""
    return Signature(
        {
            "address": Out(ADDR_BITS),
            "burstcount": Out(burst_bits(max_burst)),
            "read": Out(1),
            "write": Out(1),
            "writedata": Out(data_width),
            "byteenable": Out(data_width // 8),
            "waitrequest": In(1),
            "readdata": In(data_width),
            "readdatavalid": In(1),
        }
    )


def ReadMemorySignature(data_width: int, max_burst: int) -> Signature:
    """A read-only Avalon-MM pipelined burst master (port 0 of a two-port processor: fetch and load).

    The members of :func:`MemorySignature` without ``write``, ``writedata`` and ``byteenable``.
    """
    return Signature(
        {
            "address": Out(ADDR_BITS),
            "burstcount": Out(burst_bits(max_burst)),
            "read": Out(1),
            "waitrequest": In(1),
            "readdata": In(data_width),
            "readdatavalid": In(1),
        }
    )


def WriteMemorySignature(data_width: int, max_burst: int) -> Signature:
    """A write-only Avalon-MM burst master (port 1 of a two-port processor: store).

    The members of :func:`MemorySignature` without ``read``, ``readdata`` and ``readdatavalid``,
    plus the write responses ``writeresponsevalid`` and ``response`` (one per burst, in order).
    """
    return Signature(
        {
            "address": Out(ADDR_BITS),
            "burstcount": Out(burst_bits(max_burst)),
            "write": Out(1),
            "writedata": Out(data_width),
            "byteenable": Out(data_width // 8),
            "waitrequest": In(1),
            "writeresponsevalid": In(1),
            "response": In(2),
        }
    )


def ReadClientSignature(data_width: int, max_burst: int) -> Signature:
    """A read client of the memory arbiter, client's view.

    The client presents one burst (``req_*``, address already checked against the DMA window) and
    the arbiter pulses ``req_ready`` when it has taken it. Every beat of that burst later arrives
    with ``rsp_valid``; there is no back-pressure, so the client must have room for all beats of a
    burst before it requests it.
    """
    return Signature(
        {
            "req_valid": Out(1),
            "req_addr": Out(ADDR_BITS),
            "req_len": Out(burst_bits(max_burst)),
            "req_ready": In(1),
            "rsp_valid": In(1),
            "rsp_data": In(data_width),
        }
    )


def WriteClientSignature(data_width: int, max_burst: int, responses: bool = False) -> Signature:
    """A write client of the memory arbiter, client's view.

    The client presents one burst (``req_*``) only when all its beats are buffered; after
    ``req_ready`` the arbiter takes the beats in order from ``wdata``/``wbe`` (valid while
    ``wvalid``), pulsing ``wack`` for every beat the memory accepted.

    With ``responses`` (the write master of a two-port processor) the arbiter also pulses
    ``wresp`` once per granted burst, in grant order, when its write response has returned;
    ``wresp_err`` is high with it for a non-OKAY response and ``wresp_addr`` is that burst's
    address. Without it the members are absent, so a one-port design is unchanged.
    """
    members = {
        "req_valid": Out(1),
        "req_addr": Out(ADDR_BITS),
        "req_len": Out(burst_bits(max_burst)),
        "req_ready": In(1),
        "wvalid": Out(1),
        "wdata": Out(data_width),
        "wbe": Out(data_width // 8),
        "wack": In(1),
    }
    if responses:
        members |= {"wresp": In(1), "wresp_err": In(1), "wresp_addr": In(ADDR_BITS)}
    return Signature(members)
