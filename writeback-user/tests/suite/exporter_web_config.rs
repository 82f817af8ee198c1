//! `wbscope trace --prometheus ... --web-config FILE`: TLS with
//! client certificates and basic auth in the exporter-toolkit format,
//! certificates made by the test (rcgen). A real Prometheus scrapes
//! through it; curl without credentials, with a wrong password, or with a
//! client certificate the server does not trust gets nothing of the
//! metrics. The exporter runs with its privileges dropped meanwhile.

use std::{
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use crate::prometheus_server::{Killed, Prometheus, wait_for};
use crate::support::wbscope;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

pub(crate) const USER: &str = "prometheus";
pub(crate) const PASSWORD: &str = "correct horse battery staple";

/// A certificate authority of the test's own.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed");
        Ca { cert, key }
    }

    /// A leaf for `names`, for a server or a client, written as
    /// `DIR/NAME.crt` and `DIR/NAME.key`.
    fn issue(&self, dir: &Path, name: &str, names: &[&str], server: bool) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let key = KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("signed");
        let (crt, pem) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        fs::write(&crt, cert.pem()).expect("write cert");
        fs::write(&pem, key.serialize_pem()).expect("write key");
        (crt, pem)
    }

    fn write(&self, path: &Path) {
        fs::write(path, self.cert.pem()).expect("write ca");
    }
}

/// The test's certificates and web config (exporter-toolkit's format,
/// which Prometheus's own `--web.config.file` reads too) in a temporary
/// directory: a server certificate for 127.0.0.1 and localhost, a
/// client's, a stranger's from another CA, basic auth for [`USER`].
pub(crate) struct Pki {
    /// Holds the files below until the test ends.
    _dir: tempfile::TempDir,
    pub(crate) ca: PathBuf,
    pub(crate) client: (PathBuf, PathBuf),
    stranger: (PathBuf, PathBuf),
    pub(crate) web_config: PathBuf,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let server_ca = Ca::new("wbscope test server CA");
        let client_ca = Ca::new("wbscope test client CA");
        let rogue_ca = Ca::new("someone else's CA");
        let ca = dir.path().join("ca.crt");
        server_ca.write(&ca);
        client_ca.write(&dir.path().join("clients.crt"));
        server_ca.issue(dir.path(), "server", &["localhost", "127.0.0.1"], true);
        let client = client_ca.issue(dir.path(), "client", &["scraper"], false);
        let stranger = rogue_ca.issue(dir.path(), "stranger", &["scraper"], false);
        let hash = bcrypt::hash(PASSWORD, 6).expect("bcrypt");
        // Relative paths: resolved from the config file's directory.
        let web_config = dir.path().join("web.yml");
        fs::write(
            &web_config,
            format!(
                "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
                 client_ca_file: clients.crt\n  client_auth_type: RequireAndVerifyClientCert\n\
                 basic_auth_users:\n  {USER}: {hash}\n"
            ),
        )
        .expect("web config");
        Pki {
            _dir: dir,
            ca,
            client,
            stranger,
            web_config,
        }
    }
}

/// `wbscope trace --interval 0.5 --prometheus ADDR ARGS`, once tracing.
fn start_exporter(listen: &str, args: &[&str]) -> (Killed, SocketAddr, Vec<String>) {
    let mut all = vec!["--interval", "0.5"];
    all.extend_from_slice(args);
    crate::prometheus_server::start_exporter(listen, &all)
}

/// curl against `https://127.0.0.1:PORT/metrics` trusting the test's CA,
/// with `args` added; returns its output with the body on stdout and the
/// HTTP status on the last line.
fn curl(addr: SocketAddr, ca: &Path, args: &[&str]) -> Output {
    wbscope_programs::CURL
        .command()
        .args(["--silent", "--show-error", "--max-time", "10"])
        .arg("--cacert")
        .arg(ca)
        .args(args)
        .args(["--write-out", "\n%{http_code}"])
        .arg(format!("https://{addr}/metrics"))
        .output()
        .expect("spawn curl (cargo xtask setup installs it)")
}

fn cert_args(pair: &(PathBuf, PathBuf)) -> [&str; 4] {
    [
        "--cert",
        pair.0.to_str().expect("path"),
        "--key",
        pair.1.to_str().expect("path"),
    ]
}

/// (HTTP status, body) of a curl run that completed an exchange.
fn answered(out: &Output) -> (String, String) {
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_string(), body.to_string())
}

fn proc_status(pid: u32, field: &str) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {field}"))
}

/// With TLS, client certificates and basic auth: the right client with
/// the right password gets the metrics; without credentials or with a
/// wrong password, 401 with nothing of them; with an untrusted or no
/// client certificate, no TLS session at all. The refusals are counted.
#[test]
fn web_config_lets_in_only_who_it_should() {
    let _file = crate::support::file_group(module_path!());
    let pki = Pki::new();
    let config = pki.web_config.to_str().expect("path");
    let (exporter, addr, stderr) = start_exporter("127.0.0.1:0", &["--web-config", config]);
    assert!(
        stderr
            .iter()
            .any(|l| l.starts_with("wbscope: metrics on https://")),
        "{stderr:?}"
    );
    assert!(!stderr.iter().any(|l| l.contains("warning")), "{stderr:?}");
    // TLS is served with the privileges dropped.
    assert_eq!(proc_status(exporter.0.id(), "Seccomp"), "2");
    assert_eq!(proc_status(exporter.0.id(), "CapEff"), "0000000000000000");

    let client = cert_args(&pki.client);
    let good = format!("{USER}:{PASSWORD}");
    let bad = format!("{USER}:not the password");
    let out = curl(addr, &pki.ca, &[&client[..], &["--user", &good]].concat());
    let (code, body) = answered(&out);
    assert_eq!(code, "200", "{}", String::from_utf8_lossy(&out.stderr));
    assert!(body.contains("wbscope_intervals_total"), "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");

    for (what, extra) in [
        ("no credentials", vec![]),
        ("a wrong password", vec!["--user", bad.as_str()]),
        ("an unknown user", vec!["--user", "mallory:x"]),
    ] {
        let out = curl(addr, &pki.ca, &[&client[..], &extra].concat());
        let (code, body) = answered(&out);
        assert_eq!(code, "401", "{what}: {body}");
        assert!(
            !body.contains("wbscope_") && !body.contains("# EOF"),
            "{what} leaked: {body}"
        );
        assert_eq!(body.trim(), "Unauthorized", "{what}");
    }

    for (what, extra) in [
        (
            "an untrusted client certificate",
            cert_args(&pki.stranger).to_vec(),
        ),
        ("no client certificate", vec![]),
    ] {
        let out = curl(addr, &pki.ca, &[&extra[..], &["--user", &good]].concat());
        let (code, body) = answered(&out);
        assert!(!out.status.success(), "{what}: curl succeeded");
        assert_eq!(code, "000", "{what}: an HTTP answer");
        assert!(body.is_empty(), "{what} leaked: {body}");
    }

    // Plain HTTP on the TLS port gets nothing either.
    let out = wbscope_programs::CURL
        .command()
        .args(["--silent", "--max-time", "5", "--user", &good])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .expect("curl");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("wbscope_"));

    let out = curl(addr, &pki.ca, &[&client[..], &["--user", &good]].concat());
    let (_, body) = answered(&out);
    let value = |line_start: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(line_start))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {line_start} in {body}"))
    };
    assert_eq!(
        value(r#"wbscope_exporter_auth_failures_total{reason="no_credentials"} "#),
        1.0
    );
    assert_eq!(
        value(r#"wbscope_exporter_auth_failures_total{reason="wrong_credentials"} "#),
        2.0
    );
    // The two refused certificates and the plain-HTTP request.
    assert!(value("wbscope_exporter_tls_handshake_failures_total ") >= 3.0);
    drop(exporter);
}

/// A real Prometheus scrapes over TLS with its client certificate and
/// basic auth: its `up` for the job is 1.
#[test]
fn prometheus_scrapes_over_tls_with_basic_auth() {
    let _file = crate::support::file_group(module_path!());
    let pki = Pki::new();
    let config = pki.web_config.to_str().expect("path");
    let (exporter, addr, _) = start_exporter("127.0.0.1:0", &["--web-config", config]);
    let prom = Prometheus::start(
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: wbscope\n    scheme: https\n    tls_config:\n      \
             ca_file: {ca}\n      cert_file: {cert}\n      key_file: {key}\n    basic_auth:\n      \
             username: {USER}\n      password: {PASSWORD}\n    static_configs:\n      \
             - targets: ['{addr}']\n",
            ca = pki.ca.display(),
            cert = pki.client.0.display(),
            key = pki.client.1.display(),
        ),
        None,
    );
    let up = wait_for(Duration::from_secs(40), || {
        prom.query(r#"up{job="wbscope"}"#) == Some(1.0)
    });
    assert!(
        up,
        "prometheus never scraped wbscope over TLS: {}",
        prom.log()
    );
    // What it scraped is wbscope's metrics, not an error page.
    assert!(
        prom.query(r#"wbscope_intervals_total{job="wbscope"}"#)
            .is_some_and(|v| v >= 1.0),
        "{}",
        prom.log()
    );
    drop(prom);
    drop(exporter);
}

/// Beyond loopback without --web-config: one warning line; with TLS and
/// basic auth, none.
#[test]
fn listening_beyond_loopback_without_web_config_warns_once() {
    let _file = crate::support::file_group(module_path!());
    let (exporter, _, stderr) = start_exporter("0.0.0.0:0", &["--listen-any"]);
    drop(exporter);
    let warnings: Vec<&String> = stderr.iter().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stderr:?}");
    assert!(
        warnings[0].starts_with("wbscope: warning: metrics on 0.0.0.0:")
            && warnings[0].contains("without TLS or authentication"),
        "{warnings:?}"
    );
    let pki = Pki::new();
    let config = pki.web_config.to_str().expect("path");
    let (exporter, _, stderr) =
        start_exporter("0.0.0.0:0", &["--listen-any", "--web-config", config]);
    drop(exporter);
    assert!(!stderr.iter().any(|l| l.contains("warning")), "{stderr:?}");
}

/// A web config that cannot be used stops the trace before it attaches:
/// exit 1, one line naming the file.
#[test]
fn a_broken_web_config_is_one_line() {
    let _file = crate::support::file_group(module_path!());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("web.yml");
    fs::write(
        &path,
        "basic_auth_users:\n  prometheus: plain-text-password\n",
    )
    .expect("write");
    let out = wbscope()
        .args(["trace", "--prometheus", "127.0.0.1:0", "--web-config"])
        .arg(&path)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not a bcrypt hash"), "{stderr}");
    let out = wbscope()
        .args(["trace", "--web-config"])
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "--web-config needs --prometheus"
    );
}
