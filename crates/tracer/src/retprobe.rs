//! kretprobes with room for every call in flight.
//!
//! A kretprobe catches a function's return by swapping the return address
//! of each call in flight for a trampoline, and each of those calls takes
//! one of a fixed number of instances; a call that finds none free is
//! counted in the probe's `nmissed` and its return never runs the program
//! (Documentation/trace/kprobes.rst, "Return probes"). The number is
//! `maxactive`, and a kretprobe made through the kprobe PMU (what aya's
//! `KProbe::attach` does) cannot set it: it gets the default of
//! `register_kretprobe()` (kernel/kprobes.c), `max(10, 2 * CPUs)` on a
//! kernel with CONFIG_PREEMPTION and the number of CPUs without it. On
//! Debian 11's 5.10 (voluntary preemption) in a one-CPU guest that is one:
//! a flusher inside `ext4_writepages()` (it sleeps on I/O and the journal)
//! made the fsync that entered meanwhile lose its end, and its 14336
//! pages with it.
//!
//! So kretprobes are made through tracefs instead, whose `kprobe_events`
//! takes `maxactive` (`r<maxactive>:...`, kernel/trace/trace_kprobe.c),
//! and the program is attached to that event with perf_event_open(2) and
//! `PERF_EVENT_IOC_SET_BPF`, as aya itself does on kernels before the
//! kprobe PMU. The event's `kprobe_profile` line counts the misses that
//! remain, which the tracer reports. Where tracefs cannot be written (a
//! tracer with capabilities but not root), the caller falls back to
//! aya's kprobe PMU and says the default applies.
use std::{
    fs::{File, OpenOptions},
    io::{Read as _, Seek as _, SeekFrom, Write as _},
    os::fd::{AsFd, AsRawFd as _, OwnedFd},
    path::Path,
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::Context as _;

/// Instances per kretprobe: more writepages calls in flight at once than
/// any host makes (each is a thread inside a filesystem's writepages),
/// within `KRETPROBE_MAXACTIVE_MAX` (4096, kernel/trace/trace_kprobe.c).
/// An instance is a few dozen bytes of kernel memory.
pub(super) const MAXACTIVE: u32 = 1024;

/// Event names made by this process, numbered.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A kretprobe event of our own with a program attached; dropping it
/// detaches the program and removes the event.
pub(super) struct RetProbe {
    /// `group/event`, as `kprobe_events` and `kprobe_profile` name it.
    name: String,
    /// The function probed.
    function: String,
    perf: Option<OwnedFd>,
    /// `kprobe_events`, opened at attach: the removal at drop writes to
    /// it after the privileges are dropped (no open(2) then).
    events: File,
    /// `kprobe_profile`, opened at attach and read from offset 0.
    profile: File,
}

/// The `kprobe_events` line that makes the event.
fn definition(name: &str, function: &str) -> String {
    format!("r{MAXACTIVE}:{name} {function}\n")
}

/// `_IO('$', 0)`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
/// `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

impl RetProbe {
    /// Makes a kretprobe event on `function` in tracefs at `tracefs` and
    /// attaches `program` (a loaded kretprobe program) to it.
    pub(super) fn attach(
        tracefs: &Path,
        function: &str,
        program: impl AsFd,
    ) -> anyhow::Result<RetProbe> {
        let name = format!(
            "wbscope_{}/{}_{}",
            std::process::id(),
            function,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let events_path = tracefs.join("kprobe_events");
        let mut events = OpenOptions::new()
            .append(true)
            .open(&events_path)
            .with_context(|| format!("opening {}", events_path.display()))?;
        remove_stale(&events_path, &mut events);
        let profile_path = tracefs.join("kprobe_profile");
        let profile = File::open(&profile_path)
            .with_context(|| format!("opening {}", profile_path.display()))?;
        events
            .write_all(definition(&name, function).as_bytes())
            .with_context(|| format!("writing a kretprobe on {function} to kprobe_events"))?;
        // From here on the event exists: dropping `probe` removes it.
        let mut probe = RetProbe {
            name,
            function: function.to_string(),
            perf: None,
            events,
            profile,
        };
        let id = super::counter::event_id(tracefs, &probe.name)?;
        let perf = super::counter::open_tracepoint(id, 0, true)
            .context("perf_event_open of the kretprobe event")?;
        let prog_fd = program.as_fd().as_raw_fd();
        // SAFETY: ioctls on our perf descriptor with the documented
        // argument types (a program descriptor; none).
        unsafe {
            if libc::ioctl(perf.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog_fd) < 0 {
                return Err(std::io::Error::last_os_error())
                    .context("PERF_EVENT_IOC_SET_BPF on the kretprobe event");
            }
            if libc::ioctl(perf.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) < 0 {
                return Err(std::io::Error::last_os_error())
                    .context("PERF_EVENT_IOC_ENABLE on the kretprobe event");
            }
        }
        probe.perf = Some(perf);
        Ok(probe)
    }

    /// Returns the probe missed so far (`kprobe_profile`), `None` when
    /// the line cannot be read.
    pub(super) fn misses(&mut self) -> Option<u64> {
        self.profile.seek(SeekFrom::Start(0)).ok()?;
        let mut text = String::new();
        self.profile.read_to_string(&mut text).ok()?;
        misses_of(&text, &self.name)
    }
}

/// Removes the events a killed run of ours left in `kprobe_events` (a
/// SIGKILL runs no `Drop`): those of a `wbscope_PID` group whose process
/// is gone. A failure is said and changes nothing else.
fn remove_stale(events_path: &Path, events: &mut File) {
    let Ok(text) = std::fs::read_to_string(events_path) else {
        return;
    };
    for name in stale_events(&text, |pid| {
        // SAFETY: signal 0 only checks that the process exists.
        let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }) {
        match events.write_all(format!("-:{name}\n").as_bytes()) {
            Ok(()) => log::info!("removed the kretprobe event {name} a killed run left"),
            Err(e) => log::warn!("could not remove the stale kretprobe event {name}: {e}"),
        }
    }
}

/// `group/event` of each `kprobe_events` line (`r1024:wbscope_PID/EVENT
/// FUNCTION`, as [`definition`] writes them) whose group names a process
/// that `alive` says is gone.
fn stale_events(text: &str, alive: impl Fn(u32) -> bool) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let name = l.split_whitespace().next()?.split_once(':')?.1;
            let pid: u32 = name
                .split_once('/')?
                .0
                .strip_prefix("wbscope_")?
                .parse()
                .ok()?;
            (!alive(pid)).then(|| name.to_string())
        })
        .collect()
}

/// The misses column of `name`'s `kprobe_profile` line (`  group/event
/// hits misses`, `probes_profile_seq_show()` in kernel/trace/trace_kprobe.c;
/// older kernels print the event name without its group).
fn misses_of(profile: &str, name: &str) -> Option<u64> {
    let event = name.rsplit('/').next().unwrap_or(name);
    profile.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let first = it.next()?;
        if first != name && first != event {
            return None;
        }
        it.nth(1)?.parse().ok()
    })
}

impl Drop for RetProbe {
    fn drop(&mut self) {
        // Said once, at the end: a call whose return was missed has no
        // end record (an unmatched start the in-flight map evicts).
        match self.misses() {
            Some(0) => {}
            Some(n) => log::warn!(
                "the kretprobe on {} missed {n} return(s): more than {MAXACTIVE} calls were \
                 in flight at once, and those calls have no record",
                self.function
            ),
            None => log::warn!(
                "cannot read the misses of the kretprobe on {} from kprobe_profile",
                self.function
            ),
        }
        // The event cannot be removed while a perf event uses it.
        drop(self.perf.take());
        if let Err(e) = self
            .events
            .write_all(format!("-:{}\n", self.name).as_bytes())
        {
            log::warn!(
                "could not remove the kretprobe event {} from kprobe_events: {e}",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_of_gone_runs_are_stale_and_no_others() {
        let text = "r1024:wbscope_41/ext4_writepages_0 ext4_writepages\n\
                    r1024:wbscope_42/ext4_writepages_0 ext4_writepages\n\
                    p:kprobes/other do_sys_open\n\
                    r:wbscope_x/y f\n";
        assert_eq!(
            stale_events(text, |pid| pid == 42),
            vec!["wbscope_41/ext4_writepages_0".to_string()]
        );
        assert!(stale_events("", |_| false).is_empty());
    }

    #[test]
    fn the_event_asks_for_maxactive_instances() {
        assert_eq!(
            definition("wbscope_7/ext4_writepages_0", "ext4_writepages"),
            "r1024:wbscope_7/ext4_writepages_0 ext4_writepages\n"
        );
    }

    #[test]
    fn misses_come_from_the_profile_line_of_the_event() {
        let profile = "  wbcheck/ewp                                      12               3\n\
                       \x20 wbscope_7/ext4_writepages_0                       40               0\n\
                       \x20 do_writepages_1                                   9               2\n";
        assert_eq!(misses_of(profile, "wbscope_7/ext4_writepages_0"), Some(0));
        assert_eq!(misses_of(profile, "wbcheck/ewp"), Some(3));
        // Older kernels: the event name alone.
        assert_eq!(misses_of(profile, "wbscope_7/do_writepages_1"), Some(2));
        assert_eq!(misses_of(profile, "wbscope_7/nothing_2"), None);
        assert_eq!(misses_of("garbage\n", "a/b"), None);
    }
}
