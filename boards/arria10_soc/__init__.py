"""Intel Arria 10 SoC development kit (10AS066N3F40E2SG): the dlproc board recipe.

System (Platform Designer, ``soc_system.tcl``, Quartus Prime Pro)::

    fpga_clk_100 -> clk_0 -> iopll_0 (TargetFrequency) -> dlproc.clock, f2sdram0 (and f2sdram2) clock,
                                                             h2f_lw_axi clock
    fpga_reset_n and the HPS's h2f_reset -> dlproc.reset
    arria10_hps_0.h2f_lw_axi_master --(base + 0x0)--> dlproc.csr
    dlproc.mem --> arria10_hps_0.f2sdram0_data (AXI; Platform Designer adapts the Avalon-MM master)
    dlproc.mem1 --> arria10_hps_0.f2sdram2_data (MemoryPorts = 2 only: the write-only master,
                    with write responses: the bridge returns AXI BRESP as writeresponsevalid/response)
    dlproc.irq --> arria10_hps_0.f2h_irq0 line 0                     (GIC SPI 19)
    emif_a10_hps_0 (DDR4, 32-bit, 1066.667 MHz, 133.333 MHz reference) <-> arria10_hps_0.emif

Where Arria 10 differs from the DE10-Nano flow:

* The HPS SDRAM controller's PHY is an EMIF IP in the FPGA I/O (``altera_emif_a10_hps``), so
  its pins are ordinary FPGA pins with location assignments (from the kit's golden reference
  design, see :mod:`.platform`).
* The FPGA-to-SDRAM ports are AXI-4, at most 128 bits wide (F2SDRAM0/2; AN 763). The HPS is
  set to AN 763's port configuration 3 (F2SDRAM0 and F2SDRAM2 128 bits, F2SDRAM1 unavailable;
  ``F2SDRAM_PORT_CONFIG`` = 6). With one memory master it is connected to F2SDRAM0; with two
  (``MemoryPorts = 2``, the arria10soc_int8 preset) the read-only master (fetch, load) goes to
  F2SDRAM0 and the write-only master (store) to F2SDRAM2, each 128 bits with
  DDRBytesPerCycle = 16, exactly what a port carries. (Analog Devices' public a10soc carrier
  script enables the same pair: ``F2SDRAM_PORT_CONFIG`` 6, ``F2SDRAM0_ENABLED`` and
  ``F2SDRAM2_ENABLED`` 1, an Avalon-MM master on each of ``f2sdram0_data`` and
  ``f2sdram2_data``.) A write accepted on F2SDRAM2 is not ordered with a later read on
  F2SDRAM0, so the write master declares Avalon write responses (``writeresponsevalid``,
  ``response``, ``maximumPendingWriteTransactions`` in ``dlproc_hw.tcl``): Platform Designer's
  Avalon-to-AXI bridging then passes each burst's BRESP back, and a STORE completes (tokens,
  MARK, BUSY) only when every burst's response has returned (an error response stops the
  processor with WRITE_RESPONSE). A wider master (a custom configuration) would be width-adapted by Platform
  Designer onto the 128-bit port, which caps it at 16 bytes per processor cycle: ``dlproc build``
  says so.
* Quartus Prime Pro: ``qsys-generate --quartus-project``, ``quartus_syn`` instead of
  ``quartus_map``, and ``quartus_cpf --hps`` splits the bitstream into the ``.periph.rbf`` (I/O,
  loaded by U-Boot's SPL with early I/O release) and the ``.core.rbf`` (fabric).
* There is no open synthesis flow for Arria 10, so the resource figures are estimates.
"""

from __future__ import annotations

from typing import Any

from dlproc.boards.common.ports import ProcessorPorts
from dlproc.boards.common.recipe import COMPONENT_NAME, BoardRecipe, Pin, tcl_quote
from dlproc.boards.common.quartus import build_script_preamble, heartbeat, pin_assignments, pll_period_check, top_module
from dlproc.boards.arria10_soc.platform import HPS_PINS, SOURCE, Arria10SoCDevKitPlatform

__all__ = ["Arria10SoCRecipe", "Arria10SoCDevKitPlatform", "EMIF_DDR4_PARAMETERS", "F2SDRAM_MAX_WIDTH",
           "F2SDRAM_PORT_CONFIGS", "F2SDRAM_PORT_CONFIGURATION", "f2sdram_port_config_value"]

#: widest FPGA-to-SDRAM port of the Arria 10 HPS (F2SDRAM0 and F2SDRAM2), in bits
F2SDRAM_MAX_WIDTH = 128

#: AN 763 (683192) Table 5, "Available FPGA-to-SDRAM Port Combinations": port configuration ->
#: widths of (F2SDRAM0, F2SDRAM1, F2SDRAM2) in bits (None: unavailable).
F2SDRAM_PORT_CONFIGS: dict[int, tuple[int | None, int | None, int | None]] = {
    1: (32, 32, 32),
    2: (64, 64, 64),
    3: (128, None, 128),
    4: (128, 32, 64),
}
#: The configuration used: F2SDRAM0 and F2SDRAM2 at their full 128 bits (F2SDRAM2 takes the
#: write-only master of a MemoryPorts = 2 processor).
F2SDRAM_PORT_CONFIGURATION = 3


def f2sdram_port_config_value(configuration: int) -> str:
    """The ``altera_arria10_hps`` parameter ``F2SDRAM_PORT_CONFIG`` for an AN 763 port
    configuration: the parameter is the configuration number plus 3, as public Arria 10 SoC
    system scripts state ("port configuration 3 -> selected with value + 3"); the kit's
    reference-design scripts set 6 when they enable F2SDRAM0 and F2SDRAM2 (two 128-bit ports).
    Not checked against Platform Designer here (no Quartus Pro on this machine)."""
    if configuration not in F2SDRAM_PORT_CONFIGS:
        raise ValueError(f"AN 763 port configuration must be one of {sorted(F2SDRAM_PORT_CONFIGS)}, "
                         f"got {configuration}")
    return str(configuration + 3)

#: altera_emif_a10_hps parameters of the kit's DDR4 HILO card (MT40A256M16HA-093E, D9RGX):
#: 1 GiB, 32 bits, 1066.667 MHz, single rank.
EMIF_DDR4_PARAMETERS: dict[str, str] = {
    "PROTOCOL_ENUM": "PROTOCOL_DDR4",
    "PHY_DDR4_RATE_ENUM": "RATE_HALF",
    "PHY_DDR4_MEM_CLK_FREQ_MHZ": "1066.667",
    "PHY_DDR4_DEFAULT_REF_CLK_FREQ": "false",
    "PHY_DDR4_USER_REF_CLK_FREQ_MHZ": "133.333",
    "MEM_DDR4_FORMAT_ENUM": "MEM_FORMAT_DISCRETE",
    "MEM_DDR4_DQ_WIDTH": "32",
    "MEM_DDR4_BANK_GROUP_WIDTH": "1",
    "MEM_DDR4_ALERT_N_PLACEMENT_ENUM": "DDR4_ALERT_N_PLACEMENT_DATA_LANES",
    "MEM_DDR4_ALERT_N_DQS_GROUP": "3",
    "MEM_DDR4_READ_DBI": "true",
    "MEM_DDR4_TCL": "20",
    "MEM_DDR4_WTCL": "18",
    "MEM_DDR4_RTT_NOM_ENUM": "DDR4_RTT_NOM_RZQ_6",
    "MEM_DDR4_SPEEDBIN_ENUM": "DDR4_SPEEDBIN_2666",
    "MEM_DDR4_TRCD_NS": "14.25",
    "MEM_DDR4_TRP_NS": "14.25",
    "MEM_DDR4_TRRD_S_CYC": "7",
    "MEM_DDR4_TRRD_L_CYC": "8",
    "MEM_DDR4_TFAW_NS": "30.0",
    "MEM_DDR4_TWTR_S_CYC": "4",
    "MEM_DDR4_TWTR_L_CYC": "10",
    "PHY_DDR4_DEFAULT_IO": "false",
    "PHY_DDR4_USER_AC_IO_STD_ENUM": "IO_STD_SSTL_12",
    "PHY_DDR4_USER_AC_MODE_ENUM": "OUT_OCT_40_CAL",
    "PHY_DDR4_USER_CK_IO_STD_ENUM": "IO_STD_SSTL_12",
    "PHY_DDR4_USER_CK_MODE_ENUM": "OUT_OCT_40_CAL",
    "PHY_DDR4_USER_DATA_IO_STD_ENUM": "IO_STD_POD_12",
    "PHY_DDR4_USER_DATA_OUT_MODE_ENUM": "OUT_OCT_34_CAL",
    "PHY_DDR4_USER_DATA_IN_MODE_ENUM": "IN_OCT_60_CAL",
    "PHY_DDR4_USER_PLL_REF_CLK_IO_STD_ENUM": "IO_STD_LVDS_NO_OCT",
    "PHY_DDR4_USER_RZQ_IO_STD_ENUM": "IO_STD_CMOS_12",
}

#: HPS I/O assignment (HPS_IO_Enable): 14 dedicated pins, then the shared banks Q1..Q4 (12 each).
_HPS_IO_ENABLE = (
    "SDMMC:D0 SDMMC:CMD SDMMC:CCLK SDMMC:D1 SDMMC:D2 SDMMC:D3 NONE NONE SDMMC:D4 SDMMC:D5 SDMMC:D6 SDMMC:D7 "
    "UART1:TX UART1:RX "
    "USB0:CLK USB0:STP USB0:DIR USB0:DATA0 USB0:DATA1 USB0:NXT USB0:DATA2 USB0:DATA3 USB0:DATA4 USB0:DATA5 "
    "USB0:DATA6 USB0:DATA7 "
    "EMAC0:TX_CLK EMAC0:TX_CTL EMAC0:RX_CLK EMAC0:RX_CTL EMAC0:TXD0 EMAC0:TXD1 EMAC0:RXD0 EMAC0:RXD1 "
    "EMAC0:TXD2 EMAC0:TXD3 EMAC0:RXD2 EMAC0:RXD3 "
    "NONE NONE NONE NONE NONE NONE NONE NONE NONE NONE MDIO0:MDIO MDIO0:MDC "
    "I2C1:SDA I2C1:SCL NONE NONE NONE NONE NONE NONE NONE NONE NONE NONE"
)

_HPS_PARAMETERS: dict[str, str] = {
    "MPU_EVENTS_Enable": "0",
    "F2S_Width": "0",
    "S2F_Width": "0",
    "LWH2F_Enable": "1",
    "F2SDRAM_PORT_CONFIG": f2sdram_port_config_value(F2SDRAM_PORT_CONFIGURATION),
    "F2SDRAM0_ENABLED": "1",
    "F2SDRAM1_ENABLED": "0",
    "F2SDRAM2_ENABLED": "0",
    "F2SDRAM_READY_LATENCY": "1",
    "F2SDRAM_ADDRESS_WIDTH": "32",
    "F2SINTERRUPT_Enable": "1",
    "EMIF_CONDUIT_Enable": "1",
    "SDMMC_PinMuxing": "IO", "SDMMC_Mode": "8-bit",
    "UART1_PinMuxing": "IO", "UART1_Mode": "No_flow_control",
    "USB0_PinMuxing": "IO", "USB0_Mode": "default",
    "EMAC0_PinMuxing": "IO", "EMAC0_Mode": "RGMII_with_MDIO",
    "I2C1_PinMuxing": "IO", "I2C1_Mode": "default",
    "HPS_IO_Enable": _HPS_IO_ENABLE,
}

# hps_io conduit: (top-level port, conduit signal, direction)
_HPS_IO: list[tuple[str, str, str]] = [
    ("hps_sdio_CMD", "phery_sdmmc_CMD", "inout"), ("hps_sdio_CLK", "phery_sdmmc_CCLK", "output"),
    *((f"hps_sdio_D{i}", f"phery_sdmmc_D{i}", "inout") for i in range(8)),
    ("hps_uart1_TX", "phery_uart1_TX", "output"), ("hps_uart1_RX", "phery_uart1_RX", "input"),
    *((f"hps_usb0_D{i}", f"phery_usb0_DATA{i}", "inout") for i in range(8)),
    ("hps_usb0_CLK", "phery_usb0_CLK", "input"), ("hps_usb0_STP", "phery_usb0_STP", "output"),
    ("hps_usb0_DIR", "phery_usb0_DIR", "input"), ("hps_usb0_NXT", "phery_usb0_NXT", "input"),
    ("hps_emac0_TX_CLK", "phery_emac0_TX_CLK", "output"), ("hps_emac0_TX_CTL", "phery_emac0_TX_CTL", "output"),
    *((f"hps_emac0_TXD{i}", f"phery_emac0_TXD{i}", "output") for i in range(4)),
    ("hps_emac0_RX_CLK", "phery_emac0_RX_CLK", "input"), ("hps_emac0_RX_CTL", "phery_emac0_RX_CTL", "input"),
    *((f"hps_emac0_RXD{i}", f"phery_emac0_RXD{i}", "input") for i in range(4)),
    ("hps_emac0_MDC", "phery_emac0_MDC", "output"), ("hps_emac0_MDIO", "phery_emac0_MDIO", "inout"),
    ("hps_i2c1_SDA", "phery_i2c1_SDA", "inout"), ("hps_i2c1_SCL", "phery_i2c1_SCL", "inout"),
]

# DDR4 conduit of the EMIF ("hps_memory" export): (signal, direction, width)
_DDR4: list[tuple[str, str, int]] = [
    ("mem_act_n", "output", 1), ("mem_bg", "output", 1), ("mem_par", "output", 1), ("mem_alert_n", "input", 1),
    ("mem_a", "output", 17), ("mem_ba", "output", 2), ("mem_ck", "output", 1), ("mem_ck_n", "output", 1),
    ("mem_cke", "output", 1), ("mem_cs_n", "output", 1), ("mem_reset_n", "output", 1), ("mem_odt", "output", 1),
    ("mem_dbi_n", "inout", 4), ("mem_dq", "inout", 32), ("mem_dqs", "inout", 4), ("mem_dqs_n", "inout", 4),
]


class Arria10SoCRecipe(BoardRecipe):
    board = "arria10-soc"
    device = "10AS066N3F40E2SG"
    family = "Arria 10"
    quartus_edition = "Pro"
    project = "dlproc_a10soc"
    top = "dlproc_a10soc_top"
    lw_bridge_base = 0xFF200000
    csr_offset = 0x0
    # Arria 10: f2h_irq0[0..31] are GIC interrupts 51..82, i.e. shared peripheral interrupts 19..50.
    irq_spi_base = 19
    irq_number = 0
    sdram_bytes = 1 << 30
    dma_base = 0x30000000
    dma_size = 0x10000000
    board_clock_hz = 100_000_000

    def check(self, config: Any, ports: ProcessorPorts) -> list[str]:
        notes = []
        width = ports.mem_data_width
        if width > F2SDRAM_MAX_WIDTH:
            port_bytes = F2SDRAM_MAX_WIDTH // 8
            which = "F2SDRAM0 port" if ports.memory_ports == 1 else "F2SDRAM0 and F2SDRAM2 ports"
            masters = "master is" if ports.memory_ports == 1 else "masters are"
            note = (f"Arria 10: the processor's {width}-bit memory {masters} width-adapted onto the "
                    f"{F2SDRAM_MAX_WIDTH}-bit {which}, which {'carries' if ports.memory_ports == 1 else 'carry'} "
                    f"at most {port_bytes} bytes per processor cycle{'' if ports.memory_ports == 1 else ' each'}")
            if config.ddr_bytes_per_cycle > port_bytes:
                note += (f"; DDRBytesPerCycle = {config.ddr_bytes_per_cycle} in the configuration "
                         f"overstates it (use {port_bytes}, or MemoryDataWidth = {F2SDRAM_MAX_WIDTH}, "
                         f"as the arria10soc_int8 preset does)")
            else:
                note += f" (MemoryDataWidth = {F2SDRAM_MAX_WIDTH} gives the same bandwidth without the adapter)"
            notes.append(note)
        return notes

    # ---- pins ---------------------------------------------------------------------------------------
    def pins(self) -> list[Pin]:
        table = Arria10SoCDevKitPlatform.pin_table()
        pins: list[Pin] = []

        def add(resource: str, number: int, port: str) -> None:
            p, n, std = table[(resource, number)]
            pins.append(Pin(port, p, std, source=f"Arria10SoCDevKitPlatform {resource} {number}"))
            if n is not None:
                pins.append(Pin(f"{port}(n)", n, std, source=f"Arria10SoCDevKitPlatform {resource} {number}"))

        add("clk100", 0, "fpga_clk_100")
        add("emif_ref_clk", 0, "emif_ref_clk")
        add("reset_n", 0, "fpga_reset_n")
        for i in range(4):
            add("led", i, f"fpga_led_pio[{i}]")
        for port, location in HPS_PINS:
            ddr = port.startswith("hps_memory_")
            pins.append(Pin(port, location, None if ddr else "1.8 V", source=SOURCE))
        return pins

    # ---- Platform Designer system ------------------------------------------------------------------
    def system_tcl(self, config: Any, ports: ProcessorPorts) -> str:
        f_mhz = float(config.target_frequency_mhz)
        hps = "arria10_hps_0"
        emif = "emif_a10_hps_0"
        dl = f"{COMPONENT_NAME}_0"
        lines = [
            "# Platform Designer (Pro) system of dlproc on the Arria 10 SoC development kit",
            "# (generated by dlproc build). Run:",
            f"#   qsys-script --search-path=ip/dlproc,$ --quartus-project={self.project} --script=soc_system.tcl",
            "package require -exact qsys 16.1",
            "",
            f"create_system {self.system}",
            "set_project_property DEVICE_FAMILY {Arria 10}",
            f"set_project_property DEVICE {self.device}",
            "",
            "add_instance clk_0 clock_source",
            f"set_instance_parameter_value clk_0 clockFrequency {float(self.board_clock_hz):.1f}",
            "set_instance_parameter_value clk_0 clockFrequencyKnown true",
            "set_instance_parameter_value clk_0 resetSynchronousEdges NONE",
            "add_interface clk clock sink",
            "set_interface_property clk EXPORT_OF clk_0.clk_in",
            "add_interface reset reset sink",
            "set_interface_property reset EXPORT_OF clk_0.clk_in_reset",
            "",
            f"# The processor clock: TargetFrequency = {f_mhz:g} MHz from the 100 MHz board clock.",
            "add_instance iopll_0 altera_iopll",
            "set_instance_parameter_value iopll_0 gui_reference_clock_frequency 100.0",
            "set_instance_parameter_value iopll_0 gui_operation_mode direct",
            "set_instance_parameter_value iopll_0 gui_number_of_clocks 1",
            f"set_instance_parameter_value iopll_0 gui_output_clock_frequency0 {f_mhz!r}",
            "set_instance_parameter_value iopll_0 gui_use_locked 0",
            "add_connection clk_0.clk iopll_0.refclk",
            "add_connection clk_0.clk_reset iopll_0.reset",
            "",
            "# Hard processor system: lightweight HPS-to-FPGA bridge, F2SDRAM0, FPGA-to-HPS interrupts,",
            "# SD card, UART1, USB0, EMAC0, I2C1 on the HPS I/O.",
            f"add_instance {hps} altera_arria10_hps",
        ]
        two = ports.memory_ports == 2
        hps_parameters = {**_HPS_PARAMETERS, "F2SDRAM2_ENABLED": "1" if two else "0"}
        for key, value in hps_parameters.items():
            lines.append(f"set_instance_parameter_value {hps} {key} {tcl_quote(value)}")
        lines += [
            "add_interface hps_io conduit end",
            f"set_interface_property hps_io EXPORT_OF {hps}.hps_io",
            "",
            "# HPS SDRAM: DDR4 EMIF for the HPS.",
            f"add_instance {emif} altera_emif_a10_hps",
        ]
        for key, value in EMIF_DDR4_PARAMETERS.items():
            lines.append(f"set_instance_parameter_value {emif} {key} {tcl_quote(value)}")
        lines += [
            f"add_connection {emif}.hps_emif_conduit_end {hps}.emif",
            f"add_connection clk_0.clk_reset {emif}.global_reset_reset_sink",
            "add_interface hps_memory conduit end",
            f"set_interface_property hps_memory EXPORT_OF {emif}.mem_conduit_end",
            "add_interface hps_oct conduit end",
            f"set_interface_property hps_oct EXPORT_OF {emif}.oct_conduit_end",
            "add_interface emif_ref_clk clock sink",
            f"set_interface_property emif_ref_clk EXPORT_OF {emif}.pll_ref_clk_clock_sink",
            "",
            "# The processor (ip/dlproc/dlproc_hw.tcl).",
            f"add_instance {dl} {COMPONENT_NAME}",
            f"add_connection iopll_0.outclk0 {dl}.clock",
            f"add_connection iopll_0.outclk0 {hps}.h2f_lw_axi_clock",
            f"add_connection iopll_0.outclk0 {hps}.f2sdram0_clock",
            *([f"add_connection iopll_0.outclk0 {hps}.f2sdram2_clock"] if two else []),
            f"add_connection clk_0.clk_reset {dl}.reset",
            f"add_connection {hps}.h2f_reset {dl}.reset",
            f"add_connection clk_0.clk_reset {hps}.h2f_lw_axi_reset",
            f"add_connection clk_0.clk_reset {hps}.f2sdram0_reset",
            *([f"add_connection clk_0.clk_reset {hps}.f2sdram2_reset"] if two else []),
            "",
            f"add_connection {hps}.h2f_lw_axi_master {dl}.csr",
            f"set_connection_parameter_value {hps}.h2f_lw_axi_master/{dl}.csr baseAddress 0x{self.csr_offset:08x}",
            f"add_connection {dl}.mem {hps}.f2sdram0_data",
            f"set_connection_parameter_value {dl}.mem/{hps}.f2sdram0_data baseAddress 0x00000000",
        ]
        if two:
            # The write-only master on the second 128-bit port (AXI; Platform Designer adapts the
            # Avalon-MM master and leaves the port's read channels idle).
            lines += [
                f"add_connection {dl}.mem1 {hps}.f2sdram2_data",
                f"set_connection_parameter_value {dl}.mem1/{hps}.f2sdram2_data baseAddress 0x00000000",
            ]
        lines += [
            f"add_connection {hps}.f2h_irq0 {dl}.irq",
            f"set_connection_parameter_value {hps}.f2h_irq0/{dl}.irq irqNumber {self.irq_number}",
            "",
            f"save_system {self.system}.qsys",
            "",
        ]
        return "\n".join(lines)

    # ---- top level ------------------------------------------------------------------------------------
    def top_verilog(self, config: Any) -> str:
        ports = [
            "  input  wire        fpga_clk_100,",
            "  input  wire        fpga_reset_n,",
            "  output wire [3:0]  fpga_led_pio,",
            "  input  wire        emif_ref_clk,",
            "  input  wire        hps_memory_oct_rzqin,",
        ]
        for signal, direction, width in _DDR4:
            rng = f"[{width - 1}:0]" if width > 1 else ""
            ports.append(f"  {direction:<6} wire {rng:<6} hps_memory_{signal},")
        for port, _signal, direction in _HPS_IO:
            ports.append(f"  {direction:<6} wire        {port},")
        conns = [
            "    .clk_clk(fpga_clk_100),",
            "    .reset_reset_n(fpga_reset_n),",
            "    .emif_ref_clk_clk(emif_ref_clk),",
            "    .hps_oct_oct_rzqin(hps_memory_oct_rzqin),",
        ]
        for signal, _d, _w in _DDR4:
            conns.append(f"    .hps_memory_{signal}(hps_memory_{signal}),")
        for port, signal, _d in _HPS_IO:
            conns.append(f"    .hps_io_hps_io_{signal}({port}),")
        blink = heartbeat(["  // fpga_led_pio[0] blinks at 1 Hz from the 100 MHz board clock; the others are off."],
                          "fpga_clk_100", 27, self.board_clock_hz // 2 - 1, "fpga_led_pio", 4)
        return top_module(["// Top level of dlproc on the Arria 10 SoC development kit (generated by dlproc build)."],
                          self.top, self.system, ports, conns, blink)

    def qsf(self, config: Any) -> str:
        lines = [
            "# Quartus Prime Pro settings of dlproc on the Arria 10 SoC development kit (generated by dlproc build).",
            "set_global_assignment -name FAMILY \"Arria 10\"",
            f"set_global_assignment -name DEVICE {self.device}",
            f"set_global_assignment -name TOP_LEVEL_ENTITY {self.top}",
            "set_global_assignment -name PROJECT_OUTPUT_DIRECTORY output_files",
            "set_global_assignment -name ORIGINAL_QUARTUS_VERSION 21.3",
            f"set_global_assignment -name VERILOG_FILE {self.top}.v",
            f"set_global_assignment -name QSYS_FILE {self.system}.qsys",
            f"set_global_assignment -name SDC_FILE {self.project}.sdc",
            "# Split .periph.rbf / .core.rbf (quartus_cpf --hps): U-Boot configures the I/O first.",
            "set_global_assignment -name HPS_EARLY_IO_RELEASE ON",
            "set_global_assignment -name OPTIMIZATION_MODE \"SUPERIOR PERFORMANCE\"",
            "",
            f"# Pins: {SOURCE}.",
            *pin_assignments(self.pins()),
        ]
        lines += [
            "",
            "# The DDR4 pins' I/O standards and termination come from the EMIF IP (EMIF_DDR4_PARAMETERS).",
            "",
        ]
        return "\n".join(lines)

    def sdc(self, config: Any) -> str:
        period = 1000.0 / float(config.target_frequency_mhz)
        return "\n".join([
            "# Timing constraints of dlproc on the Arria 10 SoC development kit (generated by dlproc build).",
            f"# Processor clock: TargetFrequency {float(config.target_frequency_mhz):g} MHz "
            f"(period {period:.3f} ns), the output of iopll_0.",
            f"set dlproc_target_period_ns {period:.3f}",
            "",
            "create_clock -name fpga_clk_100 -period 10.000 [get_ports {fpga_clk_100}]",
            "# Quartus Pro: the IOPLL and the EMIF IP write their own clock constraints (their SDC files",
            "# come with the generated system); derive_clock_uncertainty still applies.",
            "derive_clock_uncertainty",
            "",
            *pll_period_check("iopll_0"),
            "",
            "set_false_path -from [get_ports {fpga_reset_n}]",
            "set_false_path -to [get_ports {fpga_led_pio[*]}]",
            "",
        ])

    def build_script(self, config: Any) -> str:
        p = self.project
        return "\n".join([
            *build_script_preamble(
                "# Quartus Prime Pro flow of dlproc on the Arria 10 SoC development kit (generated by dlproc build).",
                "# Usage: ./build.sh   (Quartus Prime Pro on PATH, or QUARTUS_ROOTDIR set)",
                ["qsys-script", "qsys-generate", "quartus_syn", "quartus_fit", "quartus_asm", "quartus_sta",
                 "quartus_cpf"], "Pro"),
            "echo '== 1/6 Platform Designer: create soc_system.qsys'",
            f'qsys-script --search-path="$SEARCH" --quartus-project={p} --script={self.system}.tcl',
            "echo '== 2/6 Platform Designer: generate the system HDL'",
            f'qsys-generate {self.system}.qsys --synthesis=VERILOG --search-path="$SEARCH" --quartus-project={p} --rev={p}',
            "echo '== 3/6 Synthesis (Quartus Pro: quartus_syn)'",
            f"quartus_syn --read_settings_files=on --write_settings_files=off {p} -c {p}",
            "echo '== 4/6 Fitter'",
            f"quartus_fit --read_settings_files=on --write_settings_files=off {p} -c {p}",
            "echo '== 5/6 Assembler and timing analysis'",
            f"quartus_asm {p} -c {p}",
            f"quartus_sta {p} -c {p}",
            "echo '== 6/6 .rbf: split into .periph.rbf and .core.rbf for the HPS boot flow'",
            f"quartus_cpf -c --hps -o bitstream_compression=on output_files/{p}.sof output_files/{p}.rbf",
            f"echo \"done: output_files/{p}.sof, {p}.periph.rbf and {p}.core.rbf\"",
            "",
        ])
