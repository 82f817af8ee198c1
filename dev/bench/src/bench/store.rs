//! Where the recorder benches keep the stores `wbscope record --store`
//! writes: the load phases of recorder.rs and the reading-cost phase of
//! map_reading.rs each record into one of their own.
use anyhow::Context as _;

/// A directory of the run's own under /var/tmp (removed when dropped) and
/// the path of a store in it.
pub(super) fn store_dir() -> anyhow::Result<(tempfile::TempDir, std::path::PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("wbscope-bench-store.")
        .tempdir_in("/var/tmp")
        .context("making the store's directory")?;
    let store = dir.path().join("store");
    Ok((dir, store))
}
