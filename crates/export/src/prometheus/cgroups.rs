//! Per-cgroup counters of who dirtied what: pages dirtied, pages written
//! back by whom, throttle pauses, from each interval's `owners`
//! (model/dirtier.rs), with a bounded set of `cgroup_id` label values.
//! docs/prometheus.md, "Per cgroup", states the rule.
//!
//! The rule. At most [`MAX_CGROUP_LABELS`] cgroups have series of their
//! own; everything else is counted under `cgroup_id="other"`. Every
//! page and pause is added to exactly one series, at the interval it is
//! seen in, and no series ever goes down, so `sum(rate(...))` over all
//! series is the total whatever the labels were at the time. A cgroup
//! gets a label the first interval it is active while a label is free
//! (the most active first when several arrive at once) and keeps it while
//! it stays active: taking the label of an active cgroup away would drop
//! what it gained since the last scrape, and moving its history into
//! `other` would make `other` jump. A labelled cgroup idle for
//! [`RETIRE_AFTER_S`] gives its label back: its series are removed (every
//! scraper has read their last value long before), and, should it come
//! back, it gets a label again only if one is free, its series starting
//! from 0 again, which `rate()` and `increase()` read as a counter reset.
//! So a heavy newcomer waits in `other` until a label frees up: the
//! labels follow the first active cgroups, not a ranking that would have
//! to reshuffle live series.
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::{Registry, Unit},
};

use super::SecondsCounter;
use wbscope_model::dirtier::OwnerLine;
use wbscope_model::ledger::LedgerLine;

/// Cgroups with series of their own; the rest are `other`. A host's
/// busy containers fit, and 16 × 6 series stays small beside the per-call
/// metrics.
pub(crate) const MAX_CGROUP_LABELS: usize = 16;
/// Label value of everything not in a labelled cgroup.
pub(crate) const OTHER: &str = "other";
/// Idle time (trace seconds) after which a cgroup's label is freed: twice
/// Prometheus's 5-minute lookback, far above any usual scrape interval,
/// so its last value has been scraped before its series goes.
pub(crate) const RETIRE_AFTER_S: f64 = 600.0;
/// The `by` values of `wbscope_cgroup_pages_written_total`.
pub(crate) const BY: [&str; 3] = ["self", "flusher", "others"];
/// The `stage` values of `wbscope_cgroup_ledger_bytes_total`: the
/// ledger's stages that have no family of their own (docs/ledger.md).
pub(crate) const STAGES: [&str; 4] = ["write_calls", "cancelled", "journal", "metadata"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CgroupLabels {
    /// cgroup v2 id (the inode number of its directory under
    /// /sys/fs/cgroup), or `"other"`.
    pub(crate) cgroup_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CgroupStageLabels {
    pub(crate) cgroup_id: String,
    /// One of [`STAGES`].
    pub(crate) stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CgroupWrittenLabels {
    pub(crate) cgroup_id: String,
    /// `self`: by the dirtier's own calls; `flusher`: by flusher work (a
    /// kworker); `others`: by another process's calls (its sync, fsync).
    pub(crate) by: &'static str,
}

/// One cgroup's figures of one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sums {
    dirtied: u64,
    /// Written, indexed like [`BY`].
    written: [u64; 3],
    pauses: u64,
    pause_ms: u64,
    /// Bytes, indexed like [`STAGES`].
    stages: [u64; 4],
}

impl Sums {
    /// One owner's line; its pages written split by the model's
    /// `written_split`, as the report's who table splits them (the three
    /// parts add up to `pages_written`).
    fn of(o: &OwnerLine) -> Sums {
        let (own, flusher, others) = o.written_split();
        Sums {
            dirtied: o.pages_dirtied,
            written: [own, flusher, others],
            pauses: o.throttle_pauses,
            pause_ms: o.throttle_pause_ms,
            stages: [
                o.write_call_bytes.unwrap_or(0),
                o.cancelled_bytes.unwrap_or(0),
                0,
                0,
            ],
        }
    }

    fn add(&mut self, s: &Sums) {
        self.dirtied += s.dirtied;
        for (o, n) in self.written.iter_mut().zip(s.written) {
            *o += n;
        }
        self.pauses += s.pauses;
        self.pause_ms += s.pause_ms;
        for (o, n) in self.stages.iter_mut().zip(s.stages) {
            *o += n;
        }
    }

    fn active(&self) -> bool {
        *self != Sums::default()
    }

    /// What ranks newcomers for a free label: pages, then paused time.
    fn weight(&self) -> (u64, u64) {
        (
            self.dirtied + self.written.iter().sum::<u64>(),
            self.pause_ms,
        )
    }
}

/// The per-cgroup families and who holds a label.
#[derive(Clone)]
pub(crate) struct CgroupMetrics {
    dirtied: Family<CgroupLabels, Counter>,
    written: Family<CgroupWrittenLabels, Counter>,
    pauses: Family<CgroupLabels, Counter>,
    pause_time: Family<CgroupLabels, SecondsCounter>,
    stages: Family<CgroupStageLabels, Counter>,
    max_labels: usize,
    /// Labelled cgroup → trace time it was last active.
    labelled: Arc<Mutex<BTreeMap<u64, f64>>>,
}

impl CgroupMetrics {
    pub(crate) fn new(max_labels: usize) -> CgroupMetrics {
        let m = CgroupMetrics {
            dirtied: Family::default(),
            written: Family::default(),
            pauses: Family::default(),
            pause_time: Family::default(),
            stages: Family::default(),
            max_labels,
            labelled: Arc::default(),
        };
        // `other` is always there, at 0 until something lands in it.
        m.add(OTHER, &Sums::default());
        m
    }

    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "cgroup_pages_dirtied",
            "Pages dirtied by the processes of a cgroup (interval owners; at most 16 cgroup_id values + \"other\")",
            self.dirtied.clone(),
        );
        r.register(
            "cgroup_pages_written",
            "Pages of a cgroup's processes written back, by the dirtier itself, the flusher or another process",
            self.written.clone(),
        );
        r.register(
            "cgroup_throttle_pauses",
            "balance_dirty_pages pauses of a cgroup's processes",
            self.pauses.clone(),
        );
        r.register_with_unit(
            "cgroup_throttle_pause",
            "Time a cgroup's processes were paused in balance_dirty_pages",
            Unit::Seconds,
            self.pause_time.clone(),
        );
        r.register_with_unit(
            "cgroup_ledger",
            "A cgroup's bytes at the ledger's stages: passed to write calls, cancelled before \
             writeback, and its share of the devices' journal and metadata (docs/ledger.md)",
            Unit::Bytes,
            self.stages.clone(),
        );
    }

    fn add(&self, cgroup_id: &str, s: &Sums) {
        let labels = CgroupLabels {
            cgroup_id: cgroup_id.to_string(),
        };
        self.dirtied.get_or_create(&labels).inc_by(s.dirtied);
        for (by, n) in BY.into_iter().zip(s.written) {
            self.written
                .get_or_create(&CgroupWrittenLabels {
                    cgroup_id: labels.cgroup_id.clone(),
                    by,
                })
                .inc_by(n);
        }
        self.pauses.get_or_create(&labels).inc_by(s.pauses);
        self.pause_time
            .get_or_create(&labels)
            .inc_by_ns(s.pause_ms.saturating_mul(1_000_000));
        for (stage, n) in STAGES.into_iter().zip(s.stages) {
            self.stages
                .get_or_create(&CgroupStageLabels {
                    cgroup_id: labels.cgroup_id.clone(),
                    stage,
                })
                .inc_by(n);
        }
    }

    fn remove(&self, cgroup_id: u64) {
        let labels = CgroupLabels {
            cgroup_id: cgroup_id.to_string(),
        };
        self.dirtied.remove(&labels);
        for by in BY {
            self.written.remove(&CgroupWrittenLabels {
                cgroup_id: labels.cgroup_id.clone(),
                by,
            });
        }
        self.pauses.remove(&labels);
        self.pause_time.remove(&labels);
        for stage in STAGES {
            self.stages.remove(&CgroupStageLabels {
                cgroup_id: labels.cgroup_id.clone(),
                stage,
            });
        }
    }

    /// One interval's `owners` and ledger, ending at `time_s` (trace
    /// seconds). Rows without a cgroup (id 0: the `(others)` row past the
    /// cap, a process whose cgroup was not read, one the ledger knows only
    /// by its journal handles) count under `other`.
    pub(crate) fn update(&self, time_s: f64, owners: &[OwnerLine], ledger: Option<&LedgerLine>) {
        let mut sums: BTreeMap<u64, Sums> = BTreeMap::new();
        for o in owners {
            sums.entry(o.cgroup_id).or_default().add(&Sums::of(o));
        }
        for p in ledger.map(|l| l.processes.as_slice()).unwrap_or_default() {
            let s = sums.entry(p.cgroup_id).or_default();
            s.stages[2] += p.stages.journal.unwrap_or(0);
            s.stages[3] += p.stages.metadata.unwrap_or(0);
        }
        sums.retain(|_, s| s.active());
        // A panic while holding the lock leaves a plain map behind.
        let mut labelled = self.labelled.lock().unwrap_or_else(|e| e.into_inner());
        for (id, last) in labelled.iter_mut() {
            if sums.contains_key(id) {
                *last = time_s;
            }
        }
        labelled.retain(|&id, last| {
            let keep = time_s - *last < RETIRE_AFTER_S;
            if !keep {
                self.remove(id);
            }
            keep
        });
        let mut newcomers: Vec<(u64, &Sums)> = sums
            .iter()
            .filter(|(id, _)| **id != 0 && !labelled.contains_key(id))
            .map(|(&id, s)| (id, s))
            .collect();
        newcomers.sort_by(|a, b| b.1.weight().cmp(&a.1.weight()).then(a.0.cmp(&b.0)));
        for (id, _) in newcomers {
            if labelled.len() >= self.max_labels {
                break;
            }
            labelled.insert(id, time_s);
        }
        let mut other = Sums::default();
        for (id, s) in &sums {
            if labelled.contains_key(id) {
                self.add(&id.to_string(), s);
            } else {
                other.add(s);
            }
        }
        self.add(OTHER, &other);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn owner(pid: u32, cgroup_id: u64, dirtied: u64) -> OwnerLine {
        OwnerLine {
            pid,
            comm: format!("p{pid}"),
            cgroup_id,
            pages_dirtied: dirtied,
            dirtied_unmeasured: false,
            ..OwnerLine::default()
        }
    }

    fn metrics(max: usize) -> (CgroupMetrics, Registry) {
        let m = CgroupMetrics::new(max);
        let mut r = Registry::with_prefix("wbscope");
        m.register(&mut r);
        (m, r)
    }

    /// Every sample of the registry: `name{labels}` → value.
    fn samples(r: &Registry) -> HashMap<String, f64> {
        let text = super::super::web::encode(r).unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    fn dirtied(r: &Registry) -> HashMap<String, f64> {
        samples(r)
            .into_iter()
            .filter_map(|(k, v)| {
                let id = k
                    .strip_prefix("wbscope_cgroup_pages_dirtied_total{cgroup_id=\"")?
                    .strip_suffix("\"}")?;
                Some((id.to_string(), v))
            })
            .collect()
    }

    #[test]
    fn at_most_n_cgroup_labels_and_other_takes_the_rest() {
        let (m, r) = metrics(MAX_CGROUP_LABELS);
        let mut total = 0;
        // 40 cgroups, a few new ones each interval, the old ones still busy.
        for i in 0..10u64 {
            let owners: Vec<OwnerLine> = (0..4 * (i + 1))
                .map(|c| owner(c as u32 + 1, 100 + c, 10 + c))
                .collect();
            total += owners.iter().map(|o| o.pages_dirtied).sum::<u64>();
            m.update(i as f64, &owners, None);
            let d = dirtied(&r);
            assert!(d.len() <= MAX_CGROUP_LABELS + 1, "{d:?}");
            assert!(d.contains_key(OTHER));
            assert_eq!(d.values().sum::<f64>(), total as f64);
        }
        let labels: std::collections::HashSet<String> = samples(&r)
            .keys()
            .filter_map(|k| {
                Some(
                    k.split("cgroup_id=\"")
                        .nth(1)?
                        .split('"')
                        .next()?
                        .to_string(),
                )
            })
            .collect();
        assert_eq!(labels.len(), MAX_CGROUP_LABELS + 1, "{labels:?}");
    }

    #[test]
    fn counters_never_go_down_when_a_bigger_cgroup_arrives() {
        let (m, r) = metrics(2);
        m.update(1.0, &[owner(1, 11, 5), owner(2, 12, 5)], None);
        let mut before = samples(&r);
        // Two labels taken; a far busier cgroup arrives, and one that has
        // no id (the `(others)` row).
        let rows = [owner(1, 11, 1), owner(3, 13, 1_000_000), owner(0, 0, 7)];
        for t in 2..6 {
            m.update(t as f64, &rows, None);
            let after = samples(&r);
            for (k, v) in &before {
                let now = after.get(k).copied();
                assert!(now.is_some_and(|n| n >= *v), "{k}: {v} → {now:?}");
            }
            before = after;
        }
        let d = dirtied(&r);
        // The labels stay with the cgroups that had them; the newcomer and
        // the id-less row go to `other`, every interval.
        assert_eq!(d.get("11"), Some(&(5.0 + 4.0)));
        assert_eq!(d.get("12"), Some(&5.0));
        assert_eq!(d.get(OTHER), Some(&(4.0 * 1_000_007.0)));
        assert!(!d.contains_key("13"), "{d:?}");
    }

    #[test]
    fn an_idle_cgroup_gives_its_label_back_without_moving_its_history() {
        let (m, r) = metrics(1);
        m.update(1.0, &[owner(1, 11, 5)], None);
        m.update(2.0, &[owner(2, 12, 3)], None);
        assert_eq!(dirtied(&r).get(OTHER), Some(&3.0));
        // Just under the idle time: still labelled.
        m.update(1.0 + RETIRE_AFTER_S - 0.5, &[owner(2, 12, 3)], None);
        assert_eq!(dirtied(&r).get("11"), Some(&5.0));
        // Past it: 11's series go, 12 takes the label from this interval
        // on; `other` keeps what it had and gains nothing from 11.
        m.update(2.0 + RETIRE_AFTER_S, &[owner(2, 12, 4)], None);
        let d = dirtied(&r);
        assert!(!d.contains_key("11"), "{d:?}");
        assert_eq!(d.get("12"), Some(&4.0));
        assert_eq!(d.get(OTHER), Some(&6.0));
        assert!(
            !samples(&r).keys().any(|k| k.contains("\"11\"")),
            "every series of 11 removed"
        );
    }

    #[test]
    fn written_splits_into_self_flusher_others_and_pauses_into_seconds() {
        let (m, r) = metrics(4);
        let row = OwnerLine {
            pages_written: 100,
            pages_written_by_others: 70,
            pages_written_by_flusher: 60,
            throttle_pauses: 3,
            throttle_pause_ms: 250,
            ..owner(1, 11, 0)
        };
        m.update(1.0, &[row], None);
        let s = samples(&r);
        let get = |k: &str| s.get(k).copied();
        let w = |by: &str| {
            get(&format!(
                "wbscope_cgroup_pages_written_total{{cgroup_id=\"11\",by=\"{by}\"}}"
            ))
        };
        assert_eq!(w("self"), Some(30.0));
        assert_eq!(w("flusher"), Some(60.0));
        assert_eq!(w("others"), Some(10.0));
        assert_eq!(
            get("wbscope_cgroup_throttle_pauses_total{cgroup_id=\"11\"}"),
            Some(3.0)
        );
        assert_eq!(
            get("wbscope_cgroup_throttle_pause_seconds_total{cgroup_id=\"11\"}"),
            Some(0.25)
        );
        // A row with only a pause counts as activity and takes a label.
        let paused = OwnerLine {
            throttle_pauses: 1,
            ..owner(2, 12, 0)
        };
        m.update(2.0, &[paused], None);
        assert_eq!(dirtied(&r).get("12"), Some(&0.0));
    }

    #[test]
    fn ledger_stages_land_on_the_cgroup_and_handle_only_rows_on_other() {
        use wbscope_model::ledger::{ProcessLedger, Stages};
        let (m, r) = metrics(4);
        let row = OwnerLine {
            write_call_bytes: Some(752),
            cancelled_bytes: Some(4096),
            ..owner(1, 11, 1)
        };
        let share = |pid, cgroup_id, journal| ProcessLedger {
            pid,
            cgroup_id,
            stages: Stages {
                journal: Some(journal),
                metadata: Some(7),
                ..Stages::default()
            },
            ..ProcessLedger::default()
        };
        let ledger = LedgerLine {
            processes: vec![share(1, 11, 13_824), share(9, 0, 500)],
            ..LedgerLine::default()
        };
        m.update(1.0, &[row], Some(&ledger));
        let s = samples(&r);
        let get = |id: &str, stage: &str| {
            s.get(&format!(
                "wbscope_cgroup_ledger_bytes_total{{cgroup_id=\"{id}\",stage=\"{stage}\"}}"
            ))
            .copied()
        };
        assert_eq!(get("11", "write_calls"), Some(752.0));
        assert_eq!(get("11", "cancelled"), Some(4096.0));
        assert_eq!(get("11", "journal"), Some(13_824.0));
        assert_eq!(get("11", "metadata"), Some(7.0));
        // A rename's mv, known only by its handles: under other.
        assert_eq!(get(OTHER, "journal"), Some(500.0));
    }
}
