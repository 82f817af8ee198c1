//! Compressed blocks (format version 2, a store's segments): the frames of
//! one interval, each in the layout of a plain recording's frames, run
//! through zstd together and written as one [`FrameKind::Block`] frame:
//!
//! ```text
//! Block payload:  BlockMeta (postcard)  zstd frame of (frame*)
//! ```
//!
//! A block is the unit of loss: the recorder writes one per interval (and
//! one early when an interval's frames reach [`BLOCK_RAW_TARGET`]), so a
//! crash loses at most the interval being gathered, and a torn block is a
//! cut frame like any other (the outer frame's checksum covers it). The
//! metadata stays outside the compressed part so that a reader looking for
//! a moment, or `wbscope store` summing a store, skips a block without
//! decompressing it.
//!
//! Why blocks rather than zstd per frame: measured on a recording of a
//! small-files fsync load (docs/recordings.md, "Compression"), a call
//! frame is ~125 bytes, too little for zstd to find repeats in (1.1x
//! smaller alone, 2.0x with a dictionary trained on the same recording);
//! a block of one interval's frames is 6.0x smaller, loses no more on a
//! crash than the interval the recorder flushes anyway, and decodes alone
//! (chaining each block to the one before as its dictionary gained less,
//! 5.8x, and would tie every block to all before it).
use std::io;

use serde::{Deserialize, Serialize};

use super::{FRAME_HEADER_LEN, FrameKind, MAX_PAYLOAD, SYNC, writer};
use wbscope_model::CallRecord;

/// Raw bytes at which a block is closed before its interval ends: zstd's
/// worst case for incompressible input is a little over its input
/// (`ZSTD_compressBound`, zstd.h), so the block stays well inside
/// [`MAX_PAYLOAD`].
pub(crate) const BLOCK_RAW_TARGET: usize = MAX_PAYLOAD / 2;
/// Largest raw size a reader decompresses: a block's `raw_len` above it is
/// corruption, and the bound keeps it from becoming a huge allocation.
pub(crate) const MAX_RAW: usize = 4 * MAX_PAYLOAD;
/// zstd level: 3 is zstd's default; measured against 1, 9 and 19 in
/// docs/recordings.md ("Compression").
pub(crate) const LEVEL: i32 = 3;

/// What a block says about itself, uncompressed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BlockMeta {
    /// Wall clock when the block's first frame could have been taken (the
    /// previous block's close, or the segment's start), ns since the epoch.
    pub(crate) first_unix_ns: u64,
    /// Wall clock when the block was closed.
    pub(crate) last_unix_ns: u64,
    /// CLOCK_MONOTONIC at `last_unix_ns`: a call's `start_ns` (monotonic)
    /// is at wall time `last_unix_ns - (monotonic_ns - start_ns)`.
    pub(crate) monotonic_ns: u64,
    /// Bytes of the frames before compression.
    pub(crate) raw_len: u32,
    pub(crate) frames: u32,
    pub(crate) calls: u32,
    /// Frames the recorder gathered and did not keep since the block
    /// before (the filesystem under the store was short of free space).
    pub(crate) not_kept: Option<NotKept>,
}

/// A stretch the recorder was running but kept no frames.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NotKept {
    pub(crate) from_unix_ns: u64,
    pub(crate) to_unix_ns: u64,
    pub(crate) calls: u64,
    pub(crate) intervals: u64,
}

impl BlockMeta {
    /// The wall clock of a monotonic time in this block.
    pub(crate) fn wall_of(&self, monotonic_ns: u64) -> u64 {
        let back = self.monotonic_ns.saturating_sub(monotonic_ns);
        self.last_unix_ns.saturating_sub(back)
    }
}

/// The frames of the block being gathered.
#[derive(Debug, Default)]
pub(crate) struct BlockBuilder {
    raw: Vec<u8>,
    pub(crate) frames: u32,
    pub(crate) calls: u32,
    pub(crate) intervals: u32,
}

impl BlockBuilder {
    pub(crate) fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        let (kind, payload) = writer::call_payload(call)?;
        self.frame(kind, &payload)?;
        self.frames += 1;
        self.calls += 1;
        Ok(())
    }

    pub(crate) fn json<T: Serialize>(&mut self, kind: FrameKind, value: &T) -> io::Result<()> {
        let payload = serde_json::to_vec(value).map_err(io::Error::other)?;
        self.frame(kind, &payload)?;
        self.frames += 1;
        if kind == FrameKind::Interval {
            self.intervals += 1;
        }
        Ok(())
    }

    /// A frame in a plain recording's layout, its checksum zero: the
    /// block's own checksum covers it, and four bytes of checksum per
    /// call are four bytes zstd cannot compress (a fifth of a block,
    /// docs/recordings.md "Compression").
    fn frame(&mut self, kind: FrameKind, payload: &[u8]) -> io::Result<()> {
        let at = self.raw.len();
        writer::encode_frame(kind, payload, &mut self.raw)?;
        self.raw[at + 8..at + 12].fill(0);
        Ok(())
    }

    pub(crate) fn raw_len(&self) -> usize {
        self.raw.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// The compressed frames; the builder is emptied (its buffer kept, so
    /// that memory does not grow or churn from block to block).
    pub(crate) fn compress(&mut self, zstd: &mut zstd::bulk::Compressor<'_>) -> io::Result<Body> {
        let body = zstd.compress(&self.raw)?;
        let out = Body {
            body,
            raw_len: self.raw.len() as u32,
            frames: self.frames,
            calls: self.calls,
        };
        self.raw.clear();
        self.frames = 0;
        self.calls = 0;
        self.intervals = 0;
        Ok(out)
    }
}

/// A block's compressed frames, before its metadata is known.
#[derive(Debug)]
pub(crate) struct Body {
    pub(crate) body: Vec<u8>,
    pub(crate) raw_len: u32,
    pub(crate) frames: u32,
    pub(crate) calls: u32,
}

/// Most bytes a [`BlockMeta`] takes in postcard (ten-byte varints for the
/// u64s, five for the u32s, one per option tag).
pub(crate) const META_MAX: usize = 3 * 10 + 3 * 5 + 1 + 4 * 10;

/// The whole `Block` frame (header and payload) of `body` with `meta`.
pub(crate) fn frame(meta: &BlockMeta, body: &[u8]) -> io::Result<Vec<u8>> {
    let mut payload = postcard::to_stdvec(meta).map_err(io::Error::other)?;
    payload.extend_from_slice(body);
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    writer::encode_frame(FrameKind::Block, &payload, &mut out)?;
    Ok(out)
}

/// A block payload's metadata and its compressed part.
pub(crate) fn split(payload: &[u8]) -> Option<(BlockMeta, &[u8])> {
    let (meta, body) = postcard::take_from_bytes::<BlockMeta>(payload).ok()?;
    if meta.raw_len as usize > MAX_RAW || meta.first_unix_ns > meta.last_unix_ns {
        return None;
    }
    Some((meta, body))
}

/// The frames of a block's compressed part, as (kind, payload); `None` if
/// it does not decompress to the length its metadata says or a frame in
/// it is not whole (only a crafted block can be so: the block's checksum
/// covers the compressed bytes, which is why the frames in it carry
/// none).
pub(crate) fn frames(meta: &BlockMeta, body: &[u8]) -> Option<Vec<(FrameKind, Vec<u8>)>> {
    let raw = zstd::bulk::decompress(body, meta.raw_len as usize).ok()?;
    if raw.len() != meta.raw_len as usize {
        return None;
    }
    let mut out = Vec::with_capacity(meta.frames as usize);
    let mut at = 0;
    while at < raw.len() {
        let head = raw.get(at..at + FRAME_HEADER_LEN)?;
        if head[..2] != SYNC.to_le_bytes() || head[3] != 0 {
            return None;
        }
        let kind = FrameKind::from_u8(head[2]).filter(|k| *k != FrameKind::Block)?;
        let len = u32::from_le_bytes(head[4..8].try_into().ok()?) as usize;
        let payload = raw.get(at + FRAME_HEADER_LEN..at + FRAME_HEADER_LEN + len)?;
        out.push((kind, payload.to_vec()));
        at += FRAME_HEADER_LEN + len;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::{Frame, RecordingReader};

    /// The measurement behind the choice of blocks (docs/recordings.md,
    /// "Compression"): a recording named by `WBSCOPE_MEASURE_REC` (made
    /// with `record -o`), compressed frame by frame, frame by frame with a
    /// dictionary trained on its first frames, and in blocks of one
    /// interval at several levels. Prints the table; asserts the choice.
    /// `WBSCOPE_MEASURE_REC=run.rec cargo test -p writeback-user --lib
    /// block::tests::measure -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement: needs WBSCOPE_MEASURE_REC"]
    fn measure() {
        let path = std::env::var("WBSCOPE_MEASURE_REC").expect("WBSCOPE_MEASURE_REC");
        let plain = std::fs::metadata(&path).unwrap().len();
        let reader = RecordingReader::open(std::fs::File::open(&path).unwrap()).unwrap();
        // The frames re-encoded, grouped by interval.
        let mut intervals: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
        let mut calls = 0u64;
        for frame in reader {
            let mut bytes = Vec::new();
            match &frame {
                Frame::Call(c) => {
                    let (kind, payload) = writer::call_payload(c).unwrap();
                    writer::encode_frame(kind, &payload, &mut bytes).unwrap();
                    calls += 1;
                }
                Frame::Interval(v) | Frame::Summary(v) => {
                    let payload = serde_json::to_vec(v).unwrap();
                    writer::encode_frame(FrameKind::Interval, &payload, &mut bytes).unwrap();
                }
            }
            let last = intervals.last_mut().unwrap();
            last.push(bytes);
            if matches!(frame, Frame::Interval(_)) {
                intervals.push(Vec::new());
            }
        }
        let frames: Vec<&Vec<u8>> = intervals.iter().flatten().collect();
        let n_intervals = intervals.len() as f64;
        let per_frame = |c: &mut zstd::bulk::Compressor<'_>| -> u64 {
            frames
                .iter()
                .map(|f| (c.compress(f).unwrap().len() + FRAME_HEADER_LEN) as u64)
                .sum()
        };
        let blocks = |c: &mut zstd::bulk::Compressor<'_>| -> u64 {
            intervals
                .iter()
                .filter(|i| !i.is_empty())
                .map(|i| {
                    let raw: Vec<u8> = i.concat();
                    (c.compress(&raw).unwrap().len() + FRAME_HEADER_LEN + 30) as u64
                })
                .sum()
        };
        // As written: the frames' own checksums zero (the block's covers
        // them).
        let no_crc = |c: &mut zstd::bulk::Compressor<'_>| -> u64 {
            intervals
                .iter()
                .filter(|i| !i.is_empty())
                .map(|i| {
                    let raw: Vec<u8> = i
                        .iter()
                        .flat_map(|f| {
                            let mut f = f.clone();
                            f[8..12].fill(0);
                            f
                        })
                        .collect();
                    (c.compress(&raw).unwrap().len() + FRAME_HEADER_LEN + 30) as u64
                })
                .sum()
        };
        let train: Vec<&[u8]> = frames
            .iter()
            .take(frames.len() / 10)
            .map(|f| f.as_slice())
            .collect();
        let dict = zstd::dict::from_samples(&train, 16 << 10).unwrap();
        let mut rows = vec![("record -o (plain)".to_string(), plain)];
        rows.push((
            "per frame, level 3".into(),
            per_frame(&mut zstd::bulk::Compressor::new(3).unwrap()),
        ));
        rows.push((
            "per frame, level 3, 16 KiB dictionary (+ its size)".into(),
            per_frame(&mut zstd::bulk::Compressor::with_dictionary(3, &dict).unwrap())
                + dict.len() as u64,
        ));
        for level in [1, 3, 9] {
            rows.push((
                format!("blocks of one interval, level {level}, frame checksums zero"),
                no_crc(&mut zstd::bulk::Compressor::new(level).unwrap()),
            ));
        }
        for level in [1, 3, 9, 19] {
            rows.push((
                format!("blocks of one interval, level {level}"),
                blocks(&mut zstd::bulk::Compressor::new(level).unwrap()),
            ));
        }
        // Each block with the raw bytes of the block before as zstd's
        // raw-content dictionary (a chain: a block decodes only after the
        // one before it).
        let mut prev: Vec<u8> = Vec::new();
        let mut chained = 0u64;
        for i in intervals.iter().filter(|i| !i.is_empty()) {
            let raw: Vec<u8> = i.concat();
            let mut c = zstd::bulk::Compressor::with_dictionary(3, &prev).unwrap();
            chained += (c.compress(&raw).unwrap().len() + FRAME_HEADER_LEN + 30) as u64;
            prev = raw;
        }
        rows.push((
            "blocks of one interval, level 3, the block before as dictionary".into(),
            chained,
        ));
        rows.push((
            "blocks of one interval, level 3, dictionary (+ its size)".into(),
            blocks(&mut zstd::bulk::Compressor::with_dictionary(3, &dict).unwrap())
                + dict.len() as u64,
        ));
        println!(
            "{path}: {calls} calls, {n_intervals} intervals, {} frames",
            frames.len()
        );
        println!("| layout | bytes | smaller than plain | bytes/call | bytes/interval |");
        println!("|---|---:|---:|---:|---:|");
        for (name, bytes) in &rows {
            println!(
                "| {name} | {bytes} | {:.1}x | {:.1} | {:.0} |",
                plain as f64 / *bytes as f64,
                *bytes as f64 / calls.max(1) as f64,
                *bytes as f64 / n_intervals
            );
        }
        let of = |name: &str| rows.iter().find(|r| r.0 == name).unwrap().1;
        let chosen = of("blocks of one interval, level 3, frame checksums zero");
        assert!(chosen < of("per frame, level 3, 16 KiB dictionary (+ its size)"));
        assert!(chosen < of("blocks of one interval, level 3"));
    }
}
