//! The one signal guard of the workspace: SIGINT, SIGTERM and SIGHUP
//! turned into a flag while a [`SignalGuard`] lives, so that a Ctrl-C
//! unwinds through `Drop` — the scratch filesystems' above all — instead of
//! killing the process with its loop devices mounted. Used by wbscope
//! (re-exported from its `sys`) and by the benches (dev/bench).
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::bail;

/// The first signal caught (0: none yet).
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only an atomic compare-exchange: async-signal-safe
    // (signal-safety(7)). The first signal is the one reported.
    let _ = INTERRUPTED.compare_exchange(0, signal, Ordering::Relaxed, Ordering::Relaxed);
}

/// True once SIGINT, SIGTERM or SIGHUP arrived while a [`SignalGuard`]
/// was installed.
pub fn interrupted() -> bool {
    caught_signal().is_some()
}

/// The first of SIGINT, SIGTERM or SIGHUP that arrived while a
/// [`SignalGuard`] was installed (for an exit code of 128 + its number).
pub fn caught_signal() -> Option<libc::c_int> {
    match INTERRUPTED.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// Fails with "interrupted" when a signal arrived.
pub fn check_interrupted() -> anyhow::Result<()> {
    if interrupted() {
        bail!("interrupted by a signal; scratch filesystems removed");
    }
    Ok(())
}

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Catches SIGINT/SIGTERM/SIGHUP for its lifetime (the old handlers come
/// back on drop).
pub struct SignalGuard([libc::sighandler_t; 3]);

impl SignalGuard {
    pub fn install() -> SignalGuard {
        INTERRUPTED.store(0, Ordering::Relaxed);
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic.
        SignalGuard(SIGNALS.map(|s| unsafe { libc::signal(s, handler) }))
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (s, old) in SIGNALS.iter().zip(self.0) {
            // SAFETY: restores the handler that was there before.
            unsafe { libc::signal(*s, old) };
        }
    }
}
