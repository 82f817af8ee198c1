//! Writing a recording. Every frame is written whole and flushed at each
//! drain, so what is on disk is always a readable prefix.
use std::io::{self, Write};

use super::{FORMAT_VERSION, FrameKind, Header, MAGIC, MAX_PAYLOAD, SYNC, crc_of};
use crate::model::CallRecord;

pub struct RecordingWriter<W: Write> {
    out: W,
    pub(crate) frames: u64,
    pub(crate) bytes: u64,
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(mut out: W, header: &Header) -> io::Result<RecordingWriter<W>> {
        let json = serde_json::to_vec(header).map_err(io::Error::other)?;
        out.write_all(MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        out.write_all(&(json.len() as u32).to_le_bytes())?;
        out.write_all(&json)?;
        out.write_all(&crc32fast::hash(&json).to_le_bytes())?;
        let bytes = (MAGIC.len() + 8 + json.len() + 4) as u64;
        Ok(RecordingWriter {
            out,
            frames: 0,
            bytes,
        })
    }

    pub fn frame(&mut self, kind: FrameKind, payload: &[u8]) -> io::Result<()> {
        if payload.len() > MAX_PAYLOAD {
            return Err(io::Error::other(format!(
                "frame of {} bytes exceeds the format's {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        let kind = kind as u8;
        let mut head = [0u8; super::FRAME_HEADER_LEN];
        head[0..2].copy_from_slice(&SYNC.to_le_bytes());
        head[2] = kind;
        head[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        head[8..12].copy_from_slice(&crc_of(kind, payload).to_le_bytes());
        self.out.write_all(&head)?;
        self.out.write_all(payload)?;
        self.frames += 1;
        self.bytes += (head.len() + payload.len()) as u64;
        Ok(())
    }

    pub fn call(&mut self, call: &CallRecord) -> io::Result<()> {
        let mut payload = postcard::to_stdvec(call).map_err(io::Error::other)?;
        let kind = if call.dirtiers.is_empty() && call.owner_cgroup_id.is_none() {
            FrameKind::Call
        } else {
            let who = super::WhoFrame {
                dirtiers: call.dirtiers.clone(),
                owner_cgroup_id: call.owner_cgroup_id,
            };
            payload.extend(postcard::to_stdvec(&who).map_err(io::Error::other)?);
            FrameKind::CallWho
        };
        let ext = super::CallExt::of(call);
        if ext != super::CallExt::default() {
            payload.extend(postcard::to_stdvec(&ext).map_err(io::Error::other)?);
        }
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
