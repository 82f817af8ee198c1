//! Reading a store, or one recording, as one stream of frames: the
//! segments that can hold the window asked for, found from their names
//! (none is read from the start of the store to find a moment), each read
//! with the damage-tolerant [`RecordingReader`] and its damage named with
//! its segment.
use std::{
    collections::VecDeque,
    fmt,
    fs::File,
    io::{self, Read},
    path::Path,
};

use super::{SegmentFile, list};
use crate::{
    Header,
    block::BlockMeta,
    reader::{Damage, Frame, OpenError, RecordingReader},
};
use wbscope_model::when::TimeWindow;

type Source = Box<dyn Read + Send>;

/// Damage met in a recording, or in one segment of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The segment's file name, in a store.
    pub(crate) segment: Option<String>,
    pub damage: Damage,
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.segment {
            Some(seg) => write!(f, "{seg}: {}", self.damage),
            None => self.damage.fmt(f),
        }
    }
}

/// Frames of a recording or of a store's segments, in order.
pub struct StoreReader {
    /// The header of the first recording read (in a store, the first
    /// segment that can hold the window).
    pub header: Header,
    current: Option<(Option<String>, RecordingReader<Source>)>,
    /// Segments not opened yet.
    rest: VecDeque<SegmentFile>,
    window: TimeWindow,
    collect_metas: Option<bool>,
    intervals_only: bool,
    pub damage: Vec<Located>,
    pub damage_not_kept: u64,
    /// With [`StoreReader::collect_metas`]: the blocks' metadata of the
    /// segment being read is moved here as each segment ends.
    pub(crate) metas: Vec<(String, BlockMeta)>,
    /// Header length of each segment opened.
    pub(crate) header_bytes: u64,
    last_wall_ns: Option<u64>,
}

impl StoreReader {
    /// A reader of nothing yet, for `window`.
    fn empty(header: Header, window: TimeWindow) -> StoreReader {
        StoreReader {
            header,
            current: None,
            rest: VecDeque::new(),
            window,
            collect_metas: None,
            intervals_only: false,
            damage: Vec::new(),
            damage_not_kept: 0,
            metas: Vec::new(),
            header_bytes: 0,
            last_wall_ns: None,
        }
    }

    /// One recording (a file, a pipe, stdin).
    pub fn single(reader: RecordingReader<Source>, window: TimeWindow) -> StoreReader {
        let mut single = StoreReader::empty(reader.header.clone(), window);
        single.current = Some((None, reader.with_window(window)));
        single
    }

    /// The segments of the store in `dir` that can hold `window`; an
    /// error when the store has no segment or none opens.
    pub fn store(dir: &Path, window: TimeWindow) -> Result<StoreReader, OpenError> {
        let all = list(dir).map_err(|e| OpenError::Io(e.to_string()))?;
        if all.is_empty() {
            return Err(OpenError::Io(
                "no segments (a store written by `wbscope record --store`)".into(),
            ));
        }
        // Segment i holds frames from the close of the block before its
        // first (in segment i - 1 at the earliest) to the start of
        // segment i + 1.
        let chosen: VecDeque<SegmentFile> = (0..all.len())
            .filter(|&i| {
                let from = if i == 0 { 0 } else { all[i - 1].start_unix_ns };
                let to = all.get(i + 1).map_or(u64::MAX, |s| s.start_unix_ns);
                window.overlaps(from, to)
            })
            .map(|i| all[i].clone())
            .collect();
        // A window outside the store still has a header to show: the
        // newest segment's.
        let mut rest = if chosen.is_empty() {
            all.into_iter().rev().take(1).collect()
        } else {
            chosen
        };
        let mut reader = StoreReader::empty(placeholder_header(), window);
        // The first segment that opens gives the header.
        while let Some(seg) = rest.pop_front() {
            if let Some(r) = reader.open_segment(&seg) {
                reader.header = r.header.clone();
                reader.current = Some((Some(seg.name()), r));
                reader.rest = rest;
                return Ok(reader);
            }
        }
        let why = reader
            .damage
            .last()
            .map(ToString::to_string)
            .unwrap_or_default();
        Err(OpenError::Io(format!("no segment could be read ({why})")))
    }

    /// Keeps every block's metadata in `metas` (`wbscope store`); with
    /// `decompress` false, no frames are returned.
    pub(crate) fn collect_metas(mut self, decompress: bool) -> StoreReader {
        self.collect_metas = Some(decompress);
        if let Some((name, r)) = self.current.take() {
            self.current = Some((name, r.collect_metas(decompress)));
        }
        self
    }

    /// Interval lines only: the segments' call frames are not decoded
    /// (`seek::find_finding`).
    pub(crate) fn intervals_only(mut self) -> StoreReader {
        self.intervals_only = true;
        if let Some((name, r)) = self.current.take() {
            self.current = Some((name, r.intervals_only()));
        }
        self
    }

    /// Wall clock (ns since the epoch) of the frame returned last: a
    /// call's end, an interval's close; `None` for a summary.
    pub fn last_wall_ns(&self) -> Option<u64> {
        self.last_wall_ns
    }

    fn open_segment(&mut self, seg: &SegmentFile) -> Option<RecordingReader<Source>> {
        let name = seg.name();
        let file = match File::open(&seg.path) {
            Ok(f) => f,
            Err(e) => {
                self.note(
                    Some(name),
                    Damage::Unreadable {
                        offset: 0,
                        error: e.to_string(),
                    },
                );
                return None;
            }
        };
        match RecordingReader::open(Box::new(io::BufReader::new(file)) as Source) {
            Ok(r) => {
                let r = r.with_window(self.window);
                self.header_bytes += r.header_len() as u64;
                let r = if self.intervals_only {
                    r.intervals_only()
                } else {
                    r
                };
                Some(match self.collect_metas {
                    Some(d) => r.collect_metas(d),
                    None => r,
                })
            }
            Err(e) => {
                // A segment cut inside its header (a crash just after it
                // was created) is a cut at byte 0; anything else there is
                // damage of the whole file.
                let damage = match e {
                    OpenError::ShortHeader(_) => Damage::Truncated { offset: 0 },
                    OpenError::Io(error) => Damage::Unreadable { offset: 0, error },
                    _ => Damage::Corrupt {
                        offset: 0,
                        skipped: seg.bytes as usize,
                    },
                };
                self.note(Some(name), damage);
                None
            }
        }
    }

    fn note(&mut self, segment: Option<String>, damage: Damage) {
        if self.damage.len() < crate::reader::MAX_DAMAGE_KEPT {
            self.damage.push(Located { segment, damage });
        } else {
            self.damage_not_kept += 1;
        }
    }

    /// Moves a finished reader's damage and metadata here.
    fn finish(&mut self, name: Option<String>, mut r: RecordingReader<Source>) {
        for d in std::mem::take(&mut r.damage) {
            self.note(name.clone(), d);
        }
        self.damage_not_kept += r.damage_not_kept;
        if let Some(metas) = r.metas.take() {
            let n = name.unwrap_or_default();
            self.metas.extend(metas.into_iter().map(|m| (n.clone(), m)));
        }
    }

    /// Reads the frames on a thread of its own into a channel of
    /// `capacity` frames, each with its wall clock
    /// ([`StoreReader::last_wall_ns`]): a consumer playing them at its own
    /// pace holds at most that many, and the reader one block, whatever
    /// the size of the recording. Damage is logged as it is met. The
    /// thread ends at the end of the recording or when the receiver is
    /// dropped.
    pub fn into_channel(
        mut self,
        capacity: usize,
    ) -> io::Result<tokio::sync::mpsc::Receiver<(Option<u64>, Frame)>> {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity);
        std::thread::Builder::new()
            .name("wbscope-replay".into())
            .spawn(move || {
                let mut logged = 0;
                loop {
                    let frame = self.next();
                    for damage in &self.damage[logged..] {
                        log::warn!("replay: {damage}");
                    }
                    logged = self.damage.len();
                    let Some(frame) = frame else { break };
                    if tx.blocking_send((self.last_wall_ns, frame)).is_err() {
                        return;
                    }
                }
                if self.damage_not_kept > 0 {
                    log::warn!(
                        "replay: {} more damaged regions not listed",
                        self.damage_not_kept
                    );
                }
            })?;
        Ok(rx)
    }
}

impl Iterator for StoreReader {
    type Item = Frame;

    fn next(&mut self) -> Option<Frame> {
        loop {
            let (name, mut r) = self.current.take()?;
            if let Some(frame) = r.next() {
                self.last_wall_ns = r.last_wall_ns;
                self.current = Some((name, r));
                return Some(frame);
            }
            let stop = r
                .damage
                .iter()
                .any(|d| matches!(d, Damage::Unreadable { .. }));
            self.finish(name, r);
            if stop {
                return None;
            }
            while let Some(seg) = self.rest.pop_front() {
                if let Some(r) = self.open_segment(&seg) {
                    self.current = Some((Some(seg.name()), r));
                    break;
                }
            }
        }
    }
}

/// Replaced by the first segment's header before anyone sees it.
fn placeholder_header() -> Header {
    Header {
        format_version: 0,
        wbscope_version: String::new(),
        host: String::new(),
        kernel: String::new(),
        start_unix_ns: 0,
        start_monotonic_ns: 0,
        probe_plan: serde_json::Value::Null,
        field_offsets: serde_json::Value::Null,
        filter: serde_json::Value::Null,
        segment: None,
    }
}
