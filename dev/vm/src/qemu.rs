//! One guest boot under qemu: the serial console goes to a log file and is
//! watched for the guest's `WBVM <event>` lines, which drive the time
//! limits. The qemu process never outlives this module: it is killed on
//! every error path (the guard's Drop) and, should the harness itself
//! die, by the kernel (PR_SET_PDEATHSIG).
use std::{
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::{self, RecvTimeoutError},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use wbscope_programs::QEMU;

/// The test disk's size, the host's limit on one guest step, and the
/// guest's possible CPUs and memory.
pub(crate) struct GuestPlan {
    /// What the guests are for, in their work dir's and serial log's
    /// names (`matrix::guest_name`); empty for the checks.
    pub(crate) kind: &'static str,
    pub(crate) disk_bytes: u64,
    pub(crate) step_limit: Duration,
    /// Possible CPUs, one of them online ([`GuestSpec::max_cpus`]).
    pub(crate) max_cpus: u32,
    /// Guest memory, MiB.
    pub(crate) memory_mib: u32,
}

pub(crate) struct GuestSpec<'a> {
    pub(crate) kernel: &'a Path,
    pub(crate) initrd: &'a Path,
    /// Raw image attached as the guest's /dev/vda.
    pub(crate) disk: &'a Path,
    /// The shared root image (rootimg.rs), read-only, /dev/vdb.
    pub(crate) root: &'a Path,
    /// Raw image the guest writes its results to as a tar archive
    /// (/dev/vdc).
    pub(crate) out: &'a Path,
    /// Serial log, kept after the run.
    pub(crate) log: &'a Path,
    /// From qemu's start to the guest's `WBVM init` line.
    pub(crate) boot_limit: Duration,
    /// For each later stage, from its `WBVM` line to the next.
    pub(crate) step_limit: Duration,
    /// Possible CPUs; one is online whatever this says ([`smp`]). 1 for
    /// the guests of the checks and scenarios (`-smp 1`).
    pub(crate) max_cpus: u32,
    /// Guest memory, MiB (`-m`).
    pub(crate) memory_mib: u32,
}

/// A guest that ran to its `WBVM done` line.
pub(crate) struct GuestRun {
    pub(crate) log: PathBuf,
    /// Wall time of each stage: boot, setup, then the guest's steps.
    pub(crate) steps: Vec<(String, Duration)>,
}

/// Kills and reaps qemu when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// What the guest said on its console.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Init,
    Step(String),
    Fail(String),
    Done(String),
    Panic(String),
}

fn event(line: &str) -> Option<Event> {
    if let Some(at) = line.find("Kernel panic") {
        return Some(Event::Panic(line[at..].trim().to_string()));
    }
    let rest = &line[line.find("WBVM ")? + 5..];
    let (word, arg) = rest.split_once(' ').unwrap_or((rest, ""));
    let arg = arg.trim().to_string();
    match word.trim() {
        "init" => Some(Event::Init),
        "step" => Some(Event::Step(arg)),
        "fail" => Some(Event::Fail(arg)),
        "done" => Some(Event::Done(arg)),
        _ => None,
    }
}

fn command(spec: &GuestSpec) -> Command {
    let mut cmd = QEMU.command();
    // TCG only: /dev/kvm here is a nested software virtualiser under which
    // stock kernels fail (docs/toolchain.md). No network. One vCPU:
    // attaching and detaching BPF programs patches live kernel text
    // (text_poke_bp: an int3 on the site, then an IPI to every CPU), and
    // with two TCG vCPUs on a loaded 2-core host a 6.1 guest once
    // livelocked there — CPU 0 looping in exc_int3 on the sched_switch
    // call site, CPU 1 waiting for its IPI (soft lockup, step timed out).
    // One vCPU also puts every program of the RT guest's interleaving
    // step on one CPU.
    // More possible CPUs than online ones: [`smp`].
    let (smp, append) = smp(spec.max_cpus);
    cmd.args(["-accel", "tcg", "-cpu", "max"])
        .arg("-m")
        .arg(spec.memory_mib.to_string())
        .arg("-smp")
        .arg(smp)
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(spec.kernel)
        .arg("-initrd")
        .arg(spec.initrd)
        .arg("-append")
        .arg(format!("console=ttyS0 panic=-1 loglevel=5{append}"));
    // Order is the guest's vda, vdb, vdc (virtio-blk enumerates them in
    // PCI slot order, which is command-line order).
    for (file, readonly) in [(spec.disk, false), (spec.root, true), (spec.out, false)] {
        cmd.arg("-drive").arg(format!(
            "file={},format=raw,if=virtio,cache=unsafe{}",
            file.display(),
            if readonly { ",readonly=on" } else { "" }
        ));
    }
    cmd
}

/// `-smp`'s value and what the kernel command line adds, for one online
/// CPU of `max_cpus` possible. The kernel sizes its per-CPU allocations,
/// BPF's per-CPU maps among them, for every possible CPU, so a big host's
/// map memory shows with one vCPU. The CPUs are present and the kernel
/// brings up one (`maxcpus=1`, kernel/cpu.c `bringup_nonboot_cpus()`):
/// `-smp 1,maxcpus=N` lists the other CPUs in the MADT as disabled, which
/// 6.12.118 does not count as possible on what it takes for bare metal
/// (`acpi_is_processor_usable()`, arch/x86/kernel/acpi/boot.c, counts
/// them only under a hypervisor it knows, and TCG's CPUID signature is
/// none of them): "Allowing 1 present CPUs plus 0 hotplug CPUs". The
/// CPUs never started execute nothing under TCG (their threads wait for
/// the INIT/SIPI that never comes), and an IPI goes to online CPUs only.
fn smp(max_cpus: u32) -> (String, &'static str) {
    if max_cpus <= 1 {
        ("1".to_string(), "")
    } else {
        (max_cpus.to_string(), " maxcpus=1")
    }
}

pub(crate) fn run_guest(spec: &GuestSpec) -> anyhow::Result<GuestRun> {
    if let Some(dir) = spec.log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = spec.log.to_path_buf();
    let log_file =
        File::create(&log).with_context(|| format!("creating serial log {}", log.display()))?;
    let stderr = log_file.try_clone()?;
    let mut cmd = command(spec);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr));
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill
    // qemu when the thread that spawned it (this one) exits.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut guard = Guard(
        cmd.spawn()
            .with_context(|| format!("starting {} (install {})", QEMU.name, QEMU.package))?,
    );
    let stdout = guard.0.stdout.take().context("qemu stdout")?;

    // Copy the console into the log, line by line, and pass it on.
    let (tx, rx) = mpsc::channel::<String>();
    let mut log_writer = log_file;
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let _ = log_writer.write_all(&buf);
                    let _ = log_writer.flush();
                    if tx.send(String::from_utf8_lossy(&buf).into_owned()).is_err() {
                        break;
                    }
                }
            }
        }
    });

    let fail_line = |reason: String| -> anyhow::Error {
        anyhow::anyhow!("{reason} (serial log: {})", log.display())
    };
    let mut steps: Vec<(String, Duration)> = Vec::new();
    let mut stage = String::from("boot");
    let mut stage_start = started;
    let mut deadline = started + spec.boot_limit;
    let mut booted = false;
    let mut done: Option<String> = None;
    let mut guest_failure: Option<String> = None;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let line = match rx.recv_timeout(wait) {
            Ok(line) => line,
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                drop(guard);
                let what = if !booted {
                    format!("guest did not boot within {} s", spec.boot_limit.as_secs())
                } else if done.is_some() {
                    "guest did not power off after finishing".to_string()
                } else {
                    format!(
                        "guest step {stage} did not finish within {} s",
                        spec.step_limit.as_secs()
                    )
                };
                return Err(fail_line(what));
            }
        };
        let Some(ev) = event(&line) else { continue };
        let now = Instant::now();
        let mut next = |name: &str, steps: &mut Vec<(String, Duration)>| {
            steps.push((
                std::mem::replace(&mut stage, name.to_string()),
                now - stage_start,
            ));
            stage_start = now;
        };
        match ev {
            Event::Init => {
                booted = true;
                next("setup", &mut steps);
                deadline = now + spec.step_limit;
            }
            Event::Step(name) => {
                next(&name, &mut steps);
                deadline = now + spec.step_limit;
            }
            Event::Done(status) => {
                next("poweroff", &mut steps);
                done = Some(status);
                deadline = now + Duration::from_secs(20);
            }
            Event::Fail(reason) => {
                guest_failure.get_or_insert(format!("guest failed in step {stage}: {reason}"));
                deadline = now + Duration::from_secs(20);
            }
            Event::Panic(text) => {
                guest_failure.get_or_insert(format!("guest kernel in step {stage}: {text}"));
                deadline = now + Duration::from_secs(20);
            }
        }
    }
    // The console closed: qemu is exiting (power-off, or panic with
    // -no-reboot). Reap it within a few seconds, else kill it.
    let exit_deadline = Instant::now() + Duration::from_secs(10);
    while matches!(guard.0.try_wait(), Ok(None)) && Instant::now() < exit_deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = guard.0.try_wait().ok().flatten();
    drop(guard);
    if let Some(reason) = guest_failure {
        return Err(fail_line(reason));
    }
    match done {
        Some(code) if code == "0" => {
            steps.push((stage, stage_start.elapsed()));
            Ok(GuestRun { log, steps })
        }
        Some(code) => Err(fail_line(format!(
            "guest checks script exited with status {code}"
        ))),
        None if !booted => Err(fail_line(format!(
            "qemu exited before the guest booted ({})",
            status.map_or("still running".to_string(), |s| s.to_string())
        ))),
        None => Err(fail_line(format!(
            "guest stopped in step {stage} without finishing"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_events() {
        assert_eq!(event("WBVM init 6.1.0-57-amd64\r\n"), Some(Event::Init));
        assert_eq!(
            event("[   3.2] foo WBVM step trace-default\r\n"),
            Some(Event::Step("trace-default".into()))
        );
        assert_eq!(
            event("WBVM fail cannot mount the host root over 9p\n"),
            Some(Event::Fail("cannot mount the host root over 9p".into()))
        );
        assert_eq!(event("WBVM done 0\r\n"), Some(Event::Done("0".into())));
        assert_eq!(event("WBVM note insmod x failed"), None);
        assert!(matches!(
            event("[ 1.0] Kernel panic - not syncing: Attempted to kill init!"),
            Some(Event::Panic(_))
        ));
        assert_eq!(event("random console text"), None);
    }

    #[test]
    fn one_online_cpu_and_the_possible_ones() {
        assert_eq!(smp(1), ("1".to_string(), ""));
        assert_eq!(smp(0), ("1".to_string(), ""));
        assert_eq!(smp(128), ("128".to_string(), " maxcpus=1"));
    }
}
