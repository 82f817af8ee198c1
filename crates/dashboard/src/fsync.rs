//! The fsync pane's state (`--enable durability`): live, the
//! join of the fsync spans, commits and charged calls
//! ([`LiveFsyncs`], the trace loop's `Durable` for the dashboard's task);
//! shown, the last interval's lines per process and the last slow fsync
//! with its commit's contributors ([`FsyncModel`]), from live intervals
//! and replayed ones alike.
use wbscope_model::{
    CallRecord,
    durability::{DeviceFlush, DurabilityJoin, FsyncLine, HandleShare, Phase, SlowFsync, Span},
};

/// An fsync this slow is kept on screen as "the last slow one" until a
/// slower or newer one replaces it: etcd's bound for a WAL fsync's p99
/// (docs/findings.md, `journal-bound`).
pub(crate) const SLOW_NS: u64 = 10_000_000;

/// What the pump sends the dashboard's task for the join.
#[derive(Clone, Debug, PartialEq)]
pub enum DurabilityMsg {
    Sync(Box<Span>),
    Commit(Phase),
    /// A device's cache flush completed (`--enable device_io`).
    Flush(DeviceFlush),
    /// The journal handles of the commits a drained batch ended.
    Shares(Vec<HandleShare>),
}

/// The live join: records in, each interval's lines out.
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveFsyncs {
    join: DurabilityJoin,
}

impl LiveFsyncs {
    /// A call, charged to its dirtiers when the dirtier hook is on.
    pub(crate) fn call(&mut self, c: &CallRecord) {
        self.join.call(c);
    }

    pub(crate) fn take(&mut self, m: DurabilityMsg) {
        match m {
            DurabilityMsg::Sync(s) => self.join.span(*s),
            DurabilityMsg::Commit(p) => self.join.phase(&p),
            DurabilityMsg::Flush(f) => self.join.flush(f),
            DurabilityMsg::Shares(shares) => self.join.shares(shares),
        }
    }

    /// The journal blocks per device and pid since the last interval, for
    /// the ledger's shares.
    pub(crate) fn handle_blocks(&mut self) -> wbscope_model::ledger::HandleBlocks {
        self.join.take_handle_blocks()
    }

    /// The fsyncs ready by `now_ns` (CLOCK_MONOTONIC), as the closing
    /// interval's lines.
    pub(crate) fn interval(&mut self, now_ns: u64) -> Vec<FsyncLine> {
        self.join.take(now_ns);
        self.join.take_line()
    }
}

/// What the pane shows.
#[derive(Clone, Debug, Default)]
pub(crate) struct FsyncModel {
    /// The last interval's lines, largest fsync time first.
    pub(crate) lines: Vec<FsyncLine>,
    /// The last fsync of at least [`SLOW_NS`], its process, and the
    /// interval's `time_s` it came in.
    pub(crate) last_slow: Option<(u32, String, SlowFsync, f64)>,
}

impl FsyncModel {
    pub(crate) fn on_lines(&mut self, lines: &[FsyncLine], time_s: f64) {
        self.lines = lines.to_vec();
        let slow = lines
            .iter()
            .filter_map(|l| Some((l, l.slowest.as_ref()?)))
            .filter(|(_, s)| s.total_ns >= SLOW_NS)
            .max_by_key(|(_, s)| (s.entangled, s.total_ns));
        if let Some((l, s)) = slow {
            self.last_slow = Some((l.pid, l.comm.clone(), s.clone(), time_s));
        }
    }
}
