//! Debian's archive through apt with a private configuration under
//! target/vm/apt/: its own sources list (every suite the matrix draws
//! from), package lists, cache and an empty dpkg status, with the archive's
//! keys from `debian-archive-keyring`. The machine's own sources, lists
//! and preferences are never read or changed.
//!
//! Kernels are named by series, not by build: the matrix asks for the
//! newest version of a meta package (`linux-image-amd64`, `-rt-amd64`,
//! `-cloud-amd64`) in a series (`6.1.`), or the newest of all, and
//! downloads whatever that version depends on, so that an archive update
//! never leaves a package name the archive no longer has.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, bail};
use wbscope_programs as programs;

/// The keyring `debian-archive-keyring` installs (bullseye to trixie keys,
/// which sign every suite below).
pub(crate) const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// Suites the kernels come from: each stable release with its security
/// updates (where Debian puts the newest kernel of a release) and
/// backports, then unstable and experimental for the newest kernel.
const SOURCES: &[(&str, &str)] = &[
    ("http://deb.debian.org/debian", "bullseye"),
    ("http://deb.debian.org/debian-security", "bullseye-security"),
    ("http://deb.debian.org/debian", "bookworm"),
    ("http://deb.debian.org/debian-security", "bookworm-security"),
    ("http://deb.debian.org/debian", "bookworm-backports"),
    ("http://deb.debian.org/debian", "trixie"),
    ("http://deb.debian.org/debian-security", "trixie-security"),
    ("http://deb.debian.org/debian", "trixie-backports"),
    ("http://deb.debian.org/debian", "sid"),
    ("http://deb.debian.org/debian", "experimental"),
];

/// Lists older than this are fetched again before a kernel is resolved:
/// "the newest version at download time" without an `apt-get update` on
/// every run.
const LISTS_MAX_AGE: Duration = Duration::from_secs(12 * 3600);

/// apt with the private configuration rooted at `dir`.
pub(crate) struct Apt {
    dir: PathBuf,
    /// `apt-get`/`apt-cache` programs (the tests' stand-ins replace them).
    apt_get: String,
    apt_cache: String,
}

impl Apt {
    pub(crate) fn new(dir: &Path) -> Apt {
        Apt {
            dir: dir.to_path_buf(),
            apt_get: programs::APT_GET.name.into(),
            apt_cache: programs::APT_CACHE.name.into(),
        }
    }

    fn config_file(&self) -> PathBuf {
        self.dir.join("apt.conf")
    }

    /// Writes the configuration (every run: it names absolute paths).
    fn configure(&self) -> anyhow::Result<()> {
        for sub in [
            "etc/sources.list.d",
            "etc/preferences.d",
            "etc/apt.conf.d",
            "state/lists/partial",
            "cache/archives/partial",
        ] {
            let d = self.dir.join(sub);
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        }
        let status = self.dir.join("state/status");
        if !status.exists() {
            std::fs::write(&status, "")?;
        }
        let sources: String = SOURCES
            .iter()
            .map(|(uri, suite)| format!("deb [signed-by={KEYRING}] {uri} {suite} main\n"))
            .collect();
        std::fs::write(self.dir.join("etc/sources.list"), sources)?;
        let d = self.dir.display();
        // Dir::Etc::parts: not the machine's apt.conf.d (which may add
        // index targets or proxies meant for its own sources).
        // Check-Valid-Until off: experimental's Release outlives its
        // Valid-Until on the mirrors between uploads (seen: "expired
        // (invalid since 25d)"), and apt then keeps none of its lists; the
        // signatures are still checked.
        let conf = format!(
            "Dir::Etc::sourcelist \"{d}/etc/sources.list\";\n\
             Dir::Etc::sourceparts \"{d}/etc/sources.list.d\";\n\
             Dir::Etc::preferences \"{d}/etc/preferences\";\n\
             Dir::Etc::preferencesparts \"{d}/etc/preferences.d\";\n\
             Dir::Etc::parts \"{d}/etc/apt.conf.d\";\n\
             Dir::State \"{d}/state\";\n\
             Dir::State::status \"{d}/state/status\";\n\
             Dir::Cache \"{d}/cache\";\n\
             APT::Architecture \"amd64\";\n\
             APT::Architectures {{ \"amd64\"; }};\n\
             Acquire::Languages \"none\";\n\
             Acquire::Check-Valid-Until \"false\";\n\
             APT::Sandbox::User \"root\";\n"
        );
        std::fs::write(self.config_file(), conf)?;
        Ok(())
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("APT_CONFIG", self.config_file()).env("LC_ALL", "C");
        cmd
    }

    /// Fetches the package lists when they are missing or older than
    /// [`LISTS_MAX_AGE`]. A failed update with lists at hand is a note
    /// (the cached lists still resolve); without lists it is an error.
    pub(crate) fn update_if_stale(&self) -> anyhow::Result<()> {
        self.configure()?;
        let lists = self.dir.join("state/lists");
        let stamp = self.dir.join("state/updated");
        let fresh = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < LISTS_MAX_AGE);
        if fresh {
            return Ok(());
        }
        eprintln!(
            "xtask: vm: apt-get update (private lists in {})",
            lists.display()
        );
        let out = self
            .command(&self.apt_get)
            .args(["update", "-qq"])
            .output()
            .with_context(|| format!("running {}", self.apt_get))?;
        let have_lists = std::fs::read_dir(&lists)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with("Packages"))
            })
            .unwrap_or(false);
        if out.status.success() {
            std::fs::write(&stamp, "")?;
            return Ok(());
        }
        let why = last_error(&String::from_utf8_lossy(&out.stderr));
        if have_lists {
            eprintln!("xtask: vm: apt-get update failed ({why}); using the lists from before");
            Ok(())
        } else {
            bail!("apt-get update failed: {why}")
        }
    }

    /// Every (version, suite) apt knows for `package`.
    fn versions(&self, package: &str) -> anyhow::Result<Vec<(String, String)>> {
        let out = self
            .command(&self.apt_cache)
            .args(["madison", package])
            .output()
            .with_context(|| format!("running {}", self.apt_cache))?;
        Ok(parse_madison(&String::from_utf8_lossy(&out.stdout)))
    }

    /// The newest version of `meta` whose version starts with `series`
    /// (any version when `None`), and the suite it is in.
    pub(crate) fn newest(
        &self,
        meta: &str,
        series: Option<&str>,
    ) -> anyhow::Result<(String, String)> {
        let mut best: Option<(String, String)> = None;
        for (version, suite) in self.versions(meta)? {
            if series.is_some_and(|s| !version.starts_with(s)) {
                continue;
            }
            let newer = match &best {
                None => true,
                Some((b, _)) => version_greater(&version, b)?,
            };
            if newer {
                best = Some((version, suite));
            }
        }
        best.with_context(|| match series {
            Some(s) => format!("no {meta} of series {s} in the archive's lists"),
            None => format!("no {meta} in the archive's lists"),
        })
    }

    /// The `Depends` of `package` at `version`, names only.
    pub(crate) fn depends(&self, package: &str, version: &str) -> anyhow::Result<Vec<String>> {
        let out = self
            .command(&self.apt_cache)
            .args(["show", &format!("{package}={version}")])
            .output()
            .with_context(|| format!("running {}", self.apt_cache))?;
        if !out.status.success() {
            bail!(
                "apt-cache show {package}={version}: {}",
                last_error(&String::from_utf8_lossy(&out.stderr))
            );
        }
        Ok(parse_depends(&String::from_utf8_lossy(&out.stdout)))
    }

    /// `apt-get download PACKAGE=VERSION...` into `dest`.
    pub(crate) fn download(
        &self,
        packages: &[(String, String)],
        dest: &Path,
    ) -> anyhow::Result<()> {
        std::fs::create_dir_all(dest)?;
        let out = self
            .command(&self.apt_get)
            .args(["download", "-q"])
            .args(packages.iter().map(|(p, v)| format!("{p}={v}")))
            .current_dir(dest)
            .output()
            .with_context(|| format!("running {}", self.apt_get))?;
        if !out.status.success() {
            bail!(
                "apt-get download: {}",
                last_error(&String::from_utf8_lossy(&out.stderr))
            );
        }
        Ok(())
    }
}

/// apt's last `E:` line, else its last line.
fn last_error(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("E:"))
        .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("no message")
        .trim()
        .to_string()
}

/// `apt-cache madison` lines: `pkg | version | uri suite/main amd64 Packages`.
fn parse_madison(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut cols = l.split('|').map(str::trim);
            let _pkg = cols.next()?;
            let version = cols.next()?;
            let source = cols.next()?;
            let suite = source
                .split_whitespace()
                .nth(1)?
                .split('/')
                .next()?
                .to_string();
            Some((version.to_string(), suite))
        })
        .collect()
}

/// Package names of the first `Depends:` field (alternatives included).
fn parse_depends(text: &str) -> Vec<String> {
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("Depends:")) else {
        return Vec::new();
    };
    line.split([',', '|'])
        .filter_map(|d| d.split_whitespace().next())
        .map(|n| n.split(':').next().unwrap_or(n).to_string())
        .collect()
}

/// Debian version order, by dpkg itself.
fn version_greater(a: &str, b: &str) -> anyhow::Result<bool> {
    let status = programs::DPKG
        .command()
        .args(["--compare-versions", a, "gt", b])
        .status()
        .context("running dpkg --compare-versions")?;
    Ok(status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn madison_and_depends_lines() {
        let madison = "linux-image-amd64 | 7.3.4-1~bpo13+1 | http://deb.debian.org/debian trixie-backports/main amd64 Packages\n\
             linux-image-amd64 |  6.1.192-3 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages\n";
        assert_eq!(
            parse_madison(madison),
            vec![
                (
                    "7.3.4-1~bpo13+1".to_string(),
                    "trixie-backports".to_string()
                ),
                ("6.1.192-3".to_string(), "bookworm-security".to_string()),
            ]
        );
        let show = "Package: linux-image-amd64\nVersion: 7.3.4-1~bpo13+1\n\
                    Depends: linux-base-amd64 (= 7.3.4-1~bpo13+1), linux-image-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1) | foo, linux-modules-amd64\n";
        assert_eq!(
            parse_depends(show),
            vec![
                "linux-base-amd64",
                "linux-image-7.3.4+deb13-amd64",
                "foo",
                "linux-modules-amd64"
            ]
        );
        assert!(parse_depends("Package: x\n").is_empty());
    }

    #[test]
    fn dpkg_orders_versions() {
        assert!(version_greater("7.3.4-1~bpo13+1", "7.3~rc7-1~exp1").unwrap());
        assert!(version_greater("6.1.192-3", "6.1.176-1").unwrap());
        assert!(!version_greater("5.10.223-1", "5.10.262-1").unwrap());
    }

    #[test]
    fn newest_of_a_series() {
        let dir = std::env::temp_dir().join(format!("xtask-apt-newest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("apt-cache");
        std::fs::write(
            &fake,
            "#!/bin/sh\ncat <<'E'\n\
             m | 6.12.118-1 | http://x/debian trixie-security/main amd64 Packages\n\
             m | 6.1.192-3 | http://x/debian bookworm-security/main amd64 Packages\n\
             m | 6.1.176-1 | http://x/debian bookworm/main amd64 Packages\n\
             m | 7.3~rc7-1~exp1 | http://x/debian experimental/main amd64 Packages\nE\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut apt = Apt::new(&dir);
        apt.apt_cache = fake.display().to_string();
        let got = (
            apt.newest("m", Some("6.1.")).unwrap(),
            apt.newest("m", None).unwrap(),
            apt.newest("m", Some("5.10.")).map_err(|e| e.to_string()),
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got.0, ("6.1.192-3".into(), "bookworm-security".into()));
        assert_eq!(got.1, ("7.3~rc7-1~exp1".into(), "experimental".into()));
        assert_eq!(
            got.2,
            Err("no m of series 5.10. in the archive's lists".into())
        );
    }
}
