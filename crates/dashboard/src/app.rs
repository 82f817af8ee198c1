//! The dashboard's state: the [`Model`], what the user is looking at, and
//! the writer controls. One task owns an [`App`]; everything reaches it as
//! a [`Msg`] and [`App::handle`] is the only place that changes it. What
//! must happen outside (start a writer, change a live tunable, quit) comes
//! back as [`Effect`]s, so the key handling is tested without threads,
//! files or a terminal.
use std::{collections::BTreeMap, time::Duration};

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use writer_core::{RunStatus, Strategy};

use crate::fsync::{DurabilityMsg, LiveFsyncs};
use crate::jump::{Decision, Jump, StoreView, clock};
use crate::state::{Model, OwnCpu, WriterUpdate};
use crate::who::LiveWho;
use crate::writes::LiveWrites;
use wbscope_model::dirtier::AttributionMode;
use wbscope_model::dirtier::DirtierSnapshot;
use wbscope_model::interval::{CallAggregate, IntervalLine};
use wbscope_model::kernel::KernelSnapshot;
use wbscope_model::kernel::KernelStats;
use wbscope_model::ledger::{LedgerInputs, LedgerLine, ShareCarry};
use wbscope_model::plan::Concept;
use wbscope_model::{CallRecord, DevId};

/// Bounds of the `+`/`-`, `]`/`[` and `>`/`<` keys: writer-core's, the
/// same the CLI and the live tunables check (why each: writer_core::limits).
pub(crate) use writer_core::limits::{MAX_CHUNK, MAX_JOBS, MAX_WINDOW, MIN_CHUNK};

/// The panes Tab moves between. At small sizes the focused one of the
/// lower panes is the one shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Pane {
    #[default]
    Histograms,
    Chart,
    Top,
    Kernel,
    Writer,
    /// Who dirtied what.
    Who,
    /// Each process's fsyncs, split.
    Fsync,
    /// Where the bytes go.
    Ledger,
    /// Each process's write system calls, split (also `W`).
    Writes,
}

impl Pane {
    // Writes last, so that the panes before keep their places in the
    // Tab order (docs/ledger.md: "Tab past the fsync pane").
    const ORDER: [Pane; 9] = [
        Pane::Kernel,
        Pane::Writer,
        Pane::Histograms,
        Pane::Chart,
        Pane::Top,
        Pane::Who,
        Pane::Fsync,
        Pane::Ledger,
        Pane::Writes,
    ];

    fn step(self, forward: bool) -> Pane {
        let n = Self::ORDER.len();
        let i = Self::ORDER.iter().position(|&p| p == self).unwrap_or(0);
        Self::ORDER[if forward {
            (i + 1) % n
        } else {
            (i + n - 1) % n
        }]
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Overlay {
    #[default]
    None,
    Help,
    Plan,
    /// The evidence and advice of the findings holding now (`f`).
    Finding,
}

/// Column the top table is sorted by (descending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SortKey {
    #[default]
    Bytes,
    Calls,
    MeanChunk,
    ScanRatio,
}

impl SortKey {
    fn next(self) -> SortKey {
        match self {
            SortKey::Bytes => SortKey::Calls,
            SortKey::Calls => SortKey::MeanChunk,
            SortKey::MeanChunk => SortKey::ScanRatio,
            SortKey::ScanRatio => SortKey::Bytes,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SortKey::Bytes => "bytes",
            SortKey::Calls => "calls",
            SortKey::MeanChunk => "mean chunk",
            SortKey::ScanRatio => "scan ratio",
        }
    }
}

/// Column the who pane is sorted by (descending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum WhoSort {
    #[default]
    Dirtied,
    Written,
    ByOthers,
    Throttled,
}

impl WhoSort {
    fn next(self) -> WhoSort {
        match self {
            WhoSort::Dirtied => WhoSort::Written,
            WhoSort::Written => WhoSort::ByOthers,
            WhoSort::ByOthers => WhoSort::Throttled,
            WhoSort::Throttled => WhoSort::Dirtied,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            WhoSort::Dirtied => "dirtied",
            WhoSort::Written => "written",
            WhoSort::ByOthers => "written by others",
            WhoSort::Throttled => "throttled ms",
        }
    }
}

/// What the user looks at; no figures here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ViewState {
    pub(crate) focus: Pane,
    pub(crate) overlay: Overlay,
    /// First line of the plan overlay.
    pub(crate) overlay_scroll: u16,
    pub(crate) sort: SortKey,
    /// Only this device in the top table.
    pub(crate) device_filter: Option<DevId>,
    /// The who pane: its sort, rows per cgroup instead of per process,
    /// and only this cgroup's processes.
    pub(crate) who_sort: WhoSort,
    pub(crate) who_by_cgroup: bool,
    pub(crate) cgroup_filter: Option<u64>,
}

/// The next writer run's settings (strategy and jobs need a restart; chunk
/// and window are live).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WriterSettings {
    pub(crate) strategy: Strategy,
    pub(crate) chunk: u64,
    pub(crate) window: u32,
    pub(crate) jobs: u32,
}

impl Default for WriterSettings {
    fn default() -> Self {
        WriterSettings {
            // Buffered first: the flusher then does the writeback, which is
            // what the kernel pane is about.
            strategy: Strategy::Buffered,
            chunk: 1 << 20,
            window: 4,
            jobs: 1,
        }
    }
}

/// The writer's control state, as far as the dashboard decided it (the
/// model says what the run itself reported).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum RunState {
    #[default]
    Idle,
    Running {
        run: u64,
    },
    /// Stop requested; `restart` starts a new run with the current settings
    /// once this one has ended (strategy or jobs changed).
    Stopping {
        run: u64,
        restart: bool,
    },
}

/// Everything the dashboard task receives.
// Calls are most of the messages and go on by value to the model: boxing
// them would add an allocation per call.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Msg {
    Key(KeyEvent),
    Resize,
    /// Boxed: a call record is large beside the other messages.
    Call(Box<CallRecord>),
    /// An fsync's span, a commit's phase, or the journal handles of the
    /// commits that ended (`--enable durability`).
    Durability(DurabilityMsg),
    /// The write system calls of one drained batch (`--enable writes`):
    /// a batch per message, since a small-block writer makes hundreds of
    /// thousands of them a second.
    Writes(Vec<wbscope_model::writes::Write>),
    /// The once-a-second sample of the kernel maps and /proc, with the
    /// dashboard's own CPU use over the second.
    Sample {
        at: Duration,
        /// CLOCK_MONOTONIC ns when it was read: the kernel's clock, for
        /// the fsync join.
        mono_ns: u64,
        snapshot: Box<KernelSnapshot>,
        cpu: OwnCpu,
        /// The dirtier maps, read with the snapshot; `None` without the
        /// dirtier hook.
        dirtiers: Option<Box<DirtierSnapshot>>,
    },
    Writer(WriterUpdate),
    /// The dirtyings read between two samples, when a quarter of their
    /// ring waited (a burst of new files): kept for the next sample's
    /// charging, not charged yet.
    Dirtyings(Box<DirtierSnapshot>),
    /// A finished interval read back from a recording (replay), with the
    /// kernel counters as of its end and, from a store, the wall clock of
    /// its close (ns since the epoch).
    Interval {
        line: Box<IntervalLine>,
        kernel: KernelStats,
        unix_ns: Option<u64>,
    },
    /// A jump in the replay of a store (keys ←/→ and n/N).
    Jump(Jump),
    /// The answer to [`Effect::FindFinding`] `id`: the finding's start
    /// (wall clock, name), none, or why the store could not be searched.
    FindingFound {
        id: u64,
        found: Result<Option<(u64, String)>, String>,
    },
    /// A line for the footer from a source (a replay that could not
    /// move, ...).
    Status(String),
    /// SIGTERM or the end of the terminal's input.
    Terminate,
}

/// What the dashboard task must do for the app.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    StartWriter {
        run: u64,
        settings: WriterSettings,
    },
    StopWriter,
    SetChunk(u64),
    SetWindow(u32),
    /// Replay the store from this wall-clock time (ns since the epoch),
    /// preceded by the findings' warm-up (`model::findings::WARM_UP_NS`)
    /// played at once; the messages of the replay before are dropped.
    PlayFrom(u64),
    /// Look in the store for where the next (`forward`) or previous
    /// finding starts from `from_ns`; answered by [`Msg::FindingFound`].
    FindFinding {
        id: u64,
        from_ns: u64,
        forward: bool,
    },
    Quit,
}

/// Turns samples and the calls between them into [`IntervalLine`]s.
#[derive(Clone, Debug, Default)]
struct IntervalBuilder {
    prev: Option<(Duration, KernelSnapshot)>,
    calls: CallAggregate,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct App {
    pub(crate) model: Model,
    /// The model as it was when `p` froze the display.
    pub(crate) frozen: Option<Box<Model>>,
    pub(crate) view: ViewState,
    pub(crate) settings: WriterSettings,
    pub(crate) run_state: RunState,
    next_run: u64,
    intervals: IntervalBuilder,
    /// Who dirtied the pages of the live calls.
    live_who: LiveWho,
    /// The ledger's journal bytes held over for the next interval.
    ledger_carry: ShareCarry,
    /// Each live fsync split (`--enable durability`).
    live_fsyncs: Option<Box<LiveFsyncs>>,
    /// Each live write system call split (`--enable writes`).
    live_writes: Option<Box<LiveWrites>>,
    /// A short message for the footer (a refused setting, ...).
    pub(crate) status: Option<String>,
    /// Whether the screen changed since the last frame (a redraw is
    /// due; nothing to do with dirty pages).
    pub(crate) needs_redraw: bool,
    /// Set when showing a recording: there is no live host to write on,
    /// so the writer keys say so instead of starting runs.
    pub(crate) replay: Option<String>,
    /// Set when the recording is a store: its span and where the view is
    /// (the jumps).
    pub(crate) store: Option<StoreView>,
}

impl App {
    pub(crate) fn new(model: Model) -> App {
        let mode = AttributionMode::of(&model.plan).unwrap_or_default();
        App {
            live_fsyncs: model.plan.attached(Concept::Durability).then(Box::default),
            live_writes: model.plan.attached(Concept::Writes).then(Box::default),
            model,
            needs_redraw: true,
            live_who: LiveWho::new(mode),
            ledger_carry: ShareCarry::default(),
            ..App::default()
        }
    }

    /// The model the screen shows: frozen while paused.
    pub(crate) fn shown(&self) -> &Model {
        self.frozen.as_deref().unwrap_or(&self.model)
    }

    pub(crate) fn paused(&self) -> bool {
        self.frozen.is_some()
    }

    /// Applies one message; returns what the caller must do.
    pub(crate) fn handle(&mut self, msg: Msg) -> Vec<Effect> {
        match msg {
            Msg::Key(key) => {
                self.needs_redraw = true;
                self.on_key(key)
            }
            Msg::Resize => {
                self.needs_redraw = true;
                Vec::new()
            }
            Msg::Call(call) => {
                self.intervals.calls.add(&call);
                let charged = if self.model.plan.attached(Concept::Dirtier) {
                    self.live_who.call(&call)
                } else {
                    Some((*call).clone())
                };
                if let (Some(f), Some(c)) = (self.live_fsyncs.as_mut(), charged) {
                    f.call(&c);
                }
                self.model.on_call(&call);
                // Calls show up with the next interval; redrawing per call
                // would cost CPU for figures that barely move.
                Vec::new()
            }
            Msg::Sample {
                at,
                mono_ns,
                snapshot,
                cpu,
                dirtiers,
            } => {
                self.on_sample(at, mono_ns, *snapshot, cpu, dirtiers.as_deref());
                self.needs_redraw |= !self.paused();
                Vec::new()
            }
            Msg::Dirtyings(snap) => {
                self.live_who.catch_up(&snap);
                Vec::new()
            }
            Msg::Durability(m) => {
                if let Some(f) = self.live_fsyncs.as_mut() {
                    f.take(m);
                }
                Vec::new()
            }
            Msg::Writes(writes) => {
                if let Some(w) = self.live_writes.as_mut() {
                    w.add(&writes);
                }
                // Like calls, they show with the next interval.
                Vec::new()
            }
            Msg::Writer(update) => self.on_writer(update),
            Msg::Interval {
                line,
                kernel,
                unix_ns,
            } => {
                if let (Some(store), Some(t)) = (&mut self.store, unix_ns) {
                    store.seen(t);
                }
                self.model.on_interval(*line, kernel, OwnCpu::default());
                self.needs_redraw |= !self.paused();
                Vec::new()
            }
            Msg::Jump(jump) => {
                self.needs_redraw = true;
                self.jump(jump)
            }
            Msg::FindingFound { id, found } => self.found(id, found),
            Msg::Status(status) => {
                self.status = Some(status);
                self.needs_redraw = true;
                Vec::new()
            }
            Msg::Terminate => vec![Effect::Quit],
        }
    }

    fn on_sample(
        &mut self,
        at: Duration,
        mono_ns: u64,
        cur: KernelSnapshot,
        cpu: OwnCpu,
        dirtiers: Option<&DirtierSnapshot>,
    ) {
        let calls = std::mem::take(&mut self.intervals.calls);
        if let Some(snap) = dirtiers {
            let charged = self.live_who.reading(snap);
            if let Some(f) = self.live_fsyncs.as_mut() {
                for c in &charged {
                    f.call(c);
                }
            }
        }
        if let Some((then, prev)) = &self.intervals.prev {
            let secs = at.saturating_sub(*then).as_secs_f64();
            let mut line = IntervalLine::new(at.as_secs_f64(), secs, &calls, prev, &cur);
            let mut written_on = BTreeMap::new();
            if dirtiers.is_some() {
                line.owners = self.live_who.owners();
                written_on = self.live_who.take_written_on();
            }
            let handles = self.live_fsyncs.as_mut().map(|f| {
                line.fsyncs = f.interval(mono_ns);
                f.handle_blocks()
            });
            if let Some(w) = self.live_writes.as_mut() {
                line.writes = w.interval();
            }
            line.ledger = LedgerLine::of(
                &LedgerInputs {
                    prev,
                    cur: &cur,
                    owners: &line.owners,
                    handles: handles.as_ref(),
                    written_on: &written_on,
                    page_size: wbscope_model::units::page_size(),
                    interval_s: secs,
                    device_io_shed: false,
                },
                &mut self.ledger_carry,
            );
            self.model.on_interval(line, cur.stats, cpu);
        }
        self.intervals.prev = Some((at, cur));
    }

    fn on_writer(&mut self, update: WriterUpdate) -> Vec<Effect> {
        let mut effects = Vec::new();
        if let WriterUpdate::Ended { run, .. } = &update {
            match self.run_state {
                RunState::Stopping { run: r, restart } if r == *run => {
                    self.run_state = RunState::Idle;
                    if restart {
                        effects.push(self.start());
                    }
                }
                // A run that ended by itself (its files written) starts
                // over, so the load goes on until the user stops it; one
                // that failed stays stopped with its error on screen.
                RunState::Running { run: r } if r == *run => {
                    let failed = matches!(&update, WriterUpdate::Ended { outcome, .. }
                        if outcome.status == RunStatus::Failed);
                    self.run_state = RunState::Idle;
                    if !failed {
                        effects.push(self.start());
                    }
                }
                _ => {}
            }
            self.needs_redraw = true;
        }
        self.model.on_writer(update);
        effects
    }

    fn start(&mut self) -> Effect {
        self.next_run += 1;
        self.run_state = RunState::Running { run: self.next_run };
        Effect::StartWriter {
            run: self.next_run,
            settings: self.settings.clone(),
        }
    }

    /// After a strategy or jobs change: a running writer restarts with the
    /// new settings.
    fn restart(&mut self) -> Vec<Effect> {
        match self.run_state {
            RunState::Running { run } => {
                self.run_state = RunState::Stopping { run, restart: true };
                vec![Effect::StopWriter]
            }
            RunState::Stopping { run, .. } => {
                self.run_state = RunState::Stopping { run, restart: true };
                Vec::new()
            }
            RunState::Idle => Vec::new(),
        }
    }

    fn jump(&mut self, jump: Jump) -> Vec<Effect> {
        let Some(store) = &mut self.store else {
            self.status = Some(
                "jumps (\u{2190}/\u{2192} a minute, n/N a finding) are for the replay of a store"
                    .into(),
            );
            return Vec::new();
        };
        match store.decide(jump) {
            Decision::PlayFrom(t) => self.play_from(t),
            Decision::Find(search) => {
                self.status = Some(format!(
                    "looking for the {} finding's start {} {}\u{2026}",
                    if search.forward { "next" } else { "previous" },
                    if search.forward { "after" } else { "before" },
                    clock(search.from_ns)
                ));
                vec![Effect::FindFinding {
                    id: search.id,
                    from_ns: search.from_ns,
                    forward: search.forward,
                }]
            }
            Decision::Refuse(why) => {
                self.status = Some(why);
                Vec::new()
            }
        }
    }

    /// The view starts again at `t`: what was shown belongs to another
    /// stretch of the store, so the model starts empty (the plan, the
    /// host and what the user looks at stay) and the display unpauses.
    fn play_from(&mut self, t: u64) -> Vec<Effect> {
        let plan = self.model.plan.clone();
        let host = std::mem::take(&mut self.model.host);
        self.model = Model::with_plan(plan, host);
        self.frozen = None;
        self.intervals = IntervalBuilder::default();
        self.live_who = LiveWho::new(AttributionMode::of(&self.model.plan).unwrap_or_default());
        if let Some(store) = &mut self.store {
            store.moved(t);
        }
        self.needs_redraw = true;
        vec![Effect::PlayFrom(t)]
    }

    /// A search's answer; one that a later jump overtook is dropped.
    fn found(&mut self, id: u64, found: Result<Option<(u64, String)>, String>) -> Vec<Effect> {
        let Some(search) = self
            .store
            .as_ref()
            .and_then(|s| s.searching)
            .filter(|s| s.id == id)
        else {
            return Vec::new();
        };
        self.needs_redraw = true;
        if let Some(store) = &mut self.store {
            store.searching = None;
        }
        match found {
            Ok(Some((t, name))) => {
                let effects = self.play_from(t);
                self.status = Some(format!("{name} starts at {}", clock(t)));
                effects
            }
            Ok(None) => {
                self.status = Some(format!(
                    "no finding starts {} {} in the store",
                    if search.forward { "after" } else { "before" },
                    clock(search.from_ns)
                ));
                Vec::new()
            }
            Err(e) => {
                self.status = Some(format!("looking for a finding: {e}"));
                Vec::new()
            }
        }
    }

    fn writer_running(&self) -> bool {
        matches!(self.run_state, RunState::Running { .. })
    }

    fn on_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        if key.kind != KeyEventKind::Press {
            return Vec::new();
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return vec![Effect::Quit];
        }
        self.status = None;
        // An open overlay takes the keys that scroll or close it.
        if self.view.overlay != Overlay::None {
            match key.code {
                KeyCode::Esc | KeyCode::Char('?' | 'P' | 'f') => {
                    self.view.overlay = Overlay::None;
                    return Vec::new();
                }
                KeyCode::Down | KeyCode::Char('j') => {
                    self.view.overlay_scroll = self.view.overlay_scroll.saturating_add(1);
                    return Vec::new();
                }
                KeyCode::Up | KeyCode::Char('k') => {
                    self.view.overlay_scroll = self.view.overlay_scroll.saturating_sub(1);
                    return Vec::new();
                }
                KeyCode::PageDown => {
                    self.view.overlay_scroll = self.view.overlay_scroll.saturating_add(10);
                    return Vec::new();
                }
                KeyCode::PageUp => {
                    self.view.overlay_scroll = self.view.overlay_scroll.saturating_sub(10);
                    return Vec::new();
                }
                _ => {}
            }
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return vec![Effect::Quit],
            KeyCode::Char('?') => self.open(Overlay::Help),
            KeyCode::Char('P') => self.open(Overlay::Plan),
            KeyCode::Char('f') => {
                if self.shown().active_findings().is_empty() {
                    self.status = Some("no finding holds now".into());
                } else {
                    self.open(Overlay::Finding);
                }
            }
            KeyCode::Tab => self.view.focus = self.view.focus.step(true),
            KeyCode::BackTab => self.view.focus = self.view.focus.step(false),
            KeyCode::Char('p') => {
                self.frozen = match self.frozen.take() {
                    Some(_) => None,
                    None => Some(Box::new(self.model.clone())),
                };
            }
            KeyCode::Char('r') => {
                self.model.reset();
                if let Some(frozen) = &mut self.frozen {
                    frozen.reset();
                }
                self.status = Some("counters reset".into());
            }
            KeyCode::Char('d') if self.view.focus == Pane::Who => self.next_cgroup(),
            KeyCode::Char('d') => self.next_device(),
            KeyCode::Char('o') if self.view.focus == Pane::Who => {
                self.view.who_sort = self.view.who_sort.next();
            }
            KeyCode::Char('o') => self.view.sort = self.view.sort.next(),
            KeyCode::Char('g') => self.view.who_by_cgroup = !self.view.who_by_cgroup,
            KeyCode::Char('W') => self.view.focus = Pane::Writes,
            KeyCode::Left => return self.handle(Msg::Jump(Jump::MinuteBack)),
            KeyCode::Right => return self.handle(Msg::Jump(Jump::MinuteForward)),
            KeyCode::Char('n') => return self.handle(Msg::Jump(Jump::NextFinding)),
            KeyCode::Char('N') => return self.handle(Msg::Jump(Jump::PreviousFinding)),
            KeyCode::Char(
                'w' | 's' | 'S' | '+' | '=' | '-' | '_' | ']' | '[' | '>' | '.' | '<' | ',',
            ) if self.replay.is_some() => {
                self.status = Some(format!(
                    "replaying {}: the writer runs only live",
                    self.replay.as_deref().unwrap_or("a recording")
                ));
            }
            KeyCode::Char('w') => {
                return match self.run_state {
                    RunState::Idle => vec![self.start()],
                    RunState::Running { run } => {
                        self.run_state = RunState::Stopping {
                            run,
                            restart: false,
                        };
                        vec![Effect::StopWriter]
                    }
                    RunState::Stopping { run, restart } => {
                        self.run_state = RunState::Stopping {
                            run,
                            restart: !restart,
                        };
                        Vec::new()
                    }
                };
            }
            KeyCode::Char(c @ ('s' | 'S')) => {
                let all = Strategy::ALL;
                let i = all
                    .iter()
                    .position(|&s| s == self.settings.strategy)
                    .unwrap_or(0);
                let n = all.len();
                self.settings.strategy = all[if c == 's' {
                    (i + 1) % n
                } else {
                    (i + n - 1) % n
                }];
                return self.restart();
            }
            KeyCode::Char('+' | '=') => {
                return self.set_chunk(self.settings.chunk.saturating_mul(2));
            }
            KeyCode::Char('-' | '_') => return self.set_chunk(self.settings.chunk / 2),
            KeyCode::Char(']') => return self.set_window(self.settings.window.saturating_add(1)),
            KeyCode::Char('[') => return self.set_window(self.settings.window.saturating_sub(1)),
            KeyCode::Char('>' | '.') => return self.set_jobs(self.settings.jobs.saturating_add(1)),
            KeyCode::Char('<' | ',') => return self.set_jobs(self.settings.jobs.saturating_sub(1)),
            _ => {}
        }
        Vec::new()
    }

    fn open(&mut self, overlay: Overlay) {
        self.view.overlay = overlay;
        self.view.overlay_scroll = 0;
    }

    /// `d`: all devices, then each device seen, in order, then all again.
    fn next_device(&mut self) {
        let devices = &self.shown().devices;
        self.view.device_filter = match self.view.device_filter {
            None => devices.keys().next().copied(),
            Some(cur) => devices
                .range((std::ops::Bound::Excluded(cur), std::ops::Bound::Unbounded))
                .next()
                .map(|(d, _)| *d),
        };
    }

    /// `d` on the who pane: all cgroups, then each cgroup seen, in order.
    fn next_cgroup(&mut self) {
        let groups = self.shown().who.by_cgroup();
        self.view.cgroup_filter = match self.view.cgroup_filter {
            None => groups.keys().next().copied(),
            Some(cur) => groups
                .range((std::ops::Bound::Excluded(cur), std::ops::Bound::Unbounded))
                .next()
                .map(|(g, _)| *g),
        };
    }

    fn set_chunk(&mut self, chunk: u64) -> Vec<Effect> {
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk) {
            self.status = Some(format!(
                "chunk stays between {} and {}",
                writer_core::ByteSize(MIN_CHUNK),
                writer_core::ByteSize(MAX_CHUNK)
            ));
            return Vec::new();
        }
        self.settings.chunk = chunk;
        if self.writer_running() {
            vec![Effect::SetChunk(chunk)]
        } else {
            Vec::new()
        }
    }

    fn set_window(&mut self, window: u32) -> Vec<Effect> {
        if !(1..=MAX_WINDOW).contains(&window) {
            self.status = Some(format!("window stays between 1 and {MAX_WINDOW} chunks"));
            return Vec::new();
        }
        self.settings.window = window;
        if self.writer_running() {
            vec![Effect::SetWindow(window)]
        } else {
            Vec::new()
        }
    }

    fn set_jobs(&mut self, jobs: u32) -> Vec<Effect> {
        if !(1..=MAX_JOBS).contains(&jobs) {
            self.status = Some(format!("jobs stay between 1 and {MAX_JOBS}"));
            return Vec::new();
        }
        self.settings.jobs = jobs;
        self.restart()
    }
}

/// Every key, for the help overlay (and the tests that check each one is
/// handled).
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("w", "start / stop a writer run (loops until stopped)"),
    ("s / S", "next / previous strategy (restarts the run)"),
    ("+ / -", "chunk size x2 / /2 (live, 4K..256M)"),
    ("] / [", "srf-pipelined window +1 / -1 (live, 1..64)"),
    ("> / <", "writer jobs +1 / -1 (restarts the run)"),
    (
        "Tab / S-Tab",
        "next / previous pane (small screens show it)",
    ),
    ("o", "sort the top table: bytes, calls, mean chunk, scan"),
    ("d", "top table: next device / all devices"),
    (
        "o d (who)",
        "who pane: sort / next cgroup (when it has focus)",
    ),
    ("g", "who pane: per process / per cgroup"),
    ("W", "write pane: each process's write calls, split"),
    ("p", "pause / resume the display (collection goes on)"),
    ("r", "reset counters, histograms and the top table"),
    ("P", "probe plan (j/k or arrows scroll)"),
    ("f", "the current finding: its evidence and what to try"),
    (
        "\u{2190} / \u{2192}",
        "replay of a store: a minute back / forward",
    ),
    (
        "n / N",
        "replay of a store: next / previous finding's start",
    ),
    ("?", "this help"),
    ("q Esc Ctrl-C", "quit (stops the writer, removes its files)"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::WriterSecond;

    fn key(c: char) -> Msg {
        Msg::Key(KeyEvent::from(KeyCode::Char(c)))
    }

    fn code(k: KeyCode) -> Msg {
        Msg::Key(KeyEvent::from(k))
    }

    fn call(dev: u32, ino: u64, pages: i64) -> CallRecord {
        CallRecord::from(&writeback_common::WritepagesCall {
            dev,
            ino,
            pages_written: pages,
            ..Default::default()
        })
    }

    #[test]
    fn quit_keys() {
        for m in [key('q'), code(KeyCode::Esc), Msg::Terminate] {
            assert_eq!(App::default().handle(m), vec![Effect::Quit]);
        }
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(App::default().handle(Msg::Key(ctrl_c)), vec![Effect::Quit]);
        // Esc closes an overlay before it quits.
        let mut app = App::default();
        app.handle(key('?'));
        assert_eq!(app.view.overlay, Overlay::Help);
        assert!(app.handle(code(KeyCode::Esc)).is_empty());
        assert_eq!(app.view.overlay, Overlay::None);
    }

    #[test]
    fn overlays_focus_sort_pause() {
        let mut app = App::default();
        app.handle(key('P'));
        assert_eq!(app.view.overlay, Overlay::Plan);
        app.handle(code(KeyCode::Down));
        app.handle(code(KeyCode::Down));
        app.handle(code(KeyCode::Up));
        assert_eq!(app.view.overlay_scroll, 1);
        app.handle(key('P'));
        assert_eq!(app.view.overlay, Overlay::None);

        let start = app.view.focus;
        for _ in 0..Pane::ORDER.len() {
            app.handle(code(KeyCode::Tab));
        }
        assert_eq!(app.view.focus, start, "Tab cycles through every pane");
        app.handle(code(KeyCode::BackTab));
        assert_eq!(app.view.focus, Pane::Writer);

        app.handle(key('o'));
        assert_eq!(app.view.sort, SortKey::Calls);

        app.model.on_call(&call(1, 1, 8));
        app.handle(key('p'));
        assert!(app.paused());
        app.handle(Msg::Call(Box::new(call(1, 1, 8))));
        assert_eq!(app.shown().totals.calls, 1, "the paused screen stays");
        assert_eq!(app.model.totals.calls, 2, "collection goes on");
        app.handle(key('p'));
        assert_eq!(app.shown().totals.calls, 2);
    }

    #[test]
    fn upper_w_focuses_the_write_pane_even_replaying() {
        let mut app = App {
            replay: Some("rec".into()),
            ..App::default()
        };
        assert!(app.handle(key('W')).is_empty());
        assert_eq!(app.view.focus, Pane::Writes);
        assert_eq!(app.status, None, "a view key, not a refused writer key");
        app.handle(code(KeyCode::Tab));
        assert_eq!(
            app.view.focus,
            Pane::Kernel,
            "the last pane of the Tab order"
        );
        let mut app = App::default();
        app.handle(key('W'));
        assert_eq!(app.run_state, RunState::Idle, "W does not start the writer");
        assert!(KEYS.iter().any(|(k, _)| *k == "W"), "the help says it");
    }

    #[test]
    fn reset_and_device_filter() {
        let mut app = App::default();
        for (dev, ino) in [(2, 1), (1, 5), (2, 2)] {
            app.handle(Msg::Call(Box::new(call(dev, ino, 16))));
        }
        app.handle(key('d'));
        assert_eq!(app.view.device_filter, Some(DevId::from_kernel(1)));
        app.handle(key('d'));
        assert_eq!(app.view.device_filter, Some(DevId::from_kernel(2)));
        app.handle(key('d'));
        assert_eq!(app.view.device_filter, None);
        app.handle(key('r'));
        assert_eq!(app.model.totals.calls, 0);
        assert!(app.model.inodes.is_empty() && app.model.hist_total.count() == 0);
    }

    #[test]
    fn chunk_and_window_bounds() {
        let mut app = App::default();
        // Idle: settings change, nothing to apply.
        assert!(app.handle(key('+')).is_empty());
        assert_eq!(app.settings.chunk, 2 << 20);
        app.handle(key('w'));
        assert_eq!(app.handle(key('-')), vec![Effect::SetChunk(1 << 20)]);
        for _ in 0..20 {
            app.handle(key('-'));
        }
        assert_eq!(app.settings.chunk, MIN_CHUNK);
        assert!(app.status.is_some(), "the refusal is said");
        for _ in 0..30 {
            app.handle(key('+'));
        }
        assert_eq!(app.settings.chunk, MAX_CHUNK);
        assert_eq!(app.handle(key('[')), vec![Effect::SetWindow(3)]);
        for _ in 0..10 {
            app.handle(key('['));
        }
        assert_eq!(app.settings.window, 1);
        for _ in 0..100 {
            app.handle(key(']'));
        }
        assert_eq!(app.settings.window, MAX_WINDOW);
    }

    #[test]
    fn writer_start_stop_restart() {
        let mut app = App::default();
        let first = app.handle(key('w'));
        assert_eq!(
            first,
            vec![Effect::StartWriter {
                run: 1,
                settings: WriterSettings::default()
            }]
        );
        // A strategy change stops the run, then starts the next one when
        // the first has ended.
        assert_eq!(app.handle(key('s')), vec![Effect::StopWriter]);
        assert_eq!(app.settings.strategy, Strategy::FsyncEnd);
        // More changes while stopping queue up without a second stop.
        assert!(app.handle(key('>')).is_empty());
        let ended = Msg::Writer(WriterUpdate::Ended {
            run: 1,
            outcome: outcome(RunStatus::Interrupted, "interrupted"),
        });
        let next = app.handle(ended);
        assert_eq!(
            next,
            vec![Effect::StartWriter {
                run: 2,
                settings: WriterSettings {
                    strategy: Strategy::FsyncEnd,
                    jobs: 2,
                    ..WriterSettings::default()
                }
            }]
        );
        // A late message of run 1 changes nothing.
        app.handle(Msg::Writer(WriterUpdate::Second(Box::new(WriterSecond {
            run: 1,
            bytes: 99,
            ..Default::default()
        }))));
        assert_eq!(app.model.writer.bytes, 0);
        // w stops; the end leaves it idle.
        assert_eq!(app.handle(key('w')), vec![Effect::StopWriter]);
        let ended = Msg::Writer(WriterUpdate::Ended {
            run: 2,
            outcome: outcome(RunStatus::Interrupted, "interrupted"),
        });
        assert!(app.handle(ended).is_empty());
        assert_eq!(app.run_state, RunState::Idle);
        // Jobs bounds.
        for _ in 0..40 {
            app.handle(key('<'));
        }
        assert_eq!(app.settings.jobs, 1);
        // S goes back.
        app.handle(key('S'));
        assert_eq!(app.settings.strategy, Strategy::FsyncEnd.min_back());
    }

    #[test]
    fn a_completed_run_loops_and_a_failed_one_stops() {
        let mut app = App::default();
        app.handle(key('w'));
        app.handle(Msg::Writer(WriterUpdate::Started {
            run: 1,
            dir: "/x".into(),
            file_size: 1 << 30,
        }));
        let again = app.handle(Msg::Writer(WriterUpdate::Ended {
            run: 1,
            outcome: outcome(RunStatus::Completed, "completed"),
        }));
        assert!(matches!(again[..], [Effect::StartWriter { run: 2, .. }]));
        // The status decides, not the words: a failure said otherwise
        // still stops, a success whatever its text loops.
        let stop = app.handle(Msg::Writer(WriterUpdate::Ended {
            run: 2,
            outcome: outcome(RunStatus::Failed, "no space left on device"),
        }));
        assert!(stop.is_empty());
        assert_eq!(app.run_state, RunState::Idle);
        app.handle(key('w'));
        let again = app.handle(Msg::Writer(WriterUpdate::Ended {
            run: 3,
            outcome: outcome(RunStatus::Completed, "failed to look like a failure"),
        }));
        assert!(matches!(again[..], [Effect::StartWriter { run: 4, .. }]));
    }

    #[test]
    fn f_opens_the_findings_evidence_only_when_one_holds() {
        use wbscope_model::interval::IntervalLine;
        let mut app = App::default();
        assert!(app.handle(key('f')).is_empty());
        assert_eq!(app.view.overlay, Overlay::None);
        assert!(
            app.status
                .as_deref()
                .is_some_and(|s| s.contains("no finding"))
        );
        // Three seconds paused 300 ms each, dirty over the free-run
        // ceiling: dirty-throttled holds (model/findings/dirty.rs).
        for s in 1..=3 {
            let snap = KernelSnapshot::default();
            let mut l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
            l.dirty.vmstat.nr_dirty_threshold = 2000;
            l.dirty.vmstat.nr_dirty_background_threshold = 1000;
            l.dirty.vmstat.nr_dirty = 1700;
            l.throttle.pauses = 10;
            l.throttle.pause_ms_total = 300;
            app.handle(Msg::Interval {
                line: Box::new(l),
                kernel: KernelStats::default(),
                unix_ns: None,
            });
        }
        assert!(!app.model.active_findings().is_empty());
        app.handle(key('f'));
        assert_eq!(app.view.overlay, Overlay::Finding);
        app.handle(code(KeyCode::Down));
        assert_eq!(app.view.overlay_scroll, 1);
        // f again closes it, and does not quit.
        assert!(app.handle(key('f')).is_empty());
        assert_eq!(app.view.overlay, Overlay::None);
    }

    /// 2026-12-02T00:00:00Z, and a second, in ns.
    const T0: u64 = 1_796_169_600 * 1_000_000_000;
    const SEC: u64 = 1_000_000_000;

    /// The replay of a store spanning ten minutes from T0, shown up to
    /// `at` seconds in (an interval and a call a second).
    fn store_app(at: u64) -> App {
        use wbscope_model::interval::IntervalLine;
        let mut app = App {
            model: Model::with_plan(wbscope_model::plan::ProbePlan::default(), "testhost".into()),
            replay: Some("store".into()),
            store: Some(StoreView::new(T0, T0 + 600 * SEC)),
            ..App::default()
        };
        for s in 1..=at {
            app.handle(Msg::Call(Box::new(call(1, s, 8))));
            let snap = KernelSnapshot::default();
            let l = IntervalLine::new(s as f64, 1.0, &CallAggregate::default(), &snap, &snap);
            app.handle(Msg::Interval {
                line: Box::new(l),
                kernel: KernelStats::default(),
                unix_ns: Some(T0 + s * SEC),
            });
        }
        app
    }

    /// Whether the footer's status says `what`.
    fn says(app: &App, what: &str) -> bool {
        app.status.as_deref().is_some_and(|s| s.contains(what))
    }

    #[test]
    fn a_minute_jump_restarts_the_view_there() {
        let mut app = store_app(100);
        assert_eq!(app.store.as_ref().unwrap().at(), T0 + 100 * SEC);
        assert_eq!(app.model.totals.calls, 100);
        app.handle(key('p'));
        assert_eq!(
            app.handle(code(KeyCode::Right)),
            vec![Effect::PlayFrom(T0 + 160 * SEC)]
        );
        // What was shown was another stretch: the model starts again,
        // unpaused, and the view is at the new moment at once.
        assert_eq!(app.model.totals.calls, 0);
        assert!(!app.paused());
        assert_eq!(app.store.as_ref().unwrap().at(), T0 + 160 * SEC);
        assert_eq!(
            app.handle(Msg::Jump(Jump::MinuteBack)),
            vec![Effect::PlayFrom(T0 + 100 * SEC)]
        );
        assert_eq!(
            app.handle(code(KeyCode::Left)),
            vec![Effect::PlayFrom(T0 + 40 * SEC)]
        );
        assert_eq!(app.handle(code(KeyCode::Left)), vec![Effect::PlayFrom(T0)]);
        // At the start: nothing to play, and the footer says why.
        assert!(app.handle(code(KeyCode::Left)).is_empty());
        assert!(says(&app, "start of the store"), "{:?}", app.status);
        // The host stays across jumps.
        assert_eq!(app.model.host, "testhost");
    }

    #[test]
    fn jumps_outside_a_store_are_refused_with_a_reason() {
        let mut app = App::default();
        for m in [
            code(KeyCode::Left),
            code(KeyCode::Right),
            key('n'),
            key('N'),
        ] {
            assert!(app.handle(m).is_empty());
            assert!(says(&app, "replay of a store"), "{:?}", app.status);
        }
    }

    #[test]
    fn a_finding_search_jumps_to_its_answer_and_drops_overtaken_ones() {
        let mut app = store_app(100);
        let at = T0 + 100 * SEC;
        assert_eq!(
            app.handle(key('n')),
            vec![Effect::FindFinding {
                id: 1,
                from_ns: at,
                forward: true
            }]
        );
        assert!(
            app.status
                .as_deref()
                .is_some_and(|s| s.contains("next finding"))
        );
        // N overtakes n: the answer to n is dropped.
        assert_eq!(
            app.handle(key('N')),
            vec![Effect::FindFinding {
                id: 2,
                from_ns: at,
                forward: false
            }]
        );
        let stale = Msg::FindingFound {
            id: 1,
            found: Ok(Some((at + 50 * SEC, "fsync-storm".into()))),
        };
        assert!(app.handle(stale).is_empty());
        assert_eq!(app.store.as_ref().unwrap().at(), at);
        let found = Msg::FindingFound {
            id: 2,
            found: Ok(Some((at - 50 * SEC, "dirty-throttled".into()))),
        };
        assert_eq!(app.handle(found), vec![Effect::PlayFrom(at - 50 * SEC)]);
        assert_eq!(app.model.totals.calls, 0);
        assert_eq!(
            app.status.as_deref(),
            Some("dirty-throttled starts at 00:00:50")
        );
        // An answer twice is dropped the second time.
        let again = Msg::FindingFound {
            id: 2,
            found: Ok(Some((at, "dirty-throttled".into()))),
        };
        assert!(app.handle(again).is_empty());
        // None found, or the store unreadable: said, and the view stays.
        app.handle(key('n'));
        assert!(
            app.handle(Msg::FindingFound {
                id: 3,
                found: Ok(None)
            })
            .is_empty()
        );
        assert_eq!(
            app.status.as_deref(),
            Some("no finding starts after 00:00:50 in the store")
        );
        app.handle(key('N'));
        app.handle(Msg::FindingFound {
            id: 4,
            found: Err("store: permission denied".into()),
        });
        assert_eq!(
            app.status.as_deref(),
            Some("looking for a finding: store: permission denied")
        );
        assert_eq!(app.store.as_ref().unwrap().at(), at - 50 * SEC);
    }

    #[test]
    fn who_pane_keys_sort_group_and_filter_only_when_focused() {
        let mut app = App::default();
        app.model.who.on_owners(&[
            wbscope_model::dirtier::OwnerLine {
                pid: 1,
                cgroup_id: 9,
                pages_dirtied: 1,
                dirtied_unmeasured: false,
                write_call_bytes: None,
                cancelled_bytes: None,
                ..Default::default()
            },
            wbscope_model::dirtier::OwnerLine {
                pid: 2,
                cgroup_id: 4,
                pages_dirtied: 1,
                dirtied_unmeasured: false,
                write_call_bytes: None,
                cancelled_bytes: None,
                ..Default::default()
            },
        ]);
        // Elsewhere o and d are the top table's.
        app.handle(key('o'));
        assert_eq!(
            (app.view.sort, app.view.who_sort),
            (SortKey::Calls, WhoSort::Dirtied)
        );
        while app.view.focus != Pane::Who {
            app.handle(code(KeyCode::Tab));
        }
        app.handle(key('o'));
        assert_eq!(
            (app.view.sort, app.view.who_sort),
            (SortKey::Calls, WhoSort::Written)
        );
        app.handle(key('d'));
        assert_eq!(app.view.cgroup_filter, Some(4));
        app.handle(key('d'));
        assert_eq!(app.view.cgroup_filter, Some(9));
        app.handle(key('d'));
        assert_eq!(app.view.cgroup_filter, None);
        assert_eq!(app.view.device_filter, None);
        app.handle(key('g'));
        assert!(app.view.who_by_cgroup);
        app.handle(key('r'));
        assert!(app.model.who.rows.is_empty(), "r resets the who totals");
    }

    fn outcome(status: RunStatus, summary: &str) -> writer_core::RunOutcome {
        writer_core::RunOutcome {
            status,
            summary: summary.into(),
        }
    }

    #[test]
    fn the_help_says_the_limits_the_keys_keep() {
        let help = |key: &str| KEYS.iter().find(|(k, _)| *k == key).map(|(_, h)| *h);
        let chunk = format!("{}K..{}M", MIN_CHUNK >> 10, MAX_CHUNK >> 20);
        assert!(help("+ / -").is_some_and(|h| h.contains(&chunk)), "{chunk}");
        let window = format!("1..{MAX_WINDOW})");
        assert!(
            help("] / [").is_some_and(|h| h.contains(&window)),
            "{window}"
        );
    }

    trait Back {
        fn min_back(self) -> Strategy;
    }
    impl Back for Strategy {
        /// The strategy before `self` in [`Strategy::ALL`].
        fn min_back(self) -> Strategy {
            let i = Strategy::ALL.iter().position(|&s| s == self).unwrap_or(0);
            Strategy::ALL[(i + Strategy::ALL.len() - 1) % Strategy::ALL.len()]
        }
    }

    #[test]
    fn the_strategy_key_reaches_the_uncached_strategies_and_wraps() {
        let mut app = App::default();
        let mut seen = vec![app.settings.strategy];
        for _ in 0..Strategy::ALL.len() {
            app.handle(key('s'));
            seen.push(app.settings.strategy);
        }
        assert!(seen.contains(&Strategy::Uncached) && seen.contains(&Strategy::UringBuffered));
        assert_eq!(seen.last(), Some(&Strategy::Buffered), "{seen:?}");
        app.handle(key('S'));
        assert_eq!(app.settings.strategy, Strategy::UringBuffered);
    }
}
