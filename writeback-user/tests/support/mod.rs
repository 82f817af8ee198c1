//! Helpers for tests that run against the real kernel (as root): loop-mounted
//! filesystems made for the test and always removed, and the `wbscope`
//! binary run as a child process.
#![allow(dead_code)]

use std::{
    fs,
    io::{BufRead, BufReader},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use tempfile::TempDir;

pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A filesystem on a loop device over a sparse image in a temporary
/// directory. Unmounted and detached on drop, whatever the test did.
pub struct LoopFs {
    pub mountpoint: PathBuf,
    pub device: String,
    _dir: TempDir,
}

impl LoopFs {
    /// `fstype` is `ext4` (with its default journal) or `xfs`.
    pub fn new(fstype: &str, size_mib: u64) -> LoopFs {
        Self::with_mount_options(fstype, size_mib, &[])
    }

    /// [`LoopFs::new`] with extra `mount` arguments, e.g. `["-o", "ro"]`.
    pub fn with_mount_options(fstype: &str, size_mib: u64, options: &[&str]) -> LoopFs {
        // Under /var/tmp: the image must not live on a tmpfs.
        let dir = tempfile::Builder::new()
            .prefix("wbscope-test-")
            .tempdir_in("/var/tmp")
            .expect("temp dir");
        let image = dir.path().join("fs.img");
        let f = fs::File::create(&image).expect("image");
        f.set_len(size_mib << 20).expect("sparse image");
        drop(f);
        let device = run(Command::new("losetup").args(["-f", "--show"]).arg(&image));
        let mountpoint = dir.path().join("mnt");
        fs::create_dir(&mountpoint).expect("mountpoint");
        // From here on, Drop cleans up even if mkfs or mount fails.
        let fs = LoopFs {
            mountpoint,
            device,
            _dir: dir,
        };
        match fstype {
            "ext4" => run(Command::new("mkfs.ext4").args(["-q", "-F", &fs.device])),
            "xfs" => run(Command::new("mkfs.xfs").args(["-q", "-f", &fs.device])),
            other => panic!("unsupported fstype {other}"),
        };
        run(Command::new("mount")
            .args(options)
            .arg(&fs.device)
            .arg(&fs.mountpoint));
        fs
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mountpoint.join(name)
    }
}

impl Drop for LoopFs {
    /// A process of the test may still be leaving the filesystem (a tmux
    /// session just killed): retry, then detach lazily rather than leave a
    /// mount behind.
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut cmd = Command::new("umount");
            if lazy {
                cmd.arg("-l");
            }
            cmd.arg(&self.mountpoint)
                .status()
                .is_ok_and(|s| s.success())
        };
        let mut done = false;
        for _ in 0..20 {
            if umount(false) {
                done = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !done {
            umount(true);
        }
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// `major:minor` of the filesystem holding `path`, as wbscope prints it.
pub fn dev_of(path: &Path) -> String {
    let dev = fs::metadata(path).expect("stat").dev();
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

pub fn wbscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wbscope"))
}

/// A running `wbscope trace`, started and waited for until its probes are
/// live.
pub struct Tracing {
    child: Child,
    stderr: mpsc::Receiver<String>,
}

/// `wbscope` as user nobody with only the given capabilities (setpriv's
/// `+bpf,+perfmon` syntax), inherited and ambient so they survive exec.
pub fn wbscope_with_caps(caps: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_wbscope"));
    cmd
}

impl Tracing {
    pub fn start(args: &[&str]) -> Tracing {
        Self::start_with(wbscope(), args)
    }

    /// `trace ARGS` run through `cmd` (e.g. [`wbscope_with_caps`]).
    pub fn start_with(mut cmd: Command, args: &[&str]) -> Tracing {
        let mut child = cmd
            .arg("trace")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wbscope");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.contains("tracing;") => break,
                Ok(line) => seen.push(line),
                Err(e) => {
                    let _ = child.kill();
                    panic!("wbscope trace did not start ({e}); stderr: {seen:?}");
                }
            }
        }
        Tracing { child, stderr: rx }
    }

    /// Stops the trace with `signal` and returns stdout's lines as JSON.
    pub fn stop(self, signal: libc::c_int) -> Vec<serde_json::Value> {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: plain syscall on our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
        self.finish()
    }

    /// Waits for the trace to end by itself.
    pub fn finish(self) -> Vec<serde_json::Value> {
        let out = self.child.wait_with_output().expect("wait");
        let stderr: Vec<String> = self.stderr.try_iter().collect();
        assert!(out.status.success(), "wbscope failed: {stderr:?}");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}
