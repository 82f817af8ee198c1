//! The marker file in each scratch directory: who made it (pid, process
//! start time, boot, pid namespace), what it made (device, mount point,
//! bdi) and the bdi knobs' values to put back. Plain `key value` lines,
//! replaced atomically (write + rename) so a reader never sees half of it.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use crate::sys::Identity;

pub(crate) const FILE: &str = "scratchfs.marker";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Marker {
    pub(crate) pid: u32,
    /// starttime of /proc/PID/stat (clock ticks since boot): with the pid,
    /// names one process even when pids are reused.
    pub(crate) start: u64,
    pub(crate) boot_id: Option<String>,
    /// `readlink /proc/self/ns/pid`: a pid means nothing in another
    /// namespace.
    pub(crate) pidns: Option<String>,
    pub(crate) device: Option<PathBuf>,
    pub(crate) mountpoint: Option<PathBuf>,
    pub(crate) bdi: Option<PathBuf>,
    /// (knob, value before we first wrote it), in the order written.
    pub(crate) knobs: Vec<(String, String)>,
}

/// The knobs a scratch filesystem may change, with the one holding their
/// state: `max_bytes` and `max_ratio` are both stored as the bdi's max
/// ratio (mm/page-writeback.c, bdi_set_max_bytes), whose exact value
/// `max_ratio_fine` (Linux 6.2+, parts per million) reads back; reading
/// `max_bytes` only gives that ratio of the current threshold.
pub(crate) fn state_knob(bdi: &Path, knob: &str) -> anyhow::Result<&'static str> {
    Ok(match knob {
        "strict_limit" => "strict_limit",
        "max_ratio" | "max_bytes" | "max_ratio_fine" => {
            if bdi.join("max_ratio_fine").exists() {
                "max_ratio_fine"
            } else {
                "max_ratio"
            }
        }
        other => bail!("bdi knob {other} is not one scratchfs restores"),
    })
}

/// Whether a marker's knob line may be written back: only our knobs, only
/// a number (the marker is a file a cleanup running as root reads).
pub(crate) fn restorable(knob: &str, value: &str) -> bool {
    matches!(knob, "strict_limit" | "max_ratio" | "max_ratio_fine")
        && !value.is_empty()
        && value.bytes().all(|b| b.is_ascii_digit())
}

impl Marker {
    pub(crate) fn new(me: &Identity) -> Marker {
        Marker {
            pid: me.pid,
            start: me.start,
            boot_id: me.boot_id.clone(),
            pidns: me.pidns.clone(),
            ..Marker::default()
        }
    }

    pub(crate) fn to_text(&self) -> String {
        let mut s = format!("pid {}\nstart {}\n", self.pid, self.start);
        let mut line = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                s.push_str(&format!("{k} {v}\n"));
            }
        };
        line("boot_id", self.boot_id.clone());
        line("pidns", self.pidns.clone());
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        line("device", path(&self.device));
        line("mountpoint", path(&self.mountpoint));
        line("bdi", path(&self.bdi));
        for (k, v) in &self.knobs {
            s.push_str(&format!("knob {k} {v}\n"));
        }
        s
    }

    pub(crate) fn parse(text: &str) -> anyhow::Result<Marker> {
        let mut m = Marker::default();
        let (mut pid, mut start) = (None, None);
        for line in text.lines() {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "pid" => pid = value.parse().ok(),
                "start" => start = value.parse().ok(),
                "boot_id" => m.boot_id = Some(value.to_string()),
                "pidns" => m.pidns = Some(value.to_string()),
                "device" => m.device = Some(PathBuf::from(value)),
                "mountpoint" => m.mountpoint = Some(PathBuf::from(value)),
                "bdi" => m.bdi = Some(PathBuf::from(value)),
                "knob" => {
                    if let Some((k, v)) = value.split_once(' ') {
                        m.knobs.push((k.to_string(), v.to_string()));
                    }
                }
                _ => {}
            }
        }
        m.pid = pid.context("marker without a pid")?;
        m.start = start.context("marker without a start time")?;
        Ok(m)
    }

    pub(crate) fn load(dir: &Path) -> anyhow::Result<Marker> {
        let path = dir.join(FILE);
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        Marker::parse(&text).with_context(|| format!("parsing {}", path.display()))
    }

    pub(crate) fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let tmp = dir.join(format!("{FILE}.new"));
        fs::write(&tmp, self.to_text()).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, dir.join(FILE))
            .with_context(|| format!("renaming {} into place", tmp.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_text_round_trips() {
        let m = Marker {
            pid: 4242,
            start: 987654,
            boot_id: Some("b0b0-1".into()),
            pidns: Some("pid:[4026531836]".into()),
            device: Some("/dev/loop3".into()),
            mountpoint: Some("/var/tmp/wbscope-scratch-4242-987654-x/mnt".into()),
            bdi: Some("/sys/class/bdi/7:3".into()),
            knobs: vec![
                ("max_ratio_fine".into(), "1000000".into()),
                ("strict_limit".into(), "0".into()),
            ],
        };
        assert_eq!(Marker::parse(&m.to_text()).unwrap(), m);
        // Only who made it: the first thing written.
        let bare = Marker {
            pid: 1,
            start: 2,
            ..Marker::default()
        };
        assert_eq!(Marker::parse(&bare.to_text()).unwrap(), bare);
        assert!(Marker::parse("start 2\n").is_err());
        assert!(Marker::parse("pid x\nstart 2\n").is_err());
    }

    #[test]
    fn only_numeric_values_of_our_knobs_are_restored() {
        assert!(restorable("strict_limit", "0"));
        assert!(restorable("max_ratio_fine", "1000000"));
        assert!(!restorable("read_ahead_kb", "128"));
        assert!(!restorable("max_ratio", "100 ; reboot"));
        assert!(!restorable("max_ratio", ""));
        assert!(!restorable("../../power/state", "1"));
    }
}
