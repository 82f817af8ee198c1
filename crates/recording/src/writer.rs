//! Writing a recording. Every frame is written whole and flushed at each
//! drain, so what is on disk is always a readable prefix.
use std::io::{self, Write};

use super::{FORMAT_VERSION, FrameKind, Header, MAGIC, MAX_PAYLOAD, SYNC, crc_of};
use wbscope_model::CallRecord;

/// A frame's bytes (header and payload) appended to `out`.
pub(crate) fn encode_frame(kind: FrameKind, payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    if payload.len() > MAX_PAYLOAD {
        return Err(io::Error::other(format!(
            "frame of {} bytes exceeds the format's {MAX_PAYLOAD}",
            payload.len()
        )));
    }
    let kind = kind as u8;
    out.extend_from_slice(&SYNC.to_le_bytes());
    out.push(kind);
    out.push(0);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc_of(kind, payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// A call's frame kind and payload (see the module documentation of
/// [`super`]).
pub(crate) fn call_payload(call: &CallRecord) -> io::Result<(FrameKind, Vec<u8>)> {
    let mut payload = postcard::to_stdvec(call).map_err(io::Error::other)?;
    let kind = if call.dirtiers.is_empty() && call.owner_cgroup_id.is_none() {
        FrameKind::Call
    } else {
        let who = super::WhoFrame {
            dirtiers: call.dirtiers.to_vec(),
            owner_cgroup_id: call.owner_cgroup_id,
        };
        payload.extend(postcard::to_stdvec(&who).map_err(io::Error::other)?);
        FrameKind::CallWho
    };
    let ext = super::CallExt::of(call);
    if ext != super::CallExt::default() {
        payload.extend(postcard::to_stdvec(&ext).map_err(io::Error::other)?);
    }
    Ok((kind, payload))
}

/// A recording's header bytes, in `version` of the format.
pub(crate) fn encode_header(header: &Header, version: u32) -> io::Result<Vec<u8>> {
    let json = serde_json::to_vec(header).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(json.len() + 20);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
    Ok(out)
}

pub struct RecordingWriter<W: Write> {
    out: W,
    pub frames: u64,
    pub bytes: u64,
    /// One frame's bytes, reused.
    scratch: Vec<u8>,
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(mut out: W, header: &Header) -> io::Result<RecordingWriter<W>> {
        let head = encode_header(header, FORMAT_VERSION)?;
        out.write_all(&head)?;
        Ok(RecordingWriter {
            out,
            frames: 0,
            bytes: head.len() as u64,
            scratch: Vec::new(),
        })
    }

    pub fn frame(&mut self, kind: FrameKind, payload: &[u8]) -> io::Result<()> {
        self.scratch.clear();
        encode_frame(kind, payload, &mut self.scratch)?;
        self.out.write_all(&self.scratch)?;
        self.frames += 1;
        self.bytes += self.scratch.len() as u64;
        Ok(())
    }

    pub fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        let (kind, payload) = call_payload(call)?;
        self.frame(kind, &payload)
    }

    pub fn json<T: serde::Serialize>(&mut self, kind: FrameKind, value: &T) -> io::Result<()> {
        let payload = serde_json::to_vec(value).map_err(io::Error::other)?;
        self.frame(kind, &payload)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
