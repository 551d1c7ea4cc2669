# Recording stubs for the Tcl that dlproc build generates (Platform Designer scripts, _hw.tcl,
# Quartus .qsf, TimeQuest .sdc). Usage:
#   tclsh boards_tcl_stubs.tcl LOG SCRIPT ?key value ...?
# Every stubbed command appends one JSON array [command, arg, ...] per call to LOG, then SCRIPT is
# sourced. Keys: pll_period_ns P -- the period derive_pll_clocks gives the PLL output clock
# (the test takes it from the generated Platform Designer script), pll_pattern NAME,
# ip_clock NAME ip_period_ns P (see below).

set log_path [lindex $argv 0]
set script_path [lindex $argv 1]
array set opt [lrange $argv 2 end]
set log [open $log_path w]

proc json_str {s} {
    return "\"[string map [list \\ \\\\ \" \\\" \n \\n \r \\r \t \\t] $s]\""
}
proc record {name args} {
    set items [list [json_str $name]]
    foreach a $args { lappend items [json_str $a] }
    puts $::log "\[[join $items ,]\]"
}

# Commands that only need recording.
foreach cmd {
    create_system set_project_property add_instance set_instance_parameter_value add_interface
    set_interface_property add_connection set_connection_parameter_value save_system
    set_module_property add_fileset set_fileset_property add_fileset_file add_interface_port
    add_parameter set_parameter_property set_validation_property
    set_global_assignment set_location_assignment set_instance_assignment
    derive_clock_uncertainty set_false_path set_input_delay set_output_delay set_multicycle_path
    post_message
} {
    proc $cmd {args} [format {record %s {*}$args; return ""} $cmd]
}

package ifneeded qsys 16.1 {package provide qsys 16.1}

# Timing commands with a minimal model of clocks, so that the generated SDC's own checks run.
# ip_clock NAME ip_period_ns P: a clock that an IP's own SDC creates (Quartus Pro IOPLL).
array set clocks {}
if {[info exists opt(ip_clock)]} { set clocks($opt(ip_clock)) $opt(ip_period_ns) }
proc get_ports {args} {
    record get_ports {*}$args
    return "port:[lindex $args end]"
}
proc get_pins {args} {
    record get_pins {*}$args
    return "pin:[lindex $args end]"
}
proc create_clock {args} {
    record create_clock {*}$args
    set name [lindex $args [expr {[lsearch $args -name] + 1}]]
    set ::clocks($name) [lindex $args [expr {[lsearch $args -period] + 1}]]
}
proc derive_pll_clocks {args} {
    record derive_pll_clocks {*}$args
    if {[info exists ::opt(pll_period_ns)]} {
        set name [expr {[info exists ::opt(pll_pattern)] ? $::opt(pll_pattern) : "u0|pll_0|outclk0"}]
        set ::clocks($name) $::opt(pll_period_ns)
    }
}
proc get_clocks {args} {
    record get_clocks {*}$args
    set pattern [lindex $args end]
    return [array names ::clocks $pattern]
}
proc get_clock_info {what clock} {
    if {$what ne "-period"} { error "stub get_clock_info: only -period" }
    return $::clocks($clock)
}
proc foreach_in_collection {var collection body} {
    uplevel 1 [list foreach $var $collection $body]
}

source $script_path
close $log
