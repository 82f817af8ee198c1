//! Throwaway filesystems on loop devices: a sparse image in a private
//! directory under /var/tmp → `losetup -f --show` → mkfs → mount. One
//! helper for the whole workspace (`wbscope scenario`, the benches, the
//! tests).
//!
//! Whatever happens, a [`ScratchFs`] leaves nothing behind: `Drop` puts
//! back the bdi knobs it changed, unmounts (lazily if the mount stays
//! busy), detaches the loop device and removes the image and its
//! directory. A process killed with SIGKILL runs no `Drop`: each scratch
//! directory is named after its process (`wbscope-scratch-PID-START-…`)
//! and holds a marker file with what it made, so [`cleanup_stale`] in a
//! later process finds the leftovers of dead runs — and only of dead runs —
//! and removes them.
//!
//! The crate installs no signal handler by itself: callers that want
//! Ctrl-C to unwind through `Drop` hold a [`signal::SignalGuard`] and
//! check [`signal::interrupted`] between steps.
mod marker;
pub mod signal;
mod stale;
mod sys;

use std::{
    ffi::{OsStr, OsString},
    fs,
    os::unix::fs::{FileTypeExt as _, MetadataExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    str::FromStr,
    sync::Mutex,
    time::Duration,
};

use anyhow::{Context as _, bail};
use wbscope_programs::{self as programs, Program};

pub use stale::{cleanup_stale, cleanup_stale_in};
pub use sys::{MountEntry, mount_of};

use marker::Marker;

/// Where images go by default: on disk. /tmp may be a tmpfs, and an image
/// in RAM would make every figure measured on it meaningless.
pub const DEFAULT_BASE: &str = "/var/tmp";

/// Every scratch directory's name starts with this, then `PID-START-`.
pub const DIR_PREFIX: &str = "wbscope-scratch-";

/// `statfs(2)`'s f_type of a tmpfs (include/uapi/linux/magic.h).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// `losetup -f` picks the first free device and then binds it: two
/// threads doing so at once can pick the same one. One at a time per
/// process.
static LOSETUP: Mutex<()> = Mutex::new(());

/// A filesystem type `mkfs` can make here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsType {
    /// ext4 with its journal (mkfs.ext4's default `has_journal`).
    Ext4,
    Xfs,
    Btrfs,
}

impl FsType {
    pub fn name(self) -> &'static str {
        match self {
            FsType::Ext4 => "ext4",
            FsType::Xfs => "xfs",
            FsType::Btrfs => "btrfs",
        }
    }

    /// mkfs program and its quiet, force-overwrite arguments.
    fn mkfs(self) -> (Program, &'static [&'static str]) {
        match self {
            FsType::Ext4 => (programs::MKFS_EXT4, &["-q", "-F"]),
            FsType::Xfs => (programs::MKFS_XFS, &["-q", "-f"]),
            FsType::Btrfs => (programs::MKFS_BTRFS, &["-q", "-f"]),
        }
    }
}

impl FromStr for FsType {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<FsType> {
        Ok(match s {
            "ext4" => FsType::Ext4,
            "xfs" => FsType::Xfs,
            "btrfs" => FsType::Btrfs,
            other => bail!("unsupported filesystem {other} (ext4, xfs or btrfs)"),
        })
    }
}

impl std::fmt::Display for FsType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to make a [`ScratchFs`]; [`ScratchFs::builder`].
#[derive(Clone, Debug)]
pub struct Builder {
    fstype: FsType,
    size_mib: u64,
    base: PathBuf,
    direct_io: bool,
    sector_size: Option<u32>,
    mkfs_args: Vec<OsString>,
    mount_args: Vec<OsString>,
}

impl Builder {
    /// Directory the private image directory is made in (default
    /// /var/tmp). Refused if it is a tmpfs.
    pub fn base(mut self, dir: impl Into<PathBuf>) -> Builder {
        self.base = dir.into();
        self
    }

    /// The loop device reads and writes its image with O_DIRECT
    /// (`losetup --direct-io=on`), so its data is not cached a second
    /// time in the host's page cache. Falls back to a buffered loop
    /// device when the kernel refuses; [`ScratchFs::direct_io`] tells
    /// which one was made.
    pub fn direct_io(mut self, on: bool) -> Builder {
        self.direct_io = on;
        self
    }

    /// The loop device's logical block size (`losetup --sector-size`).
    pub fn sector_size(mut self, bytes: u32) -> Builder {
        self.sector_size = Some(bytes);
        self
    }

    /// Extra arguments to mkfs, before the device.
    pub fn mkfs_args<S: AsRef<OsStr>>(mut self, args: &[S]) -> Builder {
        self.mkfs_args
            .extend(args.iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Extra arguments to mount, e.g. `["-o", "ro"]`.
    pub fn mount_args<S: AsRef<OsStr>>(mut self, args: &[S]) -> Builder {
        self.mount_args
            .extend(args.iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Makes, attaches, formats and mounts. On any failure what was
    /// already made is removed before the error returns.
    pub fn create(self) -> anyhow::Result<ScratchFs> {
        ScratchFs::create(self)
    }
}

/// A mounted filesystem on a loop device over a sparse image, with the
/// bdi knobs it changed; removed on drop.
#[derive(Debug)]
pub struct ScratchFs {
    fstype: FsType,
    dir: PathBuf,
    image: PathBuf,
    mountpoint: PathBuf,
    /// `/dev/loopN` once attached.
    device: Option<PathBuf>,
    /// `st_dev` of the mounted filesystem (major, minor).
    dev: (u32, u32),
    bdi: Option<PathBuf>,
    mounted: bool,
    marker: Marker,
}

impl ScratchFs {
    /// `fstype` is `ext4`, `xfs` or `btrfs`; the image is sparse, so only
    /// what is written takes disk space.
    pub fn builder(fstype: FsType, size_mib: u64) -> Builder {
        Builder {
            fstype,
            size_mib,
            base: PathBuf::from(DEFAULT_BASE),
            direct_io: false,
            sector_size: None,
            mkfs_args: Vec::new(),
            mount_args: Vec::new(),
        }
    }

    /// [`ScratchFs::builder`] with the defaults.
    pub fn new(fstype: FsType, size_mib: u64) -> anyhow::Result<ScratchFs> {
        Self::builder(fstype, size_mib).create()
    }

    fn create(b: Builder) -> anyhow::Result<ScratchFs> {
        let base = fs::canonicalize(&b.base)
            .with_context(|| format!("scratch base directory {}", b.base.display()))?;
        if sys::statfs_type(&base)? == TMPFS_MAGIC {
            bail!(
                "{} is a tmpfs: a scratch image there would live in RAM",
                base.display()
            );
        }
        let me = sys::Identity::current()?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{DIR_PREFIX}{}-{}-", me.pid, me.start))
            .tempdir_in(&base)
            .with_context(|| format!("creating a scratch directory in {}", base.display()))?
            .keep();
        let mut fs = ScratchFs {
            fstype: b.fstype,
            image: dir.join("fs.img"),
            mountpoint: dir.join("mnt"),
            dir,
            device: None,
            dev: (0, 0),
            bdi: None,
            mounted: false,
            marker: Marker::new(&me),
        };
        // From here on, Drop removes whatever was made. The marker first:
        // a run killed from now on is recognised by the next cleanup.
        fs.save_marker()?;
        fs::File::create(&fs.image)
            .and_then(|f| f.set_len(b.size_mib << 20))
            .with_context(|| format!("creating the sparse image {}", fs.image.display()))?;
        // The device is checked to be ours (bound to this image, with its
        // size) right before mkfs, and mkfs retried on a fresh device if it
        // stopped being ours: loop devices are shared with every process
        // on the host, and mkfs must never touch one that is not ours
        // (seen twice in a day's test runs: "mkfs.ext4: Device size
        // reported to be zero" on a device losetup had just bound).
        let mut attempt = 0;
        let device = loop {
            attempt += 1;
            let device = attach(&fs.image, b.direct_io, b.sector_size)?;
            fs.marker.device = Some(device.clone());
            fs.device = Some(device.clone());
            fs.save_marker()?;
            // The bdi of a loop device outlives its binding: start from
            // the kernel's defaults whatever an earlier user left there.
            if let Some(bdi) = loop_bdi(&device) {
                reset_bdi(&bdi);
            }
            let (mkfs, quiet) = b.fstype.mkfs();
            let made = if sys::bound_to(&device, &fs.image) {
                run(mkfs.command().args(quiet).args(&b.mkfs_args).arg(&device)).map(|_| ())
            } else {
                Err(anyhow::anyhow!(
                    "{} was unbound or taken by another process before mkfs",
                    device.display()
                ))
            };
            match made {
                Ok(()) => break device,
                Err(e) if attempt < 3 && !sys::bound_to(&device, &fs.image) => {
                    eprintln!("scratchfs: {e:#}; attaching again");
                    fs.device = None;
                }
                Err(e) => return Err(e),
            }
        };
        fs::create_dir(&fs.mountpoint).context("creating the mount point")?;
        // The type is named, not probed: blkid once found a second
        // signature on a just-made filesystem ("more filesystems detected
        // on /dev/loop0"), most likely a previous binding's superblock
        // still cached for the loop device, which mkfs did not overwrite.
        run(programs::MOUNT
            .command()
            .args(["-t", b.fstype.name()])
            .args(&b.mount_args)
            .arg(&device)
            .arg(&fs.mountpoint))?;
        fs.mounted = true;
        let st = fs::metadata(&fs.mountpoint).context("stat of the mount point")?;
        fs.dev = (libc::major(st.dev()), libc::minor(st.dev()));
        fs.bdi = Some(fs.find_bdi(&device)?);
        fs.marker.mountpoint = Some(fs.mountpoint.clone());
        fs.marker.bdi = fs.bdi.clone();
        fs.save_marker()?;
        Ok(fs)
    }

    pub fn fstype(&self) -> FsType {
        self.fstype
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// `mountpoint/name`.
    pub fn path(&self, name: impl AsRef<Path>) -> PathBuf {
        self.mountpoint.join(name)
    }

    /// The private directory holding the image and the mount point; other
    /// files put here go with it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `/dev/loopN`.
    pub fn device(&self) -> &Path {
        self.device.as_deref().unwrap_or(Path::new(""))
    }

    /// The mounted filesystem's device number, `st_dev` as (major, minor):
    /// what writeback tracepoints name it by. For ext4 and xfs the loop
    /// device's; btrfs has an anonymous one (major 0).
    pub fn dev(&self) -> (u32, u32) {
        self.dev
    }

    /// `/sys/class/bdi/NAME` of the filesystem: `MAJ:MIN` of the loop
    /// device, or `btrfs-N` (btrfs registers a bdi of its own).
    pub fn bdi(&self) -> &Path {
        self.bdi.as_deref().unwrap_or(Path::new(""))
    }

    /// Whether the loop device really does O_DIRECT on its image
    /// (`/sys/block/loopN/loop/dio`).
    pub fn direct_io(&self) -> bool {
        let name = self.device().file_name().unwrap_or_default();
        let dio = Path::new("/sys/block").join(name).join("loop/dio");
        fs::read_to_string(dio).is_ok_and(|s| s.trim() == "1")
    }

    /// `strict_limit`: the bdi is held to its share of the dirty
    /// threshold even below the global background threshold.
    pub fn set_strict_limit(&mut self, on: bool) -> anyhow::Result<()> {
        self.set_knob("strict_limit", if on { "1" } else { "0" })
    }

    /// `max_ratio`: at most this percentage of the dirty threshold.
    pub fn set_max_ratio(&mut self, percent: u32) -> anyhow::Result<()> {
        self.set_knob("max_ratio", &percent.to_string())
    }

    /// `max_bytes` (Linux 6.2+): the kernel turns it into a max_ratio of
    /// the current threshold (mm/page-writeback.c, bdi_set_max_bytes).
    pub fn set_max_bytes(&mut self, bytes: u64) -> anyhow::Result<()> {
        self.set_knob("max_bytes", &bytes.to_string())
    }

    /// Caps this filesystem's dirty page cache at `bytes` with a strict
    /// per-device limit (`max_bytes` and `strict_limit`), so writeback
    /// and throttling start at a small scale as on a machine with little
    /// memory.
    pub fn limit_dirty(&mut self, bytes: u64) -> anyhow::Result<()> {
        self.set_max_bytes(bytes)?;
        self.set_strict_limit(true)
    }

    /// Writes a bdi knob, first recording (in the marker too) the value
    /// to put back: `Drop`, or the next run's cleanup, restores it before
    /// the device is detached.
    fn set_knob(&mut self, knob: &str, value: &str) -> anyhow::Result<()> {
        let bdi = self.bdi.clone().context("the filesystem is not mounted")?;
        let state = marker::state_knob(&bdi, knob)?;
        if !self.marker.knobs.iter().any(|(k, _)| k == state) {
            let path = bdi.join(state);
            let original =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            self.marker
                .knobs
                .push((state.to_string(), original.trim().to_string()));
            self.save_marker()?;
        }
        let path = bdi.join(knob);
        // max_bytes, min_bytes and strict_limit came in Linux 6.2
        // (Documentation/ABI/testing/sysfs-class-bdi); writing a sysfs
        // file that is not there says only "Permission denied".
        if !path.exists() {
            anyhow::bail!(
                "{} does not exist: this kernel has no per-device {knob} (added in Linux 6.2)",
                path.display()
            );
        }
        fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }

    fn save_marker(&self) -> anyhow::Result<()> {
        self.marker.save(&self.dir)
    }

    fn find_bdi(&self, device: &Path) -> anyhow::Result<PathBuf> {
        if self.fstype == FsType::Btrfs {
            return sys::btrfs_bdi(device);
        }
        let (major, minor) = self.dev;
        Ok(PathBuf::from(format!("/sys/class/bdi/{major}:{minor}")))
    }

    /// Puts back the knobs, last changed first.
    fn restore_knobs(&mut self) {
        let Some(bdi) = &self.bdi else { return };
        for (knob, value) in self.marker.knobs.iter().rev() {
            let path = bdi.join(knob);
            if let Err(e) = fs::write(&path, value) {
                eprintln!(
                    "scratchfs: warning: restoring {} to {value}: {e}",
                    path.display()
                );
            }
        }
        self.marker.knobs.clear();
    }
}

impl Drop for ScratchFs {
    fn drop(&mut self) {
        // Before the unmount (btrfs's own bdi goes with it) and before the
        // detach: the loop device's bdi keeps its caps after the detach,
        // and the next user of that device would inherit them.
        self.restore_knobs();
        if self.mounted {
            unmount(&self.mountpoint);
        }
        for dev in self
            .device
            .iter()
            .cloned()
            .chain(sys::loops_backed_by(&self.image))
        {
            detach(&dev);
        }
        // Never remove_dir_all through a mount that is still there.
        if sys::mounts_under(&self.dir).is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!(
                "scratchfs: warning: {} is still mounted; left in place",
                self.dir.display()
            );
        }
    }
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
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

/// `losetup -f --show IMAGE`, with O_DIRECT when asked and the kernel
/// accepts it.
fn attach(image: &Path, direct_io: bool, sector_size: Option<u32>) -> anyhow::Result<PathBuf> {
    let _one = LOSETUP.lock().unwrap_or_else(|p| p.into_inner());
    let losetup = |dio: bool| {
        let mut cmd = programs::LOSETUP.command();
        cmd.args(["-f", "--show"]);
        if dio {
            cmd.arg("--direct-io=on");
        }
        if let Some(s) = sector_size {
            cmd.arg("--sector-size").arg(s.to_string());
        }
        run(cmd.arg(image))
    };
    let device = match losetup(direct_io) {
        Ok(d) => d,
        Err(_) if direct_io => {
            // A refused O_DIRECT may still have bound a device.
            for dev in sys::loops_backed_by(image) {
                detach(&dev);
            }
            losetup(false)?
        }
        Err(e) => return Err(e),
    };
    let device = PathBuf::from(device);
    let ok = fs::metadata(&device).is_ok_and(|m| m.file_type().is_block_device());
    if !ok {
        detach(&device);
        bail!("losetup printed {}, not a block device", device.display());
    }
    Ok(device)
}

/// `losetup -d`, then a wait of up to two seconds for the device to let
/// go of its image: on a device still open (a filesystem whose unmount the
/// kernel is finishing) `LOOP_CLR_FD` only sets autoclear and returns, and
/// the device stays bound until its last close (drivers/block/loop.c,
/// `loop_clr_fd()`; a CI run listed a device as bound right after
/// "detached").
/// A second `-d` after the first second covers a device that was not busy
/// yet when the first one ran.
fn detach(device: &Path) {
    let clear = || {
        let _ = programs::LOSETUP
            .command()
            .arg("-d")
            .arg(device)
            .stderr(Stdio::null())
            .status();
    };
    clear();
    let Some(name) = device.file_name() else {
        return;
    };
    let backing = Path::new("/sys/block").join(name).join("loop/backing_file");
    for i in 0..100 {
        if !backing.exists() {
            return;
        }
        if i == 50 {
            clear();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `umount`, retried for two seconds (a writer thread or a sync may hold
/// the mount a moment longer), then detached lazily so the device can go.
fn unmount(mountpoint: &Path) -> bool {
    let umount = |lazy: bool| {
        let mut cmd = programs::UMOUNT.command();
        if lazy {
            cmd.arg("-l");
        }
        cmd.arg(mountpoint)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    for _ in 0..20 {
        if umount(false) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    umount(true)
}

/// `/sys/class/bdi/MAJ:MIN` of a loop device.
fn loop_bdi(device: &Path) -> Option<PathBuf> {
    let rdev = fs::metadata(device).ok()?.rdev();
    Some(PathBuf::from(format!(
        "/sys/class/bdi/{}:{}",
        libc::major(rdev),
        libc::minor(rdev)
    )))
}

/// The kernel's defaults (mm/backing-dev.c, bdi_init: max_ratio 100%,
/// no strict limit).
fn reset_bdi(bdi: &Path) {
    let _ = fs::write(bdi.join("strict_limit"), "0");
    let _ = fs::write(bdi.join("max_ratio"), "100");
}
