//! `wbscope trace --prometheus ADDR:PORT`: the trace's figures as
//! Prometheus / OpenMetrics metrics on `http://ADDR:PORT/metrics`.
//!
//! This side is the registry: what each metric counts and how it is fed;
//! the server (web.rs) gets the registry at start and serves it, and
//! nothing here reaches into the server but starting and stopping it.
//!
//! Fed from the same places the trace loop prints from: every writepages
//! call record ([`Metrics::observe_call`]) and every interval line
//! ([`Metrics::update_from`]), so a scrape and the JSON lines agree.
//! Labels are the device (`"maj:min"`), the call's cause and, for the
//! tracer's own run time, the program name: bounded sets, never an inode
//! or a pid; per cgroup (cgroups.rs), at most 16 cgroup ids and `other`;
//! the write spans (writes.rs) by `part` and dirty `limit` only.
//! Metric names, types and units: docs/prometheus.md.
use std::net::SocketAddr;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

mod backfill;
mod cgroups;
mod fsyncs;
mod log2;
mod remote_write;
mod samples;
mod web;
mod writes;

pub use backfill::{Backfill, BackfillStats, check_label_name};
pub use remote_write::{DEFAULT_QUEUE_BYTES, Push, PushConfig, PushStats};
pub use web::MAX_CONNECTIONS;

use log2::THROTTLE_PAUSE;
use log2::{
    HistFamily, Log2Metric, SecondsCounter, pages_per_call, request_bytes, request_latency,
};

use wbscope_model::findings::{Finding, RULES, Severity};
use wbscope_model::interval::IntervalLine;
use wbscope_model::ledger::LedgerLine;
use wbscope_model::units::page_size;
use wbscope_model::{CallRecord, cause_name};

/// Every label name of the families below (and their modules'), but a
/// histogram's `le`: an extra label of a backfill or a push must be none
/// of them.
pub(crate) const OWN_LABELS: &[&str] = &[
    "dev",
    "cause",
    "kind",
    "program",
    "finding",
    "part",
    "cgroup_id",
    "by",
    "reason",
    "class",
    "stage",
    "limit",
];

/// Labels of the per-call metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CallLabels {
    /// `"major:minor"` of the filesystem's device.
    pub(crate) dev: String,
    /// `sync`, `periodic`, `background`, `flusher_other`, `direct`, `unknown`.
    pub(crate) cause: &'static str,
}

/// Labels of the per-device metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DevLabels {
    pub(crate) dev: String,
}

/// Labels of a device's written bytes of one ledger class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LedgerLabels {
    pub(crate) dev: String,
    /// `data`, `journal`, `metadata`, `other` (docs/ledger.md).
    pub(crate) class: &'static str,
}

/// Labels of a device's cache-flush requests of one class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FlushLabels {
    pub(crate) dev: String,
    /// `flush`, `fua`, `preflush`, `preflush_fua` (docs/trace-json.md).
    pub(crate) kind: String,
}

/// Labels of the tracer's run-time metrics: one of our BPF programs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProgramLabels {
    pub(crate) program: String,
}

/// Every metric the exporter serves. Cloning shares the values (the
/// registry holds clones); the trace loop updates, the server encodes.
#[derive(Clone)]
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
    pages_written: Family<CallLabels, Counter>,
    pages_per_call: HistFamily<CallLabels>,
    pages_asked: Family<CallLabels, Counter>,
    budgeted_pages_written: Family<CallLabels, Counter>,
    unbounded_calls: Family<CallLabels, Counter>,
    scan_pages_scanned: Family<CallLabels, Counter>,
    scan_pages_written: Family<CallLabels, Counter>,
    duration: Family<CallLabels, SecondsCounter>,
    timed_pages: Family<CallLabels, Counter>,
    on_cpu: Family<CallLabels, SecondsCounter>,
    on_cpu_pages: Family<CallLabels, Counter>,
    dirty_pages: Gauge,
    writeback_pages: Gauge,
    dirty_threshold_pages: Gauge,
    dirty_background_threshold_pages: Gauge,
    vmstat_written_pages: Counter,
    vmstat_dirtied_pages: Counter,
    throttle_events: Counter,
    throttle_pause: Log2Metric,
    request_bytes: HistFamily<DevLabels>,
    request_latency: HistFamily<DevLabels>,
    device_requests: Family<DevLabels, Counter>,
    device_bytes: Family<DevLabels, Counter>,
    device_flushes: Family<DevLabels, Counter>,
    device_written: Family<DevLabels, Counter>,
    ledger_written: Family<LedgerLabels, Counter>,
    flush_latency: HistFamily<FlushLabels>,
    lost_records: Counter,
    map_full: Counter,
    bpf_runs: Family<ProgramLabels, Counter>,
    bpf_run_time: Family<ProgramLabels, SecondsCounter>,
    bpf_recursion_misses: Family<ProgramLabels, Counter>,
    intervals: Counter,
    page_size: u64,
    finding_active: Family<FindingLabels, Gauge>,
    finding_severity: Family<FindingLabels, Gauge>,
    cgroups: cgroups::CgroupMetrics,
    fsyncs: fsyncs::FsyncMetrics,
    writes: writes::WriteMetrics,
}

/// Labels of `wbscope_finding_active`: a finding of docs/findings.md.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FindingLabels {
    pub(crate) finding: &'static str,
}

fn gauge_set(g: &Gauge, v: u64) {
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
}

impl Metrics {
    /// The metrics and a registry (prefix `wbscope_`) that serves them.
    pub(crate) fn new() -> (Metrics, Registry) {
        let m = Metrics {
            calls: Family::default(),
            pages_written: Family::default(),
            pages_per_call: Family::new_with_constructor(pages_per_call),
            pages_asked: Family::default(),
            budgeted_pages_written: Family::default(),
            unbounded_calls: Family::default(),
            scan_pages_scanned: Family::default(),
            scan_pages_written: Family::default(),
            duration: Family::default(),
            timed_pages: Family::default(),
            on_cpu: Family::default(),
            on_cpu_pages: Family::default(),
            dirty_pages: Gauge::default(),
            writeback_pages: Gauge::default(),
            dirty_threshold_pages: Gauge::default(),
            dirty_background_threshold_pages: Gauge::default(),
            vmstat_written_pages: Counter::default(),
            vmstat_dirtied_pages: Counter::default(),
            throttle_events: Counter::default(),
            throttle_pause: Log2Metric::new(THROTTLE_PAUSE),
            request_bytes: Family::new_with_constructor(request_bytes),
            request_latency: Family::new_with_constructor(request_latency),
            device_requests: Family::default(),
            device_bytes: Family::default(),
            device_flushes: Family::default(),
            device_written: Family::default(),
            ledger_written: Family::default(),
            flush_latency: Family::new_with_constructor(request_latency),
            lost_records: Counter::default(),
            map_full: Counter::default(),
            bpf_runs: Family::default(),
            bpf_run_time: Family::default(),
            bpf_recursion_misses: Family::default(),
            intervals: Counter::default(),
            page_size: page_size(),
            finding_active: Family::default(),
            finding_severity: Family::default(),
            cgroups: cgroups::CgroupMetrics::new(cgroups::MAX_CGROUP_LABELS),
            fsyncs: fsyncs::FsyncMetrics::new(),
            writes: writes::WriteMetrics::new(),
        };
        let mut r = Registry::with_prefix("wbscope");
        r.register(
            "writepages_calls",
            "writepages calls that ended, by device and cause",
            m.calls.clone(),
        );
        r.register(
            "pages_written",
            "Pages written by writepages calls (ext4_writepages_result)",
            m.pages_written.clone(),
        );
        r.register(
            "writepages_pages_per_call",
            "Pages written per writepages call (log2 buckets: le 0, 1, 3, 7, ...)",
            m.pages_per_call.clone(),
        );
        r.register(
            "writepages_pages_asked",
            "Pages asked (nr_to_write) by calls with a finite budget",
            m.pages_asked.clone(),
        );
        r.register(
            "writepages_budgeted_pages_written",
            "Pages written by calls with a finite budget (divide by pages_asked)",
            m.budgeted_pages_written.clone(),
        );
        r.register(
            "writepages_unbounded_calls",
            "Calls that asked for everything (nr_to_write = LONG_MAX, e.g. fsync)",
            m.unbounded_calls.clone(),
        );
        r.register(
            "scan_pages_scanned",
            "Pages examined by calls whose scan was measured (bytes scanned / page size)",
            m.scan_pages_scanned.clone(),
        );
        r.register(
            "scan_pages_written",
            "Pages written by calls whose scan was measured (scan ratio = scanned / written)",
            m.scan_pages_written.clone(),
        );
        r.register_with_unit(
            "writepages_duration",
            "Wall time of calls whose start was seen (divide by timed_pages: time per written page)",
            Unit::Seconds,
            m.duration.clone(),
        );
        r.register(
            "writepages_timed_pages",
            "Pages written by calls whose start was seen",
            m.timed_pages.clone(),
        );
        r.register_with_unit(
            "writepages_on_cpu",
            "On-CPU time of calls where it was tracked (divide by on_cpu_pages)",
            Unit::Seconds,
            m.on_cpu.clone(),
        );
        r.register(
            "writepages_on_cpu_pages",
            "Pages written by calls whose on-CPU time was tracked",
            m.on_cpu_pages.clone(),
        );
        r.register(
            "dirty_pages",
            "Dirty pages (/proc/vmstat nr_dirty), at the last interval",
            m.dirty_pages.clone(),
        );
        r.register(
            "writeback_pages",
            "Pages under writeback (/proc/vmstat nr_writeback), at the last interval",
            m.writeback_pages.clone(),
        );
        r.register(
            "dirty_threshold_pages",
            "Dirty limit where writers are throttled (/proc/vmstat nr_dirty_threshold)",
            m.dirty_threshold_pages.clone(),
        );
        r.register(
            "dirty_background_threshold_pages",
            "Dirty level where background writeback starts (nr_dirty_background_threshold)",
            m.dirty_background_threshold_pages.clone(),
        );
        r.register(
            "vmstat_written_pages",
            "Pages whose writeback completed, any filesystem (/proc/vmstat nr_written, since the start)",
            m.vmstat_written_pages.clone(),
        );
        r.register(
            "vmstat_dirtied_pages",
            "Pages dirtied, any filesystem (/proc/vmstat nr_dirtied, since the start)",
            m.vmstat_dirtied_pages.clone(),
        );
        r.register(
            "throttle_events",
            "balance_dirty_pages events",
            m.throttle_events.clone(),
        );
        r.register_with_unit(
            "throttle_pause",
            "Writer pauses in balance_dirty_pages (log2 buckets of ms)",
            Unit::Seconds,
            m.throttle_pause.clone(),
        );
        r.register(
            "device_requests",
            "Block requests, by device (completed, from /proc/diskstats, by default; issued, \
             from the block tracepoints, with --enable device_io)",
            m.device_requests.clone(),
        );
        r.register_with_unit(
            "device",
            "Bytes the device's requests moved (/proc/diskstats; absent with --enable device_io, \
             whose request-size histogram has them)",
            Unit::Bytes,
            m.device_bytes.clone(),
        );
        r.register_with_unit(
            "device_written",
            "Bytes the device counted as written (/proc/diskstats sectors written), on every run",
            Unit::Bytes,
            m.device_written.clone(),
        );
        r.register_with_unit(
            "ledger_device_written",
            "Bytes of the device's write bios by class: data, journal, metadata, other; over a \
             run they add up to wbscope_device_written_bytes_total (--enable device_io)",
            Unit::Bytes,
            m.ledger_written.clone(),
        );
        r.register(
            "device_flushes",
            "Cache flushes the device completed, part of its requests: what fsync and \
             journal commits ask of a volatile write cache (/proc/diskstats, Linux 5.5+)",
            m.device_flushes.clone(),
        );
        r.register_with_unit(
            "device_request",
            "Block requests issued, by size (log2 buckets; sum counts each at its bucket's lower edge)",
            Unit::Bytes,
            m.request_bytes.clone(),
        );
        r.register_with_unit(
            "device_request_latency",
            "Block request issue-to-completion time (log2 buckets of ns; sum at lower edges)",
            Unit::Seconds,
            m.request_latency.clone(),
        );
        r.register_with_unit(
            "device_flush_latency",
            "Issue-to-completion time of the requests carrying a cache flush, by class as \
             biolatency -F splits them (--enable device_io; log2 buckets of ns)",
            Unit::Seconds,
            m.flush_latency.clone(),
        );
        r.register(
            "lost_records",
            "Call records the kernel could not hand over (ring buffer full)",
            m.lost_records.clone(),
        );
        r.register(
            "map_full",
            "Counts the BPF programs could not keep because a hash map was full \
             (device requests, inode passes, pauses or span starts no figure holds)",
            m.map_full.clone(),
        );
        r.register(
            "bpf_runs",
            "Runs of the tracer's own BPF programs (BPF_ENABLE_STATS)",
            m.bpf_runs.clone(),
        );
        r.register_with_unit(
            "bpf_run_time",
            "Time spent in the tracer's own BPF programs (BPF_ENABLE_STATS)",
            Unit::Seconds,
            m.bpf_run_time.clone(),
        );
        r.register(
            "bpf_recursion_misses",
            "Runs of the tracer's BPF programs the kernel skipped because the program was \
             already running on that CPU (recursion_misses, Linux 5.12+), and for a kretprobe \
             the returns its event missed (no free instance): events never seen",
            m.bpf_recursion_misses.clone(),
        );
        r.register(
            "intervals",
            "Intervals the trace has closed (the metrics below the call level move once per interval)",
            m.intervals.clone(),
        );
        r.register(
            "finding_active",
            "1 while the finding holds, else 0 (docs/findings.md; the catalogue's every name)",
            m.finding_active.clone(),
        );
        r.register(
            "finding_severity",
            "The finding's worst severity in the episode holding now: 0 none, 1 info, 2 warning, 3 critical (what the alerts of docs/grafana/wbscope-rules.yml page on)",
            m.finding_severity.clone(),
        );
        m.set_findings(std::iter::empty());
        m.cgroups.register(&mut r);
        m.fsyncs.register(&mut r);
        m.writes.register(&mut r);
        (m, r)
    }

    /// One fsync, split (`--enable durability`).
    pub fn observe_sync(&self, s: &wbscope_model::durability::SyncRecord) {
        self.fsyncs.observe(s);
    }

    /// One writepages call, counted as `CallAggregate::add` counts it.
    pub fn observe_call(&self, c: &CallRecord) {
        let labels = CallLabels {
            dev: c.dev.to_string(),
            cause: cause_name(c.cause),
        };
        let pages = c.pages_written.max(0) as u64;
        self.calls.get_or_create(&labels).inc();
        self.pages_written.get_or_create(&labels).inc_by(pages);
        self.pages_per_call.get_or_create(&labels).observe(pages);
        if c.start_seen && c.nr_to_write != i64::MAX {
            self.pages_asked
                .get_or_create(&labels)
                .inc_by(c.nr_to_write.max(0) as u64);
            self.budgeted_pages_written
                .get_or_create(&labels)
                .inc_by(pages);
        } else if c.nr_to_write == i64::MAX {
            self.unbounded_calls.get_or_create(&labels).inc();
        }
        if let Some(scan) = &c.scan {
            self.scan_pages_scanned
                .get_or_create(&labels)
                .inc_by(scan.bytes / self.page_size);
            self.scan_pages_written.get_or_create(&labels).inc_by(pages);
        }
        if c.start_seen {
            self.duration
                .get_or_create(&labels)
                .inc_by_ns(c.duration_ns);
            self.timed_pages.get_or_create(&labels).inc_by(pages);
        }
        if let Some(ns) = c.on_cpu_ns {
            self.on_cpu.get_or_create(&labels).inc_by_ns(ns);
            self.on_cpu_pages.get_or_create(&labels).inc_by(pages);
        }
    }

    /// Per-interval hook: levels from the line's latest values, counters
    /// from its deltas (the call figures already came through
    /// [`Metrics::observe_call`]).
    pub fn update_from(&self, line: &IntervalLine) {
        let vm = &line.dirty.vmstat;
        gauge_set(&self.dirty_pages, vm.nr_dirty);
        gauge_set(&self.writeback_pages, vm.nr_writeback);
        gauge_set(&self.dirty_threshold_pages, vm.nr_dirty_threshold);
        gauge_set(
            &self.dirty_background_threshold_pages,
            vm.nr_dirty_background_threshold,
        );
        self.vmstat_written_pages
            .inc_by(line.dirty.vmstat_written_delta);
        self.vmstat_dirtied_pages
            .inc_by(line.dirty.vmstat_dirtied_delta);
        self.throttle_events.inc_by(line.throttle.events);
        self.throttle_pause
            .add_buckets(&line.throttle.pause_ms, Some(line.throttle.pause_ms_total));
        for d in &line.devices {
            let labels = DevLabels {
                dev: d.dev.to_string(),
            };
            self.device_requests
                .get_or_create(&labels)
                .inc_by(d.requests);
            if let Some(m) = &d.diskstats {
                self.device_bytes.get_or_create(&labels).inc_by(m.bytes);
                self.device_flushes.get_or_create(&labels).inc_by(m.flushes);
            }
            // No series for a histogram the source does not give.
            if !d.request_bytes.is_empty() {
                self.request_bytes
                    .get_or_create(&labels)
                    .add_buckets(&d.request_bytes, None);
            }
            if !d.latency_ns.is_empty() {
                self.request_latency
                    .get_or_create(&labels)
                    .add_buckets(&d.latency_ns, None);
            }
            for f in &d.flushes {
                let labels = FlushLabels {
                    dev: labels.dev.clone(),
                    kind: f.kind.to_string(),
                };
                self.flush_latency
                    .get_or_create(&labels)
                    .add_buckets(&f.latency_ns, None);
            }
        }
        if let Some(ledger) = &line.ledger {
            self.ledger(ledger);
        }
        self.lost_records.inc_by(line.lost_records);
        self.map_full.inc_by(line.map_full);
        for r in &line.run_time {
            let labels = ProgramLabels {
                program: r.program.clone(),
            };
            self.bpf_runs.get_or_create(&labels).inc_by(r.run_count);
            self.bpf_run_time
                .get_or_create(&labels)
                .inc_by_ns(r.run_time_ns);
            // A series only for programs that lost runs.
            if r.recursion_misses > 0 {
                self.bpf_recursion_misses
                    .get_or_create(&labels)
                    .inc_by(r.recursion_misses);
            }
        }
        self.cgroups
            .update(line.time_s, &line.owners, line.ledger.as_ref());
        self.writes.update(&line.writes);
        self.intervals.inc();
    }

    /// The ledger's device rows: a series per device and class only where
    /// the class was measured.
    fn ledger(&self, ledger: &LedgerLine) {
        for d in &ledger.devices {
            let dev = d.dev.to_string();
            self.device_written
                .get_or_create(&DevLabels { dev: dev.clone() })
                .inc_by(d.written);
            for (class, bytes) in [
                ("data", d.data),
                ("journal", d.journal),
                ("metadata", d.metadata),
                ("other", d.other),
            ] {
                if let Some(bytes) = bytes {
                    self.ledger_written
                        .get_or_create(&LedgerLabels {
                            dev: dev.clone(),
                            class,
                        })
                        .inc_by(bytes);
                }
            }
        }
    }

    /// The findings holding after the last interval: 1 for them, 0 for
    /// the rest of the catalogue; their severity (1 info, 2 warning, 3
    /// critical; doctor's exit status 3 is from 2 up), 0 for the rest.
    pub fn set_findings<'a>(&self, active: impl Iterator<Item = &'a Finding>) {
        let active: Vec<(&str, Severity)> = active.map(|f| (f.name, f.severity)).collect();
        for rule in RULES {
            let severity = active
                .iter()
                .find(|(name, _)| *name == rule.name)
                .map(|(_, s)| *s);
            let labels = FindingLabels { finding: rule.name };
            self.finding_active
                .get_or_create(&labels)
                .set(i64::from(severity.is_some()));
            self.finding_severity
                .get_or_create(&labels)
                .set(match severity {
                    None => 0,
                    Some(Severity::Info) => 1,
                    Some(Severity::Warning) => 2,
                    Some(Severity::Critical) => 3,
                });
        }
    }
}

/// The metrics of a `trace` or a `record` and where they go: served on
/// `--prometheus`, pushed with `--remote-write`, or both. Fed as the
/// trace prints: every call, every fsync, every interval line (the
/// findings judged at its close, then a push of the snapshot).
pub struct Telemetry {
    metrics: Metrics,
    registry: std::sync::Arc<Registry>,
    findings: wbscope_model::findings::Engine,
    server: Option<web::Server>,
    push: Option<Push>,
}

/// Where `--prometheus` serves.
pub struct Serving {
    pub scheme: &'static str,
    pub local_addr: SocketAddr,
    /// One line to warn with when the metrics reach beyond this host
    /// without TLS or without authentication.
    pub warning: Option<String>,
}

impl Telemetry {
    /// Binds `serve`'s address (behind the TLS and basic auth of its web
    /// config, read now) and starts `push`'s sender, on the current tokio
    /// runtime; `None` when neither is asked for. Everything read from
    /// files is read here, before the privileges are dropped.
    pub async fn start(
        serve: Option<(SocketAddr, Option<&std::path::Path>)>,
        push: Option<&PushConfig>,
    ) -> anyhow::Result<Option<Telemetry>> {
        if serve.is_none() && push.is_none() {
            return Ok(None);
        }
        let (metrics, mut registry) = Metrics::new();
        let push = push.map(|c| Push::start(c, &mut registry)).transpose()?;
        let (server, registry) = match serve {
            Some((addr, web_config)) => {
                let server = web::Server::start(addr, web_config, registry)?;
                let registry = server.registry.clone();
                (Some(server), registry)
            }
            None => (None, std::sync::Arc::new(registry)),
        };
        Ok(Some(Telemetry {
            metrics,
            registry,
            findings: wbscope_model::findings::Engine::new(),
            server,
            push,
        }))
    }

    pub fn serving(&self) -> Option<Serving> {
        self.server.as_ref().map(|s| Serving {
            scheme: s.scheme(),
            local_addr: s.local_addr,
            warning: s.exposure_warning(),
        })
    }

    /// The receiver's URL, with `--remote-write`.
    pub fn push_url(&self) -> Option<&str> {
        self.push.as_ref().map(Push::url)
    }

    pub fn call(&self, c: &CallRecord) {
        self.metrics.observe_call(c);
    }

    pub fn sync(&self, s: &wbscope_model::durability::SyncRecord) {
        self.metrics.observe_sync(s);
    }

    /// An interval line, closed at `wall_ms` (ms since the epoch).
    pub fn interval(&mut self, line: &IntervalLine, wall_ms: i64) -> anyhow::Result<()> {
        self.metrics.update_from(line);
        self.findings.interval(line);
        self.metrics.set_findings(self.findings.active());
        if let Some(p) = &self.push {
            p.snapshot(&self.registry, wall_ms)?;
        }
        Ok(())
    }

    /// Stops serving, and pushes what is queued for at most `grace`.
    pub async fn finish(self, grace: std::time::Duration) -> Option<PushStats> {
        drop(self.server);
        match self.push {
            Some(p) => Some(p.finish(grace).await),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::web::encode;
    use super::*;
    use wbscope_model::interval::CallAggregate;
    use wbscope_model::kernel::KernelSnapshot;
    use wbscope_model::{DevId, ScanFigures};

    fn call(dev: u32, pages: i64, asked: i64, cause: u32) -> CallRecord {
        CallRecord {
            dev: DevId::from_kernel(dev),
            ino: 12,
            tgid: 1,
            tid: 1,
            comm: "t".into(),
            start_ns: 1,
            duration_ns: 2_000_000,
            nr_to_write: asked,
            pages_written: pages,
            start_seen: true,
            cause,
            on_cpu_ns: Some(1_000_000),
            scan: Some(ScanFigures {
                iterations: 1,
                bytes: pages as u64 * page_size() * 2,
                first_pos: 0,
                last_pos: 0,
            }),
            ..CallRecord::default()
        }
    }

    fn sample<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
    }

    #[test]
    fn calls_are_counted_by_device_and_cause() {
        let (m, r) = Metrics::new();
        m.observe_call(&call(
            7 << 20 | 3,
            5,
            1024,
            writeback_common::cause::BACKGROUND,
        ));
        m.observe_call(&call(
            7 << 20 | 3,
            3,
            1024,
            writeback_common::cause::BACKGROUND,
        ));
        m.observe_call(&call(
            7 << 20 | 3,
            100,
            i64::MAX,
            writeback_common::cause::SYNC,
        ));
        let text = encode(&r).unwrap();
        let bg = r#"{dev="7:3",cause="background"}"#;
        assert_eq!(
            sample(&text, &format!("wbscope_pages_written_total{bg}")),
            Some("8")
        );
        assert_eq!(
            sample(&text, &format!("wbscope_writepages_calls_total{bg}")),
            Some("2")
        );
        assert_eq!(
            sample(
                &text,
                r#"wbscope_pages_written_total{dev="7:3",cause="sync"}"#
            ),
            Some("100")
        );
        assert_eq!(
            sample(&text, &format!("wbscope_writepages_pages_asked_total{bg}")),
            Some("2048")
        );
        assert_eq!(
            sample(&text, &format!("wbscope_scan_pages_scanned_total{bg}")),
            Some("16")
        );
        assert_eq!(
            sample(
                &text,
                &format!("wbscope_writepages_duration_seconds_total{bg}")
            ),
            Some("0.004")
        );
        // 5 → bucket [4, 7], 3 → [2, 3]; buckets are cumulative.
        let bucket = |le: &str| {
            sample(
                &text,
                &format!(
                    r#"wbscope_writepages_pages_per_call_bucket{{le="{le}",dev="7:3",cause="background"}}"#
                ),
            )
            .or_else(|| {
                sample(
                    &text,
                    &format!(
                        r#"wbscope_writepages_pages_per_call_bucket{{dev="7:3",cause="background",le="{le}"}}"#
                    ),
                )
            })
        };
        assert_eq!(bucket("1.0"), Some("0"));
        assert_eq!(bucket("3.0"), Some("1"));
        assert_eq!(bucket("7.0"), Some("2"));
        assert_eq!(bucket("+Inf"), Some("2"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn every_finding_has_a_gauge_set_while_it_holds() {
        let (m, r) = Metrics::new();
        let text = encode(&r).unwrap();
        for rule in RULES {
            let s = format!("wbscope_finding_active{{finding=\"{}\"}}", rule.name);
            assert_eq!(sample(&text, &s), Some("0"), "{text}");
        }
        // A throttled interval opens dirty-throttled: its gauge is 1, the
        // others stay 0.
        let mut engine = wbscope_model::findings::Engine::new();
        let snap = wbscope_model::kernel::KernelSnapshot::default();
        let mut line = IntervalLine::new(
            1.0,
            1.0,
            &wbscope_model::interval::CallAggregate::default(),
            &snap,
            &snap,
        );
        line.throttle.pauses = 5;
        line.throttle.pause_ms_total = 900;
        engine.interval(&line);
        m.set_findings(engine.active());
        let text = encode(&r).unwrap();
        assert_eq!(
            sample(&text, "wbscope_finding_active{finding=\"dirty-throttled\"}"),
            Some("1")
        );
        assert_eq!(
            sample(&text, "wbscope_finding_active{finding=\"fsync-storm\"}"),
            Some("0")
        );
        // 0.9 s of pauses a second is over the warning's 0.25 s/s
        // (docs/findings.md, dirty-throttled).
        let severity = engine
            .active()
            .next()
            .map(|f| f.severity)
            .expect("dirty-throttled holds");
        assert!(severity >= Severity::Warning, "{severity:?}");
        assert_eq!(
            sample(
                &text,
                "wbscope_finding_severity{finding=\"dirty-throttled\"}"
            ),
            Some(if severity == Severity::Critical {
                "3"
            } else {
                "2"
            })
        );
        assert_eq!(
            sample(&text, "wbscope_finding_severity{finding=\"fsync-storm\"}"),
            Some("0")
        );
    }

    #[test]
    fn interval_lines_feed_levels_and_kernel_counters() {
        use writeback_common::{BlockHistKey, agg, block_hist};
        let (m, r) = Metrics::new();
        let prev = KernelSnapshot {
            agg: vec![0; agg::COUNT as usize],
            ..Default::default()
        };
        let mut cur = prev.clone();
        cur.vmstat.nr_dirty = 1234;
        cur.vmstat.nr_dirty_threshold = 9999;
        cur.agg[agg::THROTTLE_PAUSES as usize] = 2;
        cur.agg[agg::THROTTLE_PAUSE_MS as usize] = 30;
        cur.agg[(agg::THROTTLE_HIST + 4) as usize] = 2;
        cur.block.insert(
            BlockHistKey {
                dev: 254 << 20,
                kind: block_hist::ISSUE_BYTES,
                bucket: 20,
            },
            7,
        );
        // Three empty flushes at 64-127 µs.
        cur.block.insert(
            BlockHistKey {
                dev: 254 << 20,
                kind: block_hist::FLUSH_LATENCY_NS + writeback_common::flush_class::FLUSH,
                bucket: 17,
            },
            3,
        );
        cur.stats.lost_records = 3;
        let run = |program: &str, recursion_misses| wbscope_model::kernel::ProgramRunTime {
            program: program.into(),
            run_count: 10,
            run_time_ns: 1000,
            recursion_misses,
        };
        cur.run_times = vec![run("fentry_writepages", 4), run("tp_btf_extent", 0)];
        let line = IntervalLine::new(1.0, 1.0, &CallAggregate::default(), &prev, &cur);
        m.update_from(&line);
        m.update_from(&line);
        let text = encode(&r).unwrap();
        // Skipped runs per program, a series only where there were some.
        assert_eq!(
            sample(
                &text,
                r#"wbscope_bpf_recursion_misses_total{program="fentry_writepages"}"#
            ),
            Some("8")
        );
        assert!(
            !text.contains(r#"wbscope_bpf_recursion_misses_total{program="tp_btf_extent"}"#),
            "{text}"
        );
        assert_eq!(sample(&text, "wbscope_dirty_pages"), Some("1234"));
        assert_eq!(sample(&text, "wbscope_dirty_threshold_pages"), Some("9999"));
        assert_eq!(sample(&text, "wbscope_lost_records_total"), Some("6"));
        assert_eq!(
            sample(&text, "wbscope_throttle_pause_seconds_count"),
            Some("4")
        );
        assert_eq!(
            sample(&text, "wbscope_throttle_pause_seconds_sum"),
            Some("0.06")
        );
        // 14 requests in [512 KiB, 1 MiB - 1]: none at le 524287, all at 1048575.
        let dev = r#"dev="254:0""#;
        let bucket = |le: &str| {
            text.lines()
                .filter(|l| l.starts_with("wbscope_device_request_bytes_bucket{"))
                .find(|l| l.contains(dev) && l.contains(&format!(r#"le="{le}""#)))
                .and_then(|l| l.rsplit(' ').next())
        };
        assert_eq!(bucket("524287.0"), Some("0"));
        assert_eq!(bucket("1048575.0"), Some("14"));
        assert_eq!(bucket("+Inf"), Some("14"));
        assert!(
            text.contains("# UNIT wbscope_device_request_bytes bytes"),
            "{text}"
        );
        let flushes = r#"wbscope_device_flush_latency_seconds_count{dev="254:0",kind="flush"}"#;
        assert_eq!(sample(&text, flushes), Some("6"), "{text}");
    }

    #[test]
    fn interval_lines_feed_the_write_spans_by_part_with_labels_of_ours() {
        use wbscope_model::writes::{WriteLine, WriteParts};
        let (m, r) = Metrics::new();
        let none = KernelSnapshot::default();
        let mut line = IntervalLine::new(1.0, 1.0, &CallAggregate::default(), &none, &none);
        m.update_from(&line);
        assert!(
            !encode(&r).unwrap().contains("wbscope_write_"),
            "none without writes"
        );
        // One writer throttled by its device 0.6 of its 0.75 s of writes.
        line.writes = vec![WriteLine {
            pid: 812,
            comm: "dd".into(),
            writes: 30,
            bytes: 30 << 20,
            p99_ns: 40_000_000,
            max_ns: 41_000_000,
            parts: WriteParts {
                total_ns: 750_000_000,
                throttle_ns: 600_000_000,
                blocked_ns: 100_000_000,
                other_ns: 50_000_000,
                ..WriteParts::default()
            },
            pauses: 30,
            throttled_by: vec!["bdi".into()],
            ..WriteLine::default()
        }];
        m.update_from(&line);
        m.update_from(&line);
        let text = encode(&r).unwrap();
        for (name, value) in [
            ("wbscope_write_calls_total", "60"),
            (r#"wbscope_write_seconds_total{part="throttle"}"#, "1.2"),
            (r#"wbscope_write_seconds_total{part="stable"}"#, "0.0"),
            (
                r#"wbscope_write_throttled_intervals_total{limit="bdi"}"#,
                "2",
            ),
            ("wbscope_write_p99_seconds", "0.04"),
            ("wbscope_intervals_total", "3"),
        ] {
            assert_eq!(sample(&text, name), Some(value), "{name} in\n{text}");
        }
        // Every label is one a backfill or a push refuses as extra.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, inner, _) = samples::split_sample(l).expect("a sample");
            for name in samples::label_names(inner) {
                assert!(name == "le" || OWN_LABELS.contains(&name), "{name} of {l}");
            }
        }
    }

    #[test]
    fn ledger_rows_feed_the_device_counters_only_where_measured() {
        use wbscope_model::ledger::DeviceLedger;
        let (m, r) = Metrics::new();
        let none = KernelSnapshot::default();
        let mut line = IntervalLine::new(1.0, 1.0, &CallAggregate::default(), &none, &none);
        let dev = |minor| DevId { major: 7, minor };
        line.ledger = Some(LedgerLine {
            devices: vec![
                DeviceLedger {
                    dev: dev(0),
                    written: 12_288,
                    data: Some(4_096),
                    direct: Some(0),
                    journal: Some(8_192),
                    metadata: Some(0),
                    other: Some(0),
                    charged: 0,
                    unattributed: 0,
                },
                // Without --enable device_io: the device's counter only.
                DeviceLedger {
                    dev: dev(1),
                    written: 512,
                    ..DeviceLedger::default()
                },
            ],
            ..LedgerLine::default()
        });
        m.update_from(&line);
        m.update_from(&line);
        let text = encode(&r).unwrap();
        let at = |name: &str| sample(&text, name);
        assert_eq!(
            at(r#"wbscope_device_written_bytes_total{dev="7:0"}"#),
            Some("24576")
        );
        assert_eq!(
            at(r#"wbscope_ledger_device_written_bytes_total{dev="7:0",class="journal"}"#),
            Some("16384")
        );
        assert_eq!(
            at(r#"wbscope_device_written_bytes_total{dev="7:1"}"#),
            Some("1024")
        );
        assert!(
            !text.contains(r#"wbscope_ledger_device_written_bytes_total{dev="7:1""#),
            "{text}"
        );
    }
}
