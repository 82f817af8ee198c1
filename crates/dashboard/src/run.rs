//! `wbscope` with no subcommand: the live dashboard.
//!
//! One task (the event loop here) owns the [`App`]; collectors send it
//! typed [`Msg`]s over one channel: the ring-buffer pump (each call), the
//! sampler (kernel maps, /proc/vmstat and our own CPU, once a second) and
//! the writer's observer (once a second, plus start and end of a run).
//! Keys come from crossterm's `EventStream`. Frames are drawn at most 10
//! times a second, only when something changed, from `&App`.
use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    pin::Pin,
    process::ExitCode,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use crossterm::event::{Event as TermEvent, EventStream};
use futures_util::StreamExt as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc::{self, UnboundedSender},
};
use writer_core::{
    LiveTunables, RunOutcome, SyncKind, Writer, WriterConfig, WriterSpec, stats::LatencyHist,
};

use crate::app::{App, Effect, Msg, WriterSettings};
use crate::fsync::DurabilityMsg;
use crate::jump::StoreView;
use crate::state::{Model, OwnCpu, WriterSecond, WriterUpdate};
use crate::ui;
use wbscope_model::Log2Histogram;
use wbscope_model::kernel::KernelSnapshot;
use wbscope_model::plan::{Concept, HookChoice, ProbePlan};
use wbscope_model::units::page_size;
use wbscope_sys::kernel_release;
use wbscope_tracer::dirtiers::DirtyingsWake;
use wbscope_tracer::ring::{RingCollector, RingRecord};
use wbscope_tracer::{Tracer, TracerOptions};

/// At most 10 frames a second.
const FRAME: Duration = Duration::from_millis(100);
/// Sampling period of the kernel maps and /proc.
const SAMPLE: Duration = Duration::from_secs(1);
/// Bytes per file of a writer run, at most; a run that completes starts
/// again, so this only bounds the disk space one run takes. Large enough
/// that a buffered run's dirty pages pass the background threshold and
/// the flusher writes them back before the file is removed.
const FILE_SIZE: u64 = 8 << 30;
/// The thread that runs each writer run carries this name (writer-core
/// names its own job and monitor threads), so the CPU figures can tell the
/// writer's threads from the tracer's.
const WRITER_THREAD: &str = "wbscope-writer";
/// How long quitting waits for a stopped run to remove its files.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// Options of the dashboard (top-level flags of `wbscope`).
#[derive(Clone, Debug, Default)]
pub struct DashboardOptions {
    pub hooks: HookChoice,
    /// Where writer runs create their files; default a new temporary
    /// directory in the current directory, removed on quit.
    pub dir: Option<PathBuf>,
}

pub async fn run(options: &DashboardOptions) -> anyhow::Result<ExitCode> {
    let (tx, rx) = mpsc::unbounded_channel::<Msg>();
    // Missing privileges or probes do not stop the dashboard: it opens and
    // says what is missing.
    let tracer_options = TracerOptions {
        hooks: options.hooks.clone(),
        ..TracerOptions::default()
    };
    let (tracer, plan) = match Tracer::attach(&tracer_options) {
        Ok(mut tracer) => {
            wbscope_tracer::spawn_ebpf_log_pump(&mut tracer);
            let collector = RingCollector::new(&mut tracer)?;
            let plan = tracer.plan.clone();
            let tracer = Arc::new(tracer);
            tokio::spawn(pump(collector, tracer.clone(), tx.clone()));
            (Some(tracer), plan)
        }
        Err(e) => {
            log::warn!("no tracer: {e:#}");
            (
                None,
                ProbePlan::unavailable(kernel_release(), &format!("{e:#}")),
            )
        }
    };
    tokio::spawn(sampler(tracer, tx.clone()));
    let mut app = App::new(Model::with_plan(plan, wbscope_sys::hostname()));
    let mut writer = WriterRunner::new(options.dir.clone(), tx.clone());

    // ratatui::init restores the terminal on panic too.
    let mut terminal = ratatui::init();
    let result = event_loop(&mut terminal, &mut app, &mut writer, rx, &mut None).await;
    ratatui::restore();
    // Stop the writer and remove its files (and our temporary directory)
    // before we exit, whatever ended the loop.
    writer.shutdown().await;
    result.map(|()| ExitCode::SUCCESS)
}

/// How many messages a replay feeder may run ahead of the dashboard: it
/// waits when they are not taken (a recording of calls alone would
/// otherwise queue all of them in memory).
pub const REPLAY_AHEAD: usize = 1024;

/// `wbscope replay FILE`: a recording shown in the dashboard. `feed` gets
/// the sending half of a bounded channel and sends the recording's calls
/// and intervals through the same messages as a live trace, paced as it
/// likes; the dashboard has no writer (its keys are refused).
pub async fn replay<F>(
    plan: ProbePlan,
    host: String,
    name: String,
    feed: impl FnOnce(mpsc::Sender<Msg>) -> F,
) -> anyhow::Result<ExitCode>
where
    F: Future<Output = ()> + Send + 'static,
{
    let (replay_tx, replay_rx) = mpsc::channel::<Msg>(REPLAY_AHEAD);
    let feed = tokio::spawn(feed(replay_tx));
    let app = App::new(Model::with_plan(plan, host));
    replay_in(app, name, replay_rx, feed, None).await
}

/// A store the dashboard replays and moves in. The glue in
/// `commands/replay.rs` implements it over the store's reader: the
/// dashboard does not read stores itself (dashboard and recording are
/// siblings, ARCHITECTURE.md).
pub trait StoreSource: Send + Sync + 'static {
    /// Sends the store's calls and intervals from `from_ns` on (wall
    /// clock, ns since the epoch), paced as the replay's speed says and
    /// preceded by the findings' warm-up sent at once; or, with `None`,
    /// from the start of the replay's window. Ends when `tx` closes.
    fn play(
        &self,
        from_ns: Option<u64>,
        tx: mpsc::Sender<Msg>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>>;

    /// Where the next (`forward`) or previous finding starts from
    /// `from_ns`: its wall clock and name, or none. Reads the store, so
    /// it blocks; the runner calls it on a thread of its own, and stops
    /// it early (any answer) once `wanted` says no.
    fn find_finding(
        &self,
        from_ns: u64,
        forward: bool,
        wanted: &dyn Fn() -> bool,
    ) -> Result<Option<(u64, String)>, String>;
}

/// `wbscope replay DIR`: a store in the dashboard, spanning `span`
/// (wall clock, ns since the epoch, within `--since`/`--until`); the
/// app's jumps become new plays of `source` and searches in it.
pub async fn replay_store(
    plan: ProbePlan,
    host: String,
    name: String,
    span: (u64, u64),
    source: Arc<dyn StoreSource>,
) -> anyhow::Result<ExitCode> {
    let (replay_tx, replay_rx) = mpsc::channel::<Msg>(REPLAY_AHEAD);
    let feed = tokio::spawn(source.play(None, replay_tx));
    let mut app = App::new(Model::with_plan(plan, host));
    app.store = Some(StoreView::new(span.0, span.1));
    replay_in(app, name, replay_rx, feed, Some(source)).await
}

async fn replay_in(
    mut app: App,
    name: String,
    rx_replay: mpsc::Receiver<Msg>,
    feed: tokio::task::JoinHandle<()>,
    store: Option<Arc<dyn StoreSource>>,
) -> anyhow::Result<ExitCode> {
    let (tx, rx) = mpsc::unbounded_channel::<Msg>();
    app.replay = Some(name);
    let mut replaying = Some(Replaying {
        rx: Some(rx_replay),
        feed: Some(feed),
        store,
        tx: tx.clone(),
        search: Arc::new(AtomicU64::new(0)),
    });
    // Never started: the app refuses writer keys while replaying.
    let mut writer = WriterRunner::new(None, tx.clone());
    let mut terminal = ratatui::init();
    let result = event_loop(&mut terminal, &mut app, &mut writer, rx, &mut replaying).await;
    ratatui::restore();
    writer.shutdown().await;
    result.map(|()| ExitCode::SUCCESS)
}

/// A replay going on: the messages of its current play, the task that
/// sends them, and the store it can move in.
struct Replaying {
    /// `None` once the play has ended.
    rx: Option<mpsc::Receiver<Msg>>,
    feed: Option<tokio::task::JoinHandle<()>>,
    store: Option<Arc<dyn StoreSource>>,
    /// For the answers of searches.
    tx: UnboundedSender<Msg>,
    /// The id of the search still wanted (0: none): a jump or a later
    /// search stops the one before, so searches do not pile up.
    search: Arc<AtomicU64>,
}

impl Replaying {
    /// [`Effect::PlayFrom`]: the current play stops (its messages not
    /// taken yet are dropped with its channel) and a new one starts.
    fn play_from(&mut self, unix_ns: u64) {
        let Some(store) = &self.store else { return };
        self.search.store(0, Ordering::Relaxed);
        if let Some(feed) = self.feed.take() {
            feed.abort();
        }
        let (tx, rx) = mpsc::channel::<Msg>(REPLAY_AHEAD);
        self.feed = Some(tokio::spawn(store.play(Some(unix_ns), tx)));
        self.rx = Some(rx);
    }

    /// [`Effect::FindFinding`]: searched on a thread of its own (it reads
    /// the store) that answers with [`Msg::FindingFound`]. Not a tokio
    /// blocking task, so that quitting does not wait for a long search.
    fn find(&self, id: u64, from_ns: u64, forward: bool) {
        let Some(store) = &self.store else { return };
        let store = Arc::clone(store);
        let tx = self.tx.clone();
        self.search.store(id, Ordering::Relaxed);
        let search = Arc::clone(&self.search);
        let spawned = std::thread::Builder::new()
            .name("wbscope-search".into())
            .spawn(move || {
                let wanted = || search.load(Ordering::Relaxed) == id;
                let found = store.find_finding(from_ns, forward, &wanted);
                if wanted() {
                    let _ = tx.send(Msg::FindingFound { id, found });
                }
            });
        if let Err(e) = spawned {
            let _ = self.tx.send(Msg::FindingFound {
                id,
                found: Err(format!("starting the search: {e}")),
            });
        }
    }
}

impl Drop for Replaying {
    fn drop(&mut self) {
        self.search.store(0, Ordering::Relaxed);
        if let Some(feed) = self.feed.take() {
            feed.abort();
        }
    }
}

/// Moves records from the ring buffer to the dashboard task, with the
/// journal handles of the commits each batch ended (read here, where the
/// tracer is: the handles of a transaction are all counted before its
/// commit ends). Stops when the dashboard is gone.
async fn pump(mut collector: RingCollector, tracer: Arc<Tracer>, tx: UnboundedSender<Msg>) {
    loop {
        let mut batch = Vec::new();
        if let Err(e) = collector.wait_and_drain(|e| batch.push(e)).await {
            log::error!("ring buffer: {e:#}");
            return;
        }
        let mut ended = Vec::new();
        let mut writes = Vec::new();
        for record in batch {
            let msg = match record {
                RingRecord::Call(call) => Msg::Call(Box::new(call)),
                RingRecord::Sync(span) => Msg::Durability(DurabilityMsg::Sync(Box::new(span))),
                RingRecord::Flush(f) => Msg::Durability(DurabilityMsg::Flush(f)),
                // Sent as one message after the batch (Msg::Writes).
                RingRecord::Write(w) => {
                    writes.push(w);
                    continue;
                }
                RingRecord::Commit(phase) => {
                    if phase.phase == writeback_common::phase::END {
                        ended.push((phase.dev, phase.transaction));
                    }
                    Msg::Durability(DurabilityMsg::Commit(phase))
                }
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
        if !writes.is_empty() && tx.send(Msg::Writes(writes)).is_err() {
            return;
        }
        match tracer.journal_handles(&ended) {
            Ok(shares) if !shares.is_empty() => {
                if tx
                    .send(Msg::Durability(DurabilityMsg::Shares(shares)))
                    .is_err()
                {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => log::warn!("reading the journal handles: {e:#}"),
        }
    }
}

/// Once a second: the kernel maps, /proc/vmstat, and the dashboard's own
/// CPU time, the tracer's side and the writer's apart.
async fn sampler(tracer: Option<Arc<Tracer>>, tx: UnboundedSender<Msg>) {
    let start = Instant::now();
    let mut tick = tokio::time::interval(SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut prev_cpu: Option<CpuReading> = None;
    // Never wakes without a tracer, or with no per-inode dirtier hook.
    let mut dirtyings = match tracer.as_deref() {
        Some(t) => DirtyingsWake::register(t),
        None => DirtyingsWake::none(),
    };
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = dirtyings.woken() => {
                if let Some(t) = &tracer {
                    match t.dirtiers(false) {
                        Ok(snap) => {
                            if tx.send(Msg::Dirtyings(Box::new(snap))).is_err() {
                                return;
                            }
                        }
                        Err(e) => log::warn!("reading the dirtier maps: {e:#}"),
                    }
                }
                continue;
            }
        }
        let snapshot = match &tracer {
            Some(t) => t.snapshot(),
            None => wbscope_tracer::read_vmstat().map(|vmstat| KernelSnapshot {
                vmstat,
                ..KernelSnapshot::default()
            }),
        };
        let snapshot = match snapshot {
            Ok(s) => s,
            Err(e) => {
                log::warn!("sampling the kernel: {e:#}");
                continue;
            }
        };
        let now = Instant::now();
        let reading = CpuReading::now();
        let cpu = match (&prev_cpu, &reading) {
            (Some(before), Some(after)) => after.since(before),
            _ => OwnCpu::default(),
        };
        prev_cpu = reading;
        // Read after the snapshot, like the trace loop's interval: the
        // pages dirtied up to now count in the interval that ends now.
        let dirtiers = match &tracer {
            Some(t) if t.plan.attached(Concept::Dirtier) => match t.dirtiers(true) {
                Ok(snap) => Some(Box::new(snap)),
                Err(e) => {
                    log::warn!("reading the dirtier maps: {e:#}");
                    None
                }
            },
            _ => None,
        };
        let msg = Msg::Sample {
            at: now.duration_since(start),
            mono_ns: wbscope_sys::monotonic_ns(),
            snapshot: Box::new(snapshot),
            cpu,
            dirtiers,
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as f64 } else { 100.0 }
}

/// The CPU time the tracer side's threads (every thread of ours but the
/// writer's) have used so far, ns, by thread id.
type TracerThreads = HashMap<u32, u64>;

/// One reading of the dashboard's CPU time; two of them give the share
/// of a core each side used in between ([`CpuReading::since`]).
struct CpuReading {
    at: Instant,
    /// CLOCK_PROCESS_CPUTIME_ID: every thread's time, also that of the
    /// threads that have ended.
    process_ns: u64,
    tracer: TracerThreads,
}

impl CpuReading {
    /// `None` when /proc/self/task cannot be read.
    fn now() -> Option<CpuReading> {
        let tracer = tracer_threads()?;
        Some(CpuReading {
            at: Instant::now(),
            process_ns: wbscope_sys::process_cpu_ns(),
            tracer,
        })
    }

    fn since(&self, before: &CpuReading) -> OwnCpu {
        let process = self.process_ns.saturating_sub(before.process_ns);
        OwnCpu::split(
            self.at.duration_since(before.at).as_secs_f64(),
            process,
            writer_ns(&before.tracer, &self.tracer, process),
        )
    }
}

/// The writer's CPU time between two readings, ns: the process's
/// (`process_ns`, every thread's) less what the tracer side's threads used.
///
/// The writer's threads are not added up one by one because they do not
/// stay: writer-core's jobs end with each run (a short run's may start and
/// end between two readings), its io_uring workers with their job, and a
/// thread that ends takes out of /proc the time it ran since the last
/// reading, which only the process's clock still counts. Summed per
/// thread, the writer lost that time (an ended run's last second read
/// 0 %), and the tracer, were it the process less those sums, would have
/// got it. The tracer side's threads (tokio's workers, the terminal's
/// reader) live as long as the dashboard, so that side is the one summed
/// per thread, and the writer gets the rest. Nor can the writer time
/// itself with CLOCK_THREAD_CPUTIME_ID: the thread we start only waits for
/// writer-core's, and io_uring's workers run no code of ours.
fn writer_ns(before: &TracerThreads, after: &TracerThreads, process_ns: u64) -> u64 {
    let tracer: u64 = after
        .iter()
        .map(|(tid, &ns)| match before.get(tid) {
            Some(&then) if then <= ns => ns - then,
            // New since (or an id used again): all its time is since.
            _ => ns,
        })
        .sum();
    process_ns.saturating_sub(tracer)
}

/// Whether a thread of ours, by name, is the writer's.
fn is_writer_thread(name: &str) -> bool {
    name == WRITER_THREAD || writer_core::engine::is_engine_thread(name)
}

/// The thread whose io_uring requests an io-wq worker runs, from the
/// worker's name (`iou-wrk-TID`, fs/io-wq.c): the `uring-buffered`
/// strategy's copies into the page cache run there, not in the job.
fn io_worker_of(name: &str) -> Option<u32> {
    name.strip_prefix("iou-wrk-")?.parse().ok()
}

/// The CPU time each tracer-side thread has used so far, from
/// /proc/self/task (a thread that ends meanwhile is left out: see
/// [`writer_ns`]).
fn tracer_threads() -> Option<TracerThreads> {
    let mut named = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue; // the thread ended meanwhile
        };
        named.push((tid, comm.trim_end_matches('\n').to_string(), entry.path()));
    }
    let writer: HashSet<u32> = named
        .iter()
        .filter(|(_, name, _)| is_writer_thread(name))
        .map(|(tid, ..)| *tid)
        .collect();
    let mut tracer = TracerThreads::new();
    for (tid, name, path) in named {
        if writer.contains(&tid) || io_worker_of(&name).is_some_and(|of| writer.contains(&of)) {
            continue;
        }
        if let Some(ns) = thread_cpu_ns(&path) {
            tracer.insert(tid, ns);
        }
    }
    Some(tracer)
}

/// A thread's CPU time so far, ns (`task` is its /proc/self/task/TID).
/// The first field of `schedstat` is the scheduler's own count in ns (the
/// one CLOCK_PROCESS_CPUTIME_ID adds up), where `stat`'s utime + stime
/// come in clock ticks: 10 ms, as much in a second as the tracer's whole
/// cost. A kernel that keeps no sched_info prints `0 0 0` there; then the
/// ticks (a thread that has not run yet reads 0 either way).
fn thread_cpu_ns(task: &Path) -> Option<u64> {
    let schedstat = std::fs::read_to_string(task.join("schedstat")).ok();
    let ns = schedstat
        .as_deref()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
    if let Some(ns) = ns.filter(|&ns| ns > 0) {
        return Some(ns);
    }
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    // After the comm (which may hold spaces and parentheses): state is
    // field 3, so utime (14) is index 11 (proc(5)).
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    let ticks = get(11)? + get(12)?;
    Some((ticks as f64 * 1e9 / clock_ticks()) as u64)
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    app: &mut App,
    writer: &mut WriterRunner,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    replay: &mut Option<Replaying>,
) -> anyhow::Result<()> {
    let mut keys = EventStream::new();
    let mut frame = tokio::time::interval(FRAME);
    frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;

    loop {
        let msg = tokio::select! {
            _ = frame.tick() => {
                if app.needs_redraw {
                    terminal.draw(|f| ui::render(app, f)).context("drawing")?;
                    app.needs_redraw = false;
                }
                continue;
            }
            Some(msg) = rx.recv() => msg,
            Some(msg) = next_replayed(replay) => msg,
            key = keys.next() => match key {
                Some(Ok(TermEvent::Key(k))) => Msg::Key(k),
                Some(Ok(TermEvent::Resize(..))) => Msg::Resize,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e).context("reading the terminal"),
                None => Msg::Terminate,
            },
            _ = sigterm.recv() => Msg::Terminate,
        };
        for effect in app.handle(msg) {
            match effect {
                Effect::Quit => return Ok(()),
                Effect::StartWriter { run, settings } => writer.start(run, &settings),
                Effect::StopWriter => writer.stop(),
                Effect::SetChunk(bytes) => writer.set(|t| t.set_chunk(bytes)),
                Effect::SetWindow(chunks) => writer.set(|t| t.set_window(chunks)),
                Effect::PlayFrom(unix_ns) => {
                    if let Some(r) = replay.as_mut() {
                        r.play_from(unix_ns);
                    }
                }
                Effect::FindFinding {
                    id,
                    from_ns,
                    forward,
                } => {
                    if let Some(r) = replay.as_ref() {
                        r.find(id, from_ns, forward);
                    }
                }
            }
        }
    }
}

/// The next message of a replay, or never (no replay, or its play has
/// ended: a jump may start another).
async fn next_replayed(replay: &mut Option<Replaying>) -> Option<Msg> {
    match replay.as_mut().map(|r| &mut r.rx) {
        Some(rx @ Some(_)) => match rx.as_mut()?.recv().await {
            Some(msg) => Some(msg),
            None => {
                *rx = None;
                std::future::pending().await
            }
        },
        _ => std::future::pending().await,
    }
}

/// What the writer's threads report, added up until the dashboard takes
/// it once a second. Shared by every run: runs can be shorter than
/// writer-core's one-second `Tick`, and per-chunk messages would flood the
/// dashboard task with 4 KiB chunks.
#[derive(Default)]
struct WriterFeed {
    second: Mutex<FeedSecond>,
}

#[derive(Default)]
struct FeedSecond {
    /// The latest run started, and whether one is going.
    run: u64,
    active: bool,
    bytes: u64,
    chunk_pages: Log2Histogram,
    sync: Vec<(SyncKind, LatencyHist)>,
}

impl WriterFeed {
    fn lock(&self) -> std::sync::MutexGuard<'_, FeedSecond> {
        // A poisoned lock only means a writing thread panicked; the
        // figures are still usable.
        self.second.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The observer of one run: chunk sizes in pages, bytes and sync
/// latencies into the feed.
struct FeedObserver {
    page: u64,
    feed: Arc<WriterFeed>,
}

impl writer_core::Observer for FeedObserver {
    fn on_event(&self, event: &writer_core::Event) {
        match event {
            writer_core::Event::ChunkWritten { len, .. } => {
                let mut second = self.feed.lock();
                second.bytes += len;
                second.chunk_pages.record(len.div_ceil(self.page));
            }
            writer_core::Event::SyncEnded { kind, latency, .. } => {
                let mut second = self.feed.lock();
                match second.sync.iter_mut().find(|(k, _)| k == kind) {
                    Some((_, h)) => h.record(*latency),
                    None => {
                        let mut h = LatencyHist::new();
                        h.record(*latency);
                        second.sync.push((*kind, h));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Once a second while a run goes (and once more after it ended, for its
/// last partial second), the feed becomes a [`WriterSecond`] message.
async fn writer_sampler(feed: Arc<WriterFeed>, tx: UnboundedSender<Msg>) {
    let mut tick = tokio::time::interval(SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_active = false;
    loop {
        tick.tick().await;
        let msg = {
            let mut second = feed.lock();
            let active = second.active;
            if !active && !was_active {
                continue;
            }
            was_active = active;
            WriterSecond {
                run: second.run,
                elapsed_s: 0.0,
                bytes: 0,
                bytes_last_second: std::mem::take(&mut second.bytes),
                chunk_pages: std::mem::take(&mut second.chunk_pages),
                sync: std::mem::take(&mut second.sync),
            }
        };
        if tx
            .send(Msg::Writer(WriterUpdate::Second(Box::new(msg))))
            .is_err()
        {
            return;
        }
    }
}

/// Starts and stops writer runs on their own thread (`Writer::run`
/// blocks) and keeps the directory they write in.
struct WriterRunner {
    dir: Option<PathBuf>,
    /// Our temporary directory, removed (with anything left in it) on drop.
    temp: Option<tempfile::TempDir>,
    current: Option<(Arc<LiveTunables>, JoinHandle<()>)>,
    feed: Arc<WriterFeed>,
    tx: UnboundedSender<Msg>,
}

impl WriterRunner {
    fn new(dir: Option<PathBuf>, tx: UnboundedSender<Msg>) -> WriterRunner {
        let feed = Arc::new(WriterFeed::default());
        tokio::spawn(writer_sampler(Arc::clone(&feed), tx.clone()));
        WriterRunner {
            dir,
            temp: None,
            current: None,
            feed,
            tx,
        }
    }

    fn ended(&self, run: u64, outcome: RunOutcome) {
        let _ = self
            .tx
            .send(Msg::Writer(WriterUpdate::Ended { run, outcome }));
    }

    /// The directory runs write into: `--dir`, or a temporary directory
    /// made in the current directory on the first start, so the writer
    /// loads the filesystem the user started wbscope on.
    fn target(&mut self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.dir {
            return Ok(dir.clone());
        }
        if self.temp.is_none() {
            let temp = tempfile::Builder::new()
                .prefix(".wbscope-")
                .tempdir_in(".")
                .context(
                    "creating a temporary directory in the current directory (or use --dir)",
                )?;
            self.temp = Some(temp);
        }
        let temp = self.temp.as_ref().context("temporary directory")?;
        Ok(temp.path().to_path_buf())
    }

    fn start(&mut self, run: u64, settings: &WriterSettings) {
        match self.try_start(run, settings) {
            Ok(()) => {}
            Err(e) => self.ended(run, RunOutcome::failed(format_args!("{e:#}"))),
        }
    }

    fn try_start(&mut self, run: u64, s: &WriterSettings) -> anyhow::Result<()> {
        let dir = self.target()?;
        let file_size = file_size_for(&dir, s.jobs);
        let spec = WriterSpec {
            dirs: vec![dir.clone()],
            size: file_size.max(s.chunk),
            chunk: s.chunk,
            strategy: s.strategy,
            jobs: s.jobs,
            window: s.window,
            ..WriterSpec::default()
        };
        let cfg = WriterConfig::new(spec)?;
        let observer = FeedObserver {
            page: page_size(),
            feed: Arc::clone(&self.feed),
        };
        let writer = Writer::new(cfg).with_observer(Arc::new(observer));
        let tunables = writer.tunables();
        let tx = self.tx.clone();
        {
            let mut second = self.feed.lock();
            second.run = run;
            second.active = true;
        }
        let feed = Arc::clone(&self.feed);
        let _ = tx.send(Msg::Writer(WriterUpdate::Started {
            run,
            dir: display_dir(&dir),
            file_size: writer.config().spec().size,
        }));
        let handle = std::thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || {
                let outcome = match writer.run() {
                    Ok(r) => RunOutcome {
                        status: r.status,
                        summary: format!(
                            "{} {}, {:.0} MB/s",
                            match r.status {
                                writer_core::RunStatus::Completed => "completed",
                                writer_core::RunStatus::Interrupted => "interrupted",
                                writer_core::RunStatus::Failed => "failed",
                            },
                            wbscope_model::units::bytes(r.bytes),
                            r.write_mb_s
                        ),
                    },
                    Err(f) => RunOutcome::failed(&f.error),
                };
                feed.lock().active = false;
                let _ = tx.send(Msg::Writer(WriterUpdate::Ended { run, outcome }));
            })
            .context("starting the writer thread")?;
        self.current = Some((tunables, handle));
        Ok(())
    }

    fn stop(&mut self) {
        if let Some((tunables, _)) = &self.current {
            tunables.request_stop();
        }
    }

    /// Applies a live tunable to the running writer; a refusal is logged
    /// (the app keeps its values within the writer's bounds).
    fn set(&self, f: impl Fn(&LiveTunables) -> Result<(), writer_core::ConfigError>) {
        if let Some((tunables, _)) = &self.current
            && let Err(e) = f(tunables)
        {
            log::warn!("writer tunable refused: {e}");
        }
    }

    /// Stops the run and waits (bounded) for it to remove its files; then
    /// the temporary directory goes.
    async fn shutdown(&mut self) {
        if let Some((tunables, handle)) = self.current.take() {
            tunables.request_stop();
            let joined = tokio::task::spawn_blocking(move || handle.join());
            if tokio::time::timeout(STOP_WAIT, joined).await.is_err() {
                log::error!("the writer did not stop within {STOP_WAIT:?}");
            }
        }
        if let Some(temp) = self.temp.take()
            && let Err(e) = temp.close()
        {
            log::error!("removing the writer's directory: {e}");
        }
    }
}

/// Per-file size: [`FILE_SIZE`], or less so that one run takes at most a
/// quarter of the free space (writer-core refuses runs that do not fit).
fn file_size_for(dir: &Path, jobs: u32) -> u64 {
    let free = free_bytes(dir).unwrap_or(u64::MAX);
    let per_job = free / 4 / u64::from(jobs.max(1));
    // Whole MiB, at least 1 MiB.
    (FILE_SIZE.min(per_job) >> 20).max(1) << 20
}

fn free_bytes(dir: &Path) -> Option<u64> {
    let st = wbscope_sys::statvfs(dir).ok()?;
    Some(st.f_bavail * st.f_frsize)
}

/// The directory as the writer pane shows it: relative to the current
/// directory when inside it.
fn display_dir(dir: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            dir.strip_prefix(cwd)
                .ok()
                .map(|p| format!("./{}", p.display()))
        })
        .unwrap_or_else(|| dir.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU time of the thread that calls it, ns.
    fn own_thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn spin(ns: u64) {
        let start = own_thread_cpu_ns();
        let mut x = 0u64;
        while own_thread_cpu_ns() - start < ns {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn writer_threads_by_name() {
        assert!(is_writer_thread(WRITER_THREAD));
        assert!(is_writer_thread("wbscope-job-3"));
        assert!(is_writer_thread("wbscope-monitor"));
        assert!(!is_writer_thread("wbscope-search"));
        assert!(!is_writer_thread("tokio-runtime-w"));
        assert_eq!(io_worker_of("iou-wrk-4194303"), Some(4_194_303));
        assert_eq!(io_worker_of("iou-sqp-12"), None);
        assert_eq!(io_worker_of("iou-wrk-"), None);
    }

    /// The tracer side is what its threads used, new ones whole; the
    /// writer the rest of the process's time, with that of the threads
    /// that ended in between (which /proc no longer shows).
    #[test]
    fn the_writer_is_the_rest_of_the_process() {
        let before = TracerThreads::from([(10, 1_000), (11, 5_000)]);
        let after = TracerThreads::from([(10, 3_000), (11, 5_500), (12, 700)]);
        // Tracer: 2000 + 500 + 700 (12 is new).
        assert_eq!(writer_ns(&before, &after, 10_000), 10_000 - 3_200);
        // The process read as less than its threads (a moment apart):
        // no writer time, not a negative one.
        assert_eq!(writer_ns(&before, &after, 3_000), 0);
        // A tracer thread gone and an id used again by a younger thread.
        let after = TracerThreads::from([(11, 200)]);
        assert_eq!(writer_ns(&before, &after, 1_000), 800);
    }

    /// A thread named as writer-core names its jobs burns 400 ms and ends
    /// before the second reading (as a run's jobs do): its time is still
    /// the writer's. The test's own thread burns 200 ms meanwhile, on the
    /// tracer's side. Other tests run beside this one, so only lower
    /// bounds hold: their threads that end count on the writer's side.
    #[test]
    fn an_ended_writer_threads_cpu_stays_on_the_writer_side() {
        let before = CpuReading::now().expect("/proc/self/task");
        let job = std::thread::Builder::new()
            .name("wbscope-job-0".into())
            .spawn(|| spin(400_000_000))
            .expect("spawn");
        spin(200_000_000);
        job.join().expect("the spinning thread");
        let after = CpuReading::now().expect("/proc/self/task");
        let secs = after.at.duration_since(before.at).as_secs_f64();
        let cpu = after.since(&before);
        let (tracer, writer) = (
            cpu.tracer.expect("tracer") * secs,
            cpu.writer.expect("writer") * secs,
        );
        // A tick's slack: schedstat lags a running thread by up to one.
        assert!(writer >= 0.38, "writer {writer:.3} s, tracer {tracer:.3} s");
        assert!(tracer >= 0.18, "writer {writer:.3} s, tracer {tracer:.3} s");
    }
}
