//! Reading a recording, whatever state it is in: whole frames are
//! returned, corrupt ones reported and skipped, a cut reported.
//!
//! The reader streams from any [`Read`]: it holds a window of at most one
//! frame of the largest size ([`WINDOW`], plus a checkpoint's slack), never
//! the whole file, and never a memory map of it (a mapped file that shrinks
//! under the reader kills it with SIGBUS on the next access, see mmap(2);
//! read(2) just ends early, which is a cut like any other).
//!
//! After damage it looks for the next sync word whose frame is whole,
//! checks out and decodes. The format has no checksum over the frame
//! header, so every sync word with a plausible header is a candidate whose
//! payload may be up to [`MAX_PAYLOAD`] long, and candidates can be four
//! bytes apart: checksumming each payload would cost up to 1 MiB per
//! candidate. Instead, while resynchronising, the reader keeps the running
//! CRC-32 of the skipped bytes at every [`CHECKPOINT`]-th byte and gets the
//! CRC of any candidate's payload from two of them (CRC-32 is linear, so
//! the CRC of a range follows from the running CRC at its two ends, as
//! zlib's `crc32_combine` does): each byte is checksummed once for the
//! checkpoints and at most `2 * CHECKPOINT` bytes per candidate, whatever
//! the lengths the candidates claim. A candidate that checks out but does
//! not decode is skipped whole, so decoding too touches each byte once.
use std::{
    collections::VecDeque,
    fmt,
    io::{self, Read},
    sync::OnceLock,
};

use super::{
    FORMAT_VERSION, FORMAT_VERSION_BLOCKS, FRAME_HEADER_LEN, FrameKind, Header, MAGIC, MAX_HEADER,
    MAX_PAYLOAD, SYNC,
    block::{self, BlockMeta},
    crc_of,
};
use wbscope_model::{CallRecord, when::TimeWindow};

/// The most of a recording the reader needs at once: one whole frame of
/// the largest payload. The buffer holds at most this plus
/// `CHECKPOINT - 1` bytes.
pub(crate) const WINDOW: usize = FRAME_HEADER_LEN + MAX_PAYLOAD;
/// Bytes asked of the source per read.
const READ_CHUNK: usize = 64 << 10;
/// Spacing of the running-CRC checkpoints kept while resynchronising:
/// memory 4 bytes per `CHECKPOINT` bytes of window, work at most
/// `2 * CHECKPOINT` bytes checksummed per candidate frame.
const CHECKPOINT: usize = 16;
/// Damage entries kept in [`RecordingReader::damage`]; more are only
/// counted, since a hostile file can have a damaged region every few bytes.
pub(crate) const MAX_DAMAGE_KEPT: usize = 1000;

/// Why a recording cannot be read at all.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("not a wbscope recording (bad magic)")]
    BadMagic,
    #[error(
        "recording format version {0} is newer than this wbscope understands \
         (version {FORMAT_VERSION_BLOCKS}); use a newer wbscope"
    )]
    NewerVersion(u32),
    #[error("recording format version {0} is not supported")]
    UnsupportedVersion(u32),
    #[error("recording header is cut short ({0} bytes)")]
    ShortHeader(usize),
    #[error("recording header is corrupt: {0}")]
    CorruptHeader(String),
    #[error("reading the recording's header: {0}")]
    Io(String),
}

/// One decoded frame.
// Calls are most frames, handed on by value: boxing them would add an
// allocation per call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// Boxed: a call record is large beside the other frames.
    Call(Box<CallRecord>),
    Interval(serde_json::Value),
    Summary(serde_json::Value),
}

/// A problem met while reading frames; reading goes on after it, except
/// after `Truncated` and `Unreadable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// Bytes at `offset` were skipped until the next frame that checks out.
    Corrupt { offset: usize, skipped: usize },
    /// The recording ends inside a frame at `offset` (cut short).
    Truncated { offset: usize },
    /// Reading failed after `offset` bytes; nothing after them was read.
    Unreadable { offset: usize, error: String },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Corrupt { offset, skipped } => {
                write!(f, "corrupt frame at byte {offset}: skipped {skipped} bytes")
            }
            Damage::Truncated { offset } => {
                write!(
                    f,
                    "recording cut short at byte {offset} (last frame incomplete)"
                )
            }
            Damage::Unreadable { offset, error } => {
                write!(f, "reading stopped at byte {offset}: {error}")
            }
        }
    }
}

/// What reading did, for the tests of its bounds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Work {
    /// Bytes run through CRC-32.
    pub(crate) checksummed: u64,
    /// Sync words with a plausible frame header met while resynchronising.
    pub(crate) candidates: u64,
    /// Bytes handed to a decoder.
    pub(crate) decoded: u64,
    /// Most bytes held in the buffer at once.
    pub(crate) max_buffered: usize,
}

/// Reads a recording from a file, a pipe or memory, one frame at a time.
pub struct RecordingReader<R> {
    pub(crate) header: Header,
    src: R,
    /// Bytes `buf_at..buf_at + buf.len()` of the recording.
    buf: Vec<u8>,
    buf_at: usize,
    /// The source said end of file; it is not asked again.
    eof: bool,
    /// Where the next frame starts.
    pos: usize,
    finished: bool,
    /// Damage met so far (the first [`MAX_DAMAGE_KEPT`]).
    pub(crate) damage: Vec<Damage>,
    /// Damage met beyond those kept.
    pub(crate) damage_not_kept: u64,
    /// The running CRC while resynchronising.
    prefix: Option<PrefixCrc>,
    work: Work,
    /// Only frames in this window are returned (and blocks wholly outside
    /// it are not decompressed).
    window: TimeWindow,
    /// Blocks are not decompressed: only their metadata is kept, in
    /// `metas` (`wbscope store`).
    metas_only: bool,
    /// The metadata of the blocks met, when asked for (`collect_metas`).
    pub(crate) metas: Option<Vec<BlockMeta>>,
    /// Call frames in blocks are not decoded (`intervals_only`).
    skip_calls: bool,
    /// The frames of the block being returned, with their wall clock.
    pending: VecDeque<(Option<u64>, Frame)>,
    /// Wall clock (ns since the epoch) of the frame `next` returned last:
    /// a call's end, an interval's close; `None` for a summary.
    pub(crate) last_wall_ns: Option<u64>,
    /// Bytes of the header (magic to its checksum).
    header_len: usize,
}

/// A decoded frame: one, or a block of them.
enum Decoded {
    One(Frame),
    /// A block's metadata and its frames (none when it was not
    /// decompressed).
    Block(BlockMeta, Vec<Frame>),
}

/// Reads until `buf` is full or the source ends; the bytes read.
fn read_full(src: &mut impl Read, buf: &mut [u8]) -> Result<usize, OpenError> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(OpenError::Io(e.to_string())),
        }
    }
    Ok(got)
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

/// Kind, payload length and checksum of a frame header that could be one.
fn plausible(head: &[u8]) -> Option<(FrameKind, usize, u32)> {
    if head.get(..2)? != SYNC.to_le_bytes() || *head.get(3)? != 0 {
        return None;
    }
    let kind = FrameKind::from_u8(*head.get(2)?)?;
    let len = u32_at(head, 4)? as usize;
    if len > MAX_PAYLOAD {
        return None;
    }
    Some((kind, len, u32_at(head, 8)?))
}

/// What of a frame is decoded.
struct Decode {
    /// Blocks wholly outside it are not decompressed.
    window: TimeWindow,
    /// No block is decompressed.
    metas_only: bool,
    /// Call frames in blocks are not decoded.
    skip_calls: bool,
}

/// The frame or block in `payload`, decoded as `how` says.
fn decode_any(kind: FrameKind, payload: &[u8], how: &Decode) -> Option<Decoded> {
    if kind != FrameKind::Block {
        return decode(kind, payload).map(Decoded::One);
    }
    let (meta, body) = block::split(payload)?;
    if how.metas_only || !how.window.overlaps(meta.first_unix_ns, meta.last_unix_ns) {
        return Some(Decoded::Block(meta, Vec::new()));
    }
    let is_call = |k: &FrameKind| matches!(k, FrameKind::Call | FrameKind::CallWho);
    let frames = block::frames(&meta, body)?
        .into_iter()
        .filter(|(kind, _)| !(how.skip_calls && is_call(kind)))
        .map(|(kind, payload)| decode(kind, &payload))
        .collect::<Option<Vec<Frame>>>()?;
    Some(Decoded::Block(meta, frames))
}

fn decode(kind: FrameKind, payload: &[u8]) -> Option<Frame> {
    match kind {
        FrameKind::Call | FrameKind::CallWho => {
            let (mut call, mut rest) = postcard::take_from_bytes::<CallRecord>(payload).ok()?;
            if kind == FrameKind::CallWho {
                let (who, after) = postcard::take_from_bytes::<super::WhoFrame>(rest).ok()?;
                call.dirtiers = who.dirtiers.into();
                call.owner_cgroup_id = who.owner_cgroup_id;
                rest = after;
            }
            // Nothing after the payload: a call without them, or a
            // recording from before them (super::CallExt). Whatever
            // follows the extension is a later writer's, and ignored.
            if !rest.is_empty() {
                let (ext, _) = postcard::take_from_bytes::<super::CallExt>(rest).ok()?;
                ext.apply(&mut call)?;
            }
            Some(Frame::Call(Box::new(call)))
        }
        FrameKind::Interval => serde_json::from_slice(payload).ok().map(Frame::Interval),
        FrameKind::Summary => serde_json::from_slice(payload).ok().map(Frame::Summary),
        // Blocks do not nest (decode_any).
        FrameKind::Block => None,
    }
}

/// What starts at a position.
// Returned by value once per frame, which goes on by value to the caller:
// boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum At {
    End,
    Frame(Decoded, usize),
    /// A frame that checks out but does not decode, of this length.
    Undecodable(usize),
    /// The recording ends inside a frame.
    Incomplete,
    Invalid,
}

impl<R: Read> RecordingReader<R> {
    /// Reads the header; frames are read as the iterator asks.
    pub fn open(mut src: R) -> Result<RecordingReader<R>, OpenError> {
        let mut fixed = [0u8; 16];
        let got = read_full(&mut src, &mut fixed)?;
        if got < MAGIC.len() || &fixed[..MAGIC.len()] != MAGIC {
            return Err(OpenError::BadMagic);
        }
        let version = u32_at(&fixed[..got], 8).ok_or(OpenError::ShortHeader(got))?;
        if version > FORMAT_VERSION_BLOCKS {
            return Err(OpenError::NewerVersion(version));
        }
        if version < FORMAT_VERSION {
            return Err(OpenError::UnsupportedVersion(version));
        }
        let len = u32_at(&fixed[..got], 12).ok_or(OpenError::ShortHeader(got))? as usize;
        if len > MAX_HEADER {
            return Err(OpenError::CorruptHeader(format!("header length {len}")));
        }
        // The JSON and its checksum.
        let mut rest = vec![0u8; len + 4];
        let more = read_full(&mut src, &mut rest)?;
        if more < rest.len() {
            return Err(OpenError::ShortHeader(got + more));
        }
        let (json, crc) = rest.split_at(len);
        if crc32fast::hash(json) != u32_at(crc, 0).ok_or(OpenError::ShortHeader(got + more))? {
            return Err(OpenError::CorruptHeader("checksum mismatch".into()));
        }
        let header: Header =
            serde_json::from_slice(json).map_err(|e| OpenError::CorruptHeader(e.to_string()))?;
        let pos = fixed.len() + rest.len();
        Ok(RecordingReader {
            header,
            src,
            buf: Vec::new(),
            buf_at: pos,
            eof: false,
            pos,
            finished: false,
            damage: Vec::new(),
            damage_not_kept: 0,
            prefix: None,
            work: Work::default(),
            window: TimeWindow::default(),
            metas_only: false,
            metas: None,
            skip_calls: false,
            pending: VecDeque::new(),
            last_wall_ns: None,
            header_len: pos,
        })
    }

    /// Bytes of the recording's header.
    pub(crate) fn header_len(&self) -> usize {
        self.header_len
    }

    /// Returns only the frames in `window`: calls that ended in it,
    /// interval lines that closed in it, and the summary only when the
    /// window is all of time (a summary is of the whole recording).
    pub(crate) fn with_window(mut self, window: TimeWindow) -> Self {
        self.window = window;
        self
    }

    /// Keeps the metadata of every block in `metas`; with `decompress`
    /// false, blocks are not decompressed (and give no frames).
    pub(crate) fn collect_metas(mut self, decompress: bool) -> Self {
        self.metas = Some(Vec::new());
        self.metas_only = !decompress;
        self
    }

    /// Blocks give their interval lines only: call frames are not
    /// decoded (the finding search of `recording::store::seek`, which
    /// reads interval lines only).
    pub(crate) fn intervals_only(mut self) -> Self {
        self.skip_calls = true;
        self
    }

    /// The wall clock of a frame of a plain (version 1) part, or of the
    /// block of `meta`: a call's end, an interval's close.
    fn wall_of(&self, frame: &Frame, meta: Option<&BlockMeta>) -> Option<u64> {
        let h = &self.header;
        Some(match frame {
            Frame::Call(c) => {
                let end = c.start_ns.saturating_add(c.duration_ns);
                match meta {
                    Some(m) => m.wall_of(end),
                    None => h
                        .start_unix_ns
                        .saturating_add(end.saturating_sub(h.start_monotonic_ns)),
                }
            }
            Frame::Interval(v) => match meta {
                Some(m) => m.last_unix_ns,
                None => {
                    let secs = v
                        .get("time_s")
                        .and_then(serde_json::Value::as_f64)
                        .unwrap_or(0.0);
                    h.start_unix_ns.saturating_add((secs.max(0.0) * 1e9) as u64)
                }
            },
            Frame::Summary(_) => return None,
        })
    }

    /// Whether a frame at `wall` is in the window (a summary only when
    /// the window is all of time).
    fn in_window(&self, wall: Option<u64>) -> bool {
        self.window.is_all() || wall.is_some_and(|w| self.window.contains(w))
    }

    /// Queues what a decoded frame or block gives, in the window.
    fn accept(&mut self, decoded: Decoded) {
        match decoded {
            Decoded::One(frame) => {
                let wall = self.wall_of(&frame, None);
                if self.in_window(wall) {
                    self.pending.push_back((wall, frame));
                }
            }
            Decoded::Block(meta, frames) => {
                for frame in frames {
                    let wall = self.wall_of(&frame, Some(&meta));
                    if self.in_window(wall) {
                        self.pending.push_back((wall, frame));
                    }
                }
                if let Some(metas) = &mut self.metas {
                    metas.push(meta);
                }
            }
        }
    }

    /// Makes bytes `from..to` (`to - from <= WINDOW`) available, as far
    /// as the recording has them; bytes before `from` may be dropped.
    fn fill(&mut self, from: usize, to: usize) -> io::Result<()> {
        debug_assert!(
            self.buf_at <= from && from <= self.buf_end() && from <= to && to - from <= WINDOW
        );
        while self.buf_end() < to && !self.eof {
            let want = READ_CHUNK.min(from + WINDOW - self.buf_end());
            if self.buf.len() + want > WINDOW + CHECKPOINT {
                self.drop_before(from);
            }
            let old = self.buf.len();
            self.buf.resize(old + want, 0);
            let read = loop {
                match self.src.read(&mut self.buf[old..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other,
                }
            };
            let n = match read {
                Ok(n) => n,
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            };
            self.buf.truncate(old + n);
            self.eof = n == 0;
            self.work.max_buffered = self.work.max_buffered.max(self.buf.len());
        }
        Ok(())
    }

    /// Drops the bytes before `from` (while resynchronising, before the
    /// checkpoint at or before it, which the CRC of later ranges starts
    /// from).
    fn drop_before(&mut self, from: usize) {
        let keep = match &mut self.prefix {
            Some(prefix) => {
                let keep = prefix.checkpoint_before(from);
                prefix.extend_to(keep, &self.buf, self.buf_at, &mut self.work);
                prefix.forget_before(keep);
                keep
            }
            None => from,
        };
        self.buf.drain(..keep - self.buf_at);
        self.buf_at = keep;
    }

    /// What starts at `at`.
    fn frame_at(&mut self, at: usize) -> io::Result<At> {
        self.fill(at, at + FRAME_HEADER_LEN)?;
        let have = self.buf_end() - at;
        if have == 0 {
            return Ok(At::End);
        }
        if have < FRAME_HEADER_LEN {
            let rest = self.bytes(at, self.buf_end());
            return Ok(if rest.len() >= 2 && rest[..2] != SYNC.to_le_bytes() {
                At::Invalid
            } else {
                At::Incomplete
            });
        }
        let Some((kind, len, crc)) = plausible(self.bytes(at, at + FRAME_HEADER_LEN)) else {
            return Ok(At::Invalid);
        };
        let end = at + FRAME_HEADER_LEN + len;
        self.fill(at, end)?;
        if self.buf_end() < end {
            return Ok(At::Incomplete);
        }
        self.work.checksummed += 1 + len as u64;
        if crc_of(kind as u8, self.bytes(at + FRAME_HEADER_LEN, end)) != crc {
            return Ok(At::Invalid);
        }
        self.work.decoded += len as u64;
        let how = Decode {
            window: self.window,
            metas_only: self.metas_only,
            skip_calls: self.skip_calls,
        };
        Ok(
            match decode_any(kind, self.bytes(at + FRAME_HEADER_LEN, end), &how) {
                Some(frame) => At::Frame(frame, end - at),
                None => At::Undecodable(end - at),
            },
        )
    }

    /// The first frame starting at or after `from` that is whole, checks
    /// out and decodes: its offset, the frame and its length. `None` at
    /// the end of the recording.
    fn resync(&mut self, from: usize) -> io::Result<Option<(usize, Decoded, usize)>> {
        self.prefix = Some(PrefixCrc::new(from));
        let found = self.resync_from(from);
        self.prefix = None;
        found
    }

    fn resync_from(&mut self, mut at: usize) -> io::Result<Option<(usize, Decoded, usize)>> {
        let sync = SYNC.to_le_bytes();
        loop {
            self.fill(at, at + 2)?;
            if self.buf_end() < at + 2 {
                return Ok(None);
            }
            let Some(i) = self
                .bytes(at, self.buf_end())
                .windows(2)
                .position(|w| w == sync)
            else {
                // The last byte may be the first of a sync word.
                at = self.buf_end() - 1;
                continue;
            };
            let start = at + i;
            at = start + 1;
            self.fill(start, start + FRAME_HEADER_LEN)?;
            if self.buf_end() < start + FRAME_HEADER_LEN {
                continue;
            }
            let Some((kind, len, crc)) = plausible(self.bytes(start, start + FRAME_HEADER_LEN))
            else {
                continue;
            };
            self.work.candidates += 1;
            let end = start + FRAME_HEADER_LEN + len;
            self.fill(start, end)?;
            if self.buf_end() < end || !self.checks_out(start, kind, len, crc) {
                continue;
            }
            self.work.decoded += len as u64;
            let how = Decode {
                window: self.window,
                metas_only: self.metas_only,
                skip_calls: self.skip_calls,
            };
            match decode_any(kind, self.bytes(start + FRAME_HEADER_LEN, end), &how) {
                Some(frame) => return Ok(Some((start, frame, end - start))),
                // Checks out, yet is not ours: skipped whole, so that no
                // byte is decoded twice.
                None => at = end,
            }
        }
    }

    /// Whether the whole candidate frame at `start` has checksum `crc`,
    /// from the running CRC at the ends of its payload.
    fn checks_out(&mut self, start: usize, kind: FrameKind, len: usize, crc: u32) -> bool {
        let Some(prefix) = &mut self.prefix else {
            return false;
        };
        let from = start + FRAME_HEADER_LEN;
        let at_from = prefix.at(from, &self.buf, self.buf_at, &mut self.work);
        let at_end = prefix.at(from + len, &self.buf, self.buf_at, &mut self.work);
        // crc(kind ‖ payload) = crc(kind)·x^8len ⊕ crc(payload), and
        // crc(payload) = S(end) ⊕ S(from)·x^8len.
        shift(crc32fast::hash(&[kind as u8]) ^ at_from, len) ^ at_end == crc
    }
}

impl<R: Read> Iterator for RecordingReader<R> {
    type Item = Frame;

    fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some((wall, frame)) = self.pending.pop_front() {
                self.last_wall_ns = wall;
                return Some(frame);
            }
            let decoded = self.next_decoded()?;
            self.accept(decoded);
        }
    }
}

impl<R: Read> RecordingReader<R> {
    /// The next frame or block, whatever the window.
    fn next_decoded(&mut self) -> Option<Decoded> {
        if self.finished {
            return None;
        }
        let start = self.pos;
        let skip_from = match self.frame_at(start) {
            Ok(At::Frame(frame, len)) => {
                self.pos += len;
                return Some(frame);
            }
            Ok(At::End) => {
                self.finished = true;
                return None;
            }
            Ok(At::Incomplete) => {
                self.note(Damage::Truncated { offset: start });
                self.finished = true;
                return None;
            }
            Ok(At::Invalid) => start + 1,
            Ok(At::Undecodable(len)) => start + len,
            Err(e) => {
                self.unreadable(e);
                return None;
            }
        };
        match self.resync(skip_from) {
            Ok(Some((at, frame, len))) => {
                self.note(Damage::Corrupt {
                    offset: start,
                    skipped: at - start,
                });
                self.pos = at + len;
                Some(frame)
            }
            Ok(None) => {
                self.note(Damage::Corrupt {
                    offset: start,
                    skipped: self.buf_end() - start,
                });
                self.finished = true;
                None
            }
            Err(e) => {
                self.unreadable(e);
                None
            }
        }
    }
}

impl<R> RecordingReader<R> {
    fn buf_end(&self) -> usize {
        self.buf_at + self.buf.len()
    }

    /// Bytes `from..to` of the recording, which must be in the window.
    fn bytes(&self, from: usize, to: usize) -> &[u8] {
        &self.buf[from - self.buf_at..to - self.buf_at]
    }

    fn note(&mut self, damage: Damage) {
        if self.damage.len() < MAX_DAMAGE_KEPT {
            self.damage.push(damage);
        } else {
            self.damage_not_kept += 1;
        }
    }

    /// Reading failed after the bytes in the window: the end.
    fn unreadable(&mut self, e: io::Error) {
        self.note(Damage::Unreadable {
            offset: self.buf_end(),
            error: e.to_string(),
        });
        self.finished = true;
    }
}

/// The running CRC-32 of the bytes from `base`, at every `CHECKPOINT`-th
/// byte: `S(x)` is the CRC-32 of bytes `base..x`.
struct PrefixCrc {
    base: usize,
    /// Index (in checkpoints from `base`) of `points[0]`.
    first: usize,
    points: VecDeque<u32>,
}

impl PrefixCrc {
    fn new(base: usize) -> PrefixCrc {
        PrefixCrc {
            base,
            first: 0,
            // The CRC-32 of nothing.
            points: VecDeque::from([0]),
        }
    }

    fn last_at(&self) -> usize {
        self.base + (self.first + self.points.len() - 1) * CHECKPOINT
    }

    /// The checkpoint at or before `x` (`x >= base`).
    fn checkpoint_before(&self, x: usize) -> usize {
        self.base + (x - self.base) / CHECKPOINT * CHECKPOINT
    }

    /// Adds the checkpoints up to `x` from the window `buf` (bytes
    /// `buf_at..`), which holds everything from the last one to `x`.
    fn extend_to(&mut self, x: usize, buf: &[u8], buf_at: usize, work: &mut Work) {
        while self.last_at() + CHECKPOINT <= x {
            let at = self.last_at() - buf_at;
            let Some(&last) = self.points.back() else {
                return;
            };
            let mut h = crc32fast::Hasher::new_with_initial(last);
            h.update(&buf[at..at + CHECKPOINT]);
            work.checksummed += CHECKPOINT as u64;
            self.points.push_back(h.finalize());
        }
    }

    /// Forgets the checkpoints before `x`, a checkpoint.
    fn forget_before(&mut self, x: usize) {
        let index = (x - self.base) / CHECKPOINT;
        while self.first < index && self.points.len() > 1 {
            self.points.pop_front();
            self.first += 1;
        }
    }

    /// `S(x)`, for `x` in the window and not before the first checkpoint.
    fn at(&mut self, x: usize, buf: &[u8], buf_at: usize, work: &mut Work) -> u32 {
        self.extend_to(x, buf, buf_at, work);
        let point = self.checkpoint_before(x);
        let index = (point - self.base) / CHECKPOINT - self.first;
        let s = self.points.get(index).copied().unwrap_or_default();
        if point == x {
            return s;
        }
        let mut h = crc32fast::Hasher::new_with_initial(s);
        h.update(&buf[point - buf_at..x - buf_at]);
        work.checksummed += (x - point) as u64;
        h.finalize()
    }
}

/// The CRC-32 polynomial (IEEE 802.3), bit-reflected as the CRC register
/// holds it: the top bit is x^0.
const POLY: u32 = 0xEDB8_8320;

/// `a·b` modulo the CRC-32 polynomial, in the register's bit order.
fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    for bit in (0..32).rev() {
        if a & (1 << bit) != 0 {
            product ^= b;
        }
        // b·x
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// Powers of x used by [`shift`]: `low[i]` is x^(8i), `high[j]` is
/// x^(8·1024·j), so any payload length is one product of the two.
struct Powers {
    low: Vec<u32>,
    high: Vec<u32>,
}

fn powers() -> &'static Powers {
    static POWERS: OnceLock<Powers> = OnceLock::new();
    POWERS.get_or_init(|| {
        let one = 1u32 << 31;
        let x = 1u32 << 30;
        let x2 = mul_mod_p(x, x);
        let x4 = mul_mod_p(x2, x2);
        let x8 = mul_mod_p(x4, x4);
        let mut low = vec![one; 1024];
        for i in 1..low.len() {
            low[i] = mul_mod_p(low[i - 1], x8);
        }
        let x8k = mul_mod_p(low[1023], x8);
        let mut high = vec![one; (MAX_PAYLOAD >> 10) + 1];
        for j in 1..high.len() {
            high[j] = mul_mod_p(high[j - 1], x8k);
        }
        Powers { low, high }
    })
}

/// `crc·x^(8n)`: what the CRC of a message becomes as the first part of a
/// message `n` bytes longer, before those bytes' own CRC is added
/// (`n <= MAX_PAYLOAD`).
fn shift(crc: u32, n: usize) -> u32 {
    let p = powers();
    let power = mul_mod_p(
        p.high.get(n >> 10).copied().unwrap_or_default(),
        p.low[n & 1023],
    );
    mul_mod_p(power, crc)
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Seek as _, SeekFrom, Write as _},
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
        time::{Duration, Instant},
    };

    use proptest::prelude::*;

    use super::*;
    use crate::{FrameKind, writer::RecordingWriter};
    use wbscope_model::DevId;

    fn header() -> Header {
        Header {
            format_version: FORMAT_VERSION,
            wbscope_version: "test".into(),
            host: "h".into(),
            kernel: "6.18".into(),
            start_unix_ns: 1,
            start_monotonic_ns: 2,
            probe_plan: serde_json::json!({"kernel": "6.18", "concepts": []}),
            field_offsets: serde_json::json!({}),
            filter: serde_json::json!({}),
            segment: None,
        }
    }

    fn call(i: u64) -> CallRecord {
        CallRecord {
            dev: DevId::from_kernel((7 << 20) | 1),
            ino: 1000 + i,
            tgid: 42,
            tid: 43,
            comm: "dd".into(),
            start_ns: i * 1000,
            duration_ns: 77,
            nr_to_write: i64::MAX,
            pages_written: i as i64,
            sync_mode: 1,
            range_end: i64::MAX,
            writeback_index_after: i,
            start_seen: true,
            cgroup_id: 1,
            cause: 1,
            on_cpu_ns: Some(70),
            extents: 1,
            extent_blocks: 8,
            bios: 1,
            bio_bytes: 4096,
            ..CallRecord::default()
        }
    }

    /// Call `i` as another filesystem's call (generic.rs) shows it: its
    /// filesystem, how it ended and its folio sizes.
    fn generic_call(i: u64) -> CallRecord {
        CallRecord {
            fs: "xfs".into(),
            boundary: writeback_common::boundary::NEXT_CALL,
            folios_written: 5,
            // 3 folios of 1 page, 2 of 16 pages.
            folio_hist: vec![0, 3, 0, 0, 0, 2],
            ..call(i)
        }
    }

    /// Call `i` of [`recording`]: every third another filesystem's.
    fn written(i: u64) -> CallRecord {
        if i % 3 == 2 { generic_call(i) } else { call(i) }
    }

    /// A recording of `n` calls, an interval line and a summary.
    fn recording(n: u64) -> Vec<u8> {
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        for i in 0..n {
            w.call(&written(i)).unwrap();
        }
        w.json(
            FrameKind::Interval,
            &serde_json::json!({"type": "interval", "calls": n}),
        )
        .unwrap();
        w.json(
            FrameKind::Summary,
            &serde_json::json!({"type": "summary", "calls": n}),
        )
        .unwrap();
        w.into_inner()
    }

    /// Where the header of a written recording ends and each of its frames
    /// ends, from the lengths written (not from the reader).
    fn layout(bytes: &[u8]) -> (usize, Vec<usize>) {
        let header_end = 16 + u32_at(bytes, 12).unwrap() as usize + 4;
        let mut ends = Vec::new();
        let mut at = header_end;
        while at < bytes.len() {
            at += FRAME_HEADER_LEN + u32_at(bytes, at + 4).unwrap() as usize;
            ends.push(at);
        }
        assert_eq!(at, bytes.len());
        (header_end, ends)
    }

    /// A frame with a valid checksum around any payload.
    fn raw_frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = SYNC.to_le_bytes().to_vec();
        f.extend_from_slice(&[kind, 0]);
        f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        f.extend_from_slice(&crc_of(kind, payload).to_le_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A plain recording in a window: calls by their end, through the
    /// header's clocks (start 1 ns wall at 2 ns monotonic), interval
    /// lines by `time_s`; no summary.
    #[test]
    fn a_window_of_a_plain_recording() {
        let bytes = recording(10);
        // Call i ends at monotonic i * 1000 + 77, wall i * 1000 + 76.
        let window = TimeWindow {
            since_ns: Some(3076),
            until_ns: Some(7076),
        };
        let frames: Vec<Frame> = RecordingReader::open(&bytes[..])
            .unwrap()
            .with_window(window)
            .collect();
        let calls: Vec<u64> = frames
            .iter()
            .map(|f| match f {
                Frame::Call(c) => c.ino - 1000,
                other => panic!("{other:?} is not in the window"),
            })
            .collect();
        assert_eq!(calls, vec![3, 4, 5, 6]);
        // The interval line (no time_s: at the start) is in a window from
        // the start; the summary only without a window.
        let from_start = TimeWindow {
            since_ns: Some(0),
            until_ns: Some(2),
        };
        let frames: Vec<Frame> = RecordingReader::open(&bytes[..])
            .unwrap()
            .with_window(from_start)
            .collect();
        assert!(matches!(frames[..], [Frame::Interval(_)]), "{frames:?}");
    }

    #[test]
    fn round_trip() {
        let bytes = recording(50);
        let mut r = RecordingReader::open(&bytes[..]).unwrap();
        assert_eq!(r.header, header());
        let frames: Vec<Frame> = r.by_ref().collect();
        assert_eq!(frames.len(), 52);
        assert_eq!(frames[7], Frame::Call(Box::new(call(7))));
        assert_eq!(frames[8], Frame::Call(Box::new(generic_call(8))));
        assert_eq!(frames[8], Frame::Call(Box::new(written(8))));
        assert!(matches!(&frames[51], Frame::Summary(v) if v["calls"] == 50));
        assert!(r.damage.is_empty());
        // Each payload checksummed once, nothing else.
        let (header_end, _) = layout(&bytes);
        let payloads = bytes.len() - header_end - 52 * FRAME_HEADER_LEN;
        assert_eq!(r.work.checksummed, (payloads + 52) as u64);
    }

    #[test]
    fn every_cut_reads_the_whole_frames_before_it() {
        let bytes = recording(20);
        let (header_end, ends) = layout(&bytes);
        for cut in header_end..bytes.len() {
            let mut r = RecordingReader::open(&bytes[..cut]).unwrap();
            let n = r.by_ref().count();
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(n, whole, "cut at {cut}");
            let last = if whole == 0 {
                header_end
            } else {
                ends[whole - 1]
            };
            if cut == last {
                assert!(r.damage.is_empty(), "cut {cut}: {:?}", r.damage);
            } else {
                assert_eq!(
                    r.damage,
                    vec![Damage::Truncated { offset: last }],
                    "cut {cut}"
                );
            }
        }
        // A cut inside the header is an error, never a panic.
        for cut in 0..header_end {
            assert!(RecordingReader::open(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn a_corrupt_frame_is_reported_and_skipped() {
        let mut bytes = recording(10);
        let (_, ends) = layout(&bytes);
        let second = ends[0];
        // Flip a payload byte of the second frame.
        bytes[second + FRAME_HEADER_LEN + 1] ^= 0xff;
        let mut r = RecordingReader::open(&bytes[..]).unwrap();
        let frames: Vec<Frame> = r.by_ref().collect();
        assert_eq!(frames.len(), 11, "one of 12 frames lost");
        assert_eq!(frames[0], Frame::Call(Box::new(call(0))));
        assert_eq!(frames[1], Frame::Call(Box::new(written(2))));
        assert_eq!(
            r.damage,
            vec![Damage::Corrupt {
                offset: second,
                skipped: ends[1] - second
            }]
        );
    }

    #[test]
    fn newer_version_and_foreign_files_are_clear_errors() {
        let mut bytes = recording(1);
        bytes[8..12].copy_from_slice(&(FORMAT_VERSION_BLOCKS + 1).to_le_bytes());
        let err = RecordingReader::open(&bytes[..]).err().unwrap();
        assert_eq!(err, OpenError::NewerVersion(FORMAT_VERSION_BLOCKS + 1));
        assert!(err.to_string().contains("newer"));
        assert_eq!(
            RecordingReader::open(&b"PK\x03\x04 not ours"[..]).err(),
            Some(OpenError::BadMagic)
        );
    }

    /// The CRC of any range (and of a frame's kind and payload) from the
    /// running CRC at the range's ends, as the resynchronisation gets it.
    #[test]
    fn crc_of_a_range_from_the_running_crc() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let running = |x: usize| crc32fast::hash(&data[..x]);
        for (a, b) in [(0, 0), (0, 1), (3, 3), (7, 100), (1, 4999), (1234, 5000)] {
            let range = crc32fast::hash(&data[a..b]);
            assert_eq!(running(b) ^ shift(running(a), b - a), range, "{a}..{b}");
            assert_eq!(
                shift(crc32fast::hash(&[2]) ^ running(a), b - a) ^ running(b),
                crc_of(2, &data[a..b]),
                "{a}..{b}"
            );
        }
        // The largest shift the format needs: x^(8·MAX_PAYLOAD), checked
        // against a CRC computed over that many bytes.
        let zeros = vec![0u8; MAX_PAYLOAD];
        let c = crc32fast::hash(b"wbscope");
        let mut h = crc32fast::Hasher::new_with_initial(c);
        h.update(&zeros);
        assert_eq!(
            shift(c, MAX_PAYLOAD) ^ crc32fast::hash(&zeros),
            h.finalize()
        );
    }

    /// A file of fake frame headers, each claiming a long payload with a
    /// wrong checksum, then real frames. Before, every sync word cost a
    /// checksum of up to 1 MiB (a 16 MiB file took 34 s); now the bytes
    /// checksummed are a small multiple of the file's size.
    #[test]
    fn fake_frame_headers_cost_bounded_work_per_byte() {
        let real = recording(3);
        let (header_end, _) = layout(&real);
        // Candidates every 4 bytes: F7 B5 01 00 read as a header claims a
        // payload of 0x0001B5F7 bytes with checksum 0x0001B5F7.
        let dense = [0xF7, 0xB5, 0x01, 0x00].repeat(512 << 10);
        // Every 12 bytes a header claiming MAX_PAYLOAD bytes.
        let mut long = Vec::new();
        for i in 0..(1usize << 20) / FRAME_HEADER_LEN {
            long.extend_from_slice(&SYNC.to_le_bytes());
            long.extend_from_slice(&[1 + (i % 3) as u8, 0]);
            long.extend_from_slice(&(MAX_PAYLOAD as u32).to_le_bytes());
            long.extend_from_slice(&(i as u32).to_le_bytes());
        }
        for fake in [dense, long] {
            let mut bytes = real[..header_end].to_vec();
            bytes.extend_from_slice(&fake);
            bytes.extend_from_slice(&real[header_end..]);
            let mut r = RecordingReader::open(&bytes[..]).unwrap();
            let frames: Vec<Frame> = r.by_ref().collect();
            assert_eq!(frames.len(), 5, "the real frames after the fakes");
            assert_eq!(
                r.damage,
                vec![Damage::Corrupt {
                    offset: header_end,
                    skipped: fake.len()
                }]
            );
            assert!(r.work.candidates as usize >= fake.len() / 12);
            let size = bytes.len() as u64;
            assert!(
                r.work.checksummed <= 12 * size,
                "{} bytes checksummed for a file of {size}",
                r.work.checksummed
            );
            assert!(r.work.decoded <= size);
            assert!(r.work.max_buffered < WINDOW + CHECKPOINT);
        }
    }

    /// Frames whose checksum is right but which do not decode (not ours,
    /// or crafted) are one damaged region with what precedes them, and
    /// each is decoded once.
    #[test]
    fn checked_but_undecodable_frames_are_skipped() {
        let real = recording(2);
        let (header_end, _) = layout(&real);
        // Unterminated JSON strings: a parser reads each to its end.
        let mut junk = Vec::new();
        for _ in 0..64 {
            let mut payload = b"\"".to_vec();
            payload.extend(std::iter::repeat_n(b'a', 16 << 10));
            junk.extend_from_slice(&raw_frame(FrameKind::Interval as u8, &payload));
        }
        let mut bytes = real[..header_end].to_vec();
        bytes.extend_from_slice(&[0x55; 3]);
        bytes.extend_from_slice(&junk);
        bytes.extend_from_slice(&real[header_end..]);
        let mut r = RecordingReader::open(&bytes[..]).unwrap();
        let frames: Vec<Frame> = r.by_ref().collect();
        assert_eq!(frames.len(), 4);
        assert_eq!(
            r.damage,
            vec![Damage::Corrupt {
                offset: header_end,
                skipped: 3 + junk.len()
            }]
        );
        assert!(r.work.decoded <= bytes.len() as u64, "{:?}", r.work);
    }

    /// A file that shrinks while it is read (before: a memory map, and
    /// SIGBUS on the first page past the new end) reads as a cut.
    #[test]
    fn a_file_that_shrinks_while_read_is_a_cut() {
        let bytes = recording(40_000);
        let (_, ends) = layout(&bytes);
        assert!(bytes.len() > 2 * WINDOW);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shrinking.rec");
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut r = RecordingReader::open(file).unwrap();
        assert_eq!(r.by_ref().take(10).count(), 10);
        // Cut in the middle of a frame well past what has been read.
        let k = ends.len() / 2;
        let cut = ends[k] + 5;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        assert_eq!(r.by_ref().count(), k + 1 - 10);
        assert_eq!(r.damage, vec![Damage::Truncated { offset: ends[k] }]);
    }

    /// A source that fails is reported with the offset reached.
    #[test]
    fn a_read_error_is_reported_where_it_happened() {
        struct Failing<'a>(&'a [u8]);
        impl Read for Failing<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
                self.0.read(buf)
            }
        }
        let bytes = recording(5);
        let (_, ends) = layout(&bytes);
        let mut r = RecordingReader::open(Failing(&bytes[..ends[2] + 3])).unwrap();
        assert_eq!(r.by_ref().count(), 3);
        assert!(
            matches!(&r.damage[..], [Damage::Unreadable { offset, error }]
                if *offset == ends[2] + 3 && error.contains("Input/output error")),
            "{:?}",
            r.damage
        );
    }

    #[test]
    fn damage_beyond_the_kept_entries_is_counted() {
        let real = recording(1);
        let (header_end, ends) = layout(&real);
        let frame = &real[header_end..ends[0]];
        let mut bytes = real[..header_end].to_vec();
        let n = MAX_DAMAGE_KEPT + 10;
        for _ in 0..n {
            bytes.extend_from_slice(frame);
            bytes.push(0);
        }
        let mut r = RecordingReader::open(&bytes[..]).unwrap();
        assert_eq!(r.by_ref().count(), n);
        assert_eq!(r.damage.len(), MAX_DAMAGE_KEPT);
        assert_eq!(r.damage_not_kept, 10);
    }

    /// The dashboard's feed: however long the recording, the reader gets
    /// at most `capacity` frames (and one window) ahead of the consumer.
    #[test]
    fn the_channel_reads_at_most_capacity_frames_ahead() {
        struct Counting {
            file: std::fs::File,
            read: Arc<AtomicUsize>,
        }
        impl Read for Counting {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.file.read(buf)?;
                self.read.fetch_add(n, Ordering::SeqCst);
                Ok(n)
            }
        }
        let bytes = recording(60_000);
        let (header_end, ends) = layout(&bytes);
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        let read = Arc::new(AtomicUsize::new(0));
        let reader = RecordingReader::open(Box::new(Counting {
            file,
            read: read.clone(),
        }) as Box<dyn Read + Send>)
        .unwrap();
        let reader = crate::store::reader::StoreReader::single(reader, TimeWindow::default());
        let capacity = 64;
        let mut rx = reader.into_channel(capacity).unwrap();
        let taken = 100;
        for i in 0..taken {
            assert_eq!(
                rx.blocking_recv().map(|(_, frame)| frame),
                Some(Frame::Call(Box::new(written(i as u64))))
            );
        }
        // Wait until the reading thread blocks on the full channel (the
        // count stops moving), at most 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = usize::MAX;
        while Instant::now() < deadline {
            let now = read.load(Ordering::SeqCst);
            if now == last {
                break;
            }
            last = now;
            std::thread::sleep(Duration::from_millis(200));
        }
        // The frames consumed, the ones in the channel, the one waiting to
        // be sent, and the reader's window of read-ahead.
        let ahead = ends[taken + capacity + 1] + WINDOW + CHECKPOINT;
        let read = read.load(Ordering::SeqCst);
        assert!(read <= ahead, "{read} bytes read, at most {ahead} expected");
        assert!(read < bytes.len() / 2);
        assert!(read > header_end);
        // The rest still arrives, in order.
        let rest = std::iter::from_fn(|| rx.blocking_recv()).count();
        assert_eq!(taken + rest, ends.len());
    }

    proptest! {
        /// Arbitrary bytes after a valid header, and arbitrary mutations
        /// of a real recording: never a panic, and every frame returned
        /// is one that was written.
        #[test]
        fn arbitrary_and_mutated_input_never_panics(
            noise in proptest::collection::vec(any::<u8>(), 0..4096),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..16),
            cut in any::<usize>(),
        ) {
            let mut head = RecordingWriter::new(Vec::new(), &header()).unwrap().into_inner();
            head.extend_from_slice(&noise);
            if let Ok(r) = RecordingReader::open(&head[..]) {
                for _ in r {}
            }
            let _ = RecordingReader::open(&noise[..]);

            let original = recording(30);
            let mut bytes = original.clone();
            for (at, x) in &flips {
                let i = at % bytes.len();
                bytes[i] ^= x;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            let written: Vec<Frame> = RecordingReader::open(&original[..]).unwrap().collect();
            if let Ok(r) = RecordingReader::open(&bytes[..]) {
                for f in r {
                    prop_assert!(written.contains(&f), "invented frame {f:?}");
                }
            }
        }
    }

    /// A call with dirtiers round-trips through a `CallWho` frame; a call
    /// without keeps the `Call` frame of recordings made before dirtiers
    /// existed, which read back unchanged.
    #[test]
    fn dirtiers_round_trip_and_old_call_frames_still_read() {
        let mut who = call(1);
        who.dirtiers = vec![wbscope_model::dirtier::Dirtier {
            pid: 7,
            comm: "dd".into(),
            cgroup_id: 3,
            pages: 1,
        }]
        .into();
        who.owner_cgroup_id = Some(9);
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        w.call(&who).unwrap();
        w.call(&call(2)).unwrap();
        let bytes = w.into_inner();
        let kinds: Vec<u8> = frame_kinds(&bytes);
        assert_eq!(kinds, vec![FrameKind::CallWho as u8, FrameKind::Call as u8]);
        let frames: Vec<Frame> = RecordingReader::open(&bytes[..]).unwrap().collect();
        assert_eq!(
            frames,
            vec![Frame::Call(Box::new(who)), Frame::Call(Box::new(call(2)))]
        );
    }

    /// A generic call's filesystem, boundary and folio sizes round-trip
    /// in both call frame kinds, after the payload a reader before them
    /// decoded (which still decodes to the call without them); a frame
    /// without them (every call frame before them) reads as the default.
    #[test]
    fn generic_calls_round_trip_and_older_readers_lose_only_the_extension() {
        let plain = generic_call(1);
        let mut who = generic_call(2);
        who.dirtiers = vec![wbscope_model::dirtier::Dirtier {
            pid: 7,
            comm: "dd".into(),
            cgroup_id: 3,
            pages: 35,
        }]
        .into();
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        w.call(&plain).unwrap();
        w.call(&who).unwrap();
        let bytes = w.into_inner();
        assert_eq!(
            frame_kinds(&bytes),
            vec![FrameKind::Call as u8, FrameKind::CallWho as u8]
        );
        let frames: Vec<Frame> = RecordingReader::open(&bytes[..]).unwrap().collect();
        assert_eq!(
            frames,
            vec![
                Frame::Call(Box::new(plain.clone())),
                Frame::Call(Box::new(who.clone()))
            ]
        );

        // What the reader before the extension did with each payload.
        let payloads = frame_payloads(&bytes);
        let old_plain: CallRecord = postcard::from_bytes(payloads[0]).unwrap();
        let (old_who, rest) = postcard::take_from_bytes::<CallRecord>(payloads[1]).unwrap();
        let who_frame: super::super::WhoFrame = postcard::from_bytes(rest).unwrap();
        let without = |c: &CallRecord| CallRecord {
            fs: Default::default(),
            boundary: 0,
            folio_hist: Vec::new(),
            dirtiers: Default::default(),
            ..c.clone()
        };
        assert_eq!(old_plain, without(&plain));
        assert_eq!(old_who, without(&who));
        assert_eq!(who_frame.dirtiers, who.dirtiers.as_slice());

        // A frame as written before the extension.
        let mut old = RecordingWriter::new(Vec::new(), &header())
            .unwrap()
            .into_inner();
        let payload = postcard::to_stdvec(&plain).unwrap();
        old.extend_from_slice(&raw_frame(FrameKind::Call as u8, &payload));
        let frames: Vec<Frame> = RecordingReader::open(&old[..]).unwrap().collect();
        assert_eq!(frames, vec![Frame::Call(Box::new(without(&plain)))]);
    }

    /// An extension that does not decode, or holds more folio buckets
    /// than the kernel has, makes its frame one that is skipped and
    /// reported; the frames around it read.
    #[test]
    fn a_crafted_extension_is_skipped() {
        let payload = postcard::to_stdvec(&call(1)).unwrap();
        let long = super::super::CallExt {
            fs: "xfs".into(),
            boundary: 1,
            folio_hist: vec![1; writeback_common::FOLIO_HIST_BUCKETS + 1],
        };
        let mut too_long = payload.clone();
        too_long.extend(postcard::to_stdvec(&long).unwrap());
        let mut junk = payload.clone();
        // A string length far past the end of the frame.
        junk.extend_from_slice(&[0xff, 0xff, 0xff, 0x7f]);
        let mut bytes = RecordingWriter::new(Vec::new(), &header())
            .unwrap()
            .into_inner();
        bytes.extend_from_slice(&raw_frame(FrameKind::Call as u8, &payload));
        let bad_at = bytes.len();
        bytes.extend_from_slice(&raw_frame(FrameKind::Call as u8, &too_long));
        bytes.extend_from_slice(&raw_frame(FrameKind::Call as u8, &junk));
        let bad_end = bytes.len();
        bytes.extend_from_slice(&raw_frame(FrameKind::Call as u8, &payload));
        let mut r = RecordingReader::open(&bytes[..]).unwrap();
        let frames: Vec<Frame> = r.by_ref().collect();
        assert_eq!(
            frames,
            vec![
                Frame::Call(Box::new(call(1))),
                Frame::Call(Box::new(call(1)))
            ]
        );
        assert_eq!(
            r.damage,
            vec![Damage::Corrupt {
                offset: bad_at,
                skipped: bad_end - bad_at
            }]
        );
    }

    /// The payload of every frame, in order.
    fn frame_payloads(bytes: &[u8]) -> Vec<&[u8]> {
        let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let mut at = 16 + header_len + 4;
        let mut out = Vec::new();
        while at + FRAME_HEADER_LEN <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            out.push(&bytes[at + FRAME_HEADER_LEN..at + FRAME_HEADER_LEN + len]);
            at += FRAME_HEADER_LEN + len;
        }
        out
    }

    /// The kind byte of every frame, in order (sync words found by walking
    /// the frames' lengths).
    fn frame_kinds(bytes: &[u8]) -> Vec<u8> {
        let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let mut at = 16 + header_len + 4;
        let mut out = Vec::new();
        while at + FRAME_HEADER_LEN <= bytes.len() {
            out.push(bytes[at + 2]);
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            at += FRAME_HEADER_LEN + len;
        }
        out
    }
}
