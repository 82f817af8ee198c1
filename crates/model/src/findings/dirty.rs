//! The dirty-page rules: writers throttled by a dirty limit
//! (`dirty-throttled`), their rate falling while dirty sits at the limit
//! (`page-cache-cliff`), and dirty growing while the flusher works
//! (`writeback-lagging`). Thresholds relative to the machine's own dirty
//! thresholds (`/proc/vmstat` `nr_dirty_threshold`,
//! `nr_dirty_background_threshold`); reasons in docs/findings.md.
use std::collections::BTreeMap;

use serde_json::json;

use super::{Ctx, Evidence, Severity, Verdict, band, round3};
use crate::interval::IntervalLine;
use crate::units::page_size;

pub(crate) const THROTTLED: &str = "dirty-throttled";
pub(crate) const CLIFF: &str = "page-cache-cliff";
pub(crate) const LAGGING: &str = "writeback-lagging";

/// Intervals the throttle share is averaged over (a pause is counted when
/// it starts, and one can last 200 ms: `MAX_PAUSE` in
/// mm/page-writeback.c).
pub(crate) const THROTTLE_WINDOW: usize = 3;
/// Task-seconds of pause per second: from a quarter, the kernel holds a
/// writer to at most three quarters of the rate it asked for.
pub(crate) const THROTTLE_WARNING: f64 = 0.25;
/// From a twentieth (`info`): more than a small write's own time varies
/// from run to run (±5%, BENCHMARKS.md "Reading the figures"), so
/// the user can measure what the limit took: a lone `dd` on a loop ext4
/// whose bdi has `strict_limit` and `max_bytes` 32 MiB pauses 0.09–0.14
/// s/s (doctor's `a_light_device_cap_is_named_as_what_acted` test), which
/// no warning names.
pub(crate) const THROTTLE_INFO: f64 = 0.05;
pub(crate) const THROTTLE_CRITICAL: f64 = 0.75;

/// Intervals dirty must sit at the limit, and the writers' rate be low,
/// for page-cache-cliff; and how far back their earlier rate is looked
/// for.
pub(crate) const CLIFF_HOLD: usize = 3;
pub(crate) const CLIFF_LOOKBACK: usize = 30;
/// Dirty at this share of `nr_dirty_threshold` counts as at the limit
/// (the global limit region starts at the free-run ceiling, half-way
/// between the two thresholds; 0.9 of the hard one is well inside it).
pub(crate) const CLIFF_AT_LIMIT: f64 = 0.9;
/// The rate now at most this share of the earlier peak is a fall
/// (`info`: the difference between memory and device speed anyone with a
/// page cache sees); at most [`CLIFF_STALL`] of it, the writer feels it
/// as a stall (`warning`).
pub(crate) const CLIFF_FALL: f64 = 0.5;
pub(crate) const CLIFF_STALL: f64 = 0.25;
/// An earlier rate counts only from intervals this long (a short last
/// interval makes a noisy rate) and this fast (MiB/s).
pub(crate) const CLIFF_MIN_INTERVAL_S: f64 = 0.5;
pub(crate) const CLIFF_MIN_PEAK_MIB_S: f64 = 1.0;

/// Seconds of growth for writeback-lagging ("many seconds": longer than
/// the 5 s flusher period, `dirty_writeback_centisecs`).
pub(crate) const LAG_SECONDS: f64 = 10.0;
/// Growth over the span, as a share of the dirty threshold, and the share
/// of steps that must not fall.
pub(crate) const LAG_GROWTH: f64 = 0.05;
/// `info` from a fifth of that: at 1% of the threshold per 10 s, dirty
/// climbs from the background threshold (half the hard one at the
/// default ratios, 10 and 20) to the hard limit in about eight minutes;
/// at the warning's 5%, in under two.
pub(crate) const LAG_GROWTH_INFO: f64 = 0.01;
pub(crate) const LAG_RISING_STEPS: f64 = 0.7;

fn mib(pages: u64) -> serde_json::Value {
    round3(pages as f64 * page_size() as f64 / (1 << 20) as f64)
}

/// Dirty + under writeback, the figure `balance_dirty_pages()` compares
/// against the thresholds (global `dirty` in `domain_dirty_avail()`).
fn dirty_total(l: &IntervalLine) -> u64 {
    l.dirty.vmstat.nr_dirty + l.dirty.vmstat.nr_writeback
}

/// `dirty_freerun_ceiling()` in mm/page-writeback.c: under it nobody is
/// throttled by the global limit.
fn freerun_ceiling(l: &IntervalLine) -> u64 {
    (l.dirty.vmstat.nr_dirty_threshold + l.dirty.vmstat.nr_dirty_background_threshold) / 2
}

/// Which limit: the programs' split when they made one, else the global
/// levels (over the free-run ceiling: the global limit; under it, the
/// pauses came from a device's or a memcg's).
fn which_limit<'a>(
    lines: impl Iterator<Item = &'a IntervalLine> + Clone,
) -> (&'static str, Evidence) {
    let mut ev = Evidence::new();
    let split = lines
        .clone()
        .filter_map(|l| l.throttle.limits.as_ref())
        .fold(None, |acc: Option<[u64; 3]>, s| {
            let a = acc.unwrap_or_default();
            Some([a[0] + s.global_ms, a[1] + s.bdi_ms, a[2] + s.memcg_ms])
        });
    let last = lines.clone().last();
    if let Some(l) = last {
        ev.insert("dirty_mib", mib(dirty_total(l)));
        ev.insert(
            "dirty_threshold_mib",
            mib(l.dirty.vmstat.nr_dirty_threshold),
        );
        ev.insert(
            "background_threshold_mib",
            mib(l.dirty.vmstat.nr_dirty_background_threshold),
        );
        ev.insert("freerun_ceiling_mib", mib(freerun_ceiling(l)));
    }
    let limit = match split {
        Some([g, b, m]) if g + b + m > 0 => {
            ev.insert(
                "pause_ms_by_limit",
                json!({"global": g, "bdi": b, "memcg": m}),
            );
            if b >= g && b >= m {
                "bdi"
            } else if m >= g {
                "memcg"
            } else {
                "global"
            }
        }
        _ => match last {
            Some(l) if dirty_total(l) > freerun_ceiling(l) => "global",
            _ => "bdi-or-memcg",
        },
    };
    (limit, ev)
}

fn throttle_advice(limit: &str) -> String {
    match limit {
        "global" => "writers dirty pages faster than the devices write them back, and the kernel \
            holds them to the devices' rate at the global limit (vm.dirty_ratio / \
            vm.dirty_bytes: \"the amount of dirty memory at which a process generating disk \
            writes will itself start writeback\", Documentation/admin-guide/sysctl/vm.rst). A \
            higher limit only buys a bigger burst, not a higher sustained rate; a lower \
            vm.dirty_background_bytes starts the flushers earlier; a streaming writer that \
            writes back as it goes (sync_file_range(SYNC_FILE_RANGE_WRITE) per chunk, `wbscope \
            write --strategy srf-pipelined`) or uses O_DIRECT never waits at the limit"
            .into(),
        "bdi" => "the device's own dirty limit throttles before the global one: \
            /sys/class/bdi/MAJ:MIN/strict_limit with max_bytes or max_ratio \
            (Documentation/ABI/testing/sysfs-class-bdi). Raise max_bytes/max_ratio, or clear \
            strict_limit if it was not set on purpose (FUSE sets it itself); or have the writer \
            write back as it goes (sync_file_range per chunk)"
            .into(),
        "memcg" => "the writer's memory cgroup is at its dirty limit (the dirty ratios applied \
            to the memory the cgroup may use: the memcg domain of balance_dirty_pages(), \
            mm/page-writeback.c). Give the cgroup more memory (memory.max / memory.high), or \
            have the writer write back as it goes (sync_file_range per chunk) so its dirty \
            pages stay low"
            .into(),
        _ => "the global dirty level is under its free-run ceiling, so the pauses come from a \
            device's own limit (/sys/class/bdi/MAJ:MIN/strict_limit, max_bytes, max_ratio) or \
            a memory cgroup's; check those, or have the writer write back as it goes"
            .into(),
    }
}

/// The tasks paused most over the lines, most first (at most 5), each
/// with its cgroup where an owner row of the lines names the process
/// (on cgroup v2 its memory cgroup: the memcg domain its pauses were
/// judged in, `mem_cgroup_wb_domain()`, mm/memcontrol.c).
fn paused_tasks<'a>(lines: impl Iterator<Item = &'a IntervalLine> + Clone) -> serde_json::Value {
    let mut by: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    for l in lines.clone() {
        for t in &l.throttle.paused {
            *by.entry((t.tgid, t.comm.as_str())).or_default() += t.pause_ms;
        }
    }
    let cgroup_of = |tgid: u32| {
        lines
            .clone()
            .flat_map(|l| &l.owners)
            .find(|o| o.pid == tgid)
            .map(|o| o.cgroup_id)
    };
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(5);
    v.into_iter()
        .map(|((tgid, comm), ms)| {
            let mut t = json!({"tgid": tgid, "comm": comm, "pause_ms": ms});
            if let Some(id) = cgroup_of(tgid) {
                t["cgroup_id"] = json!(id);
            }
            t
        })
        .collect()
}

/// `dirty-throttled`: writers paused in `balance_dirty_pages()` a large
/// share of their time.
pub(crate) fn throttled(ctx: &Ctx<'_>) -> Option<Verdict> {
    if ctx.line().throttle.pauses == 0 {
        return None;
    }
    let lines = ctx.last(THROTTLE_WINDOW);
    let secs: f64 = lines.clone().map(|l| l.interval_s).sum();
    if secs <= 0.0 {
        return None;
    }
    let pause_ms: u64 = lines.clone().map(|l| l.throttle.pause_ms_total).sum();
    let share = pause_ms as f64 / (secs * 1000.0);
    let severity = band(share, THROTTLE_INFO, THROTTLE_WARNING, THROTTLE_CRITICAL)?;
    let (limit, mut evidence) = which_limit(lines.clone());
    evidence.insert("limit", json!(limit));
    evidence.insert("pause_s_per_s", round3(share));
    evidence.insert("pause_ms", json!(pause_ms));
    evidence.insert(
        "pauses",
        json!(lines.clone().map(|l| l.throttle.pauses).sum::<u64>()),
    );
    evidence.insert("window_s", round3(secs));
    let paused = paused_tasks(lines);
    // Which memory cgroup: the most-paused task's, when it is known.
    if limit == "memcg"
        && let Some(id) = paused[0].get("cgroup_id")
    {
        evidence.insert("memcg_cgroup_id", id.clone());
    }
    evidence.insert("paused", paused);
    Some(Verdict {
        severity,
        evidence,
        advice: throttle_advice(limit),
    })
}

/// Pages dirtied per second in a line.
fn dirtied_rate(l: &IntervalLine) -> f64 {
    l.dirty.vmstat_dirtied_delta as f64 / l.interval_s.max(f64::MIN_POSITIVE)
}

fn at_limit(l: &IntervalLine) -> bool {
    l.throttle.pauses > 0
        || dirty_total(l) as f64 >= CLIFF_AT_LIMIT * l.dirty.vmstat.nr_dirty_threshold as f64
            && l.dirty.vmstat.nr_dirty_threshold > 0
}

/// `page-cache-cliff`: dirty held at its limit while the rate writers
/// dirty pages falls to half of what it was before.
pub(crate) fn page_cache_cliff(ctx: &Ctx<'_>) -> Option<Verdict> {
    let n = ctx.history.len();
    if n <= CLIFF_HOLD {
        return None;
    }
    let recent = ctx.last(CLIFF_HOLD);
    if !recent.clone().all(at_limit) {
        return None;
    }
    let secs: f64 = recent.clone().map(|l| l.interval_s).sum();
    let now = recent
        .clone()
        .map(|l| l.dirty.vmstat_dirtied_delta)
        .sum::<u64>() as f64
        / secs;
    let page = page_size() as f64;
    let (peak, peak_at) = ctx
        .history
        .iter()
        .take(n - CLIFF_HOLD)
        .filter(|l| l.interval_s >= CLIFF_MIN_INTERVAL_S)
        .map(|l| (dirtied_rate(l), l.time_s))
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    if peak * page < CLIFF_MIN_PEAK_MIB_S * (1 << 20) as f64 || now > CLIFF_FALL * peak {
        return None;
    }
    let mibs = |pages_per_s: f64| round3(pages_per_s * page / (1 << 20) as f64);
    let l = ctx.line();
    let mut evidence = Evidence::new();
    evidence.insert("dirtied_mib_s_before", mibs(peak));
    evidence.insert("dirtied_mib_s_before_at_s", round3(peak_at));
    evidence.insert("dirtied_mib_s_now", mibs(now));
    evidence.insert(
        "written_mib_s_now",
        mibs(
            recent
                .clone()
                .map(|l| l.dirty.vmstat_written_delta)
                .sum::<u64>() as f64
                / secs,
        ),
    );
    evidence.insert("dirty_mib", mib(dirty_total(l)));
    evidence.insert(
        "dirty_threshold_mib",
        mib(l.dirty.vmstat.nr_dirty_threshold),
    );
    evidence.insert(
        "throttle_pause_ms",
        json!(recent.map(|l| l.throttle.pause_ms_total).sum::<u64>()),
    );
    Some(Verdict {
        severity: if now <= CLIFF_STALL * peak {
            Severity::Warning
        } else {
            Severity::Info
        },
        evidence,
        advice: "the page cache absorbed the writes at memory speed until dirty reached its \
            limit; from there writers go at the speed the devices write back. Expect the \
            second rate, not the first: size bursts under the limit, or write back as you go \
            (sync_file_range per chunk, O_DIRECT) so the rate is steady; a higher \
            vm.dirty_bytes only moves the cliff further out"
            .into(),
    })
}

/// `writeback-lagging`: dirty growing for many seconds, over the
/// background threshold, while the flusher works in every interval.
pub(crate) fn writeback_lagging(ctx: &Ctx<'_>) -> Option<Verdict> {
    let mut span: Vec<&IntervalLine> = Vec::new();
    let mut secs = 0.0;
    for l in ctx.history.iter().rev() {
        // The first line of the span is the level growth is measured
        // from; its own interval is not part of the span.
        span.push(l);
        if secs >= LAG_SECONDS {
            break;
        }
        secs += l.interval_s;
    }
    if secs < LAG_SECONDS || span.len() < 3 {
        return None;
    }
    span.reverse();
    let (first, last) = (span[0], span[span.len() - 1]);
    let flushing = span[1..]
        .iter()
        .all(|l| l.flusher.iter().map(|f| f.pages).sum::<u64>() > 0 || l.inode_pages_wrote > 0);
    let thresh = last.dirty.vmstat.nr_dirty_threshold;
    let (d0, d1) = (first.dirty.vmstat.nr_dirty, last.dirty.vmstat.nr_dirty);
    let rising = span
        .windows(2)
        .filter(|w| w[1].dirty.vmstat.nr_dirty >= w[0].dirty.vmstat.nr_dirty)
        .count();
    if !flushing
        || thresh == 0
        || d1 <= last.dirty.vmstat.nr_dirty_background_threshold
        || (rising as f64) < LAG_RISING_STEPS * (span.len() - 1) as f64
    {
        return None;
    }
    let growth = d1.saturating_sub(d0) as f64 / thresh as f64;
    let severity = band(growth, LAG_GROWTH_INFO, LAG_GROWTH, f64::INFINITY)?;
    let page = page_size() as f64;
    let rate = |pages: u64| round3(pages as f64 * page / (1 << 20) as f64 / secs);
    let mut evidence = Evidence::new();
    evidence.insert("seconds", round3(secs));
    evidence.insert("dirty_mib_start", mib(d0));
    evidence.insert("dirty_mib_end", mib(d1));
    evidence.insert("dirty_growth_mib_s", rate(d1 - d0));
    evidence.insert(
        "dirtied_mib_s",
        rate(span[1..].iter().map(|l| l.dirty.vmstat_dirtied_delta).sum()),
    );
    evidence.insert(
        "written_mib_s",
        rate(span[1..].iter().map(|l| l.dirty.vmstat_written_delta).sum()),
    );
    evidence.insert(
        "background_threshold_mib",
        mib(last.dirty.vmstat.nr_dirty_background_threshold),
    );
    evidence.insert("dirty_threshold_mib", mib(thresh));
    evidence.insert("growth_share_of_threshold", round3(growth));
    Some(Verdict {
        severity,
        evidence,
        advice: "the flushers work all the time yet dirty keeps growing: pages are dirtied \
            faster than the devices write them back. Dirty will reach vm.dirty_ratio and the \
            writers will be throttled, and a sync or fsync then has all of it to write. A \
            lower vm.dirty_background_bytes starts writeback earlier (vm.rst: \"the amount of \
            dirty memory at which the background kernel flusher threads will start \
            writeback\") but does not make the device faster: limit the writers' rate, or see \
            whether the device is saturated"
            .into(),
    })
}
