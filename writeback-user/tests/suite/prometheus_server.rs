//! A real Prometheus for the tests (Debian's `prometheus`, installed by
//! `cargo xtask setup`): started on a free loopback port over a TSDB in
//! a temporary directory, asked over its HTTP API, killed and removed
//! however the test ends.
use std::{
    fs,
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Stdio},
    thread,
    time::{Duration, Instant},
};

/// Kills and reaps a child process however the test ends.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` over HTTP/1.0; returns the status code, headers and body.
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("no header end");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    (status, head.to_string(), body.to_string())
}

/// A free loopback port (bound, then released for the server to take).
pub(crate) fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `wbscope trace --prometheus LISTEN ARGS`, returned once it says it
/// is tracing, with the address it serves on (from its "metrics on"
/// line) and what it said before; its stderr is read to the end by a
/// thread of its own.
pub(crate) fn start_exporter(listen: &str, args: &[&str]) -> (Killed, SocketAddr, Vec<String>) {
    let mut child = crate::support::wbscope()
        .args(["trace", "--prometheus", listen])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wbscope");
    let rx = crate::support::lines_of(child.stderr.take().expect("stderr"));
    let child = Killed(child);
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.contains("tracing;") => break,
            Ok(line) => seen.push(line),
            Err(e) => panic!("wbscope trace did not start ({e}): {seen:?}"),
        }
    }
    let addr = seen
        .iter()
        .find_map(|l| l.strip_prefix("wbscope: metrics on "))
        .and_then(|rest| rest.split_once("://"))
        .map(|(_, a)| a.trim_end_matches("/metrics").parse().expect("address"))
        .unwrap_or_else(|| panic!("no metrics address: {seen:?}"));
    (child, addr, seen)
}

/// Polls `f` every 500 ms until it returns true, for at most `limit`.
pub(crate) fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// A running Prometheus server, and the directory of its config, TSDB
/// and log.
pub(crate) struct Prometheus {
    child: Option<Killed>,
    pub(crate) addr: SocketAddr,
    pub(crate) dir: tempfile::TempDir,
    data: std::path::PathBuf,
    extra: Vec<String>,
    /// Behind TLS and basic auth (`--web.config.file`): curl's arguments
    /// to reach it (CA, client certificate, credentials).
    tls: Option<Vec<String>>,
}

impl Prometheus {
    /// Starts Prometheus with `config` (its prometheus.yml) over the
    /// TSDB `data`, which a backfill may have filled beforehand (else
    /// an empty one in its directory); ready when this returns.
    pub(crate) fn start(config: &str, data: Option<&Path>) -> Prometheus {
        Prometheus::start_with(config, data, &[])
    }

    /// [`Self::start`] with more flags (`--web.enable-remote-write-receiver`).
    pub(crate) fn start_with(config: &str, data: Option<&Path>, extra: &[&str]) -> Prometheus {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(dir.path().join("prometheus.yml"), config).expect("config");
        let data = data.map_or_else(|| dir.path().join("data"), Path::to_path_buf);
        let mut prom = Prometheus {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            dir,
            data,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls: None,
        };
        prom.run();
        prom
    }

    /// [`Self::start_with`] behind `web_config` (TLS and basic auth), asked
    /// through curl with `curl_args` (`--cacert`, `--cert`, `--key`,
    /// `--user`).
    pub(crate) fn start_tls(
        config: &str,
        extra: &[&str],
        web_config: &Path,
        curl_args: &[String],
    ) -> Prometheus {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(dir.path().join("prometheus.yml"), config).expect("config");
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        extra.push(format!("--web.config.file={}", web_config.display()));
        let mut prom = Prometheus {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], free_port())),
            data: dir.path().join("data"),
            dir,
            extra,
            tls: Some(curl_args.to_vec()),
        };
        prom.run();
        prom
    }

    /// `GET path`: its status and body, over TLS through curl when the
    /// server has it.
    fn get(&self, path: &str) -> (u16, String) {
        let Some(args) = &self.tls else {
            let (status, _, body) = http_get(self.addr, path);
            return (status, body);
        };
        let out = wbscope_programs::CURL
            .command()
            .args([
                "--silent",
                "--max-time",
                "10",
                "--write-out",
                "\n%{http_code}",
            ])
            .args(args)
            .arg(format!("https://{}{path}", self.addr))
            .output()
            .expect("spawn curl (cargo xtask setup installs it)");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    /// Starts the server (again, after [`Self::stop`]: same address,
    /// config and TSDB) and waits until it is ready.
    pub(crate) fn run(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("prometheus.log"))
            .expect("log");
        self.child = Some(Killed(
            wbscope_programs::PROMETHEUS
                .command()
                .arg(format!(
                    "--config.file={}",
                    self.dir.path().join("prometheus.yml").display()
                ))
                .arg(format!("--storage.tsdb.path={}", self.data.display()))
                .arg(format!("--web.listen-address={}", self.addr))
                .arg("--log.level=warn")
                .args(&self.extra)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn prometheus (cargo xtask setup installs it)"),
        ));
        let addr = self.addr;
        let ready = wait_for(Duration::from_secs(30), || {
            TcpStream::connect(addr).is_ok() && self.get("/-/ready").0 == 200
        });
        assert!(ready, "prometheus not ready: {}", self.log());
    }

    /// Makes it read its config again (SIGHUP) and waits until the
    /// reload is done: the next ready answer after it.
    pub(crate) fn reload(&mut self) {
        if let Some(k) = &self.child {
            // SAFETY: a plain syscall on our own child.
            unsafe { libc::kill(k.0.id() as i32, libc::SIGHUP) };
        }
        thread::sleep(Duration::from_millis(500));
        let addr = self.addr;
        assert!(
            wait_for(Duration::from_secs(10), || http_get(addr, "/-/ready").0
                == 200),
            "not ready after a reload: {}",
            self.log()
        );
    }

    /// Stops the server as an operator would (SIGTERM: its TSDB is
    /// closed cleanly) and waits for it to exit.
    pub(crate) fn stop(&mut self) {
        if let Some(mut k) = self.child.take() {
            // SAFETY: a plain syscall on our own child.
            unsafe { libc::kill(k.0.id() as i32, libc::SIGTERM) };
            let _ = k.0.wait();
        }
    }

    pub(crate) fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The result of an instant query (API `data.result`); `at`, seconds
    /// since the epoch, for a query at another time than now.
    pub(crate) fn query_at(&self, q: &str, at: Option<&str>) -> Vec<serde_json::Value> {
        let mut path = format!("/api/v1/query?query={}", percent_encode(q));
        if let Some(t) = at {
            path.push_str(&format!("&time={t}"));
        }
        let (status, body) = self.get(&path);
        assert_eq!(status, 200, "{q}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("query JSON");
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"]
            .as_array()
            .expect("result vector")
            .clone()
    }

    /// The single value of an instant query's result vector, if it has
    /// one.
    pub(crate) fn query(&self, q: &str) -> Option<f64> {
        self.value_at(q, None)
    }

    /// [`Self::query`] at `at`.
    pub(crate) fn value_at(&self, q: &str, at: Option<&str>) -> Option<f64> {
        let result = self.query_at(q, at);
        assert!(result.len() <= 1, "{q}: {result:?}");
        result
            .first()
            .and_then(|r| r["value"][1].as_str())
            .map(|x| x.parse().expect("sample value"))
    }
}
