//! Loop-mounted scratch filesystems for `wbscope scenario`, removed
//! whatever happens: a [`LoopFs`] unmounts and detaches in `Drop`, and
//! [`SignalGuard`] turns SIGINT/SIGTERM/SIGHUP into a flag the scenario
//! polls, so an interrupted run unwinds through those `Drop`s instead of
//! dying with the mounts in place.
use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicI32, Ordering},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::model::DevId;

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
pub(crate) fn caught_signal() -> Option<libc::c_int> {
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

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A filesystem (`ext4` with its journal, or `xfs`) on a loop device over
/// a sparse image under /var/tmp. Unmounted, detached and deleted on drop.
pub struct LoopFs {
    pub fstype: String,
    pub mountpoint: PathBuf,
    /// `/dev/loopN`.
    pub device: String,
    /// The filesystem's device number (what the tracer's records carry).
    pub dev: DevId,
    mounted: bool,
    _dir: tempfile::TempDir,
}

impl LoopFs {
    pub fn new(fstype: &str, size_mib: u64) -> anyhow::Result<LoopFs> {
        let mkfs: &[&str] = match fstype {
            "ext4" => &["mkfs.ext4", "-q", "-F"],
            "xfs" => &["mkfs.xfs", "-q", "-f"],
            other => bail!("unsupported filesystem {other} (ext4 or xfs)"),
        };
        // Under /var/tmp: the image must not live on a tmpfs (RAM).
        let dir = tempfile::Builder::new()
            .prefix("wbscope-scenario-")
            .tempdir_in("/var/tmp")
            .context("creating a directory under /var/tmp for the image")?;
        let image = dir.path().join("fs.img");
        fs::File::create(&image)
            .and_then(|f| f.set_len(size_mib << 20))
            .with_context(|| format!("creating the sparse image {}", image.display()))?;
        // O_DIRECT on the backing file: the loop device does not cache its
        // data a second time in the host's page cache.
        let device = run(Command::new("losetup")
            .args(["-f", "--show", "--direct-io=on"])
            .arg(&image))
        .or_else(|_| run(Command::new("losetup").args(["-f", "--show"]).arg(&image)))?;
        let mountpoint = dir.path().join("mnt");
        // From here on, Drop detaches the device whatever fails.
        let mut lfs = LoopFs {
            fstype: fstype.to_string(),
            mountpoint,
            dev: DevId { major: 0, minor: 0 },
            device,
            mounted: false,
            _dir: dir,
        };
        fs::create_dir(&lfs.mountpoint).context("creating the mount point")?;
        run(Command::new(mkfs[0]).args(&mkfs[1..]).arg(&lfs.device))?;
        run(Command::new("mount").arg(&lfs.device).arg(&lfs.mountpoint))?;
        lfs.mounted = true;
        lfs.dev = DevId::from_user(
            fs::metadata(&lfs.mountpoint)
                .context("stat of the mount point")?
                .dev(),
        );
        // A loop device's bdi outlives the device: start from the
        // kernel's defaults whatever an earlier user left there.
        lfs.reset_dirty_limit();
        Ok(lfs)
    }

    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Caps this filesystem's dirty page cache at `bytes` with a strict
    /// per-device limit (`/sys/class/bdi/MAJ:MIN/max_bytes` and
    /// `strict_limit`, Linux 6.2+), so writeback and throttling start at a
    /// small scale as they would on a machine with little memory. Only
    /// this loop device's bdi is touched; it goes away with the device.
    pub fn limit_dirty(&self, bytes: u64) -> anyhow::Result<()> {
        let bdi = PathBuf::from(format!("/sys/class/bdi/{}", self.dev));
        fs::write(bdi.join("max_bytes"), bytes.to_string())
            .with_context(|| format!("writing {}/max_bytes", bdi.display()))?;
        fs::write(bdi.join("strict_limit"), "1")
            .with_context(|| format!("writing {}/strict_limit", bdi.display()))?;
        Ok(())
    }
}

impl LoopFs {
    fn bdi(&self) -> PathBuf {
        PathBuf::from(format!("/sys/class/bdi/{}", self.dev))
    }

    /// The kernel's defaults: no strict limit, up to 100% of the
    /// threshold.
    fn reset_dirty_limit(&self) {
        let bdi = self.bdi();
        let _ = fs::write(bdi.join("strict_limit"), "0");
        let _ = fs::write(bdi.join("max_ratio"), "100");
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.dev.major != 0 {
            // The bdi stays after the device goes: leave it as we found it.
            self.reset_dirty_limit();
        }
        if self.mounted {
            // A writer thread or a sync may still hold the mount for a
            // moment: retry, then detach it lazily so the device can go.
            let mut done = false;
            for _ in 0..20 {
                if Command::new("umount")
                    .arg(&self.mountpoint)
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
                {
                    done = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if !done {
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.mountpoint)
                    .status();
            }
        }
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// `sync` and `echo 3 > /proc/sys/vm/drop_caches`.
pub fn sync_and_drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3").context("writing /proc/sys/vm/drop_caches")
}
