//! Scratch filesystems against the running kernel (root: losetup, mkfs,
//! mount). Each test makes its images under a private directory in
//! /var/tmp and checks that nothing is left: no mount, no bound loop
//! device, no image, bdi knobs back to the kernel's defaults.
use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, SystemTime},
};

use scratchfs::{FsType, ScratchFs};
use wbscope_programs as programs;

/// A private base directory in /var/tmp. A failed test may leave a
/// killed child's filesystem mounted in it: cleaned up first, so that
/// removing the directory never descends into a mount.
struct Base(Option<tempfile::TempDir>);

impl Base {
    fn path(&self) -> &Path {
        self.0.as_ref().map_or(Path::new(""), |d| d.path())
    }
}

impl Drop for Base {
    fn drop(&mut self) {
        let _ = scratchfs::cleanup_stale_in(self.path());
        if mounts().contains(&*self.path().to_string_lossy()) {
            // Never remove_dir_all through a mount: leave the directory.
            if let Some(d) = self.0.take() {
                let _ = d.keep();
            }
        }
    }
}

fn base() -> Base {
    Base(Some(
        tempfile::Builder::new()
            .prefix("scratchfs-test-")
            .tempdir_in("/var/tmp")
            .expect("base dir in /var/tmp"),
    ))
}

fn mounts() -> String {
    fs::read_to_string("/proc/self/mountinfo").unwrap()
}

/// Loop devices bound to a file under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let out = programs::LOSETUP
        .command()
        .args(["-n", "-O", "NAME,BACK-FILE", "-l"])
        .output()
        .expect("losetup -l");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .map(str::to_string)
        .collect()
}

fn knob(bdi: &Path, name: &str) -> String {
    fs::read_to_string(bdi.join(name))
        .unwrap_or_else(|e| panic!("{}/{name}: {e}", bdi.display()))
        .trim()
        .to_string()
}

fn assert_defaults(bdi: &Path) {
    assert_eq!(knob(bdi, "strict_limit"), "0", "{}", bdi.display());
    assert_eq!(knob(bdi, "max_ratio"), "100", "{}", bdi.display());
}

/// Nothing under `base`: no directory, mount or loop device.
fn assert_nothing_left(base: &Path) {
    let left: Vec<_> = fs::read_dir(base).unwrap().collect();
    assert!(left.is_empty(), "left in {}: {left:?}", base.display());
    let b = base.to_string_lossy();
    assert!(!mounts().contains(&*b), "a mount under {b} is left");
    assert!(loops_under(base).is_empty(), "{:?}", loops_under(base));
}

#[test]
fn every_filesystem_mounts_caps_and_goes_away_with_its_knobs_restored() {
    let base = base();
    let mut types = vec![FsType::Ext4, FsType::Xfs];
    if programs::MKFS_BTRFS
        .command()
        .arg("--version")
        .output()
        .is_ok()
    {
        types.push(FsType::Btrfs);
    } else {
        eprintln!("mkfs.btrfs missing (btrfs-progs): btrfs not tested");
    }
    for fstype in types {
        // xfs needs 300 MiB at least, btrfs 114 MiB (their mkfs refuse less).
        let mut fs = ScratchFs::builder(fstype, 320)
            .base(base.path())
            .create()
            .unwrap_or_else(|e| panic!("{fstype}: {e:#}"));
        let dir = fs.dir().to_path_buf();
        assert!(dir.starts_with(base.path()));
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let pid = std::process::id();
        assert!(
            name.starts_with(&format!("wbscope-scratch-{pid}-")),
            "{name}"
        );
        let mi = scratchfs::mount_of(fs.mountpoint()).unwrap();
        assert_eq!(mi.mountpoint, fs.mountpoint(), "{fstype}");
        assert_eq!(mi.fstype, fstype.name());
        assert!(mi.on_block_device(), "{mi:?}");
        use std::os::unix::fs::MetadataExt as _;
        let st = fs::metadata(fs.mountpoint()).unwrap().dev();
        assert_eq!(fs.dev(), (libc::major(st), libc::minor(st)));
        fs::write(fs.path("data"), vec![7u8; 1 << 20]).unwrap();
        let bdi = fs.bdi().to_path_buf();
        let bdi_name = bdi.file_name().unwrap().to_string_lossy().into_owned();
        if fstype == FsType::Btrfs {
            assert!(bdi_name.starts_with("btrfs-"), "{bdi_name}");
        } else {
            assert_eq!(bdi_name, format!("{}:{}", fs.dev().0, fs.dev().1));
        }
        assert_defaults(&bdi);
        fs.limit_dirty(16 << 20).unwrap();
        fs.set_max_ratio(50).unwrap();
        assert_eq!(knob(&bdi, "strict_limit"), "1");
        assert_eq!(knob(&bdi, "max_ratio"), "50");
        let marker = fs::read_to_string(dir.join("scratchfs.marker")).unwrap();
        assert!(marker.contains("knob strict_limit 0"), "{marker}");
        assert!(
            marker.contains("knob max_ratio_fine 1000000"),
            "the ratio as it was before max_bytes: {marker}"
        );
        drop(fs);
        // A loop device's bdi stays after the detach: back to the defaults.
        // (btrfs's own bdi went with the unmount.)
        if fstype != FsType::Btrfs {
            assert_defaults(&bdi);
        }
        assert!(!dir.exists(), "{fstype}: {} left", dir.display());
        assert_nothing_left(base.path());
    }
}

#[test]
fn options_reach_losetup_mkfs_and_mount() {
    let base = base();
    let fs = ScratchFs::builder(FsType::Ext4, 64)
        .base(base.path())
        .sector_size(4096)
        .direct_io(true)
        .mkfs_args(&["-L", "scratchtest"])
        .mount_args(&["-o", "ro"])
        .create()
        .unwrap();
    let loop_name = fs
        .device()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let lbs =
        fs::read_to_string(format!("/sys/block/{loop_name}/queue/logical_block_size")).unwrap();
    assert_eq!(lbs.trim(), "4096");
    // /var/tmp is on a disk filesystem that takes O_DIRECT.
    assert!(fs.direct_io(), "loop device without O_DIRECT");
    let label = programs::BLKID
        .command()
        .args(["-s", "LABEL", "-o", "value"])
        .arg(fs.device())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&label.stdout).trim(), "scratchtest");
    let err = fs::write(fs.path("x"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    drop(fs);
    assert_nothing_left(base.path());
}

#[test]
fn a_failure_half_way_removes_what_was_made() {
    let base = base();
    // mkfs.ext4 refuses an unknown option after the loop device is bound.
    let err = ScratchFs::builder(FsType::Ext4, 64)
        .base(base.path())
        .mkfs_args(&["--no-such-option"])
        .create()
        .unwrap_err();
    assert!(format!("{err:#}").contains("mkfs.ext4"), "{err:#}");
    assert_nothing_left(base.path());
    // Same after mount fails.
    let err = ScratchFs::builder(FsType::Xfs, 320)
        .base(base.path())
        .mount_args(&["-o", "no_such_option"])
        .create()
        .unwrap_err();
    assert!(format!("{err:#}").contains("mount"), "{err:#}");
    assert_nothing_left(base.path());
}

#[test]
fn a_tmpfs_base_is_refused() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let err = ScratchFs::builder(FsType::Ext4, 64)
        .base(shm.path())
        .create()
        .unwrap_err();
    assert!(err.to_string().contains("tmpfs"), "{err:#}");
    assert!(fs::read_dir(shm.path()).unwrap().next().is_none());
}

#[test]
fn a_young_markerless_directory_is_left_and_an_old_dead_one_removed() {
    let base = base();
    // pid 4194305 is above PID_MAX_LIMIT (include/linux/threads.h): dead.
    let dir = base.path().join("wbscope-scratch-4194305-1-abc");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("fs.img"), b"x").unwrap();
    assert!(scratchfs::cleanup_stale_in(base.path()).unwrap().is_empty());
    assert!(dir.exists(), "being made right now, maybe");
    let old = SystemTime::now() - Duration::from_secs(600);
    fs::File::open(&dir).unwrap().set_modified(old).unwrap();
    let done = scratchfs::cleanup_stale_in(base.path()).unwrap();
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(done[0].starts_with("removed "), "{done:?}");
    assert!(!dir.exists());
}

const CHILD_BASE: &str = "SCRATCHFS_TEST_CHILD_BASE";

/// Not a test by itself: the child of the SIGKILL test (run only with
/// `SCRATCHFS_TEST_CHILD_BASE` set). Makes a capped scratch filesystem,
/// says where, and waits to be killed.
#[test]
fn child_process_for_the_sigkill_test() {
    let Some(base) = std::env::var_os(CHILD_BASE) else {
        return;
    };
    let mut fs = ScratchFs::builder(FsType::Ext4, 128)
        .base(base)
        .direct_io(true)
        .create()
        .unwrap();
    fs.limit_dirty(8 << 20).unwrap();
    fs::write(fs.path("data"), vec![1u8; 4 << 20]).unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "ready {} {} {}",
        fs.dir().display(),
        fs.device().display(),
        fs.bdi().display()
    )
    .unwrap();
    out.flush().unwrap();
    // Killed long before; bounded if the parent died first (then Drop
    // cleans up).
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn leftovers_of_a_sigkilled_run_are_removed_by_the_next_and_a_live_run_is_not() {
    let base = base();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_for_the_sigkill_test",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_BASE, base.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints "test NAME ... " on the same line first.
            if let Some(at) = line.find("ready ")
                && tx.send(line[at..].to_string()).is_err()
            {
                break;
            }
        }
    });
    let line = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(l) => l,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child never made its filesystem: {e}");
        }
    };
    let f: Vec<&str> = line.split(' ').collect();
    let (dir, device, bdi) = (PathBuf::from(f[1]), f[2].to_string(), PathBuf::from(f[3]));

    // Alive: nothing is touched.
    let done = scratchfs::cleanup_stale_in(base.path()).unwrap();
    assert!(done.is_empty(), "a live run was cleaned: {done:?}");
    assert!(mounts().contains(&*dir.to_string_lossy()));
    assert_eq!(knob(&bdi, "strict_limit"), "1");

    // SIGKILL: no Drop runs; everything stays.
    // SAFETY: plain syscall on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    child.wait().unwrap();
    assert!(mounts().contains(&*dir.to_string_lossy()), "still mounted");
    assert_eq!(loops_under(&dir).len(), 1, "still bound");
    assert_eq!(knob(&bdi, "strict_limit"), "1", "still capped");
    assert_ne!(knob(&bdi, "max_ratio"), "100", "still capped");

    let done = scratchfs::cleanup_stale_in(base.path()).unwrap();
    let has = |prefix: &str| done.iter().any(|l| l.starts_with(prefix));
    assert!(
        has(&format!("restored {}/strict_limit to 0", bdi.display())),
        "{done:?}"
    );
    assert!(has(&format!("unmounted {}/mnt", dir.display())), "{done:?}");
    assert!(has(&format!("detached {device}")), "{done:?}");
    assert!(has(&format!("removed {}", dir.display())), "{done:?}");
    assert_defaults(&bdi);
    assert_nothing_left(base.path());
    // Nothing more to do the second time.
    assert!(scratchfs::cleanup_stale_in(base.path()).unwrap().is_empty());
}
