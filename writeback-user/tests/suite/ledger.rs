//! The ledger against sources no one here wrote: each loop device's rows
//! close on its own sectors-written counter (/sys/block/DEV/stat), and the
//! journal of ext4 equals what bpftrace counts jbd2 submitting to the disk.
use std::{fs, path::Path, process::Command};

use serde_json::Value;

use super::support::{Bpftrace, LoopFs, Tracing, file_group, kernel_dev, run};

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

fn majmin(device: &str) -> String {
    let name = Path::new(device)
        .file_name()
        .and_then(|n| n.to_str())
        .expect("device name");
    fs::read_to_string(format!("/sys/block/{name}/dev"))
        .expect("dev")
        .trim()
        .to_string()
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
fn traced(fstype: &str, bpftrace: Option<&str>) -> (Value, u64, u32, Vec<String>) {
    let fs = LoopFs::new(fstype, 512);
    // Nothing of the mkfs left to write before the counting starts.
    run(Command::new("sync").arg("-f").arg(&fs.mountpoint));
    let dev = majmin(&fs.device);
    let script = bpftrace.map(|s| s.replace("DEV", &kernel_dev(&dev).to_string()));
    let bt = script.as_deref().map(Bpftrace::start);
    let trace = Tracing::start(&["--enable", "device_io,durability", "--json"]);
    let before = sectors_written(&fs.device);
    let pid = workload(&fs);
    run(Command::new("sync").arg("-f").arg(&fs.mountpoint));
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
    // Every write bio to the disk, and those jbd2 submitted (its commit
    // thread writes the journal: fs/jbd2/commit.c).
    let script = "tracepoint:block:block_bio_queue /args->dev == DEV && \
                  strcontains(args->rwbs, \"W\")/ { @all = sum(args->nr_sector * 512); \
                  if (strcontains(comm, \"jbd2\")) { @jbd2 = sum(args->nr_sector * 512); } }";
    let (row, sysfs, pid, printed) = traced("ext4", Some(script));
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

#[test]
fn xfs_and_btrfs_rows_close() {
    let _g = file_group(module_path!());
    let (row, sysfs, _, _) = traced("xfs", None);
    closes(&row, sysfs);
    // The log is where xfs's superblock puts it.
    assert!(u(&row, "journal") > 0, "{row}");
    let (row, sysfs, _, _) = traced("btrfs", None);
    closes(&row, sysfs);
    // btrfs has no journal: its log tree is metadata.
    assert_eq!(u(&row, "journal"), 0, "{row}");
    assert!(u(&row, "metadata") > 0, "{row}");
}
