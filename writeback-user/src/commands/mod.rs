//! One module per subcommand.
pub mod compare;
pub mod dashboard;
pub mod diff;
pub mod doctor;
mod filter;
pub mod probes;
pub mod record;
pub mod replay;
pub mod report;
pub mod scenario;
pub mod store;
pub mod trace;
pub mod write;

/// Wall clock now, ms since the epoch: the time of an interval's push.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The lines `--prometheus` and `--remote-write` say at start.
pub(crate) fn say_telemetry(t: &wbscope_export::prometheus::Telemetry) {
    if let Some(s) = t.serving() {
        eprintln!(
            "wbscope: metrics on {}://{}/metrics",
            s.scheme, s.local_addr
        );
        if let Some(warning) = s.warning {
            eprintln!("wbscope: warning: {warning}");
        }
    }
    if let Some(url) = t.push_url() {
        eprintln!("wbscope: remote write to {url}, at every interval");
    }
}

/// How long the last samples may take to reach the receiver at exit.
const PUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Stops serving; pushes what is left (at most [`PUSH_GRACE`]) and says
/// what the push did.
pub(crate) async fn finish_telemetry(t: wbscope_export::prometheus::Telemetry) {
    let url = t.push_url().map(str::to_string);
    if let (Some(s), Some(url)) = (t.finish(PUSH_GRACE).await, url) {
        let dropped = s.dropped_queue_full + s.dropped_rejected + s.dropped_at_exit;
        eprintln!(
            "wbscope: remote write: {} samples sent to {url}; {}",
            s.sent,
            if dropped == 0 {
                "none dropped".to_string()
            } else {
                format!(
                    "{dropped} dropped ({} for a full queue, {} refused by the receiver, {} not sent by the end)",
                    s.dropped_queue_full, s.dropped_rejected, s.dropped_at_exit
                )
            }
        );
    }
}
