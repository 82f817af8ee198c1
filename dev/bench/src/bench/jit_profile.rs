//! Where a BPF program's time goes inside it, line by line: `perf record
//! -a` samples taken while the programs run, placed in each program's JIT
//! image by the kernel's line info. `bpf_prog_info`'s `jited_line_info`
//! holds the address of each `line_info` entry's first instruction
//! (kernel/bpf/syscall.c, `bpf_prog_get_info_by_fd()`), and `bpftool -j
//! prog dump xlated linum` names the source line of each entry; a sample
//! is charged to the entry whose address is the last at or below it.
//! This host's perf (no libopcodes) and bpftool (no libbfd) cannot
//! disassemble a JIT image, and need not: the line is what is wanted.
//!
//! A timer's sample lands on the instruction after the one the CPU was
//! waiting on when it fired, so a load that missed the cache is charged
//! to the line after it; a program's first line gets the samples that
//! land on its entry, the cost of being called.
use std::{
    collections::BTreeMap,
    io,
    path::Path,
    process::{Child, Stdio},
};

use anyhow::{Context as _, bail};

/// `bpf(2)` commands (include/uapi/linux/bpf.h).
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// Offsets in `struct bpf_prog_info` (include/uapi/linux/bpf.h; the
/// struct only grows at its end). aya's `ProgramInfo` (0.14) has no
/// line info or JIT addresses, and aya-obj's bindings of the struct stay
/// out of this crate with the rest of aya, which only the tracer may
/// depend on (xtask crate_graph.rs).
mod info {
    pub(super) const JITED_PROG_LEN: usize = 16;
    pub(super) const NR_LINE_INFO: usize = 148;
    pub(super) const LINE_INFO: usize = 152;
    pub(super) const JITED_LINE_INFO: usize = 160;
    pub(super) const NR_JITED_LINE_INFO: usize = 168;
    pub(super) const LINE_INFO_REC_SIZE: usize = 172;
    pub(super) const JITED_LINE_INFO_REC_SIZE: usize = 176;
    /// Room for the whole struct on any kernel here (232 bytes on 6.18);
    /// the kernel wants what it does not know zeroed.
    pub(super) const SIZE: usize = 256;
}

fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live buffer of the length passed, which the
    // kernel reads and writes only within.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

/// A loaded program's JIT image: its length, and the address of each
/// line-info entry's first instruction with that entry's instruction
/// offset, in address order.
struct JitLines {
    len: u64,
    lines: Vec<(u64, u32)>,
}

fn jit_lines(prog_id: u32) -> anyhow::Result<JitLines> {
    let mut attr = [0u8; 128];
    put_u32(&mut attr, 0, prog_id);
    let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr)
        .with_context(|| format!("opening BPF program {prog_id}"))?;
    // SAFETY: a descriptor the kernel just gave this process.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let get = |buf: &mut [u8]| -> io::Result<()> {
        let mut attr = [0u8; 128];
        put_u32(&mut attr, 0, raw as u32);
        put_u32(&mut attr, 4, buf.len() as u32);
        put_u64(&mut attr, 8, buf.as_mut_ptr() as u64);
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
    };
    let mut first = vec![0u8; info::SIZE];
    get(&mut first).with_context(|| format!("reading BPF program {prog_id}'s info"))?;
    let len = get_u32(&first, info::JITED_PROG_LEN);
    let n = get_u32(&first, info::NR_LINE_INFO);
    let jn = get_u32(&first, info::NR_JITED_LINE_INFO);
    let (rec, jrec) = (
        get_u32(&first, info::LINE_INFO_REC_SIZE),
        get_u32(&first, info::JITED_LINE_INFO_REC_SIZE),
    );
    if n == 0 || jn != n || rec < 4 || jrec != 8 || len == 0 {
        bail!(
            "BPF program {prog_id} has no JIT line info ({n} line-info entries, {jn} JIT \
             addresses, JIT image {len} bytes): was it built with BTF, and is the JIT on?"
        );
    }
    let mut lines = vec![0u8; (n * rec) as usize];
    let mut addrs = vec![0u8; (jn * jrec) as usize];
    let mut second = vec![0u8; info::SIZE];
    put_u32(&mut second, info::NR_LINE_INFO, n);
    put_u64(&mut second, info::LINE_INFO, lines.as_mut_ptr() as u64);
    put_u32(&mut second, info::LINE_INFO_REC_SIZE, rec);
    put_u32(&mut second, info::NR_JITED_LINE_INFO, jn);
    put_u64(
        &mut second,
        info::JITED_LINE_INFO,
        addrs.as_mut_ptr() as u64,
    );
    put_u32(&mut second, info::JITED_LINE_INFO_REC_SIZE, jrec);
    get(&mut second).with_context(|| format!("reading BPF program {prog_id}'s line info"))?;
    drop(fd);
    let mut out: Vec<(u64, u32)> = (0..n as usize)
        .map(|i| {
            let mut a = [0; 8];
            a.copy_from_slice(&addrs[i * 8..i * 8 + 8]);
            // `struct bpf_line_info` begins with its `insn_off`.
            (u64::from_ne_bytes(a), get_u32(&lines, i * rec as usize))
        })
        .collect();
    out.sort_unstable();
    Ok(JitLines {
        len: u64::from(len),
        lines: out,
    })
}

/// The source line of each line-info entry, by instruction offset, from
/// `bpftool -j prog dump xlated id ID linum`: "text (file:line)".
fn xlated_sources(prog_id: u32) -> anyhow::Result<BTreeMap<u32, String>> {
    let id = prog_id.to_string();
    let insns = bpftool_json(&["prog", "dump", "xlated", "id", &id, "linum"])?;
    Ok(sources_of(&insns))
}

/// What `bpftool -j ARGS` prints, parsed.
fn bpftool_json(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let what = format!("bpftool {}", args.join(" "));
    let out = stdout_of(
        wbscope_programs::BPFTOOL.command().arg("-j").args(args),
        &what,
    )?;
    serde_json::from_slice(&out).with_context(|| format!("{what}: not JSON"))
}

/// `cmd`'s standard output once it succeeded; its standard error, named
/// `what`, if it did not.
fn stdout_of(cmd: &mut std::process::Command, what: &str) -> anyhow::Result<Vec<u8>> {
    let out = cmd
        .output()
        .with_context(|| format!("running {what} (cargo xtask setup installs it)"))?;
    if !out.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out.stdout)
}

/// Whether a source file is a library's (Rust's own, a crate's) rather
/// than the program's: its lines are inlined helpers, named with the
/// program's line before them.
fn is_library(file: &str) -> bool {
    file.contains("/rustlib/") || file.contains("/.cargo/") || file.contains("/aya-ebpf")
}

/// [`xlated_sources`]' parse: instructions are listed one an entry, a
/// 16-byte `ld_imm64` (opcode 0x18) taking two instruction slots. A
/// library's line is named after the program's line before it ("...
/// in ..."): line info names the innermost inlined function, so the
/// many `volatile_load`s of core::ptr would otherwise be one line.
fn sources_of(insns: &serde_json::Value) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    let mut slot = 0u32;
    let mut own = None::<String>;
    for insn in insns.as_array().into_iter().flatten() {
        if let Some(src) = insn["src"].as_str() {
            let path = insn["file"].as_str().unwrap_or("?");
            let file = path.rsplit('/').next().unwrap_or(path);
            let line = insn["line_num"].as_u64().unwrap_or(0);
            let here = format!("{} ({file}:{line})", src.trim());
            let label = match &own {
                Some(caller) if is_library(path) => format!("{here} in {caller}"),
                _ => here.clone(),
            };
            if !is_library(path) {
                own = Some(here);
            }
            out.insert(slot, label);
        }
        let wide = insn["disasm"]
            .as_str()
            .is_some_and(|d| d.starts_with("(18)"));
        slot += if wide { 2 } else { 1 };
    }
    out
}

/// A loaded program, as `bpftool -j prog show` lists it.
pub(crate) struct Loaded {
    pub(crate) id: u32,
    pub(crate) name: String,
    /// Runs so far (counted while the kernel's BPF statistics are on).
    pub(crate) runs: u64,
}

/// Every loaded program.
pub(crate) fn loaded() -> anyhow::Result<Vec<Loaded>> {
    let v = bpftool_json(&["prog", "show"])?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(Loaded {
                id: u32::try_from(p["id"].as_u64()?).ok()?,
                name: p["name"].as_str().unwrap_or("?").to_string(),
                runs: p["run_cnt"].as_u64().unwrap_or(0),
            })
        })
        .collect())
}

/// A program's image with each line's source, read while it is loaded.
pub(crate) struct Image {
    name: String,
    len: u64,
    /// (address, source) of each line-info entry, in address order.
    lines: Vec<(u64, String)>,
}

impl Image {
    pub(crate) fn of(program: &Loaded) -> anyhow::Result<Image> {
        let jit = jit_lines(program.id)?;
        let sources = xlated_sources(program.id)?;
        let lines = jit
            .lines
            .into_iter()
            .map(|(addr, insn)| {
                let src = sources
                    .get(&insn)
                    .cloned()
                    .unwrap_or_else(|| format!("instruction {insn}"));
                (addr, src)
            })
            .collect();
        Ok(Image {
            name: program.name.clone(),
            len: jit.len,
            lines,
        })
    }

    /// The source line the sample at `ip` falls on, if it is inside.
    fn line_at(&self, ip: u64) -> Option<&str> {
        let start = self.lines.first()?.0;
        if ip < start || ip >= start + self.len {
            return None;
        }
        let i = self.lines.partition_point(|&(a, _)| a <= ip);
        Some(&self.lines[i.checked_sub(1)?].1)
    }
}

/// `perf record -a` at `hz` until [`Sampling::ips`]; stopped if dropped
/// before.
pub(crate) struct Sampling {
    /// `None` once waited for.
    child: Option<Child>,
    data: std::path::PathBuf,
}

impl Drop for Sampling {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Sampling {
    /// Every CPU sampled at `hz` for `secs`, into `data`.
    pub(crate) fn start(data: &Path, hz: u32, secs: f64) -> anyhow::Result<Sampling> {
        let child = wbscope_programs::PERF
            .command()
            .args(["record", "-a", "-q", "-F", &hz.to_string(), "-o"])
            .arg(data)
            .args(["--", "sleep", &format!("{secs:.1}")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running perf (cargo xtask setup installs it)")?;
        Ok(Sampling {
            child: Some(child),
            data: data.to_path_buf(),
        })
    }

    /// Waits for the recording to end and returns its samples'
    /// instruction addresses.
    pub(crate) fn ips(mut self) -> anyhow::Result<Vec<u64>> {
        let child = self.child.take().context("perf already stopped")?;
        let done = child.wait_with_output().context("waiting for perf")?;
        if !done.status.success() {
            bail!(
                "perf record: {}",
                String::from_utf8_lossy(&done.stderr).trim()
            );
        }
        let out = stdout_of(
            wbscope_programs::PERF
                .command()
                .args(["script", "-F", "ip", "-i"])
                .arg(&self.data),
            "perf script",
        )?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| u64::from_str_radix(l.trim(), 16).ok())
            .collect())
    }
}

/// One program's samples: in all, and per source line, most first.
pub(crate) struct Profile {
    pub(crate) program: String,
    pub(crate) samples: u64,
    pub(crate) lines: Vec<(String, u64)>,
}

/// Charges each sample in `ips` to its program's line.
pub(crate) fn attribute(images: &[Image], ips: &[u64]) -> Vec<Profile> {
    images
        .iter()
        .map(|image| {
            let mut by_line: BTreeMap<&str, u64> = BTreeMap::new();
            for &ip in ips {
                if let Some(line) = image.line_at(ip) {
                    *by_line.entry(line).or_default() += 1;
                }
            }
            let mut lines: Vec<(String, u64)> = by_line
                .into_iter()
                .map(|(l, n)| (l.to_string(), n))
                .collect();
            lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            Profile {
                program: image.name.clone(),
                samples: lines.iter().map(|(_, n)| n).sum(),
                lines,
            }
        })
        .collect()
}

/// The profiles as a Markdown table, `top` lines a program.
pub(crate) fn table(profiles: &[Profile], top: usize) -> String {
    let mut out =
        String::from("| program | samples | source line (file:line) | share of its samples |\n");
    out.push_str("|---|---|---|---|\n");
    for p in profiles {
        for (i, (line, n)) in p.lines.iter().take(top).enumerate() {
            let (name, samples) = if i == 0 {
                (p.program.as_str(), p.samples.to_string())
            } else {
                ("", String::new())
            };
            out.push_str(&format!(
                "| {name} | {samples} | `{}` | {:.1}% |\n",
                line.replace('|', "\\|").replace('`', "'"),
                100.0 * *n as f64 / p.samples.max(1) as f64
            ));
        }
        if p.lines.is_empty() {
            out.push_str(&format!("| {} | 0 | (no sample) | |\n", p.program));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_instruction_takes_two_slots() {
        let insns = serde_json::json!([
            {"src": "let a = 1;", "file": "/x/src/a.rs", "line_num": 3, "disasm": "(b7) r1 = 1"},
            {"src": "MAP.get(0)", "file": "/x/src/a.rs", "line_num": 4,
             "disasm": "(18) r1 = map[id:7]"},
            {"disasm": "(79) r2 = *(u64 *)(r1 +0)"},
            {"src": "volatile_load(src)", "file": "/usr/lib/rustlib/src/core/ptr/mod.rs",
             "line_num": 2095, "disasm": "(79) r3 = *(u64 *)(r2 +0)"},
            {"src": "x | y", "file": "b.rs", "line_num": 9, "disasm": "(95) exit"}
        ]);
        let s = sources_of(&insns);
        assert_eq!(s.get(&0).map(String::as_str), Some("let a = 1; (a.rs:3)"));
        assert_eq!(s.get(&1).map(String::as_str), Some("MAP.get(0) (a.rs:4)"));
        assert_eq!(
            s.get(&4).map(String::as_str),
            Some("volatile_load(src) (mod.rs:2095) in MAP.get(0) (a.rs:4)")
        );
        assert_eq!(s.get(&5).map(String::as_str), Some("x | y (b.rs:9)"));
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn samples_go_to_the_line_at_or_below_them_inside_the_image() {
        let image = Image {
            name: "p".into(),
            len: 0x40,
            lines: vec![
                (0x1000, "entry".into()),
                (0x1010, "load".into()),
                (0x1030, "store".into()),
            ],
        };
        let ips = [
            0x0fff, 0x1000, 0x1005, 0x1010, 0x1011, 0x1012, 0x103f, 0x1040,
        ];
        let p = &attribute(&[image], &ips)[0];
        assert_eq!(p.samples, 6);
        assert_eq!(
            p.lines,
            vec![
                ("load".to_string(), 3),
                ("entry".to_string(), 2),
                ("store".to_string(), 1)
            ]
        );
        assert_eq!(table(&[], 2).lines().count(), 2);
    }

    #[test]
    fn the_table_escapes_a_pipe_and_gives_each_program_its_rows() {
        let profiles = vec![
            Profile {
                program: "a".into(),
                samples: 4,
                lines: vec![("x || y".into(), 3), ("z".into(), 1)],
            },
            Profile {
                program: "b".into(),
                samples: 0,
                lines: vec![],
            },
        ];
        let t = table(&profiles, 1);
        assert!(t.contains("| a | 4 | `x \\|\\| y` | 75.0% |"), "{t}");
        assert!(!t.contains("`z`"), "{t}");
        assert!(t.contains("| b | 0 | (no sample) | |"), "{t}");
    }
}
