//! Reads per-call records from the kernel's ring buffer and turns them into
//! typed [`RingRecord`]s.
use std::mem::size_of;

use anyhow::Context as _;
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use writeback_common::{WritepagesCall, record_kind};

use crate::model::CallRecord;

/// How long records may wait in the ring buffer before userspace reads
/// them when the kernel does not wake it.
pub(crate) const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// What collectors send to the task that owns the model.
#[derive(Clone, Debug, PartialEq)]
pub enum RingRecord {
    Call(CallRecord),
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
        _ => Err(DecodeError::Unknown {
            kind,
            len: bytes.len(),
        }),
    }
}

/// The ring buffer of per-call records, readable from tokio.
pub struct RingCollector {
    fd: AsyncFd<RingBuf<MapData>>,
    /// Records that could not be decoded (counted, logged once each kind).
    pub(crate) bad_records: u64,
}

impl RingCollector {
    pub fn new(ring: RingBuf<MapData>) -> anyhow::Result<RingCollector> {
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged,
        // until it is dropped, which happens only when the AsyncFd drops it.
        let fd = unsafe { AsyncFd::register(ring) }
            .map_err(std::io::Error::from)
            .context("registering the ring buffer with tokio")?;
        Ok(RingCollector { fd, bad_records: 0 })
    }

    /// Waits until the kernel wakes us or [`DRAIN_EVERY`] has passed, then
    /// hands every available record to `sink`. The programs submit without
    /// a wakeup until a quarter of the buffer is used (a wakeup costs
    /// microseconds per record on virtualised hosts), so the timer is what
    /// usually drains. Cancel-safe: nothing is consumed before the wait
    /// ends.
    pub async fn wait_and_drain(&mut self, sink: impl FnMut(RingRecord)) -> anyhow::Result<usize> {
        match tokio::time::timeout(DRAIN_EVERY, self.fd.readable_mut()).await {
            Ok(guard) => {
                let mut guard = guard.context("waiting on the ring buffer")?;
                let n = drain_into(guard.get_inner_mut(), &mut self.bad_records, sink);
                guard.clear_ready();
                Ok(n)
            }
            Err(_elapsed) => Ok(drain_into(self.fd.get_mut(), &mut self.bad_records, sink)),
        }
    }

    /// Hands every record available right now to `sink`, without waiting.
    pub fn drain(&mut self, sink: impl FnMut(RingRecord)) -> usize {
        drain_into(self.fd.get_mut(), &mut self.bad_records, sink)
    }
}

fn drain_into(
    ring: &mut RingBuf<MapData>,
    bad: &mut u64,
    mut sink: impl FnMut(RingRecord),
) -> usize {
    let mut n = 0;
    while let Some(item) = ring.next() {
        match decode(&item) {
            Ok(event) => {
                sink(event);
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
mod tests {
    use super::*;

    fn bytes_of(call: &WritepagesCall) -> Vec<u8> {
        // SAFETY: WritepagesCall is repr(C) plain data.
        unsafe {
            std::slice::from_raw_parts(
                (call as *const WritepagesCall).cast::<u8>(),
                size_of::<WritepagesCall>(),
            )
        }
        .to_vec()
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
        let RingRecord::Call(rec) = decode(&buf[1..]).unwrap();
        assert_eq!((rec.ino, rec.pages_written), (42, 16384));
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
