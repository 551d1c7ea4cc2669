"""Terasic DE10-Nano (Cyclone V SE 5CSEBA6U23I7): the dlproc board recipe.

System (Platform Designer, ``soc_system.tcl``)::

    FPGA_CLK1_50 -> clk_0 -> pll_0 (TargetFrequency) -> dlproc.clock, f2h_sdram0 clock, h2f_lw_axi clock
    KEY[0] (active low) and the HPS's h2f_reset -> dlproc.reset
    hps_0.h2f_lw_axi_master --(base + 0x0)--> dlproc.csr           (CSR on the lightweight bridge)
    dlproc.mem --> hps_0.f2h_sdram0_data (Avalon-MM, MemoryDataWidth bits)   (DMA to the HPS SDRAM)
    dlproc.irq --> hps_0.f2h_irq0 line 0                            (GIC SPI 40)

Sources of the board facts:

* FPGA pins and I/O standards (50 MHz clock, KEY, LEDs): ``amaranth_boards.de10_nano.DE10NanoPlatform``.
* HPS SDRAM: 1 GiB of DDR3 on a 32-bit bus at 400 MHz (two 4-Gbit x16 chips), the controller
  parameters that the DE10-Nano golden reference design uses (Terasic DE10-Nano GHRD
  ``soc_system.qsys``; the same values are in Analog Devices' public de10nano carrier script
  ``projects/common/de10nano/de10nano_system_qsys.tcl``).
* HPS I/O pins (UART0, SD card, Ethernet, USB): the DE10-Nano user manual pin tables (same values
  as the ADI carrier's ``de10nano_system_assign.tcl``). The HPS SDRAM pins are dedicated: their
  locations are fixed, and Platform Designer's ``hps_sdram_p0_pin_assignments.tcl`` sets their
  I/O standards and termination after analysis (build.sh runs it).
"""

from __future__ import annotations

from typing import Any

from dlproc.boards.common.ports import ProcessorPorts
from dlproc.boards.common.recipe import COMPONENT_NAME, BoardRecipe, Pin, tcl_quote
from dlproc.boards.common.quartus import build_script_preamble, heartbeat, pin_assignments, pll_period_check, top_module

__all__ = ["DE10NanoRecipe", "HPS_SDRAM_PARAMETERS", "F2SDRAM_WIDTHS"]

#: The Cyclone V FPGA-to-SDRAM interface is 256 bits in total, built from 64-bit ports; a single
#: Avalon-MM port may be 32, 64, 128 or 256 bits wide (Cyclone V HPS TRM, FPGA-to-HPS SDRAM).
F2SDRAM_WIDTHS = (32, 64, 128, 256)

#: altera_hps parameters of the DE10-Nano's DDR3 (1 GiB, 32-bit, 400 MHz).
HPS_SDRAM_PARAMETERS: dict[str, str] = {
    "HPS_PROTOCOL": "DDR3",
    "MEM_CLK_FREQ": "400.0",
    "REF_CLK_FREQ": "25.0",
    "MEM_VOLTAGE": "1.5V DDR3",
    "MEM_CLK_FREQ_MAX": "800.0",
    "MEM_DQ_WIDTH": "32",
    "MEM_ROW_ADDR_WIDTH": "15",
    "MEM_COL_ADDR_WIDTH": "10",
    "MEM_BANKADDR_WIDTH": "3",
    "MEM_TCL": "7",
    "MEM_WTCL": "7",
    "MEM_DRV_STR": "RZQ/6",
    "MEM_RTT_NOM": "RZQ/6",
    "MEM_RTT_WR": "Dynamic ODT off",
    "TIMING_TIS": "175",
    "TIMING_TIH": "250",
    "TIMING_TDS": "50",
    "TIMING_TDH": "125",
    "TIMING_TDQSQ": "120",
    "TIMING_TQH": "0.38",
    "TIMING_TDQSCK": "400",
    "TIMING_TDQSS": "0.25",
    "TIMING_TQSH": "0.38",
    "TIMING_TDSH": "0.2",
    "TIMING_TDSS": "0.2",
    "MEM_TINIT_US": "500",
    "MEM_TMRD_CK": "4",
    "MEM_TRAS_NS": "35.0",
    "MEM_TRCD_NS": "13.75",
    "MEM_TRP_NS": "13.75",
    "MEM_TREFI_US": "7.8",
    "MEM_TRFC_NS": "300.0",
    "MEM_TWR_NS": "15.0",
    "MEM_TWTR": "4",
    "MEM_TFAW_NS": "37.5",
    "MEM_TRRD_NS": "7.5",
    "MEM_TRTP_NS": "7.5",
    "TIMING_BOARD_MAX_CK_DELAY": "0.6",
    "TIMING_BOARD_MAX_DQS_DELAY": "0.6",
    "TIMING_BOARD_SKEW_CKDQS_DIMM_MIN": "-0.01",
    "TIMING_BOARD_SKEW_CKDQS_DIMM_MAX": "0.01",
    "TIMING_BOARD_SKEW_WITHIN_DQS": "0.02",
    "TIMING_BOARD_SKEW_BETWEEN_DQS": "0.02",
    "TIMING_BOARD_DQ_TO_DQS_SKEW": "0.0",
    "TIMING_BOARD_AC_SKEW": "0.02",
    "TIMING_BOARD_AC_TO_CK_SKEW": "0.0",
}

#: HPS peripherals routed to their dedicated HPS I/O (what Linux needs to boot and be reached).
HPS_PERIPHERALS: dict[str, str] = {
    "EMAC1_PinMuxing": "HPS I/O Set 0", "EMAC1_Mode": "RGMII",
    "SDIO_PinMuxing": "HPS I/O Set 0", "SDIO_Mode": "4-bit Data",
    "USB1_PinMuxing": "HPS I/O Set 0", "USB1_Mode": "SDR",
    "UART0_PinMuxing": "HPS I/O Set 0", "UART0_Mode": "No Flow Control",
    "EMAC0_PinMuxing": "Unused", "EMAC0_Mode": "N/A",
    "USB0_PinMuxing": "Unused", "USB0_Mode": "N/A",
    "UART1_PinMuxing": "Unused", "UART1_Mode": "N/A",
    "SPIM0_PinMuxing": "Unused", "SPIM0_Mode": "N/A",
    "SPIM1_PinMuxing": "Unused", "SPIM1_Mode": "N/A",
}

# Top-level port -> soc_system port of the hps_io conduit, with pin and I/O standard.
_HPS_IO: list[tuple[str, str, str, str]] = [
    # (top-level port, conduit signal, pin, io standard)
    ("HPS_ENET_GTX_CLK", "emac1_inst_TX_CLK", "J15", "3.3-V LVTTL"),
    ("HPS_ENET_TX_DATA[0]", "emac1_inst_TXD0", "A16", "3.3-V LVTTL"),
    ("HPS_ENET_TX_DATA[1]", "emac1_inst_TXD1", "J14", "3.3-V LVTTL"),
    ("HPS_ENET_TX_DATA[2]", "emac1_inst_TXD2", "A15", "3.3-V LVTTL"),
    ("HPS_ENET_TX_DATA[3]", "emac1_inst_TXD3", "D17", "3.3-V LVTTL"),
    ("HPS_ENET_RX_DATA[0]", "emac1_inst_RXD0", "A14", "3.3-V LVTTL"),
    ("HPS_ENET_RX_DATA[1]", "emac1_inst_RXD1", "A11", "3.3-V LVTTL"),
    ("HPS_ENET_RX_DATA[2]", "emac1_inst_RXD2", "C15", "3.3-V LVTTL"),
    ("HPS_ENET_RX_DATA[3]", "emac1_inst_RXD3", "A9", "3.3-V LVTTL"),
    ("HPS_ENET_MDIO", "emac1_inst_MDIO", "E16", "3.3-V LVTTL"),
    ("HPS_ENET_MDC", "emac1_inst_MDC", "A13", "3.3-V LVTTL"),
    ("HPS_ENET_RX_DV", "emac1_inst_RX_CTL", "J13", "3.3-V LVTTL"),
    ("HPS_ENET_TX_EN", "emac1_inst_TX_CTL", "A12", "3.3-V LVTTL"),
    ("HPS_ENET_RX_CLK", "emac1_inst_RX_CLK", "J12", "3.3-V LVTTL"),
    ("HPS_SD_CMD", "sdio_inst_CMD", "D14", "3.3-V LVCMOS"),
    ("HPS_SD_DATA[0]", "sdio_inst_D0", "C13", "3.3-V LVCMOS"),
    ("HPS_SD_DATA[1]", "sdio_inst_D1", "B6", "3.3-V LVCMOS"),
    ("HPS_SD_DATA[2]", "sdio_inst_D2", "B11", "3.3-V LVCMOS"),
    ("HPS_SD_DATA[3]", "sdio_inst_D3", "B9", "3.3-V LVCMOS"),
    ("HPS_SD_CLK", "sdio_inst_CLK", "B8", "3.3-V LVCMOS"),
    ("HPS_USB_DATA[0]", "usb1_inst_D0", "C10", "3.3-V LVTTL"),
    ("HPS_USB_DATA[1]", "usb1_inst_D1", "F5", "3.3-V LVTTL"),
    ("HPS_USB_DATA[2]", "usb1_inst_D2", "C9", "3.3-V LVTTL"),
    ("HPS_USB_DATA[3]", "usb1_inst_D3", "C4", "3.3-V LVTTL"),
    ("HPS_USB_DATA[4]", "usb1_inst_D4", "C8", "3.3-V LVTTL"),
    ("HPS_USB_DATA[5]", "usb1_inst_D5", "D4", "3.3-V LVTTL"),
    ("HPS_USB_DATA[6]", "usb1_inst_D6", "C7", "3.3-V LVTTL"),
    ("HPS_USB_DATA[7]", "usb1_inst_D7", "F4", "3.3-V LVTTL"),
    ("HPS_USB_CLKOUT", "usb1_inst_CLK", "G4", "3.3-V LVTTL"),
    ("HPS_USB_STP", "usb1_inst_STP", "C5", "3.3-V LVTTL"),
    ("HPS_USB_DIR", "usb1_inst_DIR", "E5", "3.3-V LVTTL"),
    ("HPS_USB_NXT", "usb1_inst_NXT", "D5", "3.3-V LVTTL"),
    ("HPS_UART_RX", "uart0_inst_RX", "A22", "3.3-V LVTTL"),
    ("HPS_UART_TX", "uart0_inst_TX", "B21", "3.3-V LVTTL"),
]

# HPS DDR3 conduit ("memory" interface of hps_0): top-level port, conduit signal, direction, width.
_HPS_DDR3: list[tuple[str, str, str, int]] = [
    ("HPS_DDR3_ADDR", "mem_a", "output", 15),
    ("HPS_DDR3_BA", "mem_ba", "output", 3),
    ("HPS_DDR3_CK_P", "mem_ck", "output", 1),
    ("HPS_DDR3_CK_N", "mem_ck_n", "output", 1),
    ("HPS_DDR3_CKE", "mem_cke", "output", 1),
    ("HPS_DDR3_CS_N", "mem_cs_n", "output", 1),
    ("HPS_DDR3_RAS_N", "mem_ras_n", "output", 1),
    ("HPS_DDR3_CAS_N", "mem_cas_n", "output", 1),
    ("HPS_DDR3_WE_N", "mem_we_n", "output", 1),
    ("HPS_DDR3_RESET_N", "mem_reset_n", "output", 1),
    ("HPS_DDR3_DQ", "mem_dq", "inout", 32),
    ("HPS_DDR3_DQS_P", "mem_dqs", "inout", 4),
    ("HPS_DDR3_DQS_N", "mem_dqs_n", "inout", 4),
    ("HPS_DDR3_ODT", "mem_odt", "output", 1),
    ("HPS_DDR3_DM", "mem_dm", "output", 4),
    ("HPS_DDR3_RZQ", "oct_rzqin", "input", 1),
]

#: Direction of each hps_io conduit signal, seen from the FPGA top level.
_HPS_IO_INPUTS = {"emac1_inst_RXD0", "emac1_inst_RXD1", "emac1_inst_RXD2", "emac1_inst_RXD3",
                  "emac1_inst_RX_CTL", "emac1_inst_RX_CLK", "usb1_inst_CLK", "usb1_inst_DIR",
                  "usb1_inst_NXT", "uart0_inst_RX"}
_HPS_IO_INOUTS = {"emac1_inst_MDIO", "sdio_inst_CMD", "sdio_inst_D0", "sdio_inst_D1", "sdio_inst_D2",
                  "sdio_inst_D3", *(f"usb1_inst_D{i}" for i in range(8))}


def _hps_io_direction(signal: str) -> str:
    if signal in _HPS_IO_INPUTS:
        return "input"
    if signal in _HPS_IO_INOUTS:
        return "inout"
    return "output"


def _fpga_pins() -> dict[str, Pin]:
    """The FPGA pins the wrapper uses, taken from amaranth-boards' DE10-Nano platform."""
    from amaranth_boards.de10_nano import DE10NanoPlatform

    platform = DE10NanoPlatform()
    src = "amaranth_boards.de10_nano.DE10NanoPlatform"

    def pin(name: str, number: int, port: str) -> Pin:
        resource = platform.lookup(name, number)
        (ios,) = resource.ios
        (location,) = ios.names
        return Pin(port, location, resource.attrs.get("io_standard"), source=f"{src} {name} {number}")

    pins = {"clk": pin("clk50", 0, "FPGA_CLK1_50"), "reset": pin("button", 0, "KEY[0]"),
            "key1": pin("button", 1, "KEY[1]")}
    for i in range(8):
        pins[f"led{i}"] = pin("led", i, f"LED[{i}]")
    return pins


class DE10NanoRecipe(BoardRecipe):
    board = "de10-nano"
    device = "5CSEBA6U23I7"
    family = "Cyclone V"
    quartus_edition = "Standard"
    project = "dlproc_de10nano"
    top = "dlproc_de10nano_top"
    lw_bridge_base = 0xFF200000
    csr_offset = 0x0
    # Cyclone V: f2h_irq0[0..31] are GIC interrupts 72..103, i.e. shared peripheral interrupts 40..71.
    irq_spi_base = 40
    irq_number = 0
    # 1 GiB at 0x0000_0000; the top 256 MiB are the DMA window (MATLAB requires >= 32 MiB).
    sdram_bytes = 1 << 30
    dma_base = 0x30000000
    dma_size = 0x10000000
    board_clock_hz = 50_000_000

    def check(self, config: Any, ports: ProcessorPorts) -> list[str]:
        from dlproc.errors import ConfigError

        if ports.memory_ports != 1:
            # The Cyclone V HPS could take a read-only and a write-only 128-bit Avalon-MM port
            # (two read and two write data ports of its FPGA-to-SDRAM interface), but the
            # DE10-Nano's DDR3 (32 bits at 400 MHz, 3.2 GB/s peak) cannot feed two ports of
            # DDRBytesPerCycle each: the second port would buy no real bandwidth, only a DDR
            # model that overstates it. So the recipe connects exactly one master.
            raise ConfigError(
                f"top.MemoryPorts = {ports.memory_ports} is not supported on the DE10-Nano: its recipe connects one "
                "memory master to one FPGA-to-SDRAM port (the board's 32-bit DDR3 at 400 MHz, 3.2 GB/s peak, "
                "cannot serve two ports of 16 bytes per cycle at 150 MHz); use MemoryPorts = 1 "
                "(the de10nano_int8 preset)"
            )
        width = ports.mem_data_width
        if width not in F2SDRAM_WIDTHS:
            raise ConfigError(
                f"top.MemoryDataWidth = {width} cannot be connected to the DE10-Nano's FPGA-to-SDRAM "
                f"port: a Cyclone V Avalon-MM F2SDRAM port is {', '.join(map(str, F2SDRAM_WIDTHS))} bits wide"
            )
        notes = []
        peak = width // 8
        if config.ddr_bytes_per_cycle > peak:  # pragma: no cover - the config forbids it
            notes.append(f"DDRBytesPerCycle {config.ddr_bytes_per_cycle} exceeds the port's {peak} bytes/cycle")
        return notes

    # ---- Platform Designer system ------------------------------------------------------------
    def system_tcl(self, config: Any, ports: ProcessorPorts) -> str:
        f_mhz = float(config.target_frequency_mhz)
        hps = "hps_0"
        lines = [
            "# Platform Designer system of dlproc on the DE10-Nano (generated by dlproc build).",
            "# Run: qsys-script --search-path=ip/dlproc,$ --script=soc_system.tcl",
            "package require -exact qsys 16.1",
            "",
            f"create_system {self.system}",
            "set_project_property DEVICE_FAMILY {Cyclone V}",
            f"set_project_property DEVICE {self.device}",
            "",
            "# Board clock (FPGA_CLK1_50) and the active-low reset key.",
            "add_instance clk_0 clock_source",
            f"set_instance_parameter_value clk_0 clockFrequency {float(self.board_clock_hz):.1f}",
            "set_instance_parameter_value clk_0 clockFrequencyKnown true",
            "set_instance_parameter_value clk_0 resetSynchronousEdges NONE",
            "add_interface clk clock sink",
            "set_interface_property clk EXPORT_OF clk_0.clk_in",
            "add_interface reset reset sink",
            "set_interface_property reset EXPORT_OF clk_0.clk_in_reset",
            "",
            f"# The processor clock: TargetFrequency = {f_mhz:g} MHz from the 50 MHz board clock.",
            "add_instance pll_0 altera_pll",
            "set_instance_parameter_value pll_0 gui_reference_clock_frequency 50.0",
            "set_instance_parameter_value pll_0 gui_operation_mode direct",
            "set_instance_parameter_value pll_0 gui_number_of_clocks 1",
            f"set_instance_parameter_value pll_0 gui_output_clock_frequency0 {f_mhz!r}",
            "set_instance_parameter_value pll_0 gui_phase_shift0 0",
            "set_instance_parameter_value pll_0 gui_duty_cycle0 50",
            "set_instance_parameter_value pll_0 gui_use_locked false",
            "add_connection clk_0.clk pll_0.refclk",
            "add_connection clk_0.clk_reset pll_0.reset",
            "",
            "# Hard processor system: DDR3 controller, lightweight HPS-to-FPGA bridge, one",
            f"# FPGA-to-SDRAM Avalon-MM port of {ports.mem_data_width} bits, FPGA-to-HPS interrupts.",
            f"add_instance {hps} altera_hps",
            f"set_instance_parameter_value {hps} MPU_EVENTS_Enable false",
            f"set_instance_parameter_value {hps} S2F_Width 0",
            f"set_instance_parameter_value {hps} F2S_Width 0",
            f"set_instance_parameter_value {hps} LWH2F_Enable true",
            f"set_instance_parameter_value {hps} F2SDRAM_Type {tcl_quote('Avalon-MM Bidirectional')}",
            f"set_instance_parameter_value {hps} F2SDRAM_Width {ports.mem_data_width}",
            f"set_instance_parameter_value {hps} F2SINTERRUPT_Enable true",
        ]
        for key, value in HPS_PERIPHERALS.items():
            lines.append(f"set_instance_parameter_value {hps} {key} {tcl_quote(value)}")
        for key, value in HPS_SDRAM_PARAMETERS.items():
            lines.append(f"set_instance_parameter_value {hps} {key} {tcl_quote(value)}")
        lines += [
            "add_interface memory conduit end",
            f"set_interface_property memory EXPORT_OF {hps}.memory",
            "add_interface hps_io conduit end",
            f"set_interface_property hps_io EXPORT_OF {hps}.hps_io",
            "",
            "# The processor (ip/dlproc/dlproc_hw.tcl).",
            f"add_instance {COMPONENT_NAME}_0 {COMPONENT_NAME}",
            f"add_connection pll_0.outclk0 {COMPONENT_NAME}_0.clock",
            f"add_connection pll_0.outclk0 {hps}.h2f_lw_axi_clock",
            f"add_connection pll_0.outclk0 {hps}.f2h_sdram0_clock",
            f"add_connection clk_0.clk_reset {COMPONENT_NAME}_0.reset",
            f"add_connection {hps}.h2f_reset {COMPONENT_NAME}_0.reset",
            "",
            "# CSR slave on the lightweight bridge.",
            f"add_connection {hps}.h2f_lw_axi_master {COMPONENT_NAME}_0.csr",
            f"set_connection_parameter_value {hps}.h2f_lw_axi_master/{COMPONENT_NAME}_0.csr baseAddress "
            f"0x{self.csr_offset:08x}",
            "",
            "# DMA master on the FPGA-to-SDRAM port (SDRAM physical addresses from 0).",
            f"add_connection {COMPONENT_NAME}_0.mem {hps}.f2h_sdram0_data",
            f"set_connection_parameter_value {COMPONENT_NAME}_0.mem/{hps}.f2h_sdram0_data baseAddress 0x00000000",
            "",
            "# Interrupt to the GIC.",
            f"add_connection {hps}.f2h_irq0 {COMPONENT_NAME}_0.irq",
            f"set_connection_parameter_value {hps}.f2h_irq0/{COMPONENT_NAME}_0.irq irqNumber {self.irq_number}",
            "",
            f"save_system {self.system}.qsys",
            "",
        ]
        return "\n".join(lines)

    # ---- top level, pins, constraints -------------------------------------------------------------
    def hps_pins(self) -> list[Pin]:
        src = "DE10-Nano user manual HPS pin table"
        return [Pin(port, loc, std, source=src) for port, _sig, loc, std in _HPS_IO]

    def pins(self) -> list[Pin]:
        return list(_fpga_pins().values()) + self.hps_pins()

    def top_verilog(self, config: Any) -> str:
        fpga = _fpga_pins()
        ports: list[str] = [
            f"  input  wire        {fpga['clk'].port},",
            "  input  wire [1:0]  KEY,",
            "  output wire [7:0]  LED,",
        ]
        for port, _sig, direction, width in _HPS_DDR3:
            rng = f"[{width - 1}:0]" if width > 1 else "     "
            ports.append(f"  {direction:<6} wire {rng:<6} {port},")
        seen: dict[str, tuple[str, int]] = {}
        for port, signal, _loc, _std in _HPS_IO:
            base = port.split("[")[0]
            index = int(port.split("[")[1][:-1]) if "[" in port else -1
            direction = _hps_io_direction(signal)
            prev = seen.get(base)
            seen[base] = (direction, max(index, prev[1] if prev else -1))
        for base, (direction, top_index) in seen.items():
            rng = f"[{top_index}:0]" if top_index >= 0 else "     "
            ports.append(f"  {direction:<6} wire {rng:<6} {base},")
        conns = [f"    .clk_clk({fpga['clk'].port}),", "    .reset_reset_n(KEY[0]),"]
        for port, signal, _dir, _w in _HPS_DDR3:
            conns.append(f"    .memory_{signal}({port}),")
        for port, signal, _loc, _std in _HPS_IO:
            conns.append(f"    .hps_io_hps_io_{signal}({port}),")
        half = max(1, round(self.board_clock_hz / 2))
        blink = heartbeat(["  // LED[0] blinks at 1 Hz from the board clock (configuration done, clock running);",
                           "  // the other LEDs are off."], fpga["clk"].port, 26, half - 1, "LED", 8)
        return top_module(["// Top level of dlproc on the DE10-Nano (generated by dlproc build; do not edit).",
                           "// soc_system is the Platform Designer system of soc_system.tcl: HPS, PLL and the processor."],
                          self.top, self.system, ports, conns, blink)

    def qsf(self, config: Any) -> str:
        lines = [
            "# Quartus Prime Standard settings of dlproc on the DE10-Nano (generated by dlproc build).",
            "set_global_assignment -name FAMILY \"Cyclone V\"",
            f"set_global_assignment -name DEVICE {self.device}",
            f"set_global_assignment -name TOP_LEVEL_ENTITY {self.top}",
            "set_global_assignment -name PROJECT_OUTPUT_DIRECTORY output_files",
            "set_global_assignment -name ORIGINAL_QUARTUS_VERSION 21.1",
            "set_global_assignment -name NUM_PARALLEL_PROCESSORS ALL",
            f"set_global_assignment -name VERILOG_FILE {self.top}.v",
            f"set_global_assignment -name QIP_FILE {self.system}/synthesis/{self.system}.qip",
            f"set_global_assignment -name SDC_FILE {self.project}.sdc",
            "set_global_assignment -name OPTIMIZATION_MODE \"HIGH PERFORMANCE EFFORT\"",
            "set_global_assignment -name STRATIX_DEVICE_IO_STANDARD \"3.3-V LVTTL\"",
            "",
            "# FPGA pins (amaranth_boards.de10_nano.DE10NanoPlatform) and HPS I/O (DE10-Nano user manual).",
            *pin_assignments(self.pins()),
        ]
        lines += [
            "",
            "# The HPS DDR3 pins are dedicated; build.sh runs Platform Designer's",
            f"# {self.system}/synthesis/submodules/hps_sdram_p0_pin_assignments.tcl after analysis,",
            "# which assigns their I/O standards, termination and drive strength.",
            "",
        ]
        return "\n".join(lines)

    def sdc(self, config: Any) -> str:
        period_in = 1e9 / self.board_clock_hz
        period = 1000.0 / float(config.target_frequency_mhz)
        clk = _fpga_pins()["clk"].port
        return "\n".join([
            "# Timing constraints of dlproc on the DE10-Nano (generated by dlproc build).",
            f"# Processor clock: TargetFrequency {float(config.target_frequency_mhz):g} MHz "
            f"(period {period:.3f} ns), the output of pll_0.",
            f"set dlproc_target_period_ns {period:.3f}",
            "",
            f"create_clock -name {clk} -period {period_in:.3f} [get_ports {{{clk}}}]",
            "# pll_0's output clock gets its period from the PLL settings (TargetFrequency).",
            "derive_pll_clocks -create_base_clocks",
            "derive_clock_uncertainty",
            "",
            "# Check that the PLL really produces the processor clock the configuration asks for.",
            *pll_period_check("pll_0"),
            "",
            "# Asynchronous board I/O: the reset key is synchronized by the reset controller, the LEDs",
            "# are human-visible.",
            "set_false_path -from [get_ports {KEY[*]}]",
            "set_false_path -to [get_ports {LED[*]}]",
            "",
        ])

    def build_script(self, config: Any) -> str:
        p = self.project
        return "\n".join([
            *build_script_preamble(
                "# Quartus Prime Standard flow of dlproc on the DE10-Nano (generated by dlproc build).",
                "# Usage: ./build.sh   (Quartus on PATH, or QUARTUS_ROOTDIR set; tested flow: Quartus 21.1 Standard)",
                ["qsys-script", "qsys-generate", "quartus_map", "quartus_sta", "quartus_fit", "quartus_asm",
                 "quartus_cpf"], "Standard"),
            "echo '== 1/7 Platform Designer: create soc_system.qsys'",
            f'qsys-script --search-path="$SEARCH" --script={self.system}.tcl',
            "echo '== 2/7 Platform Designer: generate the system HDL'",
            f'qsys-generate {self.system}.qsys --synthesis=VERILOG --search-path="$SEARCH" --output-directory={self.system}',
            "echo '== 3/7 Analysis & Synthesis'",
            f"quartus_map --read_settings_files=on --write_settings_files=off {p} -c {p}",
            "echo '== 4/7 HPS SDRAM pin assignments'",
            f"quartus_sta -t {self.system}/synthesis/submodules/hps_sdram_p0_pin_assignments.tcl {p}",
            "echo '== 5/7 Fitter'",
            f"quartus_map --read_settings_files=on --write_settings_files=off {p} -c {p}",
            f"quartus_fit --read_settings_files=on --write_settings_files=off {p} -c {p}",
            "echo '== 6/7 Assembler and timing analysis'",
            f"quartus_asm {p} -c {p}",
            f"quartus_sta {p} -c {p}",
            "echo '== 7/7 .rbf for the FPGA manager (compressed, passive parallel x16)'",
            f"quartus_cpf -c -o bitstream_compression=on output_files/{p}.sof output_files/{p}.rbf",
            f"echo \"done: output_files/{p}.sof and output_files/{p}.rbf\"",
            "",
        ])
