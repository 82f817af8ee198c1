//! `--remote-write` into a real Prometheus (Debian's, started by the
//! test with `--web.enable-remote-write-receiver`): a trace's pushed
//! pages equal its own summary; a recorder whose receiver is stopped for
//! a minute keeps its memory within the queue's bound, counts and says
//! what it dropped, and its counters are exact again once the receiver
//! is back.

use std::{
    fs,
    io::Write as _,
    path::Path,
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use crate::prometheus_server::{Killed, Prometheus, wait_for};
use crate::support::{LoopFs, dev_of, lines_of, wbscope};

const RECEIVER: &[&str] = &["--web.enable-remote-write-receiver"];
const CONFIG: &str = "global:\n  scrape_interval: 15s\n";

/// Writes `files` new files of 256 KiB under `dir`, each fsynced.
fn fsynced_files(dir: &Path, tag: &str, files: usize) {
    let data = vec![0x33u8; 256 << 10];
    for i in 0..files {
        let mut f = fs::File::create(dir.join(format!("{tag}-{i}"))).expect("create");
        f.write_all(&data).expect("write");
        f.sync_all().expect("fsync");
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"))
}

/// A trace of the device's writes pushed every half second: after it
/// ends, the pages Prometheus holds for it (the last pushed sample) are
/// the trace's own summary's, which are the files' pages.
#[test]
fn a_pushed_trace_equals_its_own_summary() {
    let _file = crate::support::file_group(super::GROUP);
    let fs = LoopFs::new("ext4", 128);
    let dev = dev_of(&fs.mountpoint);
    let prom = Prometheus::start_with(CONFIG, None, RECEIVER);
    let url = format!("http://{}/api/v1/write", prom.addr);
    let device = fs.mountpoint.to_str().expect("utf-8").to_string();
    let mut child = wbscope()
        .args([
            "trace",
            "--json",
            "--interval",
            "0.5",
            "--duration",
            "6",
            "--device",
        ])
        .arg(&device)
        .args(["--remote-write", &url, "--label", "host=push-a"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wbscope");
    let stderr = lines_of(child.stderr.take().expect("stderr"));
    let mut said = Vec::new();
    while let Ok(line) = stderr.recv_timeout(Duration::from_secs(60)) {
        let tracing = line.contains("tracing;");
        said.push(line);
        if tracing {
            break;
        }
    }
    fsynced_files(&fs.mountpoint, "p", 16);
    let out = child.wait_with_output().expect("trace");
    said.extend(stderr.try_iter());
    assert!(out.status.success(), "{said:?}");
    let summary: serde_json::Value = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .last()
        .map(|l| serde_json::from_str(l).expect("summary JSON"))
        .expect("a summary line");
    let pages = summary["pages_written"].as_u64().expect("pages");
    assert_eq!(pages, 16 * 64, "{summary}");
    let last = said.last().cloned().unwrap_or_default();
    assert!(
        last.contains("samples sent to") && last.contains("none dropped"),
        "{said:?}"
    );
    let q = format!(r#"sum(wbscope_pages_written_total{{host="push-a",dev="{dev}"}})"#);
    assert_eq!(prom.query(&q), Some(pages as f64), "{}", prom.log());
    assert_eq!(
        prom.query(r#"sum(wbscope_writepages_calls_total{host="push-a"})"#),
        summary["calls"].as_u64().map(|c| c as f64)
    );
}

/// `record --store --remote-write` with a 64 KiB queue and 0.2-s
/// intervals; the receiver stopped for a minute (snapshots of a few KiB
/// five times a second overflow the queue) and started again on the
/// same TSDB. Meanwhile the queue stays within its bound and the
/// recorder's resident memory grows by less than 4 MiB; it says the receiver went away, then
/// that it answers again and how many samples were dropped; Prometheus
/// then has wbscope's own count of them, and the pages of the load
/// written during the outage (the counters are cumulative, so the
/// samples after it carry them).
#[test]
fn a_receiver_down_for_a_minute_costs_bounded_memory_and_is_said() {
    let _file = crate::support::file_group(super::GROUP);
    let fs = LoopFs::new("ext4", 128);
    let dev = dev_of(&fs.mountpoint);
    let mut prom = Prometheus::start_with(CONFIG, None, RECEIVER);
    let url = format!("http://{}/api/v1/write", prom.addr);
    let tmp = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let store = tmp.path().join("store");
    let device = fs.mountpoint.to_str().expect("utf-8").to_string();
    let (started, stderr) = crate::support::start_record_said(&[
        "--store",
        store.to_str().expect("utf-8"),
        "--min-free",
        "1",
        "--interval",
        "0.2",
        "--device",
        &device,
        "--remote-write",
        &url,
        "--remote-write-queue",
        "64KiB",
        "--label",
        "host=push-b",
    ]);
    let pid = started.child.id();
    let mut recorder = Killed(started.child);
    let series = format!(r#"sum(wbscope_pages_written_total{{host="push-b",dev="{dev}"}})"#);
    fsynced_files(&fs.mountpoint, "before", 4);
    assert!(
        wait_for(Duration::from_secs(20), || prom.query(&series)
            == Some(256.0)),
        "before the outage: {:?}; {}",
        prom.query(&series),
        prom.log()
    );
    thread::sleep(Duration::from_secs(2));
    let rss_before = status_kib(pid, "VmRSS:");
    prom.stop();
    let outage = Instant::now();
    let mut rss_most = rss_before;
    let mut wrote = false;
    while outage.elapsed() < Duration::from_secs(60) {
        if !wrote && outage.elapsed() > Duration::from_secs(10) {
            fsynced_files(&fs.mountpoint, "during", 8);
            wrote = true;
        }
        rss_most = rss_most.max(status_kib(pid, "VmRSS:"));
        thread::sleep(Duration::from_millis(500));
    }
    prom.run();
    let said_again = wait_for(Duration::from_secs(45), || {
        prom.query(&series) == Some((12 * 64) as f64)
    });
    // SAFETY: a plain syscall on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    assert!(recorder.0.wait().expect("wait").success());
    let said: Vec<String> = stderr.try_iter().collect();
    assert!(
        said_again,
        "after the outage: {:?}; {said:?}",
        prom.query(&series)
    );
    // The queue never held more than its bound (its own gauge, pushed
    // with every snapshot), and the process grew by less than a few MiB:
    // the queue, a snapshot being built, and the allocator's own slack
    // under the load written meanwhile (1.4 MiB measured here).
    let queued =
        prom.query(r#"max(max_over_time(wbscope_remote_write_queue_bytes{host="push-b"}[5m]))"#);
    assert!(
        queued.is_some_and(|q| q > 0.0 && q <= 65536.0),
        "queue bytes at most {queued:?}"
    );
    eprintln!(
        "outage: RSS {rss_before} KiB before, {rss_most} KiB at most; queue at most {queued:?} bytes"
    );
    assert!(
        rss_most < rss_before + 4096,
        "RSS {rss_before} KiB before, {rss_most} KiB at most while the receiver was down"
    );
    let down = said
        .iter()
        .find(|l| l.contains("retrying, holding up to 64 KiB"))
        .unwrap_or_else(|| panic!("no line for the outage: {said:?}"));
    assert!(down.starts_with("wbscope: remote write: "), "{down}");
    let back = said
        .iter()
        .find(|l| l.contains("answers again after"))
        .unwrap_or_else(|| panic!("no line for the return: {said:?}"));
    let dropped: u64 = back
        .split_whitespace()
        .zip(back.split_whitespace().skip(1))
        .find_map(|(n, w)| (w == "samples").then(|| n.parse().ok()).flatten())
        .unwrap_or_else(|| panic!("no count of dropped samples: {back}"));
    assert!(dropped > 0, "{back}");
    // wbscope's own count of them reached Prometheus too (its pushes
    // after the return carry it).
    let counted = prom.query(
        r#"sum(max_over_time(wbscope_remote_write_samples_dropped_total{host="push-b",reason="queue_full"}[5m]))"#,
    );
    assert!(
        counted.is_some_and(|c| c >= dropped as f64),
        "{counted:?} < {dropped}"
    );
}

/// A receiver behind TLS with a client certificate and basic auth (a
/// Prometheus started with its own `--web.config.file`): a trace whose
/// `--remote-write-config` gives the CA, the client certificate and the
/// password lands its samples; with a wrong password the receiver's 401
/// is said once, its samples dropped and counted as refused, not
/// retried, and the trace still ends well.
#[test]
fn a_push_over_tls_with_a_client_certificate_and_basic_auth_lands() {
    use crate::exporter_web_config::{PASSWORD, Pki, USER};
    let _file = crate::support::file_group(super::GROUP);
    let pki = Pki::new();
    let curl: Vec<String> = [
        "--cacert".to_string(),
        pki.ca.display().to_string(),
        "--cert".to_string(),
        pki.client.0.display().to_string(),
        "--key".to_string(),
        pki.client.1.display().to_string(),
        "--user".to_string(),
        format!("{USER}:{PASSWORD}"),
    ]
    .to_vec();
    let prom = Prometheus::start_tls(CONFIG, RECEIVER, &pki.web_config, &curl);
    let dir = tempfile::tempdir().expect("temp dir");
    let push = |instance: &str, password: &str| {
        let pw = dir.path().join(format!("{instance}.pw"));
        fs::write(&pw, format!("{password}\n")).expect("password file");
        let config = dir.path().join(format!("{instance}.yml"));
        fs::write(
            &config,
            format!(
                "basic_auth:\n  username: {USER}\n  password_file: {}\ntls_config:\n  ca_file: {}\n  cert_file: {}\n  key_file: {}\n",
                pw.display(),
                pki.ca.display(),
                pki.client.0.display(),
                pki.client.1.display()
            ),
        )
        .expect("push config");
        let out = wbscope()
            .args(["trace", "--interval", "0.5", "--duration", "2"])
            .arg("--remote-write")
            .arg(format!("https://{}/api/v1/write", prom.addr))
            .arg("--remote-write-config")
            .arg(&config)
            .args(["--label", &format!("instance={instance}")])
            .stdout(Stdio::null())
            .output()
            .expect("trace");
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{said}");
        said
    };
    let said = push("tls-good", PASSWORD);
    assert!(said.contains("none dropped"), "{said}");
    let landed = prom.query(r#"count({__name__=~"wbscope_.+",instance="tls-good"})"#);
    assert!(landed.is_some_and(|n| n > 10.0), "{landed:?}; {said}");
    let said = push("tls-bad", "not the password");
    let refused: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("answered 401"))
        .collect();
    assert_eq!(refused.len(), 1, "{said}");
    assert!(refused[0].contains("not retried"), "{said}");
    assert!(said.contains("refused by the receiver"), "{said}");
    assert_eq!(
        prom.query(r#"count({__name__=~"wbscope_.+",instance="tls-bad"})"#),
        None
    );
}
