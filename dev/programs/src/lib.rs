//! Every program outside the workspace that anything in it spawns —
//! wbscope's tests, scratchfs, xtask, the qemu harness (`dev/vm`), the
//! benches (`dev/bench`) — as one constant each: its command name, the
//! Debian package that ships it, the tasks that need it, and whether
//! `cargo xtask setup` installs it. Setup installs from [`ALL`] (there is
//! no second list), and the code that spawns a program names it through
//! its constant (`programs::MKFS_XFS.command()`), so a program nobody
//! installs cannot be spawned without a line here.
//!
//! Two tests in xtask hold the rest: every program of the test, VM and
//! bench scopes is found after setup (`xtask/src/setup.rs`), and no Rust
//! source outside this crate spawns a program by a string literal
//! (`xtask/src/spawns.rs`).
use std::process::Command;

/// A task that spawns programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Building: `cargo xtask setup`, `build`, `run`, `dist` and the build
    /// scripts.
    Build,
    /// `cargo test`: wbscope's, writer-core's and scratchfs' tests.
    Test,
    /// The qemu harness: `cargo xtask vm-test`, `vm-scenario` and the VM
    /// share of `cargo xtask test`.
    Vm,
    /// `cargo xtask bench` and its `writer`, `small-writer`, `recorder`.
    Bench,
}

/// How a program comes to be on the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// `cargo xtask setup` installs its package when the program is
    /// missing (and checks it is there afterwards).
    Setup,
    /// A base Debian machine of this kind has it before `cargo xtask
    /// setup`: a fresh machine here has tmux, strace, jq, e2fsprogs,
    /// util-linux, xz-utils, mount, coreutils, sh, rustup/cargo/rustc, git
    /// and gcc; not bpftool, xfsprogs, btrfs-progs, fio, bpftrace,
    /// prometheus, qemu or busybox-static. Setup does not install it.
    Base,
    /// Spawned only when not root: setup cannot install it, since
    /// installing needs root; a user without it gets sudo's "not found"
    /// from the spawn's error.
    NotRoot,
}

/// An external program the workspace spawns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Program {
    /// The command, as spawned (looked up on `PATH`).
    pub name: &'static str,
    /// The Debian package that ships it.
    pub package: &'static str,
    /// The tasks that spawn it.
    pub scopes: &'static [Scope],
    pub provider: Provider,
}

impl Program {
    /// `Command::new` of this program.
    pub fn command(&self) -> Command {
        Command::new(self.name)
    }

    /// Whether `scope` spawns it.
    pub fn needed_by(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// One `pub const` per program, and [`ALL`] listing each of them: a
/// constant cannot be left out of what setup reads.
macro_rules! programs {
    ($(
        $(#[$doc:meta])*
        $id:ident = $name:literal, $package:literal, [$($scope:ident),+], $provider:ident;
    )+) => {
        $(
            $(#[$doc])*
            pub const $id: Program = Program {
                name: $name,
                package: $package,
                scopes: &[$(Scope::$scope),+],
                provider: Provider::$provider,
            };
        )+
        /// Every program of this table, in the order setup installs them.
        pub const ALL: &[Program] = &[$($id),+];
    };
}

programs! {
    // The toolchain and the build.

    /// Setup's `command -v bpf-linker`, `sh -c` scripts of the kernel
    /// tests, and the VM harness' `command -v` of qemu.
    SH = "sh", "dash", [Build, Test, Vm], Base;
    /// Setup links and queries toolchains with it; the tracer's
    /// build.rs asks it for the eBPF toolchain.
    RUSTUP = "rustup", "rustup", [Build], Base;
    /// `rustc -vV`: the host triple (the test runner's variable).
    RUSTC = "rustc", "rustup", [Build], Base;
    /// The cargo that runs xtask when `CARGO` is unset: builds, tests,
    /// `cargo install bpf-linker`, and the hand-over to the VM harness
    /// and the benches.
    CARGO = "cargo", "rustup", [Build], Base;
    /// The tracer's build.rs: the commit in `wbscope --version`.
    GIT = "git", "git", [Build], Base;
    /// dpkg and apt are Debian's own (Priority: required); setup needs
    /// them to install anything. The VM harness fetches kernels with a
    /// private apt configuration.
    APT_GET = "apt-get", "apt", [Build, Vm], Base;
    /// The VM harness: the newest kernel of a series (`apt-cache
    /// madison`, `show`).
    APT_CACHE = "apt-cache", "apt", [Vm], Base;
    /// The VM harness: kernel packages unpacked (`dpkg -x`), versions
    /// ordered (`--compare-versions`).
    DPKG = "dpkg", "dpkg", [Vm], Base;
    /// `cargo xtask run` and setup's apt-get when not root, and the
    /// runner of `cargo xtask test`'s test binaries (`sudo -E`).
    SUDO = "sudo", "sudo", [Build, Test], NotRoot;
    /// gcc depends on binutils. `cargo xtask dist` strips the userspace
    /// debug info; the VM harness strips the guest's wbscope.
    STRIP = "strip", "binutils", [Build, Vm], Base;
    /// libc-bin is Essential: yes. `cargo xtask dist` checks the binary
    /// needs nothing beyond libc; the VM harness copies what the guest's
    /// programs need.
    LDD = "ldd", "libc-bin", [Build, Vm], Base;
    /// `cargo xtask dist`: the binary run with no environment at all.
    ENV = "env", "coreutils", [Build], Base;
    /// `cargo xtask dist`: the checksum beside the binary.
    SHA256SUM = "sha256sum", "coreutils", [Build], Base;

    // What the tests, the VM guests and the benches run.

    /// The kernel tests' and the benches' writers; copied into the VM
    /// guests' root (busybox's has no `oflag=dsync`).
    DD = "dd", "coreutils", [Test, Vm, Bench], Base;
    SLEEP = "sleep", "coreutils", [Test], Base;
    SYNC = "sync", "coreutils", [Test], Base;
    /// gzip is Essential: yes. The CPU-time test reads the kernel's HZ
    /// from /proc/config.gz.
    ZCAT = "zcat", "gzip", [Test], Base;
    /// scratchfs' tests read a filesystem's label.
    BLKID = "blkid", "util-linux", [Test], Base;
    /// scratchfs mounts its filesystems (tests, benches, `wbscope
    /// scenario` in the VM guests, whose root has the host's copy).
    MOUNT = "mount", "mount", [Test, Vm, Bench], Base;
    UMOUNT = "umount", "mount", [Test, Vm, Bench], Base;
    /// Copied into the VM guests' root: its 124 on a timeout is what the
    /// harness' checks read.
    TIMEOUT = "timeout", "coreutils", [Vm], Base;
    /// Copied into the VM guests' root (`date +%N`).
    DATE = "date", "coreutils", [Vm], Base;
    /// Copied into the VM guests' root to run checks.sh
    /// (busybox-static's ash does its arithmetic in 32 bits: "divide by
    /// zero" on a nanosecond clock); the small-writer bench's loop of
    /// processes, the big-host bench's writers.
    DASH = "dash", "dash", [Vm, Bench], Base;
    /// tar is Essential: yes. The VM harness unpacks what a guest saved.
    TAR = "tar", "tar", [Vm], Base;
    /// Loop devices for scratchfs (tests, benches, and `wbscope scenario`
    /// in the VM guests).
    LOSETUP = "losetup", "util-linux", [Test, Vm, Bench], Setup;
    /// The privilege tests run wbscope as another user.
    SETPRIV = "setpriv", "util-linux", [Test], Setup;
    /// scratchfs' default filesystem; the VM guests' root image.
    MKFS_EXT4 = "mkfs.ext4", "e2fsprogs", [Test, Vm, Bench], Setup;
    /// scratchfs' xfs (tests); copied into the VM guests' root for their
    /// xfs runs.
    MKFS_XFS = "mkfs.xfs", "xfsprogs", [Test, Vm], Setup;
    /// The write-span tests rewrite pages under writeback
    /// (`sync_range -w`, then `pwrite`).
    XFS_IO = "xfs_io", "xfsprogs", [Test], Setup;
    /// scratchfs makes btrfs filesystems too (its tests and the
    /// scenarios).
    MKFS_BTRFS = "mkfs.btrfs", "btrfs-progs", [Test], Setup;
    /// The dashboard's TUI tests.
    TMUX = "tmux", "tmux", [Test], Setup;
    /// The writer CLI tests count real syscalls.
    STRACE = "strace", "strace", [Test], Setup;
    /// A pseudo-terminal for the progress-bar test.
    SCRIPT = "script", "bsdutils", [Test], Setup;
    /// The exporter's end-to-end test runs the server itself.
    PROMETHEUS = "prometheus", "prometheus", [Test], Setup;
    /// The backfill test turns `replay --openmetrics` into TSDB blocks
    /// with it (`tsdb create-blocks-from openmetrics`).
    PROMTOOL = "promtool", "prometheus", [Test], Setup;
    /// btf.rs's tests cross-check the BTF parser against `bpftool btf
    /// dump`; record_replay counts loaded programs with `bpftool prog
    /// show`; `bench fsync-storm --profile` reads the programs' source
    /// lines with it.
    BPFTOOL = "bpftool", "bpftool", [Test, Bench], Setup;
    /// report_browser.rs loads the HTML report headless and checks its
    /// screenshot.
    CHROMIUM = "chromium", "chromium", [Test], Setup;
    /// recorder_unit.rs checks the dist's systemd unit.
    SYSTEMD_ANALYZE = "systemd-analyze", "systemd", [Test], Setup;
    /// The exporter's TLS and basic-auth refusals, as a client other than
    /// Prometheus sees them.
    CURL = "curl", "curl", [Test], Setup;
    /// The independent trace kernel_durability.rs counts flush requests
    /// with, as `biolatency -F` splits them; `bench small-writer`'s peer,
    /// counting the dirty-folio tracepoint.
    BPFTRACE = "bpftrace", "bpftrace", [Test, Bench], Setup;

    // The VM harness: qemu boots Debian's kernels under TCG,
    // busybox-static is the guest's /init shell, kmod's depmod and
    // modprobe resolve the guest's module order, xz (or zstd, for kernels
    // that compress with it) unpacks the modules.

    QEMU = "qemu-system-x86_64", "qemu-system-x86", [Vm], Setup;
    BUSYBOX = "busybox", "busybox-static", [Vm], Setup;
    DEPMOD = "depmod", "kmod", [Vm], Setup;
    MODPROBE = "modprobe", "kmod", [Vm], Setup;
    XZ = "xz", "xz-utils", [Vm], Setup;
    ZSTD = "zstd", "zstd", [Vm], Setup;

    // The benches.

    /// `bench writer` compares `wbscope write` with fio; `bench
    /// small-writer` runs fio's 4 KiB writer.
    FIO = "fio", "fio", [Bench], Setup;
    /// `bench fsync-storm --profile` samples every CPU while the
    /// programs run (`perf record -a`).
    PERF = "perf", "linux-perf", [Bench], Setup;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_program_is_listed_once() {
        for (i, p) in ALL.iter().enumerate() {
            assert!(
                ALL[i + 1..].iter().all(|q| q.name != p.name),
                "{} twice",
                p.name
            );
            assert!(!p.package.is_empty() && !p.scopes.is_empty(), "{p:?}");
        }
    }

    #[test]
    fn a_command_runs_the_program_by_name() {
        assert_eq!(MKFS_XFS.command().get_program(), "mkfs.xfs");
        assert!(BPFTRACE.needed_by(Scope::Bench) && !BPFTRACE.needed_by(Scope::Vm));
    }
}
