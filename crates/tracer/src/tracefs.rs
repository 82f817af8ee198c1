//! tracefs: finding (or mounting) it, and parsing event `format` files.
//!
//! Field offsets are never compiled in: they move between kernels (the 3.x
//! `ext4_da_writepages_result` had `more_io`, 6.x `ext4_writepages_result`
//! has none), so each tracepoint's layout is read from
//! `events/<system>/<event>/format` at start-up and handed to the eBPF
//! programs as a [`TracepointLayout`] global.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use writeback_common::{FieldSpec, MAX_TP_FIELDS, TracepointLayout};

/// Where tracefs is normally mounted; the debugfs path is the pre-4.1 one.
const TRACEFS_PATHS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// One `field:` line of a format file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    /// C declaration without the name, e.g. `unsigned long`, `char[16]`.
    pub(crate) ctype: String,
    pub(crate) name: String,
    pub(crate) offset: usize,
    pub(crate) size: usize,
    pub(crate) signed: bool,
}

/// A parsed `format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EventFormat {
    pub(crate) name: String,
    pub(crate) id: Option<u32>,
    pub(crate) fields: Vec<Field>,
}

impl EventFormat {
    pub(crate) fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Builds the table the eBPF program reads, one slot per name in
    /// `names` (in that order). Names this kernel lacks stay absent (size 0);
    /// a `char` array of 8 bytes or more is read as its first 8 (the
    /// block events' `rwbs`: 8 bytes before Linux 6.x's `RWBS_LEN` 10);
    /// other fields wider than 8 bytes or of odd sizes are refused.
    pub(crate) fn layout(&self, names: &[&str]) -> anyhow::Result<(TracepointLayout, Vec<String>)> {
        if names.len() > MAX_TP_FIELDS {
            bail!("{} fields requested, at most {MAX_TP_FIELDS}", names.len());
        }
        let mut layout = TracepointLayout::EMPTY;
        let mut missing = Vec::new();
        for (slot, name) in names.iter().enumerate() {
            let Some(field) = self.field(name) else {
                missing.push((*name).to_string());
                continue;
            };
            let chars = field.ctype.starts_with("char") && field.ctype.contains('[');
            let (size, signed) = if chars && field.size >= 8 {
                (8, false)
            } else {
                (field.size, field.signed)
            };
            if !matches!(size, 1 | 2 | 4 | 8) {
                bail!(
                    "{}: field {name} has size {}, not a 1/2/4/8-byte integer",
                    self.name,
                    field.size
                );
            }
            let offset = u16::try_from(field.offset)
                .with_context(|| format!("{}: offset of {name} too large", self.name))?;
            layout.fields[slot] = FieldSpec {
                offset,
                size: size as u8,
                signed: u8::from(signed),
            };
        }
        Ok((layout, missing))
    }
}

/// Parses the text of a tracefs `format` file.
///
/// The grammar (kernel/trace/trace_events.c, `f_show`) is one
/// `\tfield:<decl>;\toffset:<n>;\tsize:<n>;\tsigned:<0|1>;` line per field;
/// `signed:` is absent on kernels before 2.6.32.
pub(crate) fn parse_format(text: &str) -> anyhow::Result<EventFormat> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    for (lineno, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("name:") {
            name = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("ID:") {
            id = rest.trim().parse().ok();
        } else if line.starts_with("field:") {
            let field = parse_field(line)
                .with_context(|| format!("format line {}: {line:?}", lineno + 1))?;
            fields.push(field);
        }
    }
    let Some(name) = name else {
        bail!("not a tracefs format file: no `name:` line");
    };
    if fields.is_empty() {
        bail!("format of {name} has no fields");
    }
    Ok(EventFormat { name, id, fields })
}

fn parse_field(line: &str) -> anyhow::Result<Field> {
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in line.split(';') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("field:") {
            decl = Some(v.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = Some(v.trim().parse::<usize>().context("bad offset")?);
        } else if let Some(v) = part.strip_prefix("size:") {
            size = Some(v.trim().parse::<usize>().context("bad size")?);
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    let decl = decl.context("no field declaration")?;
    let (ctype, name) = split_decl(decl).context("cannot find the field name")?;
    Ok(Field {
        ctype,
        name,
        offset: offset.context("no offset")?,
        size: size.context("no size")?,
        signed,
    })
}

/// Splits `unsigned long writeback_index` into type and name; array
/// declarations (`char comm[16]`) keep the brackets on the type.
fn split_decl(decl: &str) -> Option<(String, String)> {
    let (decl, array) = match decl.find('[') {
        Some(i) => (decl[..i].trim_end(), &decl[i..]),
        None => (decl, ""),
    };
    let split = decl.rfind(|c: char| c.is_whitespace() || c == '*')?;
    let name = decl[split + 1..].trim();
    if name.is_empty() {
        return None;
    }
    let ctype = format!("{}{array}", decl[..=split].trim());
    Some((ctype, name.to_string()))
}

/// Returns the tracefs root, mounting tracefs at /sys/kernel/tracing when no
/// mount is found (it is not mounted at boot on some hosts). Errors name
/// the capability that is missing.
pub(crate) fn ensure_mounted() -> anyhow::Result<PathBuf> {
    if let Some(root) = find_mounted() {
        return Ok(root);
    }
    // Mounted but not readable: tracefs directories are 0700 root, so a
    // non-root tracer needs to bypass directory permissions.
    if let Some(root) = mounted_in_proc() {
        bail!(
            "tracefs at {} is not readable: wbscope needs root or CAP_DAC_READ_SEARCH",
            root.display()
        );
    }
    let target = Path::new(TRACEFS_PATHS[0]);
    match mount_tracefs(target) {
        Ok(()) => Ok(target.to_path_buf()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => bail!(
            "tracefs is not mounted and mounting it needs CAP_SYS_ADMIN: run as root, or \
             mount it first (mount -t tracefs tracefs {})",
            target.display()
        ),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "tracefs is not mounted and mounting it at {} failed",
            target.display()
        ))),
    }
}

/// A tracefs mount point from /proc/self/mounts (world-readable, unlike
/// tracefs itself).
fn mounted_in_proc() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"tracefs")).then(|| PathBuf::from(f[1]))
    })
}

fn find_mounted() -> Option<PathBuf> {
    TRACEFS_PATHS
        .iter()
        .map(Path::new)
        .find(|p| p.join("events").is_dir())
        .map(Path::to_path_buf)
}

fn mount_tracefs(target: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    let src = CString::new("tracefs").map_err(std::io::Error::other)?;
    let dst = CString::new(target.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            src.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Why a tracepoint cannot be used, in words for the probe status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TracepointError {
    #[error("tracepoint {0}:{1} is not present on this kernel")]
    NotPresent(String, String),
    #[error("reading the format of {0}:{1}: {2:#}")]
    Unreadable(String, String, anyhow::Error),
}

/// Reads and parses `events/<system>/<event>/format` under `root`.
pub(crate) fn read_format(
    root: &Path,
    system: &str,
    event: &str,
) -> Result<EventFormat, TracepointError> {
    let path = root.join("events").join(system).join(event).join("format");
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TracepointError::NotPresent(system.into(), event.into()));
        }
        Err(e) => {
            return Err(TracepointError::Unreadable(
                system.into(),
                event.into(),
                anyhow::Error::new(e).context(path.display().to_string()),
            ));
        }
    };
    parse_format(&text).map_err(|e| TracepointError::Unreadable(system.into(), event.into(), e))
}

#[cfg(test)]
mod tests {
    use writeback_common::fields::{writepages as wp, writepages_result as wpr};

    use super::*;

    /// `ext4:ext4_writepages_result` as a 6.18 kernel prints it.
    const EXT4_WRITEPAGES_RESULT_6_18: &str = "name: ext4_writepages_result
ID: 1247
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;
\tfield:ino_t ino;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int ret;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int pages_written;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long pages_skipped;\toffset:32;\tsize:8;\tsigned:1;
\tfield:unsigned long writeback_index;\toffset:40;\tsize:8;\tsigned:0;
\tfield:int sync_mode;\toffset:48;\tsize:4;\tsigned:1;

print fmt: \"dev %d,%d ino %lu ret %d pages_written %d\", REC->ret
";

    /// `ext4:ext4_da_writepages_result` as a 3.0 kernel lays it out, written
    /// from that era's include/trace/events/ext4.h (`more_io` still present:
    /// it went in 3.1; `sync_mode` added in 2.6.39) and the 3.0 common
    /// header, which still had `common_lock_depth`. Offsets follow C
    /// alignment on x86_64.
    const EXT4_DA_WRITEPAGES_RESULT_3_0: &str = "name: ext4_da_writepages_result
ID: 701
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
\tfield:int common_lock_depth;\toffset:8;\tsize:4;\tsigned:1;

\tfield:dev_t dev;\toffset:12;\tsize:4;\tsigned:0;
\tfield:ino_t ino;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int ret;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int pages_written;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long pages_skipped;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char more_io;\toffset:40;\tsize:1;\tsigned:1;
\tfield:pgoff_t writeback_index;\toffset:48;\tsize:8;\tsigned:0;
\tfield:int sync_mode;\toffset:56;\tsize:4;\tsigned:1;

print fmt: \"dev %d,%d ino %lu ret %d pages_written %d more_io %d\", REC->ret
";

    /// The 2.6.3x layout (before 2.6.35): three `char` flags, no
    /// `writeback_index`, no `sync_mode`.
    const EXT4_DA_WRITEPAGES_RESULT_2_6_33: &str = "name: ext4_da_writepages_result
ID: 612
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
\tfield:int common_lock_depth;\toffset:8;\tsize:4;\tsigned:1;

\tfield:dev_t dev;\toffset:12;\tsize:4;\tsigned:0;
\tfield:ino_t ino;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int ret;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int pages_written;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long pages_skipped;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char encountered_congestion;\toffset:40;\tsize:1;\tsigned:1;
\tfield:char more_io;\toffset:41;\tsize:1;\tsigned:1;
\tfield:char no_nrwrite_index_update;\toffset:42;\tsize:1;\tsigned:1;

print fmt: \"dev %s ino %lu ret %d pages_written %d\", REC->ret
";

    #[test]
    fn parses_current_ext4_result_layout() {
        let fmt = parse_format(EXT4_WRITEPAGES_RESULT_6_18).unwrap();
        assert_eq!(fmt.name, "ext4_writepages_result");
        assert_eq!(fmt.id, Some(1247));
        assert_eq!(fmt.fields.len(), 11);
        let pw = fmt.field("pages_written").unwrap();
        assert_eq!((pw.offset, pw.size, pw.signed), (28, 4, true));
        assert_eq!(fmt.field("writeback_index").unwrap().ctype, "unsigned long");

        let (layout, missing) = fmt.layout(&wpr::NAMES).unwrap();
        assert!(missing.is_empty());
        assert_eq!(
            layout.fields[wpr::INO],
            FieldSpec {
                offset: 16,
                size: 8,
                signed: 0
            }
        );
        assert_eq!(layout.fields[wpr::SYNC_MODE].offset, 48);
    }

    #[test]
    fn old_layouts_shift_offsets_and_report_missing_fields() {
        let fmt = parse_format(EXT4_DA_WRITEPAGES_RESULT_3_0).unwrap();
        assert_eq!(fmt.field("more_io").unwrap().size, 1);
        let (layout, missing) = fmt.layout(&wpr::NAMES).unwrap();
        assert!(missing.is_empty(), "{missing:?}");
        // dev moved from 8 to 12 behind common_lock_depth.
        assert_eq!(layout.fields[wpr::DEV].offset, 12);
        assert_eq!(layout.fields[wpr::WRITEBACK_INDEX].offset, 48);
        assert_eq!(layout.fields[wpr::SYNC_MODE].offset, 56);

        let fmt = parse_format(EXT4_DA_WRITEPAGES_RESULT_2_6_33).unwrap();
        let (layout, missing) = fmt.layout(&wpr::NAMES).unwrap();
        assert_eq!(missing, vec!["writeback_index", "sync_mode"]);
        assert!(!layout.fields[wpr::SYNC_MODE].is_present());
        assert_eq!(layout.fields[wpr::PAGES_WRITTEN].offset, 28);
    }

    #[test]
    fn array_and_pointer_declarations() {
        assert_eq!(
            split_decl("char comm[16]"),
            Some(("char[16]".into(), "comm".into()))
        );
        assert_eq!(
            split_decl("const char * name"),
            Some(("const char *".into(), "name".into()))
        );
        assert_eq!(split_decl("int"), None);
    }

    #[test]
    fn refuses_garbage_and_wide_fields() {
        assert!(parse_format("hello").is_err());
        assert!(parse_format("name: x\nformat:\n\tfield:int a;\toffset:zz;\tsize:4;\n").is_err());
        let fmt = parse_format(
            "name: x\nformat:\n\tfield:u64 pair[2];\toffset:8;\tsize:16;\tsigned:0;\n",
        )
        .unwrap();
        assert!(fmt.layout(&["pair"]).is_err());
    }

    #[test]
    fn char_arrays_are_read_as_their_first_eight_bytes() {
        // block_rq_complete's `rwbs` on Linux 6.12 (RWBS_LEN 10).
        let fmt = parse_format(
            "name: x\nformat:\n\tfield:char rwbs[10];\toffset:28;\tsize:10;\tsigned:1;\n",
        )
        .unwrap();
        let (layout, missing) = fmt.layout(&["rwbs"]).unwrap();
        assert!(missing.is_empty());
        assert_eq!(
            layout.fields[0],
            FieldSpec {
                offset: 28,
                size: 8,
                signed: 0
            }
        );
        // Shorter than a word: refused as any odd size is.
        let short =
            parse_format("name: x\nformat:\n\tfield:char tag[6];\toffset:8;\tsize:6;\tsigned:0;\n")
                .unwrap();
        assert!(short.layout(&["tag"]).is_err());
    }

    /// The running kernel's own format files, when tracefs is readable
    /// (root). Every field the programs need must be found.
    #[test]
    fn parses_this_kernels_ext4_formats() {
        let Some(root) = find_mounted().or_else(|| ensure_mounted().ok()) else {
            panic!("tracefs is neither mounted nor mountable: kernel tests need root");
        };
        let start = read_format(&root, "ext4", "ext4_writepages").unwrap();
        let (_, missing) = start.layout(&wp::NAMES).unwrap();
        assert!(missing.is_empty(), "missing {missing:?}");
        let result = read_format(&root, "ext4", "ext4_writepages_result").unwrap();
        let (_, missing) = result.layout(&wpr::NAMES).unwrap();
        assert!(missing.is_empty(), "missing {missing:?}");
        assert!(matches!(
            read_format(&root, "ext4", "no_such_event_here"),
            Err(TracepointError::NotPresent(..))
        ));
    }
}
