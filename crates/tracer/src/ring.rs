//! Reads per-call records from the kernel's ring buffer and turns them into
//! typed [`RingRecord`]s.
use std::{
    mem::size_of,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use aya::maps::{HashMap, MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use writeback_common::{
    COMMIT_PHASE_KIND, CommitPhase, FLUSH_REQUEST_KIND, FlushRequest, GENERIC_CALL_KIND,
    GenericCall, SYNC_SPAN_KIND, SyncSpan, WRITE_CALL_KIND, WriteCall, WritepagesCall, boundary,
    record_kind,
};

use super::{Tracer, mounts::FsNames};
use wbscope_model::{
    CallRecord,
    durability::{DeviceFlush, Phase, Span},
    writes::Write,
};

/// How long a generic call may go without a folio before it is taken as
/// over (writeback-ebpf generic.rs: the last fsync or sync_file_range of
/// a thread has no event that ends it). A writepages loop waits between
/// folios only for a folio's lock or its earlier writeback, well under
/// this on any working device.
pub(crate) const IDLE_CALL: Duration = Duration::from_secs(1);

/// How often the open generic calls are looked at for idle ones.
const EXPIRE_EVERY: Duration = Duration::from_millis(250);

/// How long records may wait in the ring buffer before userspace reads
/// them when the kernel does not wake it.
pub(crate) const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The longest wait between drains of a collector that backs off while
/// few records come ([`RingCollector::back_off_when_quiet`]): each drain
/// that finds fewer than [`FEW_RECORDS`] doubles the wait from
/// [`DRAIN_EVERY`] up to this. A drain is most of an idle trace's CPU
/// (1.3 of 2.1 ms a second here: the wake-up, asking the CPUs for their
/// kept calls, the empty read), and under TCG, or on a host whose
/// per-CPU reads are long, more. Half a second keeps a call after a
/// quiet spell on a live pipe's screen within a second of its end
/// (`record -o - | replay -`, docs/recordings.md).
const QUIET_DRAIN_EVERY: Duration = Duration::from_millis(500);

/// A drain that brings fewer records than this lets a collector that
/// backs off wait longer. A drain that finds records costs about a
/// quarter of a millisecond here whatever their number (asking the CPUs
/// for their kept calls and dirtyings, reading both rings, the charge's
/// re-read, the output's write): at a few hundred calls a second, ten
/// such drains a second were most of a trace's CPU, 3.4–4.2 ms a second
/// against 1.1 idle (docs/bench-log/fsync-storm.md, step 15). A storm's
/// drain brings thousands.
const FEW_RECORDS: usize = 256;

/// What collectors send to the task that owns the model. A call is
/// kept in place, not boxed: each record is moved once, into its
/// batch's list of its kind, and a box would be an allocation per call
/// (10,000 a second under an fsync storm).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum RingRecord {
    Call(CallRecord),
    /// An ext4 fsync's span (`--enable durability`).
    Sync(Span),
    /// A phase of a journal commit (`--enable durability`).
    Commit(Phase),
    /// A completed cache-flush request (`--enable device_io`).
    Flush(DeviceFlush),
    /// A write system call's span (`--enable writes`).
    Write(Write),
}

impl RingRecord {
    /// The call, for readers that take only calls.
    pub fn into_call(self) -> Option<CallRecord> {
        match self {
            RingRecord::Call(c) => Some(c),
            RingRecord::Sync(_)
            | RingRecord::Commit(_)
            | RingRecord::Flush(_)
            | RingRecord::Write(_) => None,
        }
    }
}

/// Why a ring-buffer record was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("record of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("record kind {kind} of {len} bytes does not match any known record")]
    Unknown { kind: u32, len: usize },
}

/// Decodes one ring-buffer record. The bytes are copied out with an
/// unaligned read after a size check: ring-buffer items are only 8-byte
/// aligned by convention, and a short record must never be read past.
pub(crate) fn decode(bytes: &[u8]) -> Result<RingRecord, DecodeError> {
    let kind_bytes: [u8; 4] = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError::Short(bytes.len()))?;
    let kind = u32::from_ne_bytes(kind_bytes);
    match kind {
        record_kind::WRITEPAGES_CALL if bytes.len() >= size_of::<WritepagesCall>() => {
            // SAFETY: length checked above; WritepagesCall is Pod (any bit
            // pattern valid) and read_unaligned needs no alignment.
            let raw: WritepagesCall =
                unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<WritepagesCall>()) };
            Ok(RingRecord::Call(CallRecord::from(&raw)))
        }
        GENERIC_CALL_KIND if bytes.len() >= size_of::<GenericCall>() => {
            // SAFETY: as above; GenericCall is Pod.
            let raw: GenericCall =
                unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<GenericCall>()) };
            Ok(RingRecord::Call(CallRecord::from_generic(
                &raw,
                raw.boundary,
            )))
        }
        SYNC_SPAN_KIND if bytes.len() >= size_of::<SyncSpan>() => {
            // SAFETY: as above; SyncSpan is Pod.
            let raw: SyncSpan =
                unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<SyncSpan>()) };
            Ok(RingRecord::Sync(Span::from(&raw)))
        }
        COMMIT_PHASE_KIND if bytes.len() >= size_of::<CommitPhase>() => {
            // SAFETY: as above; CommitPhase is Pod.
            let raw: CommitPhase =
                unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<CommitPhase>()) };
            Ok(RingRecord::Commit(Phase::from(&raw)))
        }
        FLUSH_REQUEST_KIND if bytes.len() >= size_of::<FlushRequest>() => {
            // SAFETY: as above; FlushRequest is Pod.
            let raw: FlushRequest =
                unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<FlushRequest>()) };
            Ok(RingRecord::Flush(DeviceFlush::from(&raw)))
        }
        WRITE_CALL_KIND if bytes.len() >= size_of::<WriteCall>() => {
            // SAFETY: as above; WriteCall is Pod.
            let raw: WriteCall =
                unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<WriteCall>()) };
            Ok(RingRecord::Write(Write::from(&raw)))
        }
        _ => Err(DecodeError::Unknown {
            kind,
            len: bytes.len(),
        }),
    }
}

/// The ring buffer of per-call records, readable from tokio, and the
/// generic calls still open in the kernel, closed here when idle.
pub struct RingCollector {
    fd: AsyncFd<RingBuf<MapData>>,
    /// Records that could not be decoded (counted, logged once each kind).
    pub bad_records: u64,
    open_calls: HashMap<MapData, u32, GenericCall>,
    /// Asks the CPUs for the ext4 calls they keep, before each drain.
    call_flush: super::cpu_batch::BatchFlush,
    last_expiry: Instant,
    fs_names: FsNames,
    pace: Pace,
}

/// How long a collector waits for records before it drains anyway.
#[derive(Default)]
struct Pace {
    /// Whether the wait grows while drains find few records
    /// ([`RingCollector::back_off_when_quiet`]).
    back_off: bool,
    /// Drains in a row that found fewer than [`FEW_RECORDS`].
    quiet_drains: u32,
    /// When the wait under way ends: kept while the caller's other
    /// branches (an interval's tick, a signal) interrupt it, so that a
    /// tick every `--interval` cannot put the drain off for good (each
    /// wait began anew before, so a wait as long as the ticks' period
    /// never ended).
    due: Option<tokio::time::Instant>,
}

impl Pace {
    /// How long the next wait for records may be: [`DRAIN_EVERY`],
    /// doubled for each quiet drain in a row when backing off, up to
    /// [`QUIET_DRAIN_EVERY`].
    fn wait(&self) -> Duration {
        if !self.back_off {
            return DRAIN_EVERY;
        }
        DRAIN_EVERY
            .saturating_mul(1 << self.quiet_drains.min(4))
            .min(QUIET_DRAIN_EVERY)
    }

    /// When the wait under way ends; a new one if none is.
    fn due(&mut self) -> tokio::time::Instant {
        let wait = self.wait();
        *self
            .due
            .get_or_insert_with(|| tokio::time::Instant::now() + wait)
    }

    /// Counts a drain that found `records` (the calls the CPUs kept
    /// among them).
    fn counted(&mut self, records: usize) {
        self.quiet_drains = if records < FEW_RECORDS {
            self.quiet_drains.saturating_add(1)
        } else {
            0
        };
    }
}

impl RingCollector {
    /// Takes the tracer's ring buffer and its map of open generic calls.
    pub fn new(tracer: &mut Tracer) -> anyhow::Result<RingCollector> {
        let ring = tracer.take_events()?;
        let open_calls = tracer.take_open_calls()?;
        let call_flush = tracer.take_call_flush()?;
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged,
        // until it is dropped, which happens only when the AsyncFd drops it.
        let fd = unsafe { AsyncFd::register(ring) }
            .map_err(std::io::Error::from)
            .context("registering the ring buffer with tokio")?;
        Ok(RingCollector {
            fd,
            bad_records: 0,
            open_calls,
            call_flush,
            last_expiry: Instant::now(),
            fs_names: FsNames::open(),
            pace: Pace::default(),
        })
    }

    /// Waits longer between drains while they find few records (under
    /// [`FEW_RECORDS`]), up to [`QUIET_DRAIN_EVERY`]; a drain that finds
    /// more (or a quarter-full ring's wake-up) returns to
    /// [`DRAIN_EVERY`]. For a trace whose records are read as lines or
    /// frames: at a few hundred calls a second, or after a quiet spell,
    /// records wait up to half a second in the ring. Whoever closes an
    /// interval drains first ([`RingCollector::drain`]), so no interval
    /// loses them.
    pub fn back_off_when_quiet(&mut self) {
        self.pace.back_off = true;
    }

    /// Closes the open generic calls whose last folio is older than
    /// `idle` (all of them with `None`), as `how`, and hands them to
    /// `sink`. An entry is read, then removed: a folio the kernel adds in
    /// between (after a whole idle period, at that very moment) is lost;
    /// docs/probes.md says so.
    fn close_calls(&mut self, idle: Option<Duration>, how: u32, mut sink: impl FnMut(RingRecord)) {
        let now = wbscope_sys::monotonic_ns();
        let keys: Vec<u32> = self.open_calls.keys().filter_map(Result::ok).collect();
        for tid in keys {
            let Ok(call) = self.open_calls.get(&tid, 0) else {
                continue;
            };
            let quiet = now.saturating_sub(call.last_ns);
            if idle.is_some_and(|idle| quiet < idle.as_nanos() as u64) {
                continue;
            }
            if self.open_calls.remove(&tid).is_ok() {
                let mut rec = CallRecord::from_generic(&call, how);
                rec.fs = self.fs_names.name(rec.dev).into();
                sink(RingRecord::Call(rec));
            }
        }
    }

    /// Closes every generic call still open (the tracer is stopping, or a
    /// traced window ended), as [`boundary::DRAIN`].
    pub fn close_open_calls(&mut self, sink: impl FnMut(RingRecord)) {
        self.close_calls(None, boundary::DRAIN, sink);
    }

    /// Every few drains: the calls idle for [`IDLE_CALL`].
    fn expire(&mut self, sink: impl FnMut(RingRecord)) {
        if self.last_expiry.elapsed() >= EXPIRE_EVERY {
            self.last_expiry = Instant::now();
            self.close_calls(Some(IDLE_CALL), boundary::IDLE, sink);
        }
    }

    /// Waits until the kernel wakes us or [`DRAIN_EVERY`] has passed
    /// (longer while quiet, [`RingCollector::back_off_when_quiet`]), then
    /// hands every available record to `sink`. The programs submit without
    /// a wakeup until a quarter of the buffer is used (a wakeup costs
    /// microseconds per record on virtualised hosts), so the timer is what
    /// usually drains. Cancel-safe: nothing is consumed before the wait
    /// ends.
    pub async fn wait_and_drain(
        &mut self,
        mut sink: impl FnMut(RingRecord),
    ) -> anyhow::Result<usize> {
        let due = self.pace.due();
        let n = match tokio::time::timeout_at(due, self.fd.readable_mut()).await {
            Ok(guard) => {
                let mut guard = guard.context("waiting on the ring buffer")?;
                self.call_flush.flush_or_warn();
                let n = drain_into(
                    guard.get_inner_mut(),
                    &mut self.bad_records,
                    &mut self.fs_names,
                    &mut sink,
                );
                guard.clear_ready();
                n
            }
            Err(_elapsed) => {
                self.call_flush.flush_or_warn();
                drain_into(
                    self.fd.get_mut(),
                    &mut self.bad_records,
                    &mut self.fs_names,
                    &mut sink,
                )
            }
        };
        self.pace.counted(n);
        self.pace.due = None;
        self.expire(sink);
        Ok(n)
    }

    /// Hands every record available right now to `sink`, without waiting,
    /// the calls the CPUs keep included.
    pub fn drain(&mut self, sink: impl FnMut(RingRecord)) -> usize {
        self.call_flush.flush_or_warn();
        let n = drain_into(
            self.fd.get_mut(),
            &mut self.bad_records,
            &mut self.fs_names,
            sink,
        );
        self.pace.counted(n);
        n
    }
}

fn drain_into(
    ring: &mut RingBuf<MapData>,
    bad: &mut u64,
    fs_names: &mut FsNames,
    mut sink: impl FnMut(RingRecord),
) -> usize {
    let mut n = 0;
    let now = std::time::Instant::now();
    while let Some(item) = ring.next() {
        if let Some(calls) = super::cpu_batch::batch_items::<writeback_common::CallBatch>(&item) {
            for raw in calls {
                let mut call = CallRecord::from(&raw);
                call.fs = fs_names.name_at(call.dev, now).into();
                sink(RingRecord::Call(call));
                n += 1;
            }
            continue;
        }
        match decode(&item) {
            Ok(RingRecord::Call(mut call)) => {
                call.fs = fs_names.name_at(call.dev, now).into();
                sink(RingRecord::Call(call));
                n += 1;
            }
            Ok(RingRecord::Flush(mut f)) => {
                f.devices = fs_names.devices_on(f.dev);
                sink(RingRecord::Flush(f));
                n += 1;
            }
            Ok(other) => {
                sink(other);
                n += 1;
            }
            Err(e) => {
                *bad += 1;
                if *bad == 1 {
                    log::warn!("ring buffer: {e}");
                }
            }
        }
    }
    n
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record's bytes as a program writes them to the ring.
    pub(crate) fn bytes_of<T: aya::Pod>(record: &T) -> Vec<u8> {
        // SAFETY: Pod: a repr(C) struct of plain data, every byte of
        // which may be read.
        unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    #[test]
    fn a_quiet_collector_waits_longer_up_to_half_a_second_and_not_once_records_come() {
        let mut pace = Pace::default();
        pace.counted(0);
        assert_eq!(pace.wait(), DRAIN_EVERY, "without back-off: always");
        let mut pace = Pace {
            back_off: true,
            ..Pace::default()
        };
        let mut waits = vec![pace.wait()];
        for _ in 0..6 {
            pace.counted(0);
            waits.push(pace.wait());
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [100, 200, 400, 500, 500, 500, 500]);
        pace.counted(FEW_RECORDS);
        assert_eq!(pace.wait(), DRAIN_EVERY, "a drain of many records ends it");
    }

    /// A few hundred calls a second: each drain's few records let the
    /// wait grow as silence does, until a drain brings many.
    #[test]
    fn drains_of_few_records_wait_longer_too() {
        let mut pace = Pace {
            back_off: true,
            ..Pace::default()
        };
        // 380 calls a second: 38, 76, 152, then 190 a drain.
        let mut waits = Vec::new();
        for _ in 0..5 {
            let records = (380 * pace.wait().as_millis() / 1000) as usize;
            pace.counted(records);
            waits.push(pace.wait().as_millis());
        }
        assert_eq!(waits, [200, 400, 500, 500, 500]);
        // 3,000 a second: a drain of 100 ms brings 300, and stays at it.
        pace.counted(1500);
        pace.counted(300);
        assert_eq!(pace.wait(), DRAIN_EVERY);
        pace.counted(FEW_RECORDS - 1);
        assert_eq!(pace.wait().as_millis(), 200);
    }

    /// A wait that other branches interrupt keeps its end: ticks more
    /// often than the wait no longer restart it for ever.
    #[test]
    fn an_interrupted_wait_keeps_its_end() {
        let mut pace = Pace {
            back_off: true,
            quiet_drains: 9,
            due: None,
        };
        let before = tokio::time::Instant::now();
        let due = pace.due();
        assert!(
            due >= before + QUIET_DRAIN_EVERY,
            "a quiet trace's whole wait"
        );
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(pace.due(), due, "asked again mid-wait: the same end");
        pace.due = None;
        pace.counted(FEW_RECORDS);
        let after = tokio::time::Instant::now();
        let next = pace.due();
        assert!(
            next >= after + DRAIN_EVERY && next < due,
            "after a drain with records, a short wait from now"
        );
    }

    #[test]
    fn decodes_a_call_even_unaligned() {
        let call = WritepagesCall {
            kind: record_kind::WRITEPAGES_CALL,
            ino: 42,
            pages_written: 16384,
            ..Default::default()
        };
        let mut buf = vec![0u8];
        buf.extend(bytes_of(&call));
        let Ok(RingRecord::Call(rec)) = decode(&buf[1..]) else {
            panic!("not a call")
        };
        assert_eq!((rec.ino, rec.pages_written), (42, 16384));
    }

    #[test]
    fn decodes_a_generic_call_with_its_boundary_and_folio_sizes() {
        let mut hist = [0u32; writeback_common::FOLIO_HIST_BUCKETS];
        hist[1] = 3; // three 1-page folios
        hist[5] = 2; // two 16-page folios
        let g = GenericCall {
            kind: GENERIC_CALL_KIND,
            ino: 7,
            start_ns: 100,
            last_ns: 250,
            pages: 35,
            folios: 5,
            boundary: boundary::NEXT_CALL,
            folio_hist: hist,
            flags: writeback_common::generic_flags::WBC_SEEN,
            nr_to_write: i64::MAX,
            ..Default::default()
        };
        // SAFETY: GenericCall is repr(C) plain data.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&g as *const GenericCall).cast::<u8>(),
                size_of::<GenericCall>(),
            )
        };
        let Ok(RingRecord::Call(rec)) = decode(bytes) else {
            panic!("not a call")
        };
        assert_eq!((rec.ino, rec.pages_written, rec.folios_written), (7, 35, 5));
        assert_eq!(rec.boundary, boundary::NEXT_CALL);
        assert_eq!(rec.duration_ns, 150, "first to last folio");
        assert_eq!(rec.folio_hist, vec![0, 3, 0, 0, 0, 2]);
        assert!(rec.start_seen);
        assert_eq!(rec.on_cpu_ns, None, "closed by the next call: no end");
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }

    /// A call closed on its own thread at a known end carries its on-CPU
    /// time: the span minus the time switched out; without the flag (no
    /// run clock, or an end the thread did not see) it is unknown.
    #[test]
    fn a_call_closed_at_its_end_has_its_on_cpu_time() {
        use writeback_common::generic_flags as gf;
        let mut g = GenericCall {
            kind: GENERIC_CALL_KIND,
            start_ns: 1_000,
            last_ns: 4_000,
            end_ns: 5_000,
            offcpu_ns: 1_500,
            boundary: boundary::HOOK,
            flags: gf::WBC_SEEN | gf::FUNCTION_HOOK | gf::RUN_CLOCK | gf::OFF_CPU,
            ..Default::default()
        };
        let decoded = |g: &GenericCall| {
            // SAFETY: GenericCall is repr(C) plain data.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    (g as *const GenericCall).cast::<u8>(),
                    size_of::<GenericCall>(),
                )
            };
            let Ok(RingRecord::Call(rec)) = decode(bytes) else {
                panic!("not a call")
            };
            rec
        };
        let rec = decoded(&g);
        assert_eq!((rec.duration_ns, rec.on_cpu_ns), (4_000, Some(2_500)));
        g.flags &= !gf::OFF_CPU;
        assert_eq!(decoded(&g).on_cpu_ns, None);
    }

    #[test]
    fn refuses_short_and_unknown_records() {
        assert_eq!(decode(&[1, 0]), Err(DecodeError::Short(2)));
        let call = WritepagesCall {
            kind: record_kind::WRITEPAGES_CALL,
            ..Default::default()
        };
        let bytes = bytes_of(&call);
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(DecodeError::Unknown { kind: 1, .. })
        ));
        let mut other = bytes.clone();
        other[0] = 99;
        assert!(matches!(
            decode(&other),
            Err(DecodeError::Unknown { kind: 99, .. })
        ));
    }
}
