//! Privileges, before and after attaching.
//!
//! Before: checks that the process may load and attach BPF programs, so
//! that a missing privilege is reported as one line naming it instead of
//! an EPERM deep inside a loader.
//!
//! After ([`drop_after_attach`]): once the programs are attached and
//! every descriptor the run still reads is open (maps, ring buffer, BPF
//! statistics, `/proc/vmstat`, the output, the exporter's socket), none
//! of root's power is needed any more. The process becomes an
//! unprivileged user, empties every capability set, sets no_new_privs and
//! installs a seccomp filter of the system calls the rest of the run
//! makes ([`super::seccomp`]), killing the process on any other: the way
//! OpenSSH's privilege separation and systemd's hardening options confine
//! a long-running daemon. docs/production.md is the user's page.
use std::{ffi::CString, fs};

use anyhow::{Context as _, bail};
use caps::{CapSet, Capability};

use super::{landlock_dir::Beneath, seccomp::WritableDir};

/// What is missing, in the words printed to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "insufficient privileges: wbscope needs root, or CAP_BPF and CAP_PERFMON (missing: {})",
    .missing.join(", ")
)]
pub(crate) struct MissingPrivileges {
    pub(crate) missing: Vec<&'static str>,
}

/// Effective capabilities needed to load tracing programs: CAP_BPF for
/// BPF_PROG_LOAD/BPF_MAP_CREATE and CAP_PERFMON for tracing program types
/// (both split out of CAP_SYS_ADMIN in 5.8). CAP_SYS_ADMIN alone covers both.
pub(crate) fn check() -> Result<(), MissingPrivileges> {
    let has = |cap| caps::has_cap(None, CapSet::Effective, cap).unwrap_or(false);
    if has(Capability::CAP_SYS_ADMIN) {
        return Ok(());
    }
    let missing: Vec<&'static str> = [
        (Capability::CAP_BPF, "CAP_BPF"),
        (Capability::CAP_PERFMON, "CAP_PERFMON"),
    ]
    .into_iter()
    .filter(|(cap, _)| !has(*cap))
    .map(|(_, name)| name)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(MissingPrivileges { missing })
    }
}

/// The user a root process becomes: `nobody` exists on every Debian-like
/// system (base-passwd's fixed uid 65534) and owns no files.
pub const DEFAULT_USER: &str = "nobody";

/// How to end a run's privileges (`--user`, `--no-drop`).
#[derive(Clone, Debug, Default)]
pub struct DropOptions {
    /// The user to become; `None`: [`DEFAULT_USER`] when started as root,
    /// else the user the process already is.
    pub user: Option<String>,
    /// Keep every privilege for the whole run (debugging).
    pub no_drop: bool,
    /// The run opens TCP connections after the drop (`--remote-write`):
    /// socket(2) for TCP and connect(2) are allowed.
    pub outbound: bool,
}

impl DropOptions {
    /// Refuses a `--user` that does not exist or is root before anything
    /// is attached (the drop checks again).
    pub fn check(&self) -> anyhow::Result<()> {
        if self.no_drop {
            return Ok(());
        }
        target(self.user.as_deref()).map(|_| ())
    }

    /// The uid and gid the run will have after the drop, for what it must
    /// hand over before (a store's directory); `None` with `--no-drop`.
    pub fn user_ids(&self) -> anyhow::Result<Option<(u32, u32)>> {
        if self.no_drop {
            return Ok(None);
        }
        target(self.user.as_deref()).map(|a| Some((a.uid, a.gid)))
    }
}

/// What [`drop_after_attach`] did, for its line on stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// `--no-drop`.
    Kept,
    /// Kept because the kernel would refuse the map reads without them
    /// and has no CAP_BPF to keep alone (before 5.8; `map_access`).
    KeptFor(String),
    Dropped {
        user: String,
        uid: u32,
        gid: u32,
        /// System calls the filter allows.
        syscalls: usize,
        /// False when the process had no CAP_SETPCAP to empty its bounding
        /// set with (started as a user with only CAP_BPF+CAP_PERFMON);
        /// no_new_privs and the filter (no execve) make the set moot, and
        /// a systemd unit's CapabilityBoundingSet= empties it.
        bounding_cleared: bool,
        /// Why CAP_BPF stays in the permitted and effective sets, when the
        /// kernel refuses map reads without it (`map_access`).
        kept_bpf: Option<String>,
        /// With a writable directory: how far Landlock keeps files made
        /// and removed beneath it.
        beneath: Option<Beneath>,
    },
}

impl std::fmt::Display for Confinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Confinement::Kept => write!(
                f,
                "--no-drop: keeping every privilege (root or CAP_BPF+CAP_PERFMON) for the whole run"
            ),
            Confinement::KeptFor(why) => write!(f, "privileges kept: {why}"),
            Confinement::Dropped {
                user,
                uid,
                gid,
                syscalls,
                bounding_cleared,
                kept_bpf,
                beneath,
            } => {
                let capabilities = match kept_bpf {
                    None => "no capabilities".to_string(),
                    Some(why) => format!("no capabilities but CAP_BPF ({why})"),
                };
                write!(
                    f,
                    "privileges dropped: user {user} (uid {uid}, gid {gid}), {capabilities}, \
                     no_new_privs, seccomp filter of {syscalls} system calls"
                )?;
                match beneath {
                    None => {}
                    Some(Beneath::Enforced) => {
                        write!(f, ", files made and removed in the store only (Landlock)")?
                    }
                    Some(Beneath::Partly) => write!(
                        f,
                        ", files made and removed in the store only (Landlock, without the \
                         rights this kernel lacks)"
                    )?,
                    Some(Beneath::Unavailable) => write!(
                        f,
                        " (no Landlock in this kernel: the store's calls are bounded by the \
                         filter and the user's permissions)"
                    )?,
                }
                if !bounding_cleared {
                    write!(
                        f,
                        " (bounding set kept: no CAP_SETPCAP to empty it; \
                         CapabilityBoundingSet= in a systemd unit does)"
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// A user from the password database.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Account {
    name: String,
    uid: u32,
    gid: u32,
}

/// `name`'s uid and primary gid (getpwnam_r(3): /etc/passwd, or whatever
/// nsswitch.conf names, read before the drop).
fn lookup(name: &str) -> anyhow::Result<Account> {
    let c_name = CString::new(name).with_context(|| format!("--user {name:?}: a NUL byte"))?;
    // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids).
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives `pwd`'s
    // use (only the ids are copied out).
    let rc = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 {
        bail!(
            "--user {name}: looking it up: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    if found.is_null() {
        bail!("--user {name}: no such user");
    }
    Ok(Account {
        name: name.to_string(),
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// The process's real, effective and saved uids and gids.
fn current_ids() -> ([u32; 3], [u32; 3]) {
    let (mut r, mut e, mut s) = (0, 0, 0);
    let (mut rg, mut eg, mut sg) = (0, 0, 0);
    // SAFETY: valid pointers to integers.
    unsafe {
        libc::getresuid(&mut r, &mut e, &mut s);
        libc::getresgid(&mut rg, &mut eg, &mut sg);
    }
    ([r, e, s], [rg, eg, sg])
}

/// The account to become: `--user`, else nobody for root, else whoever
/// the process already is (a unit's `User=` with `AmbientCapabilities=`
/// has no CAP_SETUID to change it, nor a reason to).
fn target(user: Option<&str>) -> anyhow::Result<Account> {
    let ([uid, euid, _], [gid, ..]) = current_ids();
    let account = match user {
        Some(name) => lookup(name)?,
        None if uid == 0 || euid == 0 => lookup(DEFAULT_USER).with_context(|| {
            format!("the default --user {DEFAULT_USER}; name another unprivileged user")
        })?,
        None => Account {
            name: format!("#{uid}"),
            uid,
            gid,
        },
    };
    if account.uid == 0 {
        bail!(
            "--user {}: uid 0 keeps root's power over every file; name an unprivileged user \
             (or --no-drop)",
            account.name
        );
    }
    Ok(account)
}

/// Threads of this process (`/proc/self/task`).
fn thread_count() -> anyhow::Result<usize> {
    Ok(fs::read_dir("/proc/self/task")
        .context("listing /proc/self/task")?
        .count())
}

/// Set once the drop is done: what would open a file from then on (the
/// filter forbids `openat`) must not try (tracer/dirtiers.rs).
static DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process dropped its privileges (and may open no file).
pub(crate) fn dropped() -> bool {
    DROPPED.load(std::sync::atomic::Ordering::Relaxed)
}

/// What this kernel asks of a process that reads the run's maps.
#[derive(Clone, Debug, PartialEq, Eq)]
enum MapAccess {
    /// Any holder of the map's descriptor.
    Open,
    /// CAP_BPF (or CAP_SYS_ADMIN), with the reason.
    NeedsCapBpf(String),
    /// CAP_SYS_ADMIN: no CAP_BPF in this kernel.
    NeedsSysAdmin(String),
}

/// Whether this kernel would refuse the run's map reads once the
/// capabilities are gone. Before 5.19 the bpf() system call refused every
/// command, map lookups included, to a caller without CAP_BPF or
/// CAP_SYS_ADMIN while `kernel.unprivileged_bpf_disabled` is set
/// (`__sys_bpf()`, kernel/bpf/syscall.c: `if
/// (sysctl_unprivileged_bpf_disabled && !bpf_capable()) return -EPERM`);
/// 5.19's "bpf: refine kernel.unprivileged_bpf_disabled behaviour" limited
/// it to BPF_MAP_CREATE and BPF_PROG_LOAD, and 6.5 moved it into
/// `map_create()` and `bpf_prog_load()`. `bpf_capable()` is CAP_BPF or
/// CAP_SYS_ADMIN since 5.8 ("bpf, capability: Introduce CAP_BPF"), so from
/// 5.8 to 5.18 keeping CAP_BPF alone is enough; before 5.8 the gate was
/// CAP_SYS_ADMIN. Distributions set it (Debian 11 and 12: 2). Seen in the
/// 5.10 guest of `cargo xtask vm-test`: with every capability gone, each
/// trace stopped at its first map write ("writing GLOBAL_THRESH: EPERM").
fn map_access() -> MapAccess {
    let Some(disabled) = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        return MapAccess::Open;
    };
    access_on(&wbscope_sys::kernel_release(), disabled)
}

/// [`map_access`] for a kernel of `release` ("5.10.0-46-amd64") with
/// `unprivileged_bpf_disabled` at `disabled`.
fn access_on(release: &str, disabled: u32) -> MapAccess {
    let Some((major, minor)) = wbscope_sys::release_version(release) else {
        return MapAccess::Open;
    };
    if disabled == 0 || (major, minor) >= (5, 19) {
        return MapAccess::Open;
    }
    let why = format!(
        "kernel {release} refuses BPF map reads without it while \
         kernel.unprivileged_bpf_disabled is {disabled}; 5.19 and later do not"
    );
    if (major, minor) >= (5, 8) {
        MapAccess::NeedsCapBpf(why)
    } else {
        MapAccess::NeedsSysAdmin(why.replace("without it", "without CAP_SYS_ADMIN"))
    }
}

/// Ends the run's privileges, or says it keeps them (`--no-drop`), and
/// returns what it did. Call it once the programs are attached and every
/// file the run still reads or writes is open, while the process has one
/// thread: capabilities and the bounding set are per thread, so a thread
/// started before would keep them (the call fails instead). `dir`: a
/// directory the run goes on creating and deleting files in, through its
/// descriptor (a store's; [`super::seccomp::WritableDir`]).
pub fn drop_after_attach(
    options: &DropOptions,
    dir: Option<WritableDir<'_>>,
) -> anyhow::Result<Confinement> {
    if options.no_drop {
        return Ok(Confinement::Kept);
    }
    let kept_bpf = match map_access() {
        MapAccess::Open => None,
        MapAccess::NeedsCapBpf(why) => Some(why),
        MapAccess::NeedsSysAdmin(why) => return Ok(Confinement::KeptFor(why)),
    };
    let account = target(options.user.as_deref())?;
    let threads = thread_count()?;
    if threads != 1 {
        bail!(
            "dropping privileges: the process has {threads} threads; capabilities are per \
             thread, so the drop must come before any other thread starts"
        );
    }
    let filter =
        super::seccomp::filter(dir, options.outbound).context("compiling the seccomp filter")?;
    // What is read lazily, once, is read now: aya caches the number of
    // possible CPUs (/sys/devices/system/cpu/possible, for per-CPU maps)
    // per thread at first use, and the run's one thread is this one.
    aya::util::nr_cpus().map_err(|(path, e)| anyhow::anyhow!("reading {path}: {e}"))?;

    // The bounding set first: emptying it needs CAP_SETPCAP, gone once the
    // uid changes. It only limits what an execve could gain.
    let bounding_cleared = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)
        .unwrap_or(false)
        && caps::clear(None, CapSet::Bounding).is_ok();
    // Keeping CAP_BPF through the uid change: with PR_SET_KEEPCAPS the
    // permitted set survives it (the effective set is emptied all the
    // same), and is cut down to CAP_BPF below.
    if kept_bpf.is_some() {
        set_keepcaps(true)?;
    }
    change_ids(&account)?;
    if kept_bpf.is_some() {
        set_keepcaps(false)?;
    }
    // Changing every uid from 0 to non-zero already cleared the
    // permitted, effective and ambient sets (capabilities(7), "Effect of
    // user ID changes on capabilities"); a non-root start keeps them, so
    // set all explicitly. Lowering needs no privilege.
    let kept: caps::CapsHashSet = kept_bpf.iter().map(|_| Capability::CAP_BPF).collect();
    // Effective before permitted: capset(2) refuses an effective set that
    // is not within the permitted one at every step.
    for (set, to) in [
        (CapSet::Ambient, caps::CapsHashSet::new()),
        (CapSet::Inheritable, caps::CapsHashSet::new()),
        (CapSet::Effective, kept.clone()),
        (CapSet::Permitted, kept.clone()),
    ] {
        caps::set(None, set, &to).with_context(|| format!("setting the {set:?} capabilities"))?;
        let left = caps::read(None, set).with_context(|| format!("reading {set:?}"))?;
        if left != to {
            bail!("dropping privileges: {set:?} capabilities are {left:?}, not {to:?}");
        }
    }
    // A writable directory: files made and removed beneath it only
    // (Landlock sets no_new_privs first; the run has one thread, the one
    // it restricts).
    let beneath = dir
        .map(|d| super::landlock_dir::confine(d.fd))
        .transpose()
        .context("confining the store's directory (Landlock)")?;
    // no_new_privs (prctl PR_SET_NO_NEW_PRIVS) then the filter, on every
    // thread (SECCOMP_FILTER_FLAG_TSYNC): seccompiler sets both.
    seccompiler::apply_filter_all_threads(&filter).context("installing the seccomp filter")?;
    DROPPED.store(true, std::sync::atomic::Ordering::Relaxed);
    test_hooks::after_drop();
    Ok(Confinement::Dropped {
        user: account.name,
        uid: account.uid,
        gid: account.gid,
        syscalls: super::seccomp::allowed_count(dir, options.outbound),
        bounding_cleared,
        kept_bpf,
        beneath,
    })
}

/// prctl(PR_SET_KEEPCAPS): whether the permitted capabilities survive the
/// uid change from 0 (cleared again on the next execve, which the filter
/// forbids anyway).
fn set_keepcaps(on: bool) -> anyhow::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, libc::c_ulong::from(on), 0, 0, 0) } != 0 {
        bail!(
            "dropping privileges: PR_SET_KEEPCAPS {}: {}",
            u8::from(on),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Supplementary groups emptied, then gid, then uid (the other order would
/// leave no CAP_SETGID to change the gid with). glibc applies each to
/// every thread of the process (its setxid broadcast).
fn change_ids(account: &Account) -> anyhow::Result<()> {
    let (uids, gids) = current_ids();
    let same_user = uids.iter().all(|&u| u == account.uid);
    let same_group = gids.iter().all(|&g| g == account.gid);
    // SAFETY: a count of 0 with a null list: clears the groups.
    let cleared = unsafe { libc::setgroups(0, std::ptr::null()) } == 0;
    if !cleared && !same_user {
        bail!(
            "dropping privileges: clearing the supplementary groups: {}",
            std::io::Error::last_os_error()
        );
    }
    if !same_group {
        // SAFETY: plain syscall wrapper.
        if unsafe { libc::setresgid(account.gid, account.gid, account.gid) } != 0 {
            bail!(
                "dropping privileges: becoming gid {}: {}",
                account.gid,
                std::io::Error::last_os_error()
            );
        }
    }
    if !same_user {
        // SAFETY: plain syscall wrapper.
        if unsafe { libc::setresuid(account.uid, account.uid, account.uid) } != 0 {
            bail!(
                "dropping privileges: becoming user {} (uid {}): {}",
                account.name,
                account.uid,
                std::io::Error::last_os_error()
            );
        }
    }
    let (uids, gids) = current_ids();
    if uids.iter().any(|&u| u != account.uid) || gids.iter().any(|&g| g != account.gid) {
        bail!("dropping privileges: ids are {uids:?}/{gids:?} after the change");
    }
    Ok(())
}

/// A test-only hook, compiled only with the `test-hooks` feature (which
/// the crate's own tests turn on; release builds never have it): with
/// `WBSCOPE_TEST_FORBIDDEN_SYSCALL` set, the process tries a system call
/// the filter does not allow right after the drop, so a test can see it
/// killed by SIGSYS.
#[cfg(feature = "test-hooks")]
mod test_hooks {
    pub(super) fn after_drop() {
        if std::env::var_os("WBSCOPE_TEST_FORBIDDEN_SYSCALL").is_some() {
            let sh = c"/bin/sh";
            let argv = [sh.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            // SAFETY: valid NUL-terminated arrays; execve(2) is what an
            // attacker who took over the process would try first.
            unsafe { libc::execve(sh.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
mod test_hooks {
    pub(super) fn after_drop() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_each_missing_capability() {
        let err = MissingPrivileges {
            missing: vec!["CAP_BPF", "CAP_PERFMON"],
        };
        assert_eq!(
            err.to_string(),
            "insufficient privileges: wbscope needs root, or CAP_BPF and CAP_PERFMON \
             (missing: CAP_BPF, CAP_PERFMON)"
        );
    }

    /// The default user exists here, as on every Debian-like system, and
    /// is not root; an unknown name and root are refused by name.
    #[test]
    fn users_are_looked_up_and_root_refused() {
        let nobody = lookup(DEFAULT_USER).expect("nobody");
        assert_ne!(nobody.uid, 0);
        assert_eq!(lookup("root").expect("root").uid, 0);
        let err = target(Some("root")).expect_err("root refused");
        assert!(err.to_string().contains("uid 0"), "{err:#}");
        let err = lookup("no-such-user-wbscope").expect_err("unknown");
        assert_eq!(err.to_string(), "--user no-such-user-wbscope: no such user");
    }

    #[test]
    fn kernels_before_5_19_keep_cap_bpf_for_their_maps() {
        let bpf = |r, d| matches!(access_on(r, d), MapAccess::NeedsCapBpf(_));
        assert!(bpf("5.10.0-46-amd64", 2));
        assert!(bpf("5.18.19-amd64", 1));
        assert!(bpf("5.8.0-1-amd64", 2));
        assert_eq!(access_on("5.10.0-46-amd64", 0), MapAccess::Open);
        assert_eq!(access_on("5.19.0-1-amd64", 2), MapAccess::Open);
        assert_eq!(access_on("6.1.0-57-amd64", 2), MapAccess::Open);
        assert_eq!(access_on("6.12.118+deb13-amd64", 2), MapAccess::Open);
        assert_eq!(access_on("7.3.4+deb13-amd64", 2), MapAccess::Open);
        assert_eq!(access_on("garbage", 2), MapAccess::Open);
        // No CAP_BPF before 5.8: the gate was CAP_SYS_ADMIN.
        let MapAccess::NeedsSysAdmin(why) = access_on("5.4.0-1-amd64", 1) else {
            panic!("5.4 needs CAP_SYS_ADMIN");
        };
        assert!(why.contains("without CAP_SYS_ADMIN"), "{why}");
        let kept = Confinement::KeptFor("why".into());
        assert_eq!(kept.to_string(), "privileges kept: why");
        let dropped = Confinement::Dropped {
            user: "nobody".into(),
            uid: 65534,
            gid: 65534,
            syscalls: 40,
            bounding_cleared: true,
            kept_bpf: Some("kernel 5.10 refuses".into()),
            beneath: None,
        };
        assert_eq!(
            dropped.to_string(),
            "privileges dropped: user nobody (uid 65534, gid 65534), no capabilities but \
             CAP_BPF (kernel 5.10 refuses), no_new_privs, seccomp filter of 40 system calls"
        );
    }

    #[test]
    fn no_drop_keeps_and_says_so() {
        let options = DropOptions {
            user: None,
            no_drop: true,
            outbound: false,
        };
        let kept = drop_after_attach(&options, None).expect("kept");
        assert_eq!(options.user_ids().expect("ids"), None);
        assert_eq!(kept, Confinement::Kept);
        assert!(kept.to_string().starts_with("--no-drop: keeping"));
    }
}
