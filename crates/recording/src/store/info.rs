//! `wbscope store DIR`: what a store holds, from its blocks' metadata
//! (no block is decompressed): span, size, compression ratio, gaps and
//! where each segment starts.
use std::path::Path;

use serde::Serialize;

use super::{list, reader::StoreReader};
use crate::reader::OpenError;
use wbscope_model::when::TimeWindow;

/// A stretch with nothing in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Gap {
    /// `recorder down` (no recorder ran) or `not kept` (the recorder ran
    /// and the store had no room).
    pub(crate) kind: &'static str,
    pub(crate) from_unix_ns: u64,
    pub(crate) to_unix_ns: u64,
    /// Calls the recorder saw and did not keep (`not kept` only).
    pub(crate) calls_not_kept: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SegmentLine {
    pub(crate) name: String,
    pub(crate) start_unix_ns: u64,
    pub(crate) bytes: u64,
    pub(crate) blocks: u64,
    pub(crate) calls: u64,
    /// Wall clock of its last block's close.
    pub(crate) end_unix_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StoreInfo {
    pub(crate) first_unix_ns: Option<u64>,
    pub(crate) last_unix_ns: Option<u64>,
    /// Bytes of the segment files.
    pub(crate) bytes: u64,
    /// Bytes of the frames before compression (what `record -o` writes
    /// for them) and the blocks' bytes they became.
    pub(crate) raw_bytes: u64,
    pub(crate) compressed_bytes: u64,
    /// `raw_bytes / compressed_bytes`.
    pub(crate) ratio: Option<f64>,
    pub(crate) calls: u64,
    pub(crate) gaps: Vec<Gap>,
    pub(crate) segments: Vec<SegmentLine>,
    /// Damage met (a segment cut by a crash is one line here).
    pub(crate) damage: Vec<String>,
}

/// Whether `dir` holds no segment (an unreadable `dir` is not empty:
/// reading it says why).
pub fn is_empty(dir: &Path) -> bool {
    list(dir).is_ok_and(|l| l.is_empty())
}

/// Sums up the store in `dir`.
pub fn summarize(dir: &Path) -> Result<StoreInfo, OpenError> {
    let files = list(dir).map_err(|e| OpenError::Io(e.to_string()))?;
    let mut reader = StoreReader::store(dir, TimeWindow::default())?.collect_metas(false);
    for _ in reader.by_ref() {}
    let mut info = StoreInfo {
        bytes: files.iter().map(|f| f.bytes).sum(),
        damage: reader.damage.iter().map(ToString::to_string).collect(),
        ..StoreInfo::default()
    };
    info.segments = files
        .iter()
        .map(|f| SegmentLine {
            name: f.name(),
            start_unix_ns: f.start_unix_ns,
            bytes: f.bytes,
            ..SegmentLine::default()
        })
        .collect();
    let mut prev_end: Option<u64> = None;
    for (name, meta) in &reader.metas {
        info.raw_bytes += u64::from(meta.raw_len);
        info.calls += u64::from(meta.calls);
        info.first_unix_ns.get_or_insert(meta.first_unix_ns);
        info.last_unix_ns = Some(meta.last_unix_ns);
        if let Some(seg) = info.segments.iter_mut().find(|s| &s.name == name) {
            seg.blocks += 1;
            seg.calls += u64::from(meta.calls);
            seg.end_unix_ns = Some(meta.last_unix_ns);
        }
        if let Some(nk) = &meta.not_kept {
            info.gaps.push(Gap {
                kind: "not kept",
                from_unix_ns: nk.from_unix_ns,
                to_unix_ns: nk.to_unix_ns,
                calls_not_kept: nk.calls,
            });
        } else if let Some(end) = prev_end
            && meta.first_unix_ns > end
        {
            // Within one recorder's run a block starts where the one
            // before it closed; a later start is a stretch no recorder ran.
            info.gaps.push(Gap {
                kind: "recorder down",
                from_unix_ns: end,
                to_unix_ns: meta.first_unix_ns,
                calls_not_kept: 0,
            });
        }
        prev_end = Some(meta.last_unix_ns);
    }
    info.compressed_bytes = info.bytes.saturating_sub(reader.header_bytes);
    info.ratio =
        (info.compressed_bytes > 0).then(|| info.raw_bytes as f64 / info.compressed_bytes as f64);
    Ok(info)
}

/// Wall-clock ns as RFC 3339 UTC.
pub(crate) fn rfc3339(unix_ns: u64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(unix_ns))
        .map(|t| t.round(jiff::Unit::Millisecond).unwrap_or(t).to_string())
        .unwrap_or_else(|_| format!("{unix_ns} ns"))
}

/// The summary as text.
pub fn text(dir: &Path, info: &StoreInfo) -> String {
    use wbscope_model::units::bytes;
    let mut out = String::new();
    let span = match (info.first_unix_ns, info.last_unix_ns) {
        (Some(a), Some(b)) => format!(
            "{} to {} ({:.0} s)",
            rfc3339(a),
            rfc3339(b),
            (b.saturating_sub(a)) as f64 / 1e9
        ),
        _ => "nothing recorded".into(),
    };
    out += &format!("store {}\n", dir.display());
    out += &format!("  span         {span}\n");
    out += &format!(
        "  size         {} in {} segments\n",
        bytes(info.bytes),
        info.segments.len()
    );
    out += &format!(
        "  compression  {} of frames in {} ({})\n",
        bytes(info.raw_bytes),
        bytes(info.compressed_bytes),
        info.ratio
            .map_or("-".into(), |r| format!("{r:.1}x smaller"))
    );
    out += &format!("  calls        {}\n", info.calls);
    if info.gaps.is_empty() {
        out += "  gaps         none\n";
    }
    for g in &info.gaps {
        out += &format!(
            "  gap          {} to {} ({:.0} s): {}{}\n",
            rfc3339(g.from_unix_ns),
            rfc3339(g.to_unix_ns),
            g.to_unix_ns.saturating_sub(g.from_unix_ns) as f64 / 1e9,
            g.kind,
            if g.kind == "not kept" {
                format!(", {} calls not kept", g.calls_not_kept)
            } else {
                String::new()
            }
        );
    }
    for d in &info.damage {
        out += &format!("  damage       {d}\n");
    }
    out += "  segments     START                          BYTES  BLOCKS  CALLS  FILE\n";
    for s in &info.segments {
        out += &format!(
            "               {:<28} {:>8} {:>7} {:>6}  {}\n",
            rfc3339(s.start_unix_ns),
            bytes(s.bytes),
            s.blocks,
            s.calls,
            s.name
        );
    }
    out
}
