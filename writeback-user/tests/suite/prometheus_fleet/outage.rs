//! A remote-write receiver down for 30 s under a recorder: the queue's
//! bound holds, what was dropped is counted and said, and the counters
//! are exact once it is back. 30 s, not a minute: the 64 KiB queue is
//! full after about 4 s of 0.2-s snapshots, so the rest of the outage
//! only repeats the overflow, and each second of it is a second of CI
//! (within its 1,200 s goal only so). Its own module so that it sorts
//! first among this group's tests: libtest starts them in name order,
//! and this long one then overlaps all the others.

use std::{
    thread,
    time::{Duration, Instant},
};

use super::push::{CONFIG, RECEIVER, fsynced_files, status_kib};
use crate::prometheus_server::{Killed, Prometheus, wait_for};
use crate::support::{LoopFs, dev_of};

/// `record --store --remote-write` with a 64 KiB queue and 0.2-s
/// intervals; the receiver stopped for 30 s (snapshots of a few KiB
/// five times a second overflow the queue) and started again on the
/// same TSDB. Meanwhile the queue stays within its bound and the
/// recorder's resident memory grows by less than 4 MiB; it says the receiver went away, then
/// that it answers again and how many samples were dropped; Prometheus
/// then has wbscope's own count of them, and the pages of the load
/// written during the outage (the counters are cumulative, so the
/// samples after it carry them).
#[test]
fn a_receiver_down_for_30_s_costs_bounded_memory_and_is_said() {
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
    thread::sleep(Duration::from_millis(500));
    let rss_before = status_kib(pid, "VmRSS:");
    prom.stop();
    let outage = Instant::now();
    let mut rss_most = rss_before;
    let mut wrote = false;
    while outage.elapsed() < Duration::from_secs(30) {
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
