//! Reading a recording, whatever state it is in: whole frames are
//! returned, corrupt ones reported and skipped, a cut reported.
use std::fmt;

use super::{
    FORMAT_VERSION, FRAME_HEADER_LEN, FrameKind, Header, MAGIC, MAX_HEADER, MAX_PAYLOAD, SYNC,
    crc_of,
};
use crate::model::CallRecord;

/// Why a recording cannot be read at all.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("not a wbscope recording (bad magic)")]
    BadMagic,
    #[error(
        "recording format version {0} is newer than this wbscope understands \
         (version {FORMAT_VERSION}); use a newer wbscope"
    )]
    NewerVersion(u32),
    #[error("recording format version {0} is not supported")]
    UnsupportedVersion(u32),
    #[error("recording header is cut short ({0} bytes)")]
    ShortHeader(usize),
    #[error("recording header is corrupt: {0}")]
    CorruptHeader(String),
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Call(CallRecord),
    Interval(serde_json::Value),
    Summary(serde_json::Value),
}

/// A problem met while reading frames; reading goes on after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// Bytes at `offset` were skipped until the next frame that checks out.
    Corrupt { offset: usize, skipped: usize },
    /// The recording ends inside a frame at `offset` (cut short).
    Truncated { offset: usize },
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
        }
    }
}

/// Reads a recording held in memory.
pub struct RecordingReader<'a> {
    pub header: Header,
    data: &'a [u8],
    pos: usize,
    pub damage: Vec<Damage>,
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> RecordingReader<'a> {
    pub fn open(data: &'a [u8]) -> Result<RecordingReader<'a>, OpenError> {
        if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
            return Err(OpenError::BadMagic);
        }
        let version = u32_at(data, 8).ok_or(OpenError::ShortHeader(data.len()))?;
        if version > FORMAT_VERSION {
            return Err(OpenError::NewerVersion(version));
        }
        if version != FORMAT_VERSION {
            return Err(OpenError::UnsupportedVersion(version));
        }
        let len = u32_at(data, 12).ok_or(OpenError::ShortHeader(data.len()))? as usize;
        if len > MAX_HEADER {
            return Err(OpenError::CorruptHeader(format!("header length {len}")));
        }
        let start = 16;
        let json = data
            .get(start..start + len)
            .ok_or(OpenError::ShortHeader(data.len()))?;
        let crc = u32_at(data, start + len).ok_or(OpenError::ShortHeader(data.len()))?;
        if crc32fast::hash(json) != crc {
            return Err(OpenError::CorruptHeader("checksum mismatch".into()));
        }
        let header: Header =
            serde_json::from_slice(json).map_err(|e| OpenError::CorruptHeader(e.to_string()))?;
        Ok(RecordingReader {
            header,
            data,
            pos: start + len + 4,
            damage: Vec::new(),
        })
    }

    /// The frame at `at`, if a whole, valid one starts there:
    /// `Ok(Some((frame, next)))`, `Ok(None)` when the data ends inside it,
    /// `Err(())` when it is not a valid frame.
    #[allow(clippy::result_unit_err)]
    fn frame_at(&self, at: usize) -> Result<Option<(Frame, usize)>, ()> {
        let rest = &self.data[at..];
        if rest.len() < FRAME_HEADER_LEN {
            return if rest.len() >= 2 && rest[..2] != SYNC.to_le_bytes() {
                Err(())
            } else {
                Ok(None)
            };
        }
        if rest[..2] != SYNC.to_le_bytes() {
            return Err(());
        }
        let kind = FrameKind::from_u8(rest[2]).ok_or(())?;
        let len = u32_at(rest, 4).ok_or(())? as usize;
        if len > MAX_PAYLOAD || rest[3] != 0 {
            return Err(());
        }
        let crc = u32_at(rest, 8).ok_or(())?;
        let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
            return Ok(None);
        };
        if crc_of(kind as u8, payload) != crc {
            return Err(());
        }
        let frame = match kind {
            FrameKind::Call => Frame::Call(postcard::from_bytes(payload).map_err(|_| ())?),
            FrameKind::Interval => {
                Frame::Interval(serde_json::from_slice(payload).map_err(|_| ())?)
            }
            FrameKind::Summary => Frame::Summary(serde_json::from_slice(payload).map_err(|_| ())?),
        };
        Ok(Some((frame, at + FRAME_HEADER_LEN + len)))
    }
}

impl Iterator for RecordingReader<'_> {
    type Item = Frame;

    fn next(&mut self) -> Option<Frame> {
        loop {
            if self.pos >= self.data.len() {
                return None;
            }
            match self.frame_at(self.pos) {
                Ok(Some((frame, next))) => {
                    self.pos = next;
                    return Some(frame);
                }
                Ok(None) => {
                    self.damage.push(Damage::Truncated { offset: self.pos });
                    self.pos = self.data.len();
                    return None;
                }
                Err(()) => {
                    // Resynchronise: the next sync word whose frame is whole
                    // and checks out (or the end).
                    let start = self.pos;
                    let mut at = start + 1;
                    let sync = SYNC.to_le_bytes();
                    loop {
                        match self.data[at..].windows(2).position(|w| w == sync) {
                            None => {
                                at = self.data.len();
                                break;
                            }
                            Some(i) => at += i,
                        }
                        if matches!(self.frame_at(at), Ok(Some(_))) {
                            break;
                        }
                        at += 1;
                    }
                    self.damage.push(Damage::Corrupt {
                        offset: start,
                        skipped: at - start,
                    });
                    self.pos = at;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{
        model::DevId,
        recording::{FrameKind, writer::RecordingWriter},
    };

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

    /// A recording of `n` calls, an interval line and a summary.
    fn recording(n: u64) -> Vec<u8> {
        let mut w = RecordingWriter::new(Vec::new(), &header()).unwrap();
        for i in 0..n {
            w.call(&call(i)).unwrap();
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

    #[test]
    fn round_trip() {
        let bytes = recording(50);
        let mut r = RecordingReader::open(&bytes).unwrap();
        assert_eq!(r.header, header());
        let frames: Vec<Frame> = r.by_ref().collect();
        assert_eq!(frames.len(), 52);
        assert_eq!(frames[7], Frame::Call(call(7)));
        assert!(matches!(&frames[51], Frame::Summary(v) if v["calls"] == 50));
        assert!(r.damage.is_empty());
    }

    #[test]
    fn every_cut_reads_the_whole_frames_before_it() {
        let bytes = recording(20);
        let header_end = RecordingReader::open(&bytes).unwrap().pos;
        for cut in header_end..bytes.len() {
            let mut r = RecordingReader::open(&bytes[..cut]).unwrap();
            let n = r.by_ref().count();
            // Frames are whole or absent: a call frame here is 12 + its
            // payload; count the frames that end at or before the cut.
            let mut whole = 0;
            let mut full = RecordingReader::open(&bytes).unwrap();
            let mut at = full.pos;
            while let Ok(Some((_, next))) = full.frame_at(at) {
                if next > cut {
                    break;
                }
                whole += 1;
                at = next;
                full.pos = next;
            }
            assert_eq!(n, whole, "cut at {cut}");
            if cut != at {
                assert_eq!(
                    r.damage,
                    vec![Damage::Truncated { offset: at }],
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
        let r = RecordingReader::open(&bytes).unwrap();
        let (_, second) = r.frame_at(r.pos).unwrap().unwrap();
        // Flip a payload byte of the second frame.
        bytes[second + FRAME_HEADER_LEN + 1] ^= 0xff;
        let mut r = RecordingReader::open(&bytes).unwrap();
        let frames: Vec<Frame> = r.by_ref().collect();
        assert_eq!(frames.len(), 11, "one of 12 frames lost");
        assert_eq!(frames[0], Frame::Call(call(0)));
        assert_eq!(frames[1], Frame::Call(call(2)));
        assert!(matches!(r.damage[..], [Damage::Corrupt { offset, .. }] if offset == second));
    }

    #[test]
    fn newer_version_and_foreign_files_are_clear_errors() {
        let mut bytes = recording(1);
        bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let err = RecordingReader::open(&bytes).err().unwrap();
        assert_eq!(err, OpenError::NewerVersion(FORMAT_VERSION + 1));
        assert!(err.to_string().contains("newer"));
        assert_eq!(
            RecordingReader::open(b"PK\x03\x04 not ours").err(),
            Some(OpenError::BadMagic)
        );
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
            if let Ok(r) = RecordingReader::open(&head) {
                for _ in r {}
            }
            let _ = RecordingReader::open(&noise);

            let original = recording(30);
            let mut bytes = original.clone();
            for (at, x) in &flips {
                let i = at % bytes.len();
                bytes[i] ^= x;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            let written: Vec<Frame> = RecordingReader::open(&original).unwrap().collect();
            if let Ok(r) = RecordingReader::open(&bytes) {
                for f in r {
                    prop_assert!(written.contains(&f), "invented frame {f:?}");
                }
            }
        }
    }
}
