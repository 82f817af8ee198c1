//! wbscope's integration tests, one binary (it links once): each module
//! is one concern, most against the real kernel as root (loop
//! filesystems made for the test and always removed, the `wbscope`
//! binary run as a child, bpftrace or tracefs beside it as the
//! independent count).
//!
//! Tests of one module may run at the same time, as they always could;
//! tests of different modules never do (`support::file_group`): many
//! compare host-wide counters (/proc/vmstat, a disk's own statistics, a
//! tracefs count) with what wbscope saw, which another module's
//! workload would disturb.
mod support;

mod compare_cli;
mod dashboard_tmux;
mod diff_cli;
mod doctor;
mod exporter_web_config;
mod hostile_cli;
mod kernel_cpu_time;
mod kernel_dirtiers;
mod kernel_durability;
mod kernel_fallback;
mod kernel_generic;
mod kernel_probes;
mod kernel_trace;
mod kernel_writes;
mod ledger;
mod privileges;
mod prometheus_exporter;
mod prometheus_fleet;
mod prometheus_server;
mod record_budget;
mod record_replay;
mod record_store;
mod recorder_unit;
mod report_browser;
mod report_real;
mod scenario_tiny;
mod write_cli;
