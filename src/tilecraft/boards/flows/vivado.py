"""A PYNQ overlay from a block design: the Vivado project and block-design Tcl, a one-line build
script, and, where Vivado is on the PATH, the build itself.

`write_project(design, folder)` writes `tilecraft_top.v`, `registers.json`, `bd.tcl` (the
Zynq PS with the accelerator's `m_axi` on an HP port, `s_axi_control` on a GP port, `interrupt`
through an AXI interrupt controller to the PS, the fabric clock at the config's frequency and
its reset), `project.tcl` (a part-only project, the board part when its files are installed,
implementation, a timing gate and the outputs copied to `overlay/`) and `build.sh`. The overlay
folder gets `<name>.bit` + `<name>.hwh` (what PYNQ loads) and `<name>.toml` (the config, which
the runtime checks against the bitstream's ID registers).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tilecraft.boards.block_design import INSTANCE, INTC, MODULE, REGISTER_RANGE, BlockDesign
from tilecraft.boards.flows.overlay_package import package_name, write_package
from tilecraft.boards.flows.verilog import export_verilog
from tilecraft.errors import DeviceError
from tilecraft.files import write_atomic

# PS settings Vivado derives itself (read-only in the IP): the .hwh carries them, the Tcl not
DERIVED = re.compile(r"DIVISOR\d|ACT_FREQMHZ|PCW_ACT_")


def bd_tcl(d: BlockDesign) -> str:
    ip = d.board.ps.ip
    ps = d.ps_instance
    settings = " ".join(
        f"CONFIG.{k} {{{v}}}" for k, v in d.ps_settings().items() if not DERIVED.search(k)
    )
    rule = "zynq_ultra_ps_e" if d.zynqmp else "processing_system7"
    external = "" if d.zynqmp else 'make_external "FIXED_IO, DDR" Master "Disable" Slave "Disable" '
    clock_actual = (
        "PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ"
        if d.zynqmp
        else "PCW_ACT_FPGA0_PERIPHERAL_FREQMHZ"
    )
    base, intc_base = f"0x{d.register_base:08X}", f"0x{d.intc_base:08X}"
    window = f"{REGISTER_RANGE // 1024}K"
    return f"""\
# The block design of the {d.name} overlay: {d.config.tag} on the {d.board.description}.
# Written by tilecraft (boards/flows/vivado.py) from the same description as the runtime's tests.
create_bd_design {d.name}
set ps [create_bd_cell -type ip -vlnv [lindex [get_ipdefs "xilinx.com:ip:{ip}:*"] end] {ps}]
set board [get_property board_part [current_project]]
set preset [expr {{$board ne "" && [llength [get_board_parts -quiet $board]] > 0}}]
apply_bd_automation -rule xilinx.com:bd_rule:{rule} \\
    -config [list {external}apply_board_preset $preset] $ps
set_property -dict [list {settings}] $ps

# the accelerator (a module reference to the Verilog top) and its reset
create_bd_cell -type module -reference {MODULE} {INSTANCE}
create_bd_cell -type ip -vlnv [lindex [get_ipdefs "xilinx.com:ip:proc_sys_reset:*"] end] rst_0
set clk /{ps}/{d.clock_pin}
connect_bd_net [get_bd_pins $clk] [get_bd_pins {INSTANCE}/aclk] [get_bd_pins rst_0/slowest_sync_clk]
connect_bd_net [get_bd_pins {ps}/{d.reset_pin}] [get_bd_pins rst_0/ext_reset_in]
connect_bd_net [get_bd_pins rst_0/peripheral_aresetn] [get_bd_pins {INSTANCE}/aresetn]

# the interrupt through an AXI interrupt controller, as PYNQ's base overlays wire theirs: PYNQ
# lists (and pynq.Interrupt waits on) only pins behind one. C_IRQ_CONNECTION 1: a single irq
# wire to the PS rather than a MicroBlaze interrupt bus.
set intc [create_bd_cell -type ip -vlnv [lindex [get_ipdefs "xilinx.com:ip:axi_intc:*"] end] {INTC}]
set_property -dict [list CONFIG.C_IRQ_CONNECTION {{1}}] $intc

# the accelerator's and the controller's registers behind the PS master (one interconnect: the
# first automation makes it, the second joins it), the accelerator's master into DDR, and the
# interrupt from the accelerator through the controller to the PS
set clocks [list Clk_master $clk Clk_slave $clk Clk_xbar $clk]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /{ps}/{d.control_port} \\
    Slave /{INSTANCE}/s_axi_control {{*}}$clocks intc_ip {{New AXI Interconnect}}] \\
    [get_bd_intf_pins {INSTANCE}/s_axi_control]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /{ps}/{d.control_port} \\
    Slave /{INTC}/s_axi {{*}}$clocks intc_ip Auto] \\
    [get_bd_intf_pins {INTC}/s_axi]
apply_bd_automation -rule xilinx.com:bd_rule:axi4 -config [list Master /{INSTANCE}/m_axi \\
    Slave /{ps}/{d.data_port} {{*}}$clocks intc_ip {{New AXI Interconnect}}] \\
    [get_bd_intf_pins {ps}/{d.data_port}]
connect_bd_net [get_bd_pins {INSTANCE}/interrupt] [get_bd_pins {INTC}/intr]
connect_bd_net [get_bd_pins {INTC}/irq] [get_bd_pins {ps}/{d.interrupt_pin}]

assign_bd_address -offset {base} -range {window} \\
    -target_address_space [get_bd_addr_spaces {ps}/Data] \\
    [get_bd_addr_segs {INSTANCE}/s_axi_control/reg0] -force
assign_bd_address -offset {intc_base} -range {window} \\
    -target_address_space [get_bd_addr_spaces {ps}/Data] \\
    [get_bd_addr_segs {INTC}/S_AXI/Reg] -force
assign_bd_address
validate_bd_design
save_bd_design

set actual [get_property CONFIG.{clock_actual} $ps]
if {{abs($actual - {d.clock.mhz:.6f}) > {d.clock.mhz * 0.01:.4f}}} {{
    error "the fabric clock is $actual MHz, not the config's {d.config.clock_mhz:g} MHz"
}}
"""


def project_tcl(d: BlockDesign, allow_timing_failure: bool = False) -> str:
    name = d.name
    return f"""\
# The {name} overlay for the {d.board.description}: run with build.sh (Vivado {d.board.pynq.vivado},
# the release PYNQ {d.board.pynq.release} overlays are built with).
set here [file dirname [file normalize [info script]]]
# 1: hand over a .bit whose implemented timing misses the clock (tilecraft build
# --allow-timing-failure); 0: stop with an error instead
set allow_timing_failure {int(allow_timing_failure)}
create_project -force {name} $here/vivado -part {d.board.part}
if {{[llength [get_board_parts -quiet {d.board.board_part}]]}} {{
    set_property board_part {d.board.board_part} [current_project]
}}
add_files $here/{MODULE}.v
update_compile_order -fileset sources_1
source $here/bd.tcl
generate_target all [get_files {name}.bd]
make_wrapper -files [get_files {name}.bd] -top -import
set_property top {name}_wrapper [current_fileset]
update_compile_order -fileset sources_1

launch_runs impl_1 -to_step write_bitstream -jobs 2
wait_on_run impl_1
if {{[get_property PROGRESS [get_runs impl_1]] != "100%"}} {{
    error "implementation did not finish: see $here/vivado/{name}.runs/impl_1/runme.log"
}}
open_run impl_1
file mkdir $here/overlay
report_timing_summary -file $here/overlay/{name}.timing.rpt
report_utilization -file $here/overlay/{name}.utilization.rpt
{timing_gate(d)}
file copy -force [lindex [glob $here/vivado/{name}.runs/impl_1/*.bit] 0] $here/overlay/{name}.bit
set hwh [glob -nocomplain \\
    $here/vivado/{name}.gen/sources_1/bd/{name}/hw_handoff/{name}.hwh \\
    $here/vivado/{name}.srcs/sources_1/bd/{name}/hw_handoff/{name}.hwh]
file copy -force [lindex $hwh 0] $here/overlay/{name}.hwh
puts "tilecraft: overlay/{name}.bit and overlay/{name}.hwh written (WNS $wns ns)"
if {{[file isdirectory $here/package/{package_name(d)}]}} {{
    foreach ext {{bit hwh toml}} {{
        file copy -force $here/overlay/{name}.$ext $here/package/{package_name(d)}/
    }}
}}
"""


def timing_gate(d: BlockDesign) -> str:
    """Tcl that stops the build before any .bit is copied out when the implemented design
    misses the fabric clock, setup (WNS) or hold (WHS), unless `allow_timing_failure` is 1."""
    mhz, name = f"{d.clock.mhz:g}", d.name
    return f"""\
set wns [get_property SLACK [get_timing_paths -max_paths 1 -nworst 1 -setup]]
set whs [get_property SLACK [get_timing_paths -max_paths 1 -nworst 1 -hold]]
if {{$wns eq "" || $whs eq ""}} {{
    error "no timing paths after implementation: cannot tell whether {mhz} MHz is met"
}}
if {{$wns < 0 || $whs < 0}} {{
    set missed "timing is not met at {mhz} MHz (WNS $wns ns, WHS $whs ns)"
    append missed ": see overlay/{name}.timing.rpt"
    if {{!$allow_timing_failure}} {{
        append missed "; no .bit written (a lower clock: tilecraft build --clock-mhz MHZ;"
        error "$missed to take it anyway: --allow-timing-failure)"
    }}
    puts "tilecraft: WARNING: $missed; the .bit is written anyway (--allow-timing-failure)"
}}"""


BUILD_COMMAND = (
    "vivado -mode batch -notrace -source project.tcl -log vivado.log -journal vivado.jou"
)


def write_project(
    design: BlockDesign, folder: str | Path, example=None, allow_timing_failure: bool = False
) -> list[Path]:
    """Everything Vivado needs, in `folder`; the overlay folder gets the config already. With
    `example` (a conv program), also the overlay package (`package/`), which the build fills.
    The build hands over no .bit whose timing misses the clock, unless `allow_timing_failure`."""
    folder = Path(folder)
    if example is not None:
        write_package(design, folder / "package", example)
    written = export_verilog(design.config, folder)
    written += [
        write_atomic(folder / "bd.tcl", bd_tcl(design)),
        write_atomic(folder / "project.tcl", project_tcl(design, allow_timing_failure)),
        write_atomic(folder / "build.sh", f'#!/bin/sh\ncd "$(dirname "$0")" && {BUILD_COMMAND}\n'),
    ]
    (folder / "build.sh").chmod(0o755)
    (folder / "overlay").mkdir(exist_ok=True)
    written.append(
        write_atomic(folder / "overlay" / f"{design.name}.toml", design.config.to_toml())
    )
    return written


def vivado_version(vivado: str) -> str:
    """`2024.1` from `vivado -version`."""
    try:
        done = subprocess.run([vivado, "-version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DeviceError(f"cannot run {vivado} -version: {exc}") from None
    found = re.search(r"[Vv]ivado v?(\d{4}\.\d)", done.stdout)
    if not found:
        raise DeviceError(f"{vivado} -version printed no version: {done.stdout[:200]!r}")
    return found.group(1)


def build(
    design: BlockDesign,
    folder: str | Path,
    *,
    example=None,
    any_vivado: bool = False,
    allow_timing_failure: bool = False,
):
    """Write the project; run Vivado when it is on the PATH and its version is the board's
    (or `any_vivado`). Returns what happened: `ran`, `command`, `overlay` and, if it did not
    run, `reason`."""
    folder = Path(folder)
    write_project(design, folder, example, allow_timing_failure)
    result = {
        "ran": False,
        "command": f"cd {folder} && ./build.sh",
        "folder": str(folder),
        "overlay": str(folder / "overlay"),
    }
    vivado = shutil.which("vivado")
    want = design.board.pynq.vivado
    if vivado is None:
        result["reason"] = f"Vivado is not on the PATH (the {design.board.name} needs {want})"
        return result
    have = vivado_version(vivado)
    if have != want and not any_vivado:
        raise DeviceError(
            f"Vivado {have} is on the PATH, but {design.board.name} overlays for PYNQ "
            f"{design.board.pynq.release} are built with Vivado {want} (a newer .hwh can fail "
            f"to parse on an older PYNQ); use Vivado {want}, or --any-vivado to build anyway"
        )
    done = subprocess.run(["sh", str(folder / "build.sh")], capture_output=True, text=True)
    log = folder / "vivado.log"
    if done.returncode != 0:
        tail = (log.read_text() if log.exists() else done.stdout + done.stderr)[-3000:]
        raise DeviceError(f"Vivado failed ({done.returncode}); the end of its log:\n{tail}")
    overlay = folder / "overlay"
    missing = [s for s in (".bit", ".hwh") if not (overlay / f"{design.name}{s}").exists()]
    if missing:
        raise DeviceError(f"Vivado finished but wrote no {', '.join(missing)} in {overlay}")
    result.update(ran=True, vivado=have)
    return result
