//! What the writer bench measures beside the tools' own figures: the
//! children's CPU time, the per-second dirtying rate from /proc/vmstat,
//! fio's bandwidth log and the CV of a per-second series.
use std::{
    fs,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;

pub(super) fn children_rusage() -> (f64, f64) {
    // SAFETY: rusage is plain data (all zeroes is valid); getrusage writes
    // into the struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

pub(super) fn population_cv(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if mean <= 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    Some(var.sqrt() / mean)
}

pub(super) fn vmstat(field: &str) -> Option<u64> {
    fs::read_to_string("/proc/vmstat")
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
}

/// Samples /proc/vmstat `nr_dirtied` once a second until `stop`; returns
/// MB dirtied in each full second (system-wide).
pub(super) fn dirtied_per_second(stop: Arc<AtomicBool>) -> Vec<f64> {
    let started = Instant::now();
    let mut last = vmstat("nr_dirtied").unwrap_or(0);
    let mut out = Vec::new();
    let mut tick = 1u32;
    loop {
        let due = started + Duration::from_secs(tick.into());
        while Instant::now() < due {
            if stop.load(Ordering::Relaxed) {
                return out;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let now = vmstat("nr_dirtied").unwrap_or(last);
        out.push(now.saturating_sub(last) as f64 * 4096.0 / 1e6);
        last = now;
        tick += 1;
    }
}

/// fio's averaged bandwidth log: `msec, KiB/s, dir, bs, offset[, prio]`.
pub(super) fn fio_bw_log(path: &Path) -> anyhow::Result<Vec<f64>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split(',').nth(1)?.trim().parse::<f64>().ok())
        .map(|kib_s| kib_s * 1024.0 / 1e6)
        .collect())
}
