"""Amaranth platform of the Intel Arria 10 SoC development kit (10AS066N3F40E2SG).

amaranth-boards has no Arria 10 board, so this module describes the kit's FPGA-side user I/O
with the pins and I/O standards of Intel's golden hardware reference design for the kit
(``altera-opensource/ghrd-socfpga``, ``a10_soc_devkit_ghrd_std/create_ghrd_quartus.tcl``, board
revision C, which follows the kit's user guide pin tables). The HPS pins (DDR4 through the HPS
EMIF, SD card, UART, Ethernet, USB, I2C) are listed in :data:`HPS_PINS` from the same source.

Quartus Prime **Pro** (the edition that supports Arria 10) has ``quartus_syn`` instead of
``quartus_map``, and Arria 10 has no ALTIOBUF primitives, so the Amaranth platform uses the
generic I/O buffers (see /work/shared/toolchain-notes.md section 5). dlproc's board flow does not
build through this platform (the processor lives in a Platform Designer system); the recipe uses
:meth:`Arria10SoCDevKitPlatform.pin_table` for the top-level wrapper's pins.
"""

from __future__ import annotations

from amaranth.build import Attrs, Clock, DiffPairs, Pins, PinsN, Resource
from amaranth.lib import io
from amaranth.vendor import IntelPlatform

__all__ = ["Arria10SoCDevKitPlatform", "HPS_PINS", "SOURCE"]

SOURCE = ("Intel Arria 10 SoC development kit golden hardware reference design, board rev. C "
          "(altera-opensource/ghrd-socfpga a10_soc_devkit_ghrd_std/create_ghrd_quartus.tcl)")


class Arria10SoCDevKitPlatform(IntelPlatform):
    device = "10AS066N3"
    package = "F40"
    speed = "E2"
    suffix = "SG"
    default_clk = "clk100"
    resources = [
        # 100 MHz LVDS oscillator for the FPGA fabric.
        Resource("clk100", 0, DiffPairs("AM10", "AL10", dir="i"), Clock(100e6), Attrs(io_standard="LVDS")),
        # 133.333 MHz LVDS reference of the HPS DDR4 EMIF (D9RGX DDR4 card).
        Resource("emif_ref_clk", 0, DiffPairs("F25", "G24", dir="i"), Clock(133.333e6), Attrs(io_standard="LVDS")),
        Resource("reset_n", 0, PinsN("AV21", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("led", 0, Pins("AR23", dir="o"), Attrs(io_standard="1.8 V")),
        Resource("led", 1, Pins("AR22", dir="o"), Attrs(io_standard="1.8 V")),
        Resource("led", 2, Pins("AM21", dir="o"), Attrs(io_standard="1.8 V")),
        Resource("led", 3, Pins("AL20", dir="o"), Attrs(io_standard="1.8 V")),
        Resource("button", 0, Pins("R5", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("button", 1, Pins("T5", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("button", 2, Pins("P5", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("button", 3, Pins("P6", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("switch", 0, Pins("P3", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("switch", 1, Pins("P4", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("switch", 2, Pins("P1", dir="i"), Attrs(io_standard="1.8 V")),
        Resource("switch", 3, Pins("R1", dir="i"), Attrs(io_standard="1.8 V")),
    ]
    connectors = []

    # Quartus Prime Pro: quartus_syn replaces quartus_map.
    quartus_required_tools = ["quartus_syn", "quartus_fit", "quartus_asm", "quartus_sta"]

    @property
    def quartus_command_templates(self):
        templates = list(IntelPlatform.quartus_command_templates)
        templates[0] = templates[0].replace('invoke_tool("quartus_map")', 'invoke_tool("quartus_syn")') \
                                   .replace('get_override("quartus_map_opts")', 'get_override("quartus_syn_opts")')
        return templates

    def get_io_buffer(self, buffer):
        # Arria 10 has no ALTIOBUF; the generic buffers map to its GPIO cells.
        if isinstance(buffer, (io.Buffer, io.FFBuffer)):
            return buffer.elaborate(None)
        return super().get_io_buffer(buffer)  # pragma: no cover - DDR buffers need the GPIO IP

    @classmethod
    def pin_table(cls) -> dict[tuple[str, int], tuple[str, str | None, str | None]]:
        """(resource name, number) -> (positive pin, negative pin or None, io standard)."""
        table = {}
        for resource in cls.resources:
            (ios,) = resource.ios
            if isinstance(ios, DiffPairs):
                p, n = ios.p.names[0], ios.n.names[0]
            else:
                p, n = ios.names[0], None
            table[(resource.name, resource.number)] = (p, n, resource.attrs.get("io_standard"))
        return table


def _bus(name: str, pins: str) -> list[tuple[str, str]]:
    return [(f"{name}[{i}]", pin) for i, pin in enumerate(pins.split())]


#: HPS pins of the kit: (top-level port, pin). DDR4 I/O standards come from the EMIF IP;
#: the HPS dedicated/shared I/O are 1.8 V.
HPS_PINS: list[tuple[str, str]] = [
    ("hps_memory_mem_act_n", "B21"), ("hps_memory_mem_bg", "J24"), ("hps_memory_mem_par", "A18"),
    ("hps_memory_mem_alert_n", "AG24"),
    *_bus("hps_memory_mem_a", "B26 C26 C22 C21 C25 B24 B22 C23 D23 E23 C24 D24 F26 G26 G25 F24 F23"),
    *_bus("hps_memory_mem_ba", "E25 H24"),
    ("hps_memory_mem_ck", "B20"), ("hps_memory_mem_ck_n", "B19"), ("hps_memory_mem_cke", "A24"),
    ("hps_memory_mem_cs_n", "A22"), ("hps_memory_mem_reset_n", "A19"), ("hps_memory_mem_odt", "A26"),
    *_bus("hps_memory_mem_dbi_n", "AN26 AU25 AV26 AH25"),
    *_bus("hps_memory_mem_dq", "AP26 AN24 AN23 AM24 AK26 AL23 AL26 AK23 AP23 AT26 AR26 AR25 AT23 AP25 AU24 "
                               "AU26 AU28 AU27 AV23 AW28 AV24 AW24 AV28 AV27 AH24 AH23 AG25 AF24 AF25 AJ24 "
                               "AJ23 AJ26"),
    *_bus("hps_memory_mem_dqs", "AM25 AT25 AW26 AK25"),
    *_bus("hps_memory_mem_dqs_n", "AL25 AT24 AW25 AJ25"),
    ("hps_memory_oct_rzqin", "E26"),
    # HPS dedicated I/O: SD card (boot) and UART1 (console, rev. B/C position).
    ("hps_sdio_CLK", "K16"), ("hps_sdio_CMD", "H16"), ("hps_sdio_D0", "E16"), ("hps_sdio_D1", "G16"),
    ("hps_sdio_D2", "H17"), ("hps_sdio_D3", "F15"), ("hps_sdio_D4", "M19"), ("hps_sdio_D5", "E15"),
    ("hps_sdio_D6", "J16"), ("hps_sdio_D7", "L18"),
    ("hps_uart1_TX", "M17"), ("hps_uart1_RX", "K17"),
    # HPS shared I/O: USB0 (Q1), EMAC0 RGMII (Q2) with MDIO (Q3), I2C1 (Q4).
    ("hps_usb0_CLK", "D18"), ("hps_usb0_DIR", "C19"), ("hps_usb0_NXT", "F17"), ("hps_usb0_STP", "E18"),
    ("hps_usb0_D0", "D19"), ("hps_usb0_D1", "E17"), ("hps_usb0_D2", "C17"), ("hps_usb0_D3", "C18"),
    ("hps_usb0_D4", "D21"), ("hps_usb0_D5", "D20"), ("hps_usb0_D6", "E21"), ("hps_usb0_D7", "E22"),
    ("hps_emac0_TX_CLK", "H18"), ("hps_emac0_TX_CTL", "H19"), ("hps_emac0_TXD0", "E20"),
    ("hps_emac0_TXD1", "F20"), ("hps_emac0_TXD2", "F19"), ("hps_emac0_TXD3", "G19"),
    ("hps_emac0_RX_CLK", "F18"), ("hps_emac0_RX_CTL", "G17"), ("hps_emac0_RXD0", "G20"),
    ("hps_emac0_RXD1", "G21"), ("hps_emac0_RXD2", "F22"), ("hps_emac0_RXD3", "G22"),
    ("hps_emac0_MDC", "K20"), ("hps_emac0_MDIO", "K21"),
    ("hps_i2c1_SDA", "L20"), ("hps_i2c1_SCL", "M20"),
]
