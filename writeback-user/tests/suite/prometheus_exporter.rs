//! `wbscope trace --prometheus`: the exporter against the running kernel
//! (root), scraped directly and by a real Prometheus server (Debian's
//! `prometheus`, started by the test on loopback).

use std::{
    collections::HashMap,
    fs::{self, File},
    io::{ErrorKind, Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::Stdio,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use crate::prometheus_server::{Killed, Prometheus, http_get, start_exporter, wait_for};
use crate::support::{LoopFs, dev_of, wbscope};
use prometheus_parse::{Scrape, Value};

const PAGE: u64 = 4096;
const MIB: u64 = 32;
const PAGES: u64 = (MIB << 20) / PAGE;

/// A running `wbscope trace --prometheus 127.0.0.1:0 ...`, with the
/// address it listens on (read from its stderr).
struct Exporter {
    child: Killed,
    addr: SocketAddr,
}

impl Exporter {
    fn start(extra: &[&str]) -> Exporter {
        let (child, addr, _) = start_exporter("127.0.0.1:0", extra);
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_ne!(addr.port(), 0);
        Exporter { child, addr }
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }
}

/// Scrapes `/metrics` and parses it with an exposition-format parser.
fn scrape(addr: SocketAddr) -> Scrape {
    let (status, head, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "no # EOF terminator");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parse the exposition")
}

fn number(v: &Value) -> f64 {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => *x,
        other => panic!("not a number: {other:?}"),
    }
}

/// Sum of `metric` over the samples whose labels include `want`.
fn sum(s: &Scrape, metric: &str, want: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == metric)
        .filter(|x| want.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| number(&x.value))
        .sum()
}

/// Writes `mib` MiB of non-zero data in 1 MiB chunks and fsyncs it.
fn write_and_fsync(path: &Path, mib: u64) {
    let mut f = File::create_new(path).expect("create");
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8 + 1).collect();
    for _ in 0..mib {
        f.write_all(&chunk).expect("write");
    }
    f.sync_all().expect("fsync");
}

/// Scrape during a 32 MiB write + fsync on a filesystem made for the test:
/// that device's pages-written counter grows by exactly 8192 pages, and
/// the pages-per-call histogram of the same calls agrees.
#[test]
fn scrape_during_a_write_counts_its_pages() {
    let _file = crate::support::file_group(module_path!());
    // Per folio: the default (per-inode) attribution reads each process's
    // dirtied pages from /proc/PID/io, which a run that dropped its
    // privileges cannot (trace-json.md, "Who dirtied it").
    let exporter = Exporter::start(&["--interval", "0.5", "--json", "--enable", "dirty_folio"]);
    let before = scrape(exporter.addr);
    let types: HashMap<_, _> = before
        .samples
        .iter()
        .map(|s| (s.metric.as_str(), &s.value))
        .collect();
    assert!(
        matches!(types.get("wbscope_dirty_pages"), Some(Value::Gauge(_))),
        "{types:?}"
    );
    let intervals_before = sum(&before, "wbscope_intervals_total", &[]);

    let fs = LoopFs::new("ext4", 128);
    let path = fs.path("data");
    let dev = dev_of(&fs.mountpoint);
    let on_dev = [("dev", dev.as_str())];
    // Loop devices are reused: another test may have written to this
    // major:minor since the trace started. The baseline is taken once the
    // device is ours.
    let before = scrape(exporter.addr);
    write_and_fsync(&path, MIB);

    // The call counters move as records are drained (every 100 ms); wait
    // until the fsync's pages are there, then a full interval more, so a
    // late record would show up as too many pages.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let s = scrape(exporter.addr);
        if sum(&s, "wbscope_pages_written_total", &on_dev) >= PAGES as f64
            || Instant::now() > deadline
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(1200));
    let after = scrape(exporter.addr);

    let written = sum(&after, "wbscope_pages_written_total", &on_dev)
        - sum(&before, "wbscope_pages_written_total", &on_dev);
    assert_eq!(written, PAGES as f64, "pages written on {dev}");
    let per_call_sum = sum(&after, "wbscope_writepages_pages_per_call_sum", &on_dev);
    assert_eq!(per_call_sum, PAGES as f64, "histogram sum on {dev}");
    let calls = sum(&after, "wbscope_writepages_calls_total", &on_dev);
    let per_call_count = sum(&after, "wbscope_writepages_pages_per_call_count", &on_dev);
    assert!(calls >= 1.0, "no calls on {dev}");
    assert_eq!(per_call_count, calls);
    // The fsync's calls asked for everything (nr_to_write = LONG_MAX).
    let sync = [("dev", dev.as_str()), ("cause", "sync")];
    assert!(sum(&after, "wbscope_pages_written_total", &sync) > 0.0);
    assert!(sum(&after, "wbscope_writepages_unbounded_calls_total", &sync) >= 1.0);
    // The histogram parses as one: its +Inf bucket holds every call.
    let hist: f64 = after
        .samples
        .iter()
        .filter(|s| {
            s.metric == "wbscope_writepages_pages_per_call" && s.labels.get("dev") == Some(&dev)
        })
        .map(|s| match &s.value {
            Value::Histogram(b) => b
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map_or(0.0, |b| b.count),
            other => panic!("not a histogram: {other:?}"),
        })
        .sum();
    assert_eq!(hist, calls);
    // The kernel-side figures came through the interval lines.
    assert!(sum(&after, "wbscope_intervals_total", &[]) >= intervals_before + 2.0);
    // By default the devices come from /proc/diskstats: requests and
    // bytes, no request histograms (`--enable device_io`).
    assert!(sum(&after, "wbscope_device_requests_total", &on_dev) >= 1.0);
    assert!(sum(&after, "wbscope_device_bytes_total", &on_dev) >= (PAGES * PAGE) as f64);
    // The fsync flushed the loop device's write cache at least once.
    assert!(sum(&after, "wbscope_device_flushes_total", &on_dev) >= 1.0);
    assert_eq!(
        sum(&after, "wbscope_device_request_bytes_count", &on_dev),
        0.0
    );
    assert!(sum(&after, "wbscope_dirty_threshold_pages", &[]) > 0.0);
    assert!(sum(&after, "wbscope_bpf_runs_total", &[]) > 0.0);
    assert_eq!(sum(&after, "wbscope_lost_records_total", &[]), 0.0);
    // Who dirtied it, per cgroup: this process dirtied the file's pages
    // and they were written (other processes' pages may add to both).
    let grew = |m: &str| sum(&after, m, &[]) - sum(&before, m, &[]);
    assert!(grew("wbscope_cgroup_pages_dirtied_total") >= PAGES as f64);
    assert!(grew("wbscope_cgroup_pages_written_total") >= PAGES as f64);
    // Bounded cardinality: no label but these, and at most 16 cgroups
    // and "other".
    let mut cgroups = std::collections::HashSet::new();
    for s in &after.samples {
        for (k, v) in s.labels.iter() {
            assert!(
                [
                    "dev",
                    "cause",
                    "program",
                    "finding",
                    "cgroup_id",
                    "by",
                    "stage",
                    "class"
                ]
                .contains(&k.as_str()),
                "label {k} on {}",
                s.metric
            );
            if k == "cgroup_id" {
                cgroups.insert(v.clone());
            }
        }
    }
    assert!(
        cgroups.contains("other") && cgroups.len() <= 17,
        "{cgroups:?}"
    );
    drop(exporter);
}

/// A real Prometheus server scrapes wbscope every second; after a known
/// write, its API shows that device's pages-written series at exactly the
/// written pages.
#[test]
fn prometheus_server_scrapes_the_written_pages() {
    let _file = crate::support::file_group(module_path!());
    // The device is ours before the trace starts: no other test's writes
    // on a reused loop device can land on its series.
    let fs = LoopFs::new("ext4", 128);
    let dev = dev_of(&fs.mountpoint);
    let exporter = Exporter::start(&["--interval", "0.5"]);
    let prom = Prometheus::start(
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: wbscope\n    static_configs:\n      - targets: ['{}']\n",
            exporter.addr
        ),
        None,
    );
    let query = |q: &str| prom.query(q);
    let prom_log = || prom.log();
    // A scrape that fails to parse would leave `up` at 0.
    let up = wait_for(Duration::from_secs(30), || {
        query(r#"up{job="wbscope"}"#) == Some(1.0)
    });
    assert!(up, "wbscope never scraped successfully: {}", prom_log());

    let series = format!(r#"sum(wbscope_pages_written_total{{job="wbscope",dev="{dev}"}})"#);
    assert_eq!(query(&series), None, "{series} before the write");
    write_and_fsync(&fs.path("data"), MIB);
    let mut last = None;
    let seen = wait_for(Duration::from_secs(30), || {
        last = query(&series);
        last.is_some_and(|v| v >= PAGES as f64)
    });
    assert!(seen, "{series} = {last:?} after 30 s: {}", prom_log());
    // One more scrape: nothing beyond the write's pages.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(query(&series), Some(PAGES as f64), "{series}");
    let calls = format!(r#"sum(wbscope_writepages_calls_total{{dev="{dev}"}})"#);
    assert!(query(&calls).is_some_and(|c| c >= 1.0), "{calls}");
    drop(prom);
    drop(exporter);
}

/// A non-loopback address without --listen-any is a usage error: exit 2,
/// one line, before anything is attached.
#[test]
fn non_loopback_address_needs_listen_any() {
    let _file = crate::support::file_group(module_path!());
    for args in [
        &["trace", "--prometheus", "0.0.0.0:9000"][..],
        &["trace", "--prometheus", "[::]:9000"],
        &["trace", "--listen-any"],
        &["trace", "--prometheus", "not-an-address"],
    ] {
        // Bounded: were the address accepted, the trace would run on.
        let mut child = wbscope()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run wbscope");
        let exited = wait_for(Duration::from_secs(20), || {
            child.try_wait().expect("wait").is_some()
        });
        if !exited {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after 20 s");
        }
        let out = child.wait_with_output().expect("output");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("wbscope: error: "), "{stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        if args[2..].contains(&"0.0.0.0:9000") {
            assert!(stderr.contains("--listen-any"), "{stderr}");
        }
    }
}

/// How long a scrape may take while other clients misbehave (a scrape
/// alone takes a few ms on loopback).
const SCRAPE_LIMIT: Duration = Duration::from_secs(2);

/// Reads `s` until the peer closes it, for at most what is left of
/// `limit` since `start`.
fn read_until_closed(
    s: &mut TcpStream,
    start: Instant,
    limit: Duration,
) -> Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!(
                "connection still open after {limit:?} ({} bytes read)",
                raw.len()
            ));
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => return Ok(raw),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(format!("read after {:?}: {e}", start.elapsed())),
        }
    }
}

/// `GET /metrics` that must be answered in full (status 200, the text
/// ending in `# EOF`) and closed within `limit`; how long it took.
fn scrape_within(addr: SocketAddr, limit: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send: {e}"))?;
    let raw = read_until_closed(&mut s, start, limit)?;
    let raw = String::from_utf8_lossy(&raw);
    if !raw.starts_with("HTTP/1.1 200 ") || !raw.ends_with("# EOF\n") {
        let head: String = raw.chars().take(200).collect();
        return Err(format!("not a full 200 response: {head:?}"));
    }
    Ok(start.elapsed())
}

/// `count` connections to `addr` that send nothing.
fn idle_connections(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|i| {
            TcpStream::connect_timeout(&addr, SCRAPE_LIMIT)
                .unwrap_or_else(|e| panic!("idle connection {i}: {e}"))
        })
        .collect()
}

/// A line of `/proc/PID/status` (`Threads:`, `VmRSS:`), as a number.
fn proc_status(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// File descriptors wbscope holds: the listener, the accepted sockets,
/// its BPF objects and whatever it reads at the moment.
fn open_fds(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .count()
}

/// 40 clients that connect and send nothing (more than the exporter
/// holds at once) must not keep a scraper out: 3 of 3 scrapes are answered
/// within 2 s each. Before connections were evicted the 16 held idle
/// sockets kept the next scrape in the accept queue for 10 s.
#[test]
fn scrapes_succeed_with_idle_connections_open() {
    let _file = crate::support::file_group(module_path!());
    let exporter = Exporter::start(&["--interval", "0.5"]);
    let idle = idle_connections(exporter.addr, 40);
    // Let the exporter accept them all before the scrapes come.
    std::thread::sleep(Duration::from_millis(300));
    let results: Vec<_> = (0..3)
        .map(|_| scrape_within(exporter.addr, SCRAPE_LIMIT))
        .collect();
    drop(idle);
    for (i, r) in results.iter().enumerate() {
        assert!(r.is_ok(), "scrape {i} with 40 idle connections: {r:?}");
    }
    drop(exporter);
}

/// A scraper that asks for keep-alive (as Prometheus does) gets its
/// answer and the connection closed: the exporter keeps no idle
/// keep-alive connection for a client to hoard.
#[test]
fn scrape_connections_are_closed_after_the_response() {
    let _file = crate::support::file_group(module_path!());
    let exporter = Exporter::start(&["--interval", "0.5"]);
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&exporter.addr, SCRAPE_LIMIT).expect("connect");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {}\r\n\r\n",
        exporter.addr
    )
    .expect("send");
    let raw = read_until_closed(&mut s, start, SCRAPE_LIMIT);
    drop(s);
    let raw = raw.expect("keep-alive request");
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200 "), "{raw:.200}");
    assert!(raw.ends_with("# EOF\n"), "no # EOF terminator");
    drop(exporter);
}

/// The prefix a slowloris client trickles before an endless header value.
const SLOW_REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";

/// 100 slowloris connections, each sent one byte of a never-ending
/// request per second (and reconnected when the exporter drops it, as a
/// slowloris does), until `stop` or 30 s at most.
fn slowloris(addr: SocketAddr, stop: &AtomicBool) {
    let connect = || {
        let s = TcpStream::connect_timeout(&addr, SCRAPE_LIMIT).ok()?;
        s.set_nodelay(true).ok()?;
        s.set_write_timeout(Some(Duration::from_millis(100))).ok()?;
        Some(s)
    };
    let mut clients: Vec<(Option<TcpStream>, usize)> = (0..100).map(|_| (connect(), 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        for (s, sent) in &mut clients {
            let byte = SLOW_REQUEST.get(*sent).copied().unwrap_or(b'a');
            let alive = s.as_mut().is_some_and(|s| s.write_all(&[byte]).is_ok());
            if alive {
                *sent += 1;
            } else {
                *s = connect();
                *sent = 0;
            }
        }
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// During a 100-connection slowloris, scrapes are answered within 2 s,
/// and right after it too. Before, the first 16 slow clients held every
/// slot for the 10 s header timeout, then the next 16, and so on.
#[test]
fn scrapes_succeed_during_a_slowloris() {
    let _file = crate::support::file_group(module_path!());
    let exporter = Exporter::start(&["--interval", "0.5"]);
    let stop = AtomicBool::new(false);
    let during = std::thread::scope(|scope| {
        scope.spawn(|| slowloris(exporter.addr, &stop));
        // Past the first trickled bytes: every slow client is connected.
        std::thread::sleep(Duration::from_millis(1500));
        let results: Vec<_> = (0..5)
            .map(|_| {
                let r = scrape_within(exporter.addr, SCRAPE_LIMIT);
                std::thread::sleep(Duration::from_millis(700));
                r
            })
            .collect();
        stop.store(true, Ordering::Relaxed);
        results
    });
    for (i, r) in during.iter().enumerate() {
        assert!(r.is_ok(), "scrape {i} during the slowloris: {r:?}");
    }
    let after = scrape_within(exporter.addr, SCRAPE_LIMIT);
    assert!(after.is_ok(), "scrape after the slowloris: {after:?}");
    drop(exporter);
}

/// 1000 connections opened at once and then closed: wbscope's open
/// sockets, threads and memory stay bounded meanwhile (never one task and
/// socket per connection), a scrape during the flood and one after it are
/// answered within 2 s, and the sockets are released. Before, the scrape
/// during the flood waited behind 984 queued connections.
#[test]
fn a_connection_flood_stays_bounded() {
    let _file = crate::support::file_group(module_path!());
    let exporter = Exporter::start(&["--interval", "0.5"]);
    let pid = exporter.pid();
    let warm = scrape_within(exporter.addr, SCRAPE_LIMIT);
    assert!(warm.is_ok(), "scrape before the flood: {warm:?}");
    let fds = open_fds(pid);
    let threads = proc_status(pid, "Threads:");
    let rss_kib = proc_status(pid, "VmRSS:");

    let flood = idle_connections(exporter.addr, 1000);
    std::thread::sleep(Duration::from_millis(300));
    let fds_during = open_fds(pid);
    let threads_during = proc_status(pid, "Threads:");
    let rss_during = proc_status(pid, "VmRSS:");
    let during = scrape_within(exporter.addr, SCRAPE_LIMIT);
    drop(flood);
    let after = scrape_within(exporter.addr, SCRAPE_LIMIT);
    // The held connections see the flood's sockets close and end.
    let mut fds_after = open_fds(pid);
    let deadline = Instant::now() + Duration::from_secs(3);
    while fds_after > fds + 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        fds_after = open_fds(pid);
    }

    assert!(during.is_ok(), "scrape during the flood: {during:?}");
    assert!(after.is_ok(), "scrape after the flood: {after:?}");
    // At most MAX_CONNECTIONS accepted sockets; the slack of 4 is for
    // files the trace itself opens now and then (/proc, tracefs).
    let max = wbscope_export::prometheus::MAX_CONNECTIONS;
    assert!(
        fds_during <= fds + max + 4,
        "{fds_during} fds during the flood, {fds} before, at most {max} connections"
    );
    assert!(
        fds_after <= fds + 4,
        "{fds_after} fds after the flood, {fds} before"
    );
    // The runtime's workers serve every connection: no thread per client.
    assert!(
        threads_during <= threads + 2,
        "{threads_during} threads during the flood, {threads} before"
    );
    // 1000 connections each with a task and hyper's 8 KiB read buffer
    // would be ~10 MiB; the bounded set is well under 8 MiB.
    assert!(
        rss_during <= rss_kib + (8 << 10),
        "VmRSS {rss_during} KiB during the flood, {rss_kib} KiB before"
    );
    drop(exporter);
}
