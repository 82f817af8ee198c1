//! `cargo xtask vm-scenario`: the same classic case on several kernels,
//! side by side. Each kernel of the VM matrix boots under qemu
//! with the same virtual disk (a sparse raw image, ext4), memory (1 GiB)
//! and one vCPU, and runs `wbscope scenario NAME --scale tiny --repeat N
//! --json` there (checks.sh, group `scenario`); the host then asks
//! `wbscope diff FIRST OTHER --json` for each later kernel against the
//! first and prints Fengguang Wu's table: a row per case and figure, a
//! column per kernel with the change against the first, the significance
//! marks of `wbscope diff` (LKP's and mmtests' rules, docs/diff.md), and
//! TOTAL rows. The statistics stay in wbscope: this only lays out its
//! answers.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::{
    kernel::KernelSpec,
    matrix::{self, GuestScenarios, Shared},
    qemu::GuestPlan,
};

/// What `cargo xtask vm-scenario` was asked.
pub(crate) struct ScenarioOptions {
    /// Kernel labels of the VM matrix, the first the base.
    pub(crate) kernels: Vec<String>,
    /// `wbscope scenario` names.
    pub(crate) scenarios: Vec<String>,
    /// Runs per variant and kernel (`--repeat`): 3 or more give the
    /// significance rules something to judge.
    pub(crate) repeat: u32,
}

/// The scenario guests' [`GuestPlan::kind`]: their work dirs are
/// `run/<label>-scenario`, apart from the checks' guests of the same
/// kernel, which may run at the same time.
pub(crate) const GUEST_KIND: &str = "scenario";

/// The scenario guests: a 4 GiB sparse test disk (tiny scale makes one
/// 1 GiB sparse image per filesystem in /var/tmp, and writes up to 256 MiB
/// a run); a step is one whole scenario, up to five minutes a round of
/// its variants (one round of single-stream or package-unpack takes
/// 10-20 s under TCG here), so that a guest that hangs is stopped.
fn plan(repeat: u32) -> GuestPlan {
    GuestPlan {
        kind: GUEST_KIND,
        disk_bytes: 4 << 30,
        step_limit: Duration::from_secs(300 * u64::from(repeat)),
        max_cpus: 1,
        memory_mib: matrix::GUEST_MEMORY_MIB,
    }
}

/// The figures shown per case, the writer's first, then the writeback
/// internals behind them (docs/diff.md names each).
const FIGURES: &[&str] = &[
    "write_mb_s",
    "durable_mb_s",
    "files_per_s",
    "elapsed_s",
    "fsync_p99",
    "sys_cpu_s",
    "pages_per_call_mean",
    "scanned_per_page",
    "ns_per_page",
    "throttle_ms_per_s",
    "dirty_mean_mib",
    "writeback_mean_mib",
    "pages_per_pass_mean",
    "request_kib_mean",
];

/// The figures summed over the cases in TOTAL rows (as Wu's tables sum
/// throughput and time over the dd cases).
const TOTALS: &[&str] = &["write_mb_s", "durable_mb_s", "elapsed_s"];

/// `cargo xtask vm-scenario`: with a release wbscope (or
/// `WBSCOPE_VM_BINARY`), as the guests of `vm-test` run; the kernels'
/// guests in [`matrix::lanes`].
pub(crate) fn vm_scenario(opts: &ScenarioOptions) -> anyhow::Result<()> {
    validate(opts)?;
    xtask::setup::ensure_tools(xtask::setup::Scope::Vm)?;
    let wbscope = matrix::wbscope_binary()?;
    check_names(opts, &wbscope)?;
    let lanes = matrix::lanes()?;
    let base = matrix::Base::new(&wbscope)?;
    let scenario = Scenario::new(opts, &base)?;
    let mut guests: Vec<Option<anyhow::Result<String>>> =
        scenario.specs.iter().map(|_| None).collect();
    crate::lanes::run(lanes, scenario.jobs(), |i, r| guests[i] = Some(r));
    scenario.finish(guests).map(|_| ())
}

/// What `cargo xtask test` runs beside the VM checks, with the debug
/// wbscope it tested: the command end to end on two kernels of the suite
/// (6.12 and its PREEMPT_RT build, downloaded for the checks too), one
/// scenario of four variants, two runs each. One scenario is enough to
/// carry the runs through the guests, the documents and the table: a
/// second (package-unpack) added about 65 s to each guest under TCG (57 s
/// of its writers' time), and `wbscope scenario` itself is tested on the
/// host (writeback-user/tests/suite/scenario_tiny.rs).
pub(crate) fn smoke_options() -> ScenarioOptions {
    ScenarioOptions {
        kernels: vec!["6.12".into(), "6.12-rt".into()],
        scenarios: vec!["single-stream".into()],
        repeat: 2,
    }
}

/// The smoke run's verdict on its table ([`Scenario::finish`]'s): each
/// scenario's section and at least two figure rows.
pub(crate) fn smoke_verdict(opts: &ScenarioOptions, text: &str) -> anyhow::Result<()> {
    for name in &opts.scenarios {
        if !text.contains(&format!(
            "### {name} ({} runs per case on the base)",
            opts.repeat
        )) {
            bail!("vm-scenario: the table has no {name} section:\n{text}");
        }
    }
    let rows = text
        .lines()
        .filter(|l| l.contains("| write_mb_s |"))
        .count();
    if rows < 2 {
        bail!("vm-scenario: {rows} write_mb_s rows in the table:\n{text}");
    }
    println!(
        "vm-scenario: {} against {}, {rows} write_mb_s rows: ok",
        opts.kernels[0],
        opts.kernels[1..].join(", ")
    );
    Ok(())
}

/// The options' own errors, before anything is built or booted.
pub(crate) fn validate(opts: &ScenarioOptions) -> anyhow::Result<()> {
    if opts.kernels.len() < 2 {
        bail!("name at least two kernels (the first is the base), e.g. --kernels 6.12,newest");
    }
    if let Some((i, k)) = opts
        .kernels
        .iter()
        .enumerate()
        .find(|(i, k)| opts.kernels[..*i].contains(k))
    {
        bail!(
            "{k:?} is named twice (kernel {} of --kernels): name each kernel once (its guest's \
             work dir and documents are named by its label)",
            i + 1
        );
    }
    if opts.scenarios.iter().any(|s| s == "sync-after-write") {
        bail!("sync-after-write has no --repeat (one sync per document): choose other scenarios");
    }
    if opts.repeat < 2 {
        bail!("--repeat must be at least 2: one run a side has no spread to judge a change by");
    }
    specs(opts).map(|_| ())
}

fn specs(opts: &ScenarioOptions) -> anyhow::Result<Vec<&'static KernelSpec>> {
    opts.kernels
        .iter()
        .map(|k| match matrix::select(Some(k))?.as_slice() {
            [one] => Ok(*one),
            _ => bail!("{k:?} names several kernels: list single kernels, the first the base"),
        })
        .collect()
}

/// A name the guests' wbscope would refuse, said before anything is
/// built or booted.
pub(crate) fn check_names(opts: &ScenarioOptions, wbscope: &Path) -> anyhow::Result<()> {
    let known = scenario_names(wbscope)?;
    if let Some(bad) = opts.scenarios.iter().find(|s| !known.contains(s)) {
        bail!("unknown scenario {bad:?}: choose from {}", known.join(", "));
    }
    Ok(())
}

/// A vm-scenario ready to boot: a job per kernel, then the table.
pub(crate) struct Scenario<'a> {
    opts: &'a ScenarioOptions,
    specs: Vec<&'static KernelSpec>,
    base: &'a matrix::Base,
    shared: Shared,
    /// target/vm/scenario: a directory of documents per kernel, the table.
    results: PathBuf,
    started: Instant,
}

impl<'a> Scenario<'a> {
    /// The scenario guests' initramfs beside `base`'s root image.
    pub(crate) fn new(opts: &'a ScenarioOptions, base: &'a matrix::Base) -> anyhow::Result<Self> {
        let specs = specs(opts)?;
        let shared = base.shared(
            "scenario",
            &GuestScenarios {
                names: &opts.scenarios.join(" "),
                repeat: opts.repeat,
            },
        )?;
        Ok(Scenario {
            opts,
            specs,
            base,
            shared,
            results: base.root().join("scenario"),
            started: Instant::now(),
        })
    }

    /// A job per kernel, the base first: boot, run the scenarios, copy
    /// their documents to `results/<label>/`; each gives the kernel's
    /// release.
    pub(crate) fn jobs(&self) -> Vec<crate::lanes::Job<'_, String>> {
        self.specs
            .iter()
            .map(|spec| Box::new(move || self.guest(spec)) as crate::lanes::Job<'_, String>)
            .collect()
    }

    fn guest(&self, spec: &KernelSpec) -> anyhow::Result<String> {
        let t0 = Instant::now();
        eprintln!(
            "xtask: vm-scenario: {} ({} x {} runs per variant)…",
            spec.label,
            self.opts.scenarios.join(" "),
            self.opts.repeat
        );
        let booted = matrix::boot(
            spec,
            self.base.root(),
            &self.shared,
            &plan(self.opts.repeat),
        )
        .with_context(|| format!("kernel {}", spec.label))?;
        let dir = self.results.join(spec.label);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for name in &self.opts.scenarios {
            collect(&booted.out, name, &dir.join(format!("{name}.json")))
                .with_context(|| format!("kernel {} ({})", spec.label, booted.release))?;
        }
        eprintln!(
            "xtask: vm-scenario: {} kernel {}: {:.0} s",
            spec.label,
            booted.release,
            t0.elapsed().as_secs_f64()
        );
        Ok(booted.release)
    }

    /// After every guest (`guests[i]` what [`Self::jobs`]' job `i` gave):
    /// asks `wbscope diff` for each later kernel against the first,
    /// prints and returns the table; fails naming every guest that did
    /// not give its documents.
    pub(crate) fn finish(
        &self,
        guests: Vec<Option<anyhow::Result<String>>>,
    ) -> anyhow::Result<String> {
        let mut releases = Vec::new();
        let mut errors = Vec::new();
        for (spec, guest) in self.specs.iter().zip(guests) {
            match guest {
                Some(Ok(release)) => releases.push(release),
                Some(Err(e)) => errors.push(format!("{e:#}")),
                None => errors.push(format!("kernel {}: its guest did not run", spec.label)),
            }
        }
        if !errors.is_empty() {
            bail!("{}", errors.join("; "));
        }
        let wbscope = self.base.wbscope();
        let results = &self.results;
        let mut text = String::new();
        for name in &self.opts.scenarios {
            let base = results
                .join(self.specs[0].label)
                .join(format!("{name}.json"));
            let diffs = self.specs[1..]
                .iter()
                .map(|s| {
                    diff(
                        wbscope,
                        &base,
                        &results.join(s.label).join(format!("{name}.json")),
                    )
                })
                .collect::<anyhow::Result<Vec<Value>>>()?;
            text.push_str(&table(name, &releases, &diffs));
        }
        let md = results.join("table.md");
        std::fs::write(&md, &text).with_context(|| format!("writing {}", md.display()))?;
        println!("{text}");
        eprintln!(
            "xtask: vm-scenario: {:.0} s; the table is in {}, each kernel's documents beside it",
            self.started.elapsed().as_secs_f64(),
            md.display()
        );
        Ok(text)
    }
}

/// The scenario names `wbscope scenario --help` lists.
fn scenario_names(wbscope: &Path) -> anyhow::Result<Vec<String>> {
    let out = Command::new(wbscope)
        .args(["scenario", "--help"])
        .output()
        .context("running wbscope scenario --help")?;
    let names = possible_values(&String::from_utf8_lossy(&out.stdout));
    if names.is_empty() {
        bail!("wbscope scenario --help lists no scenario");
    }
    Ok(names)
}

/// The first "Possible values:" list of clap's long help: the lines
/// `- NAME: what it is` up to the first blank line.
fn possible_values(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Possible values:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split(':').next())
        .map(|n| n.trim().to_string())
        .collect()
}

/// Copies scenario `name`'s document out of a guest's results, or says
/// why the guest has none (its exit status and the last line it wrote).
fn collect(out: &Path, name: &str, dest: &Path) -> anyhow::Result<()> {
    let read = |ext: &str| std::fs::read_to_string(out.join(format!("scenario-{name}.{ext}")));
    let rc = read("rc").unwrap_or_default();
    if rc.trim() != "0" {
        let err = read("err").unwrap_or_default();
        bail!(
            "wbscope scenario {name} in the guest: exit status {}: {}",
            if rc.trim().is_empty() {
                "none (it did not finish)"
            } else {
                rc.trim()
            },
            err.lines().last().unwrap_or("no message")
        );
    }
    let doc = read("json").with_context(|| format!("scenario {name}: no document"))?;
    std::fs::write(dest, doc).with_context(|| format!("writing {}", dest.display()))?;
    // The bdis' stats sampled beside it, where the guest had debugfs.
    if let Ok(stats) = read("bdi") {
        let at = dest.with_extension("bdi");
        std::fs::write(&at, stats).with_context(|| format!("writing {}", at.display()))?;
    }
    Ok(())
}

/// `wbscope diff BASE OTHER --json`: exit 0 (a gate would give 3; none
/// is asked here).
fn diff(wbscope: &Path, base: &Path, other: &Path) -> anyhow::Result<Value> {
    let out = Command::new(wbscope)
        .arg("diff")
        .args([base, other])
        .arg("--json")
        .output()
        .context("running wbscope diff")?;
    if !out.status.success() {
        bail!(
            "wbscope diff {} {}: {}",
            base.display(),
            other.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("reading wbscope diff --json")
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// A figure as the base column shows it: the mean, and the relative
/// standard deviation when it rounds to 1% or more (as LKP prints it).
fn base_cell(a: &Value) -> String {
    let mean = num(&a["mean"]).map_or("—".into(), short);
    match num(&a["rel_stddev"]) {
        Some(r) if (r * 100.0).round() >= 1.0 => format!("{mean} ±{:.0}%", r * 100.0),
        _ => mean,
    }
}

/// A later kernel's cell: the change in per cent, `*` when significant
/// (both rules, `wbscope diff`'s default), with the verdict's word.
fn change_cell(row: &Value) -> String {
    let change = match num(&row["change_pct"]) {
        Some(c) => format!("{c:+.1}%"),
        None if num(&row["b"]["mean"]).unwrap_or(0.0) != 0.0 => "from 0".into(),
        None => "0".into(),
    };
    match row["verdict"].as_str() {
        Some(v @ ("worse" | "better" | "changed")) => format!("{change} * {v}"),
        _ => change,
    }
}

/// Three significant digits, no exponent.
fn short(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// The row of `figure` in a diff column, if both sides had it.
fn row<'a>(column: &'a Value, figure: &str) -> Option<&'a Value> {
    column["rows"]
        .as_array()?
        .iter()
        .find(|r| r["figure"] == figure)
}

/// The column named `name` of a diff.
fn column<'a>(diff: &'a Value, name: &str) -> Option<&'a Value> {
    diff["columns"]
        .as_array()?
        .iter()
        .find(|c| c["column"] == name)
}

/// Wu's table for one scenario: `releases[0]` is the base, `diffs[i]` is
/// `wbscope diff` of the base against `releases[i + 1]`. Markdown.
pub(crate) fn table(scenario: &str, releases: &[String], diffs: &[Value]) -> String {
    let mut s = String::new();
    let runs = diffs
        .first()
        .and_then(|d| d["columns"].get(0))
        .map(|c| format!("{} runs per case on the base", c["runs_a"]))
        .unwrap_or_default();
    let _ = writeln!(s, "### {scenario} ({runs})\n");
    let _ = writeln!(
        s,
        "| case | figure | {} |",
        releases
            .iter()
            .enumerate()
            .map(|(i, r)| if i == 0 {
                format!("{r} (base)")
            } else {
                r.clone()
            })
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(s, "|---|---|{}", "---|".repeat(releases.len()));
    let cases: Vec<&str> = diffs
        .first()
        .and_then(|d| d["columns"].as_array())
        .map(|cs| cs.iter().filter_map(|c| c["column"].as_str()).collect())
        .unwrap_or_default();
    // TOTAL: per figure, the base's and each kernel's sums of means over
    // the cases every kernel has it in.
    let mut totals: Vec<(&str, Vec<f64>)> = TOTALS
        .iter()
        .map(|f| (*f, vec![0.0; releases.len()]))
        .collect();
    for case in &cases {
        let cols: Vec<Option<&Value>> = diffs.iter().map(|d| column(d, case)).collect();
        for figure in FIGURES {
            let rows: Vec<Option<&Value>> = cols
                .iter()
                .map(|c| c.and_then(|c| row(c, figure)))
                .collect();
            let Some(first) = rows.iter().flatten().next() else {
                continue;
            };
            let cells: Vec<String> = rows
                .iter()
                .map(|r| r.map_or("—".into(), change_cell))
                .collect();
            let _ = writeln!(
                s,
                "| {case} | {figure} | {} | {} |",
                base_cell(&first["a"]),
                cells.join(" | ")
            );
            if let Some((_, sums)) = totals.iter_mut().find(|(f, _)| f == figure)
                && rows.iter().all(Option::is_some)
            {
                sums[0] += num(&first["a"]["mean"]).unwrap_or(0.0);
                for (i, r) in rows.iter().flatten().enumerate() {
                    sums[i + 1] += num(&r["b"]["mean"]).unwrap_or(0.0);
                }
            }
        }
    }
    for (figure, sums) in &totals {
        if sums[0] == 0.0 {
            continue;
        }
        let later: Vec<String> = sums[1..]
            .iter()
            .map(|v| format!("{:+.1}%", (v / sums[0] - 1.0) * 100.0))
            .collect();
        let _ = writeln!(
            s,
            "| TOTAL | {figure} | {} | {} |",
            short(sums[0]),
            later.join(" | ")
        );
    }
    let _ = writeln!(
        s,
        "\nBase: mean ±relative standard deviation (shown from 1%). Later kernels: the \
         change of the mean against the base; `*` and the verdict when `wbscope diff` \
         finds it significant under both LKP's and mmtests' rules (docs/diff.md). TOTAL: \
         the sum of the cases' means; no significance.\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn has(t: &str, line: &str) {
        assert!(t.contains(line), "{line:?} not in:\n{t}");
    }

    fn side(mean: f64, rel: Option<f64>) -> Value {
        json!({"n": 3, "mean": mean, "rel_stddev": rel})
    }

    fn diff_of(cases: &[(&str, f64, f64, &str)]) -> Value {
        json!({"columns": cases.iter().map(|(case, a, b, verdict)| json!({
            "column": case, "runs_a": 3, "runs_b": 3,
            "rows": [{
                "figure": "write_mb_s",
                "a": side(*a, Some(0.02)),
                "b": side(*b, Some(0.001)),
                "change_pct": (b / a - 1.0) * 100.0,
                "verdict": verdict,
            }],
        })).collect::<Vec<_>>()})
    }

    #[test]
    fn the_table_has_a_column_per_kernel_marks_and_totals() {
        let releases = ["6.1.0-40".to_string(), "6.12.57".into(), "7.3.4".into()];
        let d1 = diff_of(&[
            ("ext4 buffered", 400.0, 300.0, "worse"),
            ("ext4 direct", 100.0, 101.0, "same"),
        ]);
        let d2 = diff_of(&[
            ("ext4 buffered", 400.0, 500.0, "better"),
            ("ext4 direct", 100.0, 100.0, "same"),
        ]);
        let t = table("single-stream", &releases, &[d1, d2]);
        has(&t, "### single-stream (3 runs per case on the base)");
        has(&t, "| case | figure | 6.1.0-40 (base) | 6.12.57 | 7.3.4 |");
        has(
            &t,
            "| ext4 buffered | write_mb_s | 400 ±2% | -25.0% * worse | +25.0% * better |",
        );
        has(&t, "| ext4 direct | write_mb_s | 100 ±2% | +1.0% | +0.0% |");
        // 500 -> 401 and 600: -19.8% and +20.0%.
        has(&t, "| TOTAL | write_mb_s | 500 | -19.8% | +20.0% |");
        // Figures no kernel has are not rows.
        assert!(!t.contains("fsync_p99"), "{t}");
    }

    #[test]
    fn a_case_one_kernel_lacks_is_a_dash_and_out_of_the_total() {
        let releases = ["a".to_string(), "b".into(), "c".into()];
        let d1 = diff_of(&[("x", 10.0, 20.0, "better"), ("y", 5.0, 5.0, "same")]);
        let d2 = diff_of(&[("x", 10.0, 10.0, "same")]);
        let t = table("s", &releases, &[d1, d2]);
        has(&t, "| y | write_mb_s | 5.00 ±2% | +0.0% | — |");
        has(&t, "| TOTAL | write_mb_s | 10.0 | +100.0% | +0.0% |");
    }

    #[test]
    fn scenario_names_are_the_first_list_of_possible_values() {
        let help = "Arguments:\n  [NAME]\n          Which\n\n          Possible values:\n          \
            - single-stream:     One large file\n          - package-unpack:    Many: small\n\n\
            Options:\n          Possible values:\n          - tiny:  Under a minute\n";
        assert_eq!(possible_values(help), ["single-stream", "package-unpack"]);
        assert!(possible_values("no list").is_empty());
    }

    #[test]
    fn a_kernel_named_twice_is_refused() {
        let opts = |kernels: &[&str]| ScenarioOptions {
            kernels: kernels.iter().map(|k| k.to_string()).collect(),
            scenarios: vec!["single-stream".into()],
            repeat: 2,
        };
        let e = validate(&opts(&["6.12", "6.1", "6.12"])).unwrap_err();
        assert!(e.to_string().contains("\"6.12\" is named twice"), "{e}");
        validate(&opts(&["6.12", "6.12-rt"])).unwrap();
        validate(&smoke_options()).unwrap();
    }

    #[test]
    fn cells_read_as_the_tools_print_them() {
        assert_eq!(base_cell(&side(812.25, Some(0.004))), "812");
        assert_eq!(base_cell(&side(0.5, None)), "0.500");
        let from_zero = json!({"change_pct": null, "b": {"mean": 3.0}, "verdict": "worse"});
        assert_eq!(change_cell(&from_zero), "from 0 * worse");
    }
}
