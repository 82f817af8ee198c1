//! The write pane's state (`--enable writes`): live, each buffered write
//! system call added up by the model's [`WriteTally`] as the trace loop's
//! session adds them ([`LiveWrites`]); shown, the last interval's lines
//! per process and the last slow write ([`WritesModel`]), from live
//! intervals and replayed ones alike (both arrive as the interval line's
//! `writes`).
use wbscope_model::writes::{PART_NAMES, SlowWrite, Write, WriteLine, WriteTally};

/// A write this slow is kept on screen as "the last slow one" until a
/// newer one replaces it: `--slow-write`'s default, so that the pane and
/// `trace`'s `write` lines call the same writes slow.
pub(crate) const SLOW_NS: u64 = 10_000_000;

/// The live tally: writes in, each interval's lines out.
#[derive(Clone, Debug)]
pub(crate) struct LiveWrites {
    tally: WriteTally,
}

impl Default for LiveWrites {
    fn default() -> Self {
        LiveWrites {
            tally: WriteTally::new(SLOW_NS),
        }
    }
}

impl LiveWrites {
    /// One drained batch of writes.
    pub(crate) fn add(&mut self, writes: &[Write]) {
        for w in writes {
            self.tally.add(w);
        }
    }

    /// The interval's lines, largest write time first, and a fresh start.
    pub(crate) fn interval(&mut self) -> Vec<WriteLine> {
        // The tally also keeps the slow writes one by one for `trace`'s
        // `write` lines (up to SLOW_WRITES_KEPT an interval); the pane
        // shows each line's slowest instead, so they are dropped here,
        // once an interval, which keeps them from piling up.
        drop(self.tally.take_slow());
        self.tally.take_lines()
    }
}

/// What the pane shows.
#[derive(Clone, Debug, Default)]
pub(crate) struct WritesModel {
    /// The last interval's lines, largest write time first.
    pub(crate) lines: Vec<WriteLine>,
    /// The last interval's length, s: the lines' counts over it are the
    /// rates.
    pub(crate) interval_s: f64,
    /// The slowest write of the last interval that had one of at least
    /// [`SLOW_NS`], and that interval's `time_s`.
    pub(crate) last_slow: Option<(SlowWrite, f64)>,
}

impl WritesModel {
    pub(crate) fn on_lines(&mut self, lines: &[WriteLine], time_s: f64, interval_s: f64) {
        self.lines = lines.to_vec();
        self.interval_s = interval_s;
        // Filtered again: a recording's lines carry their slowest at the
        // recorder's `--slow-write`, which may be lower than ours.
        let slow = lines
            .iter()
            .filter_map(|l| l.slowest.as_ref())
            .filter(|s| s.parts.total_ns >= SLOW_NS)
            .max_by_key(|s| s.parts.total_ns);
        if let Some(s) = slow {
            self.last_slow = Some((s.clone(), time_s));
        }
    }

    /// A line's writes per second; `None` over no time.
    pub(crate) fn per_s(&self, l: &WriteLine) -> Option<f64> {
        (self.interval_s > 0.0).then(|| l.writes as f64 / self.interval_s)
    }
}

/// What a slow write waited for most and for how long: its `waited_for`
/// as written (a recording's names are kept as they are), with that
/// part's time; a name we do not know falls back to its largest part.
pub(crate) fn waited_for(s: &SlowWrite) -> (String, u64) {
    match PART_NAMES.iter().position(|&n| n == s.waited_for) {
        Some(i) => (s.waited_for.clone(), s.parts.values()[i]),
        None => {
            let (name, ns) = s.parts.dominant();
            (name.to_string(), ns)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::app::{App, Msg};
    use crate::state::{Model, OwnCpu};
    use wbscope_model::kernel::KernelSnapshot;
    use wbscope_model::plan::{Concept, ConceptPlan, HookKind, ProbePlan};
    use writeback_common::write_domain;

    const MS: u64 = 1_000_000;

    /// A plan with the write spans attached, or not.
    fn plan(writes: bool) -> ProbePlan {
        let mut p = ConceptPlan::new(Concept::Writes);
        if writes {
            p.hook = Some("tracepoint syscalls:sys_enter_write".into());
            p.kind = Some(HookKind::Tracepoint);
        }
        ProbePlan {
            kernel: "6.18".into(),
            concepts: vec![p],
        }
    }

    /// A write of `total_ms` by `pid`, `throttle_ms` of it paused by the
    /// bdi's limit.
    fn write(pid: u32, comm: &str, total_ms: u64, throttle_ms: u64) -> Write {
        Write {
            pid,
            tid: pid,
            comm: comm.into(),
            ret: 1 << 20,
            start_ns: 1_000 * MS,
            end_ns: (1_000 + total_ms) * MS,
            throttle_ns: throttle_ms * MS,
            pauses: u32::from(throttle_ms > 0),
            domains: if throttle_ms > 0 {
                write_domain::BDI
            } else {
                0
            },
            ..Write::default()
        }
    }

    fn sample(app: &mut App, s: u64) {
        app.handle(Msg::Sample {
            at: Duration::from_secs(s),
            mono_ns: s * 1_000 * MS,
            snapshot: Box::new(KernelSnapshot::default()),
            cpu: OwnCpu::default(),
            dirtiers: None,
        });
    }

    #[test]
    fn live_writes_become_the_intervals_lines_and_the_last_slow_one_stays() {
        let mut app = App::new(Model::with_plan(plan(true), "h".into()));
        sample(&mut app, 1);
        // Two seconds of writes: dd 100, one throttled for 208 ms; cp 10.
        let mut batch: Vec<Write> = (0..99).map(|_| write(812, "dd", 1, 0)).collect();
        batch.push(write(812, "dd", 212, 208));
        batch.extend((0..10).map(|_| write(90, "cp", 2, 0)));
        app.handle(Msg::Writes(batch));
        sample(&mut app, 3);
        let w = &app.model.writes;
        let [dd, cp] = w.lines.as_slice() else {
            panic!("{:?}", w.lines)
        };
        assert_eq!((dd.pid, dd.writes, cp.pid, cp.writes), (812, 100, 90, 10));
        assert_eq!((dd.p50_ns, dd.p99_ns, dd.max_ns), (MS, MS, 212 * MS));
        assert_eq!(dd.parts.throttle_ns, 208 * MS);
        assert_eq!(w.per_s(dd), Some(50.0), "100 writes over 2 s");
        let (slow, at) = w.last_slow.as_ref().expect("the 212 ms write");
        assert_eq!((slow.comm.as_str(), *at), ("dd", 3.0));
        assert_eq!(waited_for(slow), ("throttle".to_string(), 208 * MS));
        assert_eq!(slow.throttled_by, vec!["bdi".to_string()]);
        // The interval's line went out with the interval (the findings
        // see it too).
        assert_eq!(
            app.model.last.as_ref().map(|l| l.writes.len()),
            Some(2),
            "the interval line carries them"
        );

        // An interval of fast writes: new lines, the slow one stays.
        app.handle(Msg::Writes(vec![write(90, "cp", 3, 0)]));
        sample(&mut app, 4);
        let w = &app.model.writes;
        assert_eq!(w.lines.len(), 1);
        assert_eq!(w.per_s(&w.lines[0]), Some(1.0));
        assert_eq!(
            w.last_slow.as_ref().map(|(s, t)| (s.pid, *t)),
            Some((812, 3.0))
        );

        // A quiet interval: no lines; a newer slow write replaces the
        // old one even when shorter.
        sample(&mut app, 5);
        assert!(app.model.writes.lines.is_empty());
        app.handle(Msg::Writes(vec![write(90, "cp", 40, 0)]));
        sample(&mut app, 6);
        let (slow, at) = app.model.writes.last_slow.as_ref().expect("cp's");
        assert_eq!((slow.pid, *at), (90, 6.0));
        assert_eq!(waited_for(slow), ("other".to_string(), 40 * MS));
        assert!(slow.throttled_by.is_empty());
    }

    #[test]
    fn without_the_write_spans_writes_are_not_tallied() {
        let mut app = App::new(Model::with_plan(plan(false), "h".into()));
        sample(&mut app, 1);
        app.handle(Msg::Writes(vec![write(812, "dd", 212, 208)]));
        sample(&mut app, 2);
        assert!(app.model.writes.lines.is_empty());
        assert!(app.model.writes.last_slow.is_none());
    }

    #[test]
    fn replayed_lines_keep_only_writes_slow_by_our_bound() {
        let mut m = WritesModel::default();
        let line = |slowest_ms: u64| {
            let mut t = WriteTally::new(0);
            t.add(&write(7, "rec", slowest_ms, 0));
            t.take_lines()
        };
        // A recorder with `--slow-write 1ms`: its 5 ms write is no slow
        // one here.
        m.on_lines(&line(5), 1.0, 1.0);
        assert!(m.last_slow.is_none());
        assert_eq!(m.lines.len(), 1);
        m.on_lines(&line(50), 2.0, 0.0);
        assert_eq!(m.last_slow.as_ref().map(|(_, t)| *t), Some(2.0));
        assert_eq!(m.per_s(&m.lines[0]), None, "no rate over no time");
    }

    #[test]
    fn a_slow_writes_unknown_part_name_falls_back_to_its_largest() {
        let mut s = SlowWrite::of(&write(1, "x", 30, 20));
        s.waited_for = "future-part".into();
        assert_eq!(waited_for(&s), ("throttle".to_string(), 20 * MS));
    }
}
