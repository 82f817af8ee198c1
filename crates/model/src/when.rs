//! A window of wall-clock time asked of a recording or a store
//! (`--since` / `--until`). Plain data; the command line parses it
//! (cli/when.rs), the readers apply it (recording).

/// `since <= t < until`, ns since the Unix epoch; either end open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeWindow {
    pub since_ns: Option<u64>,
    pub until_ns: Option<u64>,
}

impl TimeWindow {
    /// Whether the window is all of time (no end given).
    pub fn is_all(&self) -> bool {
        self.since_ns.is_none() && self.until_ns.is_none()
    }

    pub fn contains(&self, t: u64) -> bool {
        self.since_ns.is_none_or(|s| t >= s) && self.until_ns.is_none_or(|u| t < u)
    }

    /// Whether anything in `[from, to]` is in the window.
    pub fn overlaps(&self, from: u64, to: u64) -> bool {
        self.since_ns.is_none_or(|s| to >= s) && self.until_ns.is_none_or(|u| from < u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_half_open() {
        let w = TimeWindow {
            since_ns: Some(10),
            until_ns: Some(20),
        };
        assert!(!w.contains(9) && w.contains(10) && w.contains(19) && !w.contains(20));
        assert!(
            w.overlaps(0, 10) && !w.overlaps(0, 9) && w.overlaps(19, 30) && !w.overlaps(20, 30)
        );
        assert!(TimeWindow::default().is_all() && TimeWindow::default().contains(0));
        assert!(!w.is_all());
    }
}
