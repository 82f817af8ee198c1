//! `wbscope replay STORE --openmetrics` into a real Prometheus: a store
//! recorded over a known load (root, a loop filesystem of its own),
//! turned into TSDB blocks by `promtool tsdb create-blocks-from
//! openmetrics`, read back over Prometheus's API.

use std::{
    fs,
    io::Write,
    path::Path,
    process::Stdio,
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::prometheus_server::Prometheus;
use crate::support::{LoopFs, dev_of, start_record_said, wbscope};

/// Files of a burst, and their size: 64 × 16 pages.
const FILES: usize = 64;
const FILE_BYTES: usize = 64 << 10;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
}

/// Writes and fsyncs `FILES` new files under `dir`, named by `burst`.
fn burst(dir: &Path, burst: usize) {
    let data = vec![0x5au8; FILE_BYTES];
    for i in 0..FILES {
        let mut f = fs::File::create(dir.join(format!("b{burst}-{i}"))).expect("create");
        f.write_all(&data).expect("write");
        f.sync_all().expect("fsync");
    }
}

fn epoch_arg(ns: u64) -> String {
    format!("{:.9}", ns as f64 / 1e9)
}

/// The largest timestamp of an OpenMetrics text, as it is written.
fn last_timestamp(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(_, ts)| ts))
        .max_by(|a, b| {
            a.parse::<f64>()
                .expect("ts")
                .total_cmp(&b.parse::<f64>().expect("ts"))
        })
        .expect("a sample")
        .to_string()
}

/// A store over three bursts of fsynced files; the middle one's window
/// exported with `--openmetrics --label …` and backfilled: in
/// Prometheus, `increase()` over the window of the pages written and of
/// the calls equals `replay --since … --until … --summary` exactly, which
/// is the burst's own pages; every series has the labels given.
#[test]
fn a_backfilled_store_window_gives_prometheus_the_replay_totals_exactly() {
    let _file = crate::support::file_group(super::GROUP);
    let fs = LoopFs::new("ext4", 128);
    let dev = dev_of(&fs.mountpoint);
    let tmp = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let store = tmp.path().join("store");
    let device = fs.mountpoint.to_string_lossy().to_string();
    let (started, _said) = start_record_said(&[
        "--store",
        store.to_str().expect("utf-8"),
        "--min-free",
        "1",
        "--interval",
        "0.5",
        "--device",
        &device,
    ]);
    let mut recorder = crate::prometheus_server::Killed(started.child);
    burst(&fs.mountpoint, 1);
    thread::sleep(Duration::from_millis(1500));
    let since = now_ns();
    burst(&fs.mountpoint, 2);
    thread::sleep(Duration::from_millis(1500));
    let until = now_ns();
    burst(&fs.mountpoint, 3);
    thread::sleep(Duration::from_millis(1000));
    // SAFETY: a plain syscall on our own child.
    unsafe { libc::kill(recorder.0.id() as i32, libc::SIGINT) };
    assert!(recorder.0.wait().expect("wait").success());

    let window = [
        "--since".to_string(),
        epoch_arg(since),
        "--until".to_string(),
        epoch_arg(until),
    ];
    let summary = wbscope()
        .arg("replay")
        .arg(&store)
        .args(&window)
        .arg("--summary")
        .output()
        .expect("replay --summary");
    assert!(summary.status.success(), "{summary:?}");
    let summary: serde_json::Value = serde_json::from_slice(&summary.stdout).expect("summary JSON");
    let (calls, pages) = (
        summary["calls"].as_u64().expect("calls"),
        summary["pages_written"].as_u64().expect("pages"),
    );
    // What the burst must produce: its files' pages, nothing else on the
    // device in the window.
    assert_eq!(pages, (FILES * FILE_BYTES / 4096) as u64, "{summary}");
    assert!(calls >= FILES as u64, "{summary}");

    let om = tmp.path().join("window.om");
    let out = wbscope()
        .arg("replay")
        .arg(&store)
        .args(&window)
        .args([
            "--openmetrics",
            "--label",
            "instance=host-a",
            "--label",
            "job=wbscope",
        ])
        .stdout(fs::File::create(&om).expect("om file"))
        .stderr(Stdio::piped())
        .output()
        .expect("replay --openmetrics");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("snapshots"), "{said}");
    let text = fs::read_to_string(&om).expect("read om");
    assert!(text.ends_with("# EOF\n"));

    let data = tmp.path().join("data");
    let blocks = wbscope_programs::PROMTOOL
        .command()
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(&data)
        .output()
        .expect("promtool (cargo xtask setup installs it)");
    assert!(
        blocks.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&blocks.stdout),
        String::from_utf8_lossy(&blocks.stderr)
    );
    let prom = Prometheus::start("global:\n  scrape_interval: 15s\n", Some(&data));
    // Evaluated at the last sample, over a range reaching back past the
    // zeros at --since: nothing to extrapolate at either end.
    let at = last_timestamp(&text);
    let range_ms = (at.parse::<f64>().expect("ts") * 1000.0) as u64 - since / 1_000_000 + 1000;
    let increase = |metric: &str| {
        prom.value_at(
            &format!(
                r#"sum(increase({metric}{{instance="host-a",job="wbscope",dev="{dev}"}}[{range_ms}ms]))"#
            ),
            Some(&at),
        )
    };
    assert_eq!(
        increase("wbscope_pages_written_total"),
        Some(pages as f64),
        "{}",
        prom.log()
    );
    assert_eq!(
        increase("wbscope_writepages_calls_total"),
        Some(calls as f64)
    );
    // Every series carries both labels: none without them.
    let unlabelled = prom.query_at(
        r#"count({__name__=~"wbscope_.+", instance!="host-a"}) or count({__name__=~"wbscope_.+", job!="wbscope"})"#,
        Some(&at),
    );
    assert!(unlabelled.is_empty(), "{unlabelled:?}");
    let levels = prom.value_at(
        r#"count(wbscope_dirty_pages{instance="host-a"})"#,
        Some(&at),
    );
    assert_eq!(levels, Some(1.0));
}
