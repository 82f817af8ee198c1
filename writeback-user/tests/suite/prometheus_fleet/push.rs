//! `--remote-write` into a real Prometheus (Debian's, started by the
//! test with `--web.enable-remote-write-receiver`): a trace's pushed
//! pages equal its own summary; over TLS with a client certificate and
//! basic auth the push lands, and a refusal is said. The receiver down
//! for a minute: [`super::outage`].

use std::{fs, io::Write as _, path::Path, process::Stdio, time::Duration};

use crate::prometheus_server::Prometheus;
use crate::support::{LoopFs, dev_of, lines_of, wbscope};

pub(super) const RECEIVER: &[&str] = &["--web.enable-remote-write-receiver"];
pub(super) const CONFIG: &str = "global:\n  scrape_interval: 15s\n";

/// Writes `files` new files of 256 KiB under `dir`, each fsynced.
pub(super) fn fsynced_files(dir: &Path, tag: &str, files: usize) {
    let data = vec![0x33u8; 256 << 10];
    for i in 0..files {
        let mut f = fs::File::create(dir.join(format!("{tag}-{i}"))).expect("create");
        f.write_all(&data).expect("write");
        f.sync_all().expect("fsync");
    }
}

pub(super) fn status_kib(pid: u32, field: &str) -> u64 {
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
