//! The Grafana dashboard shipped in docs/grafana/wbscope.json: every
//! metric family has a panel, every panel's queries return series from a
//! real Prometheus after a load that makes them (or the panel says which
//! option shows it and the run did not have it), and the fleet rows rank
//! a throttled host above a quiet one. The same live run has the rules
//! of wbscope-rules.yml evaluated and their throttle alert firing.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    fs,
    io::Write as _,
    path::Path,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use crate::prometheus_server::{Prometheus, http_get, start_exporter};
use crate::support::LoopFs;
use serde_json::Value;

const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/wbscope.json");
const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/prometheus.md");

fn dashboard() -> Value {
    serde_json::from_str(&fs::read_to_string(DASHBOARD).expect("read the dashboard"))
        .expect("dashboard JSON")
}

/// The panels (rows left out) with their description and expressions,
/// the dashboard's variables replaced as "All" and Grafana's
/// `$__rate_interval` as a minute.
fn panels() -> Vec<(String, String, Vec<String>)> {
    dashboard()["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let exprs = p["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .map(|t| {
                    t["expr"]
                        .as_str()
                        .expect("expr")
                        .replace("$__rate_interval", "1m")
                        .replace("$instance", ".*")
                        .replace("$dev", ".*")
                        .replace("$cgroup", ".*")
                })
                .collect();
            (
                p["title"].as_str().expect("title").to_string(),
                p["description"].as_str().unwrap_or_default().to_string(),
                exprs,
            )
        })
        .collect()
}

/// The metric families of docs/prometheus.md's tables (`| \`wbscope_…\``),
/// as named in a query: `_total` and histogram suffixes left out.
fn documented_families() -> BTreeSet<String> {
    fs::read_to_string(DOCS)
        .expect("read docs/prometheus.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| `wbscope_"))
        .filter_map(|l| l.split('`').next())
        .map(|n| format!("wbscope_{}", n.trim_end_matches("_total")))
        .collect()
}

#[test]
fn every_documented_family_has_a_panel() {
    let families = documented_families();
    assert!(families.len() >= 40, "{families:?}");
    let exprs: String = panels()
        .into_iter()
        .flat_map(|p| p.2)
        .collect::<Vec<_>>()
        .join("\n");
    let missing: Vec<&String> = families
        .iter()
        .filter(|f| !exprs.contains(f.as_str()))
        .collect();
    assert!(missing.is_empty(), "families without a panel: {missing:?}");
    // Variables for instance, device and cgroup.
    let vars: Vec<String> = dashboard()["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .map(|v| v["name"].as_str().expect("name").to_string())
        .collect();
    for v in ["instance", "dev", "cgroup"] {
        assert!(vars.iter().any(|n| n == v), "{vars:?}");
    }
}

/// The fleet rows' queries under promtool on two hosts' series, one
/// throttled half its time with slow fsyncs and flushes and a finding at
/// warning, one quiet: each row puts the throttled host first.
#[test]
fn the_fleet_rows_put_the_troubled_host_first() {
    let panels = panels();
    let fleet = |title: &str| {
        panels
            .iter()
            .find(|p| p.0 == title)
            .unwrap_or_else(|| panic!("no panel {title}"))
            .2[0]
            .clone()
    };
    // 15-s samples for 5 minutes: host-a pauses 7.5 s in each 15 s (0.5
    // s/s), its fsyncs and flushes all in the 0.1-s bucket; host-b's in
    // the 0.001-s bucket; host-a has dirty-throttled at warning.
    let mut t =
        String::from("evaluation_interval: 15s\ntests:\n  - interval: 15s\n    input_series:\n");
    let series = |t: &mut String, s: &str, v: &str| {
        let _ = writeln!(t, "      - series: '{s}'\n        values: '{v}'");
    };
    series(
        &mut t,
        r#"wbscope_throttle_pause_seconds_sum{instance="host-a"}"#,
        "0+7.5x20",
    );
    series(
        &mut t,
        r#"wbscope_throttle_pause_seconds_sum{instance="host-b"}"#,
        "0x20",
    );
    for (host, slow) in [("host-a", true), ("host-b", false)] {
        for (metric, extra) in [
            ("wbscope_fsync_seconds_bucket", r#",part="total""#),
            (
                "wbscope_device_flush_latency_seconds_bucket",
                r#",kind="flush""#,
            ),
        ] {
            for (le, grows) in [("0.001", !slow), ("0.1", true), ("+Inf", true)] {
                let v = if grows { "0+10x20" } else { "0x20" };
                series(
                    &mut t,
                    &format!(r#"{metric}{{instance="{host}",dev="8:0",le="{le}"{extra}}}"#),
                    v,
                );
            }
        }
    }
    series(
        &mut t,
        r#"wbscope_finding_severity{instance="host-a",finding="dirty-throttled"}"#,
        "2x20",
    );
    series(
        &mut t,
        r#"wbscope_finding_severity{instance="host-b",finding="dirty-throttled"}"#,
        "0x20",
    );
    t.push_str("    promql_expr_test:\n");
    let expect = |t: &mut String, expr: &str, samples: &[(&str, f64)]| {
        let _ = writeln!(
            t,
            "      - expr: {}\n        eval_time: 5m\n        exp_samples:",
            serde_json::to_string(expr).expect("string")
        );
        for (labels, value) in samples {
            let _ = writeln!(
                t,
                "          - labels: '{labels}'\n            value: {value}"
            );
        }
    };
    expect(
        &mut t,
        &fleet("Hosts by throttle seconds per second"),
        &[
            (r#"{instance="host-a"}"#, 0.5),
            (r#"{instance="host-b"}"#, 0.0),
        ],
    );
    // histogram_quantile interpolates in the bucket: host-a's p99 in
    // (0.001, 0.1], host-b's in (0, 0.001].
    expect(
        &mut t,
        &fleet("Hosts by fsync p99"),
        &[
            (r#"{instance="host-a"}"#, 0.09901),
            (r#"{instance="host-b"}"#, 0.00099),
        ],
    );
    expect(
        &mut t,
        &fleet("Hosts by cache-flush latency p99"),
        &[
            (r#"{instance="host-a"}"#, 0.09901),
            (r#"{instance="host-b"}"#, 0.00099),
        ],
    );
    expect(
        &mut t,
        &fleet("Findings at warning or worse, by host"),
        &[(
            r#"wbscope_finding_severity{instance="host-a",finding="dirty-throttled"}"#,
            2.0,
        )],
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("fleet.test.yml");
    fs::write(&file, &t).expect("write");
    let out = wbscope_programs::PROMTOOL
        .command()
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .expect("spawn promtool (cargo xtask setup installs it)");
    assert!(
        out.status.success(),
        "{}{}\n{t}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Files written and fsynced one after another until stopped: fsyncs,
/// their journal commits and cache flushes.
fn fsync_loop(dir: &Path, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let dir = dir.to_path_buf();
    thread::spawn(move || {
        let data = vec![7u8; 64 << 10];
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let mut f = fs::File::create(dir.join(format!("f{}", i % 64))).expect("create");
            f.write_all(&data).expect("write");
            f.sync_all().expect("fsync");
            i += 1;
        }
    })
}

/// [`crate::support::throttled_writers`] on `dir`, run again and again
/// until stopped: the capped device keeps them throttled however long
/// the test waits (one run lasts seconds on a fast disk).
fn writers_until_stopped(dir: String, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let out = crate::support::throttled_writers(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .expect("spawn the writer");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    })
}

/// A trace with every option a panel names (durability, device_io,
/// remote write into the same Prometheus) scraped every second, the
/// shipped rules evaluated every second, while four writers are
/// throttled on a device whose bdi is capped at 16 MiB dirty
/// (strict_limit) and a loop fsyncs on another: each panel gets series
/// from at least one of its queries, but those whose description says
/// they show with `--web-config`; `ALERTS` has `WbscopeDirtyThrottled`
/// firing, with its finding and a severity of warning or critical.
#[test]
fn every_panel_gets_series_and_the_throttle_alert_fires_in_a_real_prometheus() {
    let _file = crate::support::file_group(super::GROUP);
    let mut capped =
        scratchfs::ScratchFs::new("ext4".parse().expect("ext4"), 2048).expect("scratch ext4");
    capped.limit_dirty(16 << 20).expect("cap");
    let synced = LoopFs::new("ext4", 128);
    // Prometheus first (the trace pushes to it), then the trace it
    // scrapes.
    let mut prom = Prometheus::start_with(
        "global: {}\n",
        None,
        &["--web.enable-remote-write-receiver"],
    );
    let url = format!("http://{}/api/v1/write", prom.addr);
    let (_trace, addr, _) = start_exporter(
        "127.0.0.1:0",
        &[
            "--interval",
            "1",
            "--enable",
            "durability,device_io,writes",
            "--remote-write",
            &url,
            "--label",
            "instance=pushed",
        ],
    );
    fs::write(
        prom.dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: wbscope\n    static_configs:\n      - targets: ['{addr}']\n",
            super::rules::quoted(super::rules::RULES_FILE)
        ),
    )
    .expect("config");
    // Prometheus reloads its config on SIGHUP.
    prom.reload();
    let alert = r#"ALERTS{alertname="WbscopeDirtyThrottled",alertstate="firing",job="wbscope"}"#;
    assert_eq!(prom.query(alert), None, "firing before the load");
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = fsync_loop(&synced.mountpoint, stop.clone());
    let writers = writers_until_stopped(
        capped.mountpoint().to_str().expect("utf-8").to_string(),
        stop.clone(),
    );
    let mut waiting: Vec<(String, String, Vec<String>)> = panels()
        .into_iter()
        .filter(|p| !p.1.contains("Shows with `--web-config`"))
        .collect();
    waiting.push((
        "the WbscopeDirtyThrottled alert".into(),
        String::new(),
        vec![alert.to_string()],
    ));
    let deadline = Instant::now() + Duration::from_secs(90);
    while !waiting.is_empty() && Instant::now() < deadline {
        waiting.retain(|(_, _, exprs)| exprs.iter().all(|e| prom.query_at(e, None).is_empty()));
        thread::sleep(Duration::from_secs(2));
    }
    let firing = prom.query_at(alert, None);
    stop.store(true, Ordering::Relaxed);
    syncer.join().expect("fsync loop");
    writers.join().expect("writers");
    let titles: Vec<&String> = waiting.iter().map(|p| &p.0).collect();
    let severity = prom.query(
        r#"max_over_time(wbscope_finding_severity{finding="dirty-throttled",job="wbscope"}[5m])"#,
    );
    assert!(
        titles.is_empty(),
        "without series: {titles:?}; dirty-throttled's severity over 5 min {severity:?}; {}",
        prom.log()
    );
    // One alert per severity the episode reached while it fired.
    assert!(!firing.is_empty() && firing.len() <= 2, "{firing:?}");
    for a in &firing {
        let labels = &a["metric"];
        assert_eq!(labels["finding"], "dirty-throttled", "{labels}");
        assert!(
            labels["severity"] == "warning" || labels["severity"] == "critical",
            "{labels}"
        );
    }
    // Every family the exporter served in this run is in the docs'
    // tables, which the test above ties to the panels.
    let (status, _, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200);
    let documented = documented_families();
    let served: BTreeSet<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(|n| n.trim_end_matches("_total").to_string())
        .collect();
    let undocumented: Vec<&String> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in docs/prometheus.md: {undocumented:?}"
    );
}
