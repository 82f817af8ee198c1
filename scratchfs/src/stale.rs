//! Leftovers of runs that died without their `Drop` (SIGKILL, a crash, a
//! power cut): found by the scratch directories' names and markers,
//! removed only when the process that made them is gone.
use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Component, Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

use crate::{
    DEFAULT_BASE, DIR_PREFIX, detach,
    marker::{self, Marker},
    sys::{self, Identity},
    unmount,
};

/// A directory without a marker this young may be one being made right
/// now (the marker is written just after the directory).
const MARKERLESS_GRACE: Duration = Duration::from_secs(60);

/// [`cleanup_stale_in`] the default base, /var/tmp.
pub fn cleanup_stale() -> anyhow::Result<Vec<String>> {
    cleanup_stale_in(Path::new(DEFAULT_BASE))
}

/// Removes what scratch filesystems of dead processes left in `base`:
/// restores the bdi knobs they changed, unmounts, detaches the loop
/// devices, deletes the images and directories. Returns one line per
/// thing done. A directory whose process is alive, or cannot be judged
/// (another pid namespace), is never touched.
pub fn cleanup_stale_in(base: &Path) -> anyhow::Result<Vec<String>> {
    let base = fs::canonicalize(base).with_context(|| format!("resolving {}", base.display()))?;
    let me = Identity::current()?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let mut dirs: Vec<PathBuf> = fs::read_dir(&base)
        .with_context(|| format!("reading {}", base.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(DIR_PREFIX))
        // Only real directories of ours: never follow a link someone
        // else planted.
        .filter(|e| fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == euid))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let mut done = Vec::new();
    for dir in dirs {
        let Some(owner) = owner_of(&dir) else {
            continue;
        };
        if state(&owner, &me) == State::Dead {
            clean(&dir, &owner, &mut done);
        }
    }
    Ok(done)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Alive,
    Dead,
    /// Another pid namespace: its pid cannot be looked up here.
    Unknown,
}

/// Whether the process that wrote `m` still runs: same pid *and* same
/// start time (a pid alone may have been reused).
pub(crate) fn state(m: &Marker, me: &Identity) -> State {
    if let (Some(theirs), Some(ours)) = (&m.boot_id, &me.boot_id)
        && theirs != ours
    {
        // A reboot ended every process of the earlier boot.
        return State::Dead;
    }
    if let (Some(theirs), Some(ours)) = (&m.pidns, &me.pidns)
        && theirs != ours
    {
        return State::Unknown;
    }
    match sys::start_time(m.pid) {
        Some(t) if t == m.start => State::Alive,
        _ => State::Dead,
    }
}

/// The marker, or (a process killed before writing it) the pid and start
/// time in the directory's name, once the directory is old enough.
fn owner_of(dir: &Path) -> Option<Marker> {
    if let Ok(m) = Marker::load(dir) {
        return Some(m);
    }
    let age = fs::symlink_metadata(dir)
        .ok()?
        .modified()
        .ok()?
        .elapsed()
        .ok()?;
    if age < MARKERLESS_GRACE {
        return None;
    }
    let name = dir.file_name()?.to_str()?.strip_prefix(DIR_PREFIX)?;
    let mut parts = name.split('-');
    Some(Marker {
        pid: parts.next()?.parse().ok()?,
        start: parts.next()?.parse().ok()?,
        ..Marker::default()
    })
}

fn clean(dir: &Path, owner: &Marker, done: &mut Vec<String>) {
    let mounts = sys::mounts_under(dir);
    let loops: Vec<PathBuf> = sys::loops()
        .into_iter()
        .filter(|(_, backing)| backing.starts_with(dir))
        .map(|(dev, _)| dev)
        .collect();
    // The knobs first: btrfs's bdi goes with the mount, and a loop
    // device's bdi keeps its caps after the detach.
    if let Some(bdi) = owner.bdi.as_deref().filter(|_| !owner.knobs.is_empty()) {
        restore(bdi, owner, &loops, !mounts.is_empty(), done);
    }
    for m in &mounts {
        if unmount(m) {
            done.push(format!("unmounted {}", m.display()));
        } else {
            done.push(format!("could not unmount {}", m.display()));
        }
    }
    for dev in &loops {
        detach(dev);
        done.push(format!("detached {}", dev.display()));
    }
    if !sys::mounts_under(dir).is_empty() {
        done.push(format!("left {}: still mounted", dir.display()));
        return;
    }
    let bytes = sys::allocated(dir);
    match fs::remove_dir_all(dir) {
        Ok(()) => done.push(format!(
            "removed {} ({} on disk)",
            dir.display(),
            human(bytes)
        )),
        Err(e) => done.push(format!("could not remove {}: {e}", dir.display())),
    }
}

/// Writes back the marker's knob values if the bdi is still the dead
/// run's: its loop device is bound to the run's image or to nothing, or
/// (btrfs-N) the run's mount is still there.
fn restore(bdi: &Path, owner: &Marker, loops: &[PathBuf], mounted: bool, done: &mut Vec<String>) {
    // The marker is a file: only ever /sys/class/bdi/NAME.
    let mut comps = bdi.components();
    let name = match (comps.next_back(), comps.as_path()) {
        (Some(Component::Normal(n)), parent) if parent == Path::new("/sys/class/bdi") => n,
        _ => return,
    };
    if !bdi.exists() {
        return;
    }
    let name = name.to_string_lossy();
    let ours = match parse_dev(&name) {
        Some(dev) => {
            loops.iter().any(|d| rdev(d) == Some(dev)) || (is_loop(dev) && !sys::loop_bound(dev))
        }
        None => mounted,
    };
    if !ours {
        done.push(format!(
            "left {} as it is: its device serves another user now",
            bdi.display()
        ));
        return;
    }
    for (knob, value) in owner.knobs.iter().rev() {
        if !marker::restorable(knob, value) {
            continue;
        }
        let path = bdi.join(knob);
        match fs::write(&path, value) {
            Ok(()) => done.push(format!("restored {} to {value}", path.display())),
            Err(e) => done.push(format!(
                "could not restore {} to {value}: {e}",
                path.display()
            )),
        }
    }
}

fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn rdev(device: &Path) -> Option<(u32, u32)> {
    let r = fs::metadata(device).ok()?.rdev();
    Some((libc::major(r), libc::minor(r)))
}

/// Whether MAJ:MIN is a loop device (its sysfs node is `loopN`).
fn is_loop(dev: (u32, u32)) -> bool {
    fs::canonicalize(format!("/sys/dev/block/{}:{}", dev.0, dev.1))
        .ok()
        .and_then(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with("loop"))
        })
        .unwrap_or(false)
}

fn human(bytes: u64) -> String {
    if bytes >= 1_000_000_000 {
        format!("{:.1} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker_of(pid: u32, start: u64, me: &Identity) -> Marker {
        Marker {
            pid,
            start,
            boot_id: me.boot_id.clone(),
            pidns: me.pidns.clone(),
            ..Marker::default()
        }
    }

    #[test]
    fn a_run_is_alive_only_with_its_pid_and_start_time() {
        let me = Identity::current().unwrap();
        assert_eq!(state(&marker_of(me.pid, me.start, &me), &me), State::Alive);
        // Our pid with another start time: the pid was reused.
        assert_eq!(
            state(&marker_of(me.pid, me.start + 1, &me), &me),
            State::Dead
        );
        // No such process.
        assert_eq!(state(&marker_of(u32::MAX, 1, &me), &me), State::Dead);
        // Another boot: dead even if the pid and start time match.
        let mut rebooted = marker_of(me.pid, me.start, &me);
        rebooted.boot_id = Some("another-boot".into());
        assert_eq!(state(&rebooted, &me), State::Dead);
        // Another pid namespace: not ours to judge.
        let mut elsewhere = marker_of(u32::MAX, 1, &me);
        elsewhere.pidns = Some("pid:[1]".into());
        assert_eq!(state(&elsewhere, &me), State::Unknown);
    }

    #[test]
    fn sizes_read_as_people_say_them() {
        assert_eq!(human(5_300_000_000), "5.3 GB");
        assert_eq!(human(12_500_000), "12.5 MB");
    }
}
