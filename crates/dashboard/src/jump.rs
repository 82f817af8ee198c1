//! Jumps in the replay of a store (`wbscope replay DIR`): a minute back or
//! forward, to the previous or next finding's start. Where the view is and
//! what the store spans is plain state here; [`StoreView::decide`] turns a
//! jump into what the app asks of the runner, which reads the store
//! through the glue in `commands/replay.rs` (the dashboard does not read
//! stores itself).
use wbscope_model::units;

/// One minute, in ns.
pub(crate) const MINUTE_NS: u64 = 60 * 1_000_000_000;

/// A jump the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jump {
    MinuteBack,
    MinuteForward,
    PreviousFinding,
    NextFinding,
}

/// A search for a finding's start, in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Search {
    pub(crate) id: u64,
    pub(crate) from_ns: u64,
    pub(crate) forward: bool,
}

/// The replay of a store: its span (within `--since`/`--until`) and where
/// the view is in it. Times are ns since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoreView {
    pub(crate) first_ns: u64,
    /// Grows while a recorder is still writing the store.
    pub(crate) last_ns: u64,
    /// The close of the latest interval shown, or where the view jumped
    /// to; `None` before the first interval.
    pub(crate) at_ns: Option<u64>,
    pub(crate) searching: Option<Search>,
    searches: u64,
}

/// What a jump comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Play the store from this moment.
    PlayFrom(u64),
    /// Look for a finding's start (the store must be read).
    Find(Search),
    /// Nothing to do, for this reason (the footer says it).
    Refuse(String),
}

impl StoreView {
    pub(crate) fn new(first_ns: u64, last_ns: u64) -> StoreView {
        StoreView {
            first_ns,
            last_ns: last_ns.max(first_ns),
            at_ns: None,
            searching: None,
            searches: 0,
        }
    }

    /// Where the view is: before the first interval, the start.
    pub(crate) fn at(&self) -> u64 {
        self.at_ns.unwrap_or(self.first_ns)
    }

    /// An interval that closed at `unix_ns` was shown. The lines played
    /// before a jump's moment (the findings' warm-up) do not move the view
    /// back.
    pub(crate) fn seen(&mut self, unix_ns: u64) {
        self.at_ns = Some(self.at_ns.map_or(unix_ns, |at| at.max(unix_ns)));
        self.last_ns = self.last_ns.max(unix_ns);
    }

    /// The view moved to `unix_ns`; a search in flight is forgotten.
    pub(crate) fn moved(&mut self, unix_ns: u64) {
        self.at_ns = Some(unix_ns);
        self.searching = None;
    }

    pub(crate) fn decide(&mut self, jump: Jump) -> Decision {
        let at = self.at();
        match jump {
            Jump::MinuteBack if at <= self.first_ns => Decision::Refuse(format!(
                "at the start of the store ({})",
                clock(self.first_ns)
            )),
            Jump::MinuteBack => Decision::PlayFrom(at.saturating_sub(MINUTE_NS).max(self.first_ns)),
            Jump::MinuteForward => {
                let to = at.saturating_add(MINUTE_NS);
                if to > self.last_ns {
                    Decision::Refuse(format!(
                        "the store ends at {}: no minute after {}",
                        clock(self.last_ns),
                        clock(at)
                    ))
                } else {
                    Decision::PlayFrom(to)
                }
            }
            Jump::PreviousFinding | Jump::NextFinding => {
                self.searches += 1;
                let search = Search {
                    id: self.searches,
                    from_ns: at,
                    forward: jump == Jump::NextFinding,
                };
                self.searching = Some(search);
                Decision::Find(search)
            }
        }
    }
}

/// `HH:MM:SS` (UTC) of a wall-clock time in ns.
pub(crate) fn clock(unix_ns: u64) -> String {
    let full = units::utc(unix_ns / 1_000_000_000);
    full.get(11..19).unwrap_or(&full).to_string()
}

/// `YYYY-MM-DD HH:MM:SS to HH:MM:SS UTC` (the date again when the
/// ends are on different days).
pub(crate) fn span(first_ns: u64, last_ns: u64) -> String {
    let (a, b) = (
        units::utc(first_ns / 1_000_000_000),
        units::utc(last_ns / 1_000_000_000),
    );
    let same_day = a.get(..10) == b.get(..10);
    let a = a.strip_suffix(" UTC").unwrap_or(&a);
    if same_day {
        format!("{a} to {}", b.get(11..).unwrap_or(&b))
    } else {
        format!("{a} to {b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-02T00:00:00Z.
    const T0: u64 = 1_796_169_600 * 1_000_000_000;
    const SEC: u64 = 1_000_000_000;

    #[test]
    fn minutes_stay_inside_the_store() {
        let mut v = StoreView::new(T0, T0 + 150 * SEC);
        // Before any interval the view is at the start.
        assert!(
            matches!(v.decide(Jump::MinuteBack), Decision::Refuse(ref s) if s.contains("start of the store (00:00:00)"))
        );
        assert_eq!(
            v.decide(Jump::MinuteForward),
            Decision::PlayFrom(T0 + 60 * SEC)
        );
        v.moved(T0 + 60 * SEC);
        v.seen(T0 + 30 * SEC);
        assert_eq!(v.at(), T0 + 60 * SEC, "warm-up lines do not move it back");
        v.seen(T0 + 100 * SEC);
        assert_eq!(
            v.decide(Jump::MinuteBack),
            Decision::PlayFrom(T0 + 40 * SEC)
        );
        // Past the end: refused, saying where it ends.
        assert!(
            matches!(v.decide(Jump::MinuteForward), Decision::Refuse(ref s) if s.contains("ends at 00:02:30"))
        );
        // Back from 30 s in: the start, not before it.
        v.moved(T0 + 30 * SEC);
        assert_eq!(v.decide(Jump::MinuteBack), Decision::PlayFrom(T0));
        // A recorder still writing: the end grows with what is shown.
        v.seen(T0 + 200 * SEC);
        assert_eq!(v.last_ns, T0 + 200 * SEC);
    }

    #[test]
    fn each_search_has_its_own_id() {
        let mut v = StoreView::new(T0, T0 + 150 * SEC);
        let Decision::Find(a) = v.decide(Jump::NextFinding) else {
            panic!()
        };
        let Decision::Find(b) = v.decide(Jump::PreviousFinding) else {
            panic!()
        };
        assert!(a.forward && !b.forward && a.id != b.id);
        assert_eq!(v.searching, Some(b));
        v.moved(T0);
        assert_eq!(v.searching, None);
    }

    #[test]
    fn times_read_as_utc() {
        assert_eq!(clock(T0 + 3723 * SEC + 999), "01:02:03");
        assert_eq!(
            span(T0, T0 + 3600 * SEC),
            "2026-12-02 00:00:00 to 01:00:00 UTC"
        );
        assert_eq!(
            span(T0, T0 + 86_400 * SEC),
            "2026-12-02 00:00:00 to 2026-12-03 00:00:00 UTC"
        );
    }
}
