//! Recordings: what `wbscope record` writes and `wbscope replay` reads.
//!
//! A recording is a self-describing header followed by framed records:
//!
//! ```text
//! "WBSCOPE\0"  u32 format version  u32 header length  header (JSON)  u32 crc32(header)
//! frame*:  u16 sync 0xB5F7  u8 kind  u8 reserved  u32 payload length  u32 crc32(kind, payload)  payload
//! ```
//!
//! All integers little-endian. Every frame carries its own checksum and a
//! sync word, so a recording cut short (crash, full disk, kill -9) is read
//! up to its last whole frame, and a corrupt frame is reported and skipped
//! by scanning for the next sync word whose frame checks out (in work
//! bounded per byte, whatever the file holds: see [`reader`]). The reader
//! streams, holding at most one frame of the largest size, so a recording
//! of any size replays in bounded memory. Payloads:
//! a writepages call as postcard-encoded [`CallRecord`] (independent of the
//! kernel record layout) — followed, in a `CallWho` frame, by whose pages
//! it wrote —, then, for calls that have them, the call's filesystem,
//! boundary and folio sizes as a postcard [`CallExt`] appended to either
//! kind; an interval line as JSON (the `trace --json` interval line,
//! verbatim), and the summary as JSON.
//!
//! [`CallRecord`]: wbscope_model::CallRecord
pub mod block;
pub mod reader;
pub mod store;
pub mod writer;

use serde::{Deserialize, Serialize};

pub const MAGIC: &[u8; 8] = b"WBSCOPE\0";
/// Bumped on any incompatible change to the header or frames. Plain
/// recordings (`record -o`) are still written as version 1, which every
/// wbscope reads; a store's segments are version 2, the first with
/// [`FrameKind::Block`], so that a wbscope from before blocks refuses a
/// segment with "newer version" instead of reading it as damage.
pub const FORMAT_VERSION: u32 = 1;
/// The version of recordings with compressed blocks (store segments).
pub const FORMAT_VERSION_BLOCKS: u32 = 2;
pub(crate) const SYNC: u16 = 0xB5F7;
/// sync + kind + reserved + length + crc.
pub(crate) const FRAME_HEADER_LEN: usize = 12;
/// Largest payload a reader accepts: a call record is ~100 bytes and an
/// interval line a few KiB; anything larger is corruption, and the bound
/// keeps a corrupt length from becoming a huge allocation.
pub(crate) const MAX_PAYLOAD: usize = 1 << 20;
/// Largest header a reader accepts (the probe plan is a few KiB).
pub(crate) const MAX_HEADER: usize = 1 << 20;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    Call = 1,
    Interval = 2,
    Summary = 3,
    /// A call with the processes that dirtied the pages it wrote: the
    /// postcard [`CallRecord`] of a `Call` frame followed by the postcard
    /// [`WhoFrame`]. Written only for calls that have dirtiers, so that
    /// readers before it lose only those calls (as damage) and recordings
    /// made before it read as they always did.
    ///
    /// [`CallRecord`]: wbscope_model::CallRecord
    CallWho = 4,
    /// zstd-compressed frames of one interval (format version 2, store
    /// segments): see [`block`].
    Block = 5,
}

/// The part of a call a `CallWho` frame adds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WhoFrame {
    pub(crate) dirtiers: Vec<wbscope_model::dirtier::Dirtier>,
    pub(crate) owner_cgroup_id: Option<u64>,
}

/// What a call frame (`Call` or `CallWho`) may carry after its payload:
/// the fields of other filesystems' calls (xfs, btrfs: `fs`, boundary,
/// folio sizes) that `trace --json` prints and the postcard [`CallRecord`]
/// has no room for.
///
/// Appended rather than put in a frame kind of its own because postcard's
/// `from_bytes` ignores what follows the value it decodes: readers before
/// it read these frames as they always did and lose only these fields,
/// and recordings before it (nothing after the payload) read as the
/// default, which is what they printed (`fs` "", `boundary` "hook", no
/// folio sizes). Written only when it differs from that default, so a
/// call without them keeps its old bytes. A later addition goes after
/// this one, in the same way.
///
/// [`CallRecord`]: wbscope_model::CallRecord
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CallExt {
    pub(crate) fs: String,
    /// `writeback_common::boundary` code.
    pub(crate) boundary: u32,
    /// Folios by log2 of their pages, at most
    /// `writeback_common::FOLIO_HIST_BUCKETS` long.
    pub(crate) folio_hist: Vec<u32>,
}

impl CallExt {
    pub(crate) fn of(call: &wbscope_model::CallRecord) -> CallExt {
        CallExt {
            fs: call.fs.to_string(),
            boundary: call.boundary,
            folio_hist: call.folio_hist.clone(),
        }
    }

    /// Into `call`, refusing a histogram longer than the kernel's, which
    /// only a crafted frame could hold.
    pub(crate) fn apply(self, call: &mut wbscope_model::CallRecord) -> Option<()> {
        if self.folio_hist.len() > writeback_common::FOLIO_HIST_BUCKETS {
            return None;
        }
        call.fs = self.fs.into();
        call.boundary = self.boundary;
        call.folio_hist = self.folio_hist;
        Some(())
    }
}

impl FrameKind {
    pub(crate) fn from_u8(v: u8) -> Option<FrameKind> {
        match v {
            1 => Some(FrameKind::Call),
            2 => Some(FrameKind::Interval),
            3 => Some(FrameKind::Summary),
            4 => Some(FrameKind::CallWho),
            5 => Some(FrameKind::Block),
            _ => None,
        }
    }
}

/// The recording's header: enough to interpret it anywhere.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format_version: u32,
    pub wbscope_version: String,
    pub host: String,
    pub kernel: String,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC at the start, ns (the clock of `time_ns` in calls).
    pub start_monotonic_ns: u64,
    /// The probe plan in force (`wbscope probes --json`).
    pub probe_plan: serde_json::Value,
    /// Field offsets the programs used, per tracepoint:
    /// `{"ext4:ext4_writepages": {"dev": [offset, size, signed], ...}}`.
    pub field_offsets: serde_json::Value,
    /// The filters in force (kernel `dev_t`, tgid, ino, cgroup id; 0 = off).
    pub filter: serde_json::Value,
    /// In a store's segment: which one, and when it was opened. Absent in
    /// plain recordings (and ignored by readers before it: serde skips
    /// unknown fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<SegmentInfo>,
}

/// A store segment's place in its store (`recording::store`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// Wall clock when the segment was opened, ns since the Unix epoch
    /// (also in its file name).
    pub opened_unix_ns: u64,
    /// CLOCK_MONOTONIC then.
    pub opened_monotonic_ns: u64,
}

fn crc_of(kind: u8, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[kind]);
    h.update(payload);
    h.finalize()
}
