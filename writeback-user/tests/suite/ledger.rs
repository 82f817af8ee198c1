//! The ledger against sources no one here wrote: each loop device's rows
//! close on its own sectors-written counter (/sys/block/DEV/stat), and the
//! journal of ext4 equals what bpftrace counts jbd2 submitting to the disk.
use std::{
    fs,
    path::Path,
    sync::{Mutex, MutexGuard, PoisonError},
};

use serde_json::Value;

use super::support::{Bpftrace, LoopFs, Tracing, disk_majmin, file_group, kernel_dev, run};

/// One test of this file at a time: a trace sees the whole host, and
/// each test's rows and unattributed bytes are those of its own writers
/// only when no other test writes beside them.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Field 7 of /sys/block/NAME/stat: sectors written (iostats.rst).
fn sectors_written(device: &str) -> u64 {
    let name = Path::new(device)
        .file_name()
        .and_then(|n| n.to_str())
        .expect("device name");
    let stat = fs::read_to_string(format!("/sys/block/{name}/stat")).expect("stat");
    stat.split_whitespace()
        .nth(6)
        .and_then(|f| f.parse().ok())
        .expect("sectors written")
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// The journald case of systemd#40262: 500 records of 752 bytes, each
/// appended and made durable (`oflag=dsync`: the data and the size
/// change committed before the write returns), then 8 MiB of buffered
/// data synced once.
fn workload(fs: &LoopFs) -> u32 {
    let mut journal = wbscope_programs::DD.command();
    journal.args([
        "if=/dev/zero",
        &format!("of={}", fs.path("journal").display()),
        "bs=752",
        "count=500",
        "oflag=append,dsync",
        "conv=notrunc",
        "status=none",
    ]);
    let child = journal.spawn().expect("spawn dd");
    let pid = child.id();
    let out = child.wait_with_output().expect("dd");
    assert!(out.status.success(), "dd failed");
    run(wbscope_programs::DD.command().args([
        "if=/dev/zero",
        &format!("of={}", fs.path("bulk").display()),
        "bs=1M",
        "count=8",
        "conv=fsync",
        "status=none",
    ]));
    pid
}

/// The summary's ledger row of `dev`, and the device's own growth.
/// A scratch filesystem whose mkfs zeroed ext4's inode tables and
/// journal itself: `ext4lazyinit` would zero them with write-zeroes
/// requests in the background while the test counts, bytes of no
/// process's (the ledger's `other`).
fn scratch(fstype: &str, mib: u64) -> LoopFs {
    if fstype == "ext4" {
        LoopFs::with_args(
            "ext4",
            mib,
            &["-E", "lazy_itable_init=0,lazy_journal_init=0"],
            &[],
        )
    } else {
        LoopFs::new(fstype, mib)
    }
}

fn traced(fstype: &str, bpftrace: Option<&str>, more: &[&str]) -> (Value, u64, u32, Vec<String>) {
    let fs = scratch(fstype, 512);
    // Nothing of the mkfs left to write before the counting starts.
    run(wbscope_programs::SYNC
        .command()
        .arg("-f")
        .arg(&fs.mountpoint));
    let dev = disk_majmin(&fs.device);
    let script = bpftrace.map(|s| s.replace("DEV", &kernel_dev(&dev).to_string()));
    let bt = script.as_deref().map(Bpftrace::start);
    let mut args = vec!["--enable", "device_io,durability", "--json"];
    args.extend(more);
    let trace = Tracing::start(&args);
    let before = sectors_written(&fs.device);
    let pid = workload(&fs);
    run(wbscope_programs::SYNC
        .command()
        .arg("-f")
        .arg(&fs.mountpoint));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after = sectors_written(&fs.device);
    let lines = trace.stop(libc::SIGINT);
    let printed = bt.map(Bpftrace::stop).unwrap_or_default();
    let summary = lines.last().expect("summary");
    let ledger = &summary["ledger"];
    let row = ledger["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["dev"] == dev.as_str())
        .unwrap_or_else(|| panic!("{dev} in {ledger}"))
        .clone();
    let mut out = row;
    out["processes"] = ledger["processes"].clone();
    out["findings"] = lines
        .iter()
        .filter(|l| l["type"] == "finding" && l["event"] == "close")
        .cloned()
        .collect();
    (out, (after - before) * 512, pid, printed)
}

/// The device's four classes add up to its own counter, which the
/// ledger's `written` read the same.
fn closes(row: &Value, sysfs: u64) {
    let classed = u(row, "data") + u(row, "journal") + u(row, "metadata") + u(row, "other");
    assert_eq!(u(row, "written"), sysfs, "{row}");
    let gap = classed.abs_diff(sysfs) as f64 / sysfs as f64;
    assert!(gap <= 0.001, "classes {classed} vs {sysfs} written: {row}");
    // The 8 MiB and the records' pages are data, at least.
    assert!(u(row, "data") >= 8 << 20, "{row}");
}

#[test]
fn ext4_rows_close_and_the_journal_equals_jbd2s_writes() {
    let _g = file_group(module_path!());
    let _s = serial();
    // Every write bio to the disk, and those jbd2 submitted (its commit
    // thread writes the journal: fs/jbd2/commit.c).
    let script = "tracepoint:block:block_bio_queue /args->dev == DEV && \
                  strcontains(args->rwbs, \"W\")/ { @all = sum(args->nr_sector * 512); \
                  if (strcontains(comm, \"jbd2\")) { @jbd2 = sum(args->nr_sector * 512); } }";
    let (row, sysfs, pid, printed) = traced("ext4", Some(script), &[]);
    closes(&row, sysfs);
    let value = |name: &str| -> u64 {
        printed
            .iter()
            .find_map(|l| l.strip_prefix(&format!("@{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("@{name} in {printed:?}"))
    };
    assert_eq!(
        value("all"),
        sysfs,
        "bpftrace's bios against the device's counter"
    );
    let journal = u(&row, "journal");
    let jbd2 = value("jbd2");
    assert!(
        journal.abs_diff(jbd2) as f64 <= jbd2 as f64 * 0.01,
        "journal {journal} vs jbd2's writes {jbd2}"
    );
    // Two processes wrote: the device's bytes are charged to them but for
    // the journal's rounding and what the kernel's own threads did.
    assert!(u(&row, "unattributed") * 100 <= sysfs, "{row}");
    // 500 commits of at least a descriptor, a block and a commit block.
    assert!(journal >= 500 * 3 * 4096, "{row}");
    // The appender: each record dirtied its last page again, each page
    // was written back, and it is charged most of the journal (the
    // handles it dirtied).
    let p = row["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} in {row}"));
    assert_eq!(u(p, "write_calls"), 500 * 752, "{p}");
    assert!(
        u(p, "dirtied") >= 500 * 4096 && u(p, "written_back") >= 500 * 4096,
        "{p}"
    );
    assert!(u(p, "journal") * 10 >= journal * 9, "{p} of {journal}");
    eprintln!("ledger: device {row}\nledger: appender {p}\nledger: jbd2 wrote {jbd2}");
    let amplification = p["amplification_of_write_calls"]
        .as_f64()
        .expect("amplification");
    assert!(amplification > 10.0, "{p}");
    // The doctor's rule names it, the appender, and the journal.
    let finding = row["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["name"] == "write-amplified" && f["evidence"]["pid"] == pid)
        .unwrap_or_else(|| panic!("no write-amplified for {pid}: {}", row["findings"]));
    assert_eq!(finding["severity"], "warning", "{finding}");
    assert_eq!(finding["evidence"]["stage"], "journal", "{finding}");
}

/// xfs through the classic `block:block_bio_queue` (where the BTF one
/// does not load): no page to look at, but xfs flags its metadata and the
/// log is placed by its sectors, so the rows close all the same.
#[test]
fn xfs_and_btrfs_rows_close() {
    let _g = file_group(module_path!());
    let _s = serial();
    let (row, sysfs, _, _) = traced("xfs", None, &["--disable", "tp_btf"]);
    closes(&row, sysfs);
    assert!(u(&row, "metadata") > 0, "{row}");
    // The log is where xfs's superblock puts it.
    assert!(u(&row, "journal") > 0, "{row}");
    let (row, sysfs, _, _) = traced("btrfs", None, &[]);
    closes(&row, sysfs);
    // btrfs has no journal: its log tree is metadata.
    assert_eq!(u(&row, "journal"), 0, "{row}");
    assert!(u(&row, "metadata") > 0, "{row}");
}

/// A shell whose own writes are the case (dash's `printf` and
/// redirections are builtins: the shell itself writes), ending with its
/// own /proc/PID/io as the kernel counted it, read by `cat` a moment
/// before the shell exits: the independent figures. The kernel adds a
/// reaped child's counts to its parent's (`wait_task_zombie()`, kernel/
/// exit.c), so the shell's `wchar` at its exit is that reading plus what
/// `cat` wrote: returned as the third figure.
fn shell_case(script: &str) -> (u32, std::collections::BTreeMap<String, u64>, u64) {
    let out = wbscope_programs::SH
        .command()
        .args([
            "-c",
            &format!("{script}\necho pid $$; cat /proc/$$/io; exit 0"),
        ])
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (head, io_text) = text.split_once('\n').expect("two parts");
    let pid = head
        .strip_prefix("pid ")
        .and_then(|p| p.trim().parse().ok())
        .expect("pid");
    let io = io_text
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.trim().parse().expect("count")))
        .collect();
    (pid, io, io_text.len() as u64)
}

/// The summary's process row of `pid`.
fn process(summary: &Value, pid: u32) -> &Value {
    summary["ledger"]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} in {}", summary["ledger"]))
}

#[test]
fn each_stage_is_counted_as_the_kernel_counted_it() {
    let _g = file_group(module_path!());
    let _s = serial();
    let fs = scratch("ext4", 2048);
    let dir = fs.mountpoint.display().to_string();
    let trace = Tracing::start(&["--json", "--enable", "device_io"]);
    // Written then truncated before any writeback: cancelled.
    let (cancel_pid, cancel_io, cat_wrote) = shell_case(&format!(
        "i=0; while [ $i -lt 512 ]; do printf '%4096s' x >> {dir}/cancel; i=$((i+1)); done; : > {dir}/cancel"
    ));
    // The same 4 KiB rewritten 100,000 times before one writeback:
    // absorbed (`1<>` opens without truncating).
    let (absorb_pid, absorb_io, cat_wrote_too) = shell_case(&format!(
        "i=0; while [ $i -lt 100000 ]; do printf '%4096s' x 1<> {dir}/absorb; i=$((i+1)); done"
    ));
    run(wbscope_programs::SYNC
        .command()
        .arg("-f")
        .arg(&fs.mountpoint));
    // 1 GiB of 1 MiB buffered writes.
    let mut big = wbscope_programs::DD.command();
    big.args([
        "if=/dev/zero",
        &format!("of={dir}/big"),
        "bs=1M",
        "count=1024",
        "conv=fsync",
        "status=none",
    ]);
    let child = big.spawn().expect("dd");
    let big_pid = child.id();
    assert!(child.wait_with_output().expect("dd").status.success());
    // 64 MiB of O_DIRECT writes: direct, not dirtied.
    let mut direct = wbscope_programs::DD.command();
    direct.args([
        "if=/dev/zero",
        &format!("of={dir}/direct"),
        "bs=1M",
        "count=64",
        "oflag=direct",
        "status=none",
    ]);
    let child = direct.spawn().expect("dd");
    let direct_pid = child.id();
    assert!(child.wait_with_output().expect("dd").status.success());
    std::thread::sleep(std::time::Duration::from_millis(500));
    let lines = trace.stop(libc::SIGINT);
    let summary = lines.last().expect("summary");

    let p = process(summary, direct_pid);
    assert_eq!(u(p, "direct"), 64 << 20, "{p}");
    assert_eq!(u(p, "dirtied"), 0, "{p}");
    assert_eq!(u(p, "write_calls"), 64 << 20, "{p}");

    let p = process(summary, cancel_pid);
    assert_eq!(u(p, "cancelled"), cancel_io["cancelled_write_bytes"], "{p}");
    assert_eq!(u(p, "cancelled"), 512 * 4096, "{p}");
    assert_eq!(u(p, "dirtied"), cancel_io["write_bytes"], "{p}");
    assert_eq!(u(p, "write_calls"), cancel_io["wchar"] + cat_wrote, "{p}");
    assert_eq!(u(p, "written_back"), 0, "{p}");

    let p = process(summary, absorb_pid);
    assert_eq!(
        u(p, "write_calls"),
        absorb_io["wchar"] + cat_wrote_too,
        "{p}"
    );
    assert_eq!(u(p, "dirtied"), absorb_io["write_bytes"], "{p}");
    assert_eq!(u(p, "dirtied"), 4096, "{p}");
    assert_eq!(u(p, "absorbed"), u(p, "write_calls") - 4096, "{p}");
    assert!(u(p, "absorbed") >= 100_000 * 4096 - 4096, "{p}");
    assert_eq!(u(p, "written_back"), 4096, "{p}");

    let p = process(summary, big_pid);
    assert_eq!(u(p, "dirtied"), 1 << 30, "{p}");
    assert_eq!(u(p, "written_back"), 1 << 30, "{p}");
    let x = p["amplification"].as_f64().expect("amplification");
    eprintln!("ledger: 1 GiB of 1 MiB writes: {p}");
    assert!((1.0..1.01).contains(&x), "{p}");
}

#[test]
fn a_rename_over_the_old_file_is_journal_and_metadata() {
    let _g = file_group(module_path!());
    let _s = serial();
    let fs = scratch("ext4", 512);
    let dir = fs.mountpoint.display().to_string();
    run(wbscope_programs::SYNC
        .command()
        .arg("-f")
        .arg(&fs.mountpoint));
    let trace = Tracing::start(&["--enable", "device_io,durability", "--json"]);
    // The safe-save idiom, 1,000 times: write a new copy, make it
    // durable, rename it over the old one.
    let renames = 1000;
    run(wbscope_programs::SH.command().args([
        "-c",
        &format!(
            "i=0; while [ $i -lt {renames} ]; do \
               dd if=/dev/zero of={dir}/f.tmp bs=100 count=1 conv=fsync status=none && \
               mv {dir}/f.tmp {dir}/f; i=$((i+1)); done"
        ),
    ]));
    run(wbscope_programs::SYNC
        .command()
        .arg("-f")
        .arg(&fs.mountpoint));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let lines = trace.stop(libc::SIGINT);
    let summary = lines.last().expect("summary");
    let dev = disk_majmin(&fs.device);
    let row = summary["ledger"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["dev"] == dev.as_str())
        .expect("the device's row");
    let (journal, metadata, data) = (u(row, "journal"), u(row, "metadata"), u(row, "data"));
    eprintln!(
        "ledger: per rename: journal {} B, metadata {} B, data {} B ({row})",
        journal / renames,
        metadata / renames,
        data / renames
    );
    // Each rename's 100 bytes of data cost a 4 KiB page; its commits more.
    assert!(journal + metadata > data, "{row}");
    assert!(data >= renames * 4096, "{row}");
    // The `mv`s made handles and dirtied nothing: their share is in rows
    // of their own, so the journal and metadata are charged but for the
    // rounding and the last commits, whose handles end after the trace
    // (1.4% here). The data of 1,000 `dd`s that each live a millisecond is
    // charged only where the attribution matched the file to its
    // dirtier before the process was gone (from all of it to about none,
    // run to run): it is allowed to stay unattributed.
    let written = u(row, "written");
    assert!(
        u(row, "unattributed") <= data + u(row, "other") + written / 50,
        "{row}"
    );
}
