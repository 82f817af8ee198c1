//! `wbscope diff`'s arguments.
use std::path::PathBuf;

use clap::Args;

use wbscope_model::diff::Rule;

const EXAMPLES: &str = "\
Examples:
  wbscope compare --dir /mnt/data --size 256M --strategies buffered,fsync-end --repeat 3 --json > base.json
  # ... change the kernel, a sysctl, the filesystem ...
  wbscope compare --dir /mnt/data --size 256M --strategies buffered,fsync-end --repeat 3 --json > new.json
  wbscope diff base.json new.json
  wbscope diff base.json new.json --fail-if 'write_mb_s < -5%' --fail-if 'fsync_p99 > +20%'
  wbscope diff base.json new.json --fail-if 'finding dirty-throttled appears' --json
  wbscope diff base1.json,base2.json new.json --html diff.html
  wbscope diff base.json new.json --markdown >> $GITHUB_STEP_SUMMARY
  wbscope diff runs/base/ runs/new/ --rule either       # every .json and recording in each directory
  wbscope diff monday.rec,tuesday.rec friday.rec        # recordings: the kernel's figures

A and B are each one or more results of the same kind: compare documents,
scenario documents of one scenario (runs of --repeat N are the samples),
or recordings (one sample each). Per column (strategy, filesystem) and
figure: each side's mean ±relative stddev, the change, LKP's rule (the
runs do not overlap and |change| >= 5%) and mmtests' (|difference of
means| > both 95% half-widths, Student t). --fail-if exits 3 when an
expression holds significantly: FIGURE[@COLUMN] OP PERCENT, or finding
NAME appears|disappears. Figures and the CI recipe: docs/diff.md.
Exit status: 0, 3 when a --fail-if holds, 2 on bad arguments, 1 on errors.";

/// Arguments of `wbscope diff`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct DiffArgs {
    /// The base: a file, several joined by commas, or a directory (its
    /// .json files and recordings).
    #[arg(value_name = "A")]
    pub(crate) a: String,
    /// The one to judge, as A.
    #[arg(value_name = "B")]
    pub(crate) b: String,
    /// Exit 3 when EXPR holds significantly, e.g. 'write_mb_s < -5%',
    /// 'fsync_p99 > +20%', 'finding dirty-throttled appears'. Repeatable.
    #[arg(long = "fail-if", value_name = "EXPR")]
    pub(crate) fail_if: Vec<String>,
    /// Which rule makes a change significant.
    #[arg(long, value_parser = super::named::parser::<Rule>(), default_value = "both")]
    pub(crate) rule: Rule,
    /// One JSON document instead of the table.
    #[arg(long, conflicts_with = "markdown")]
    pub(crate) json: bool,
    /// The table as Markdown.
    #[arg(long)]
    pub(crate) markdown: bool,
    /// Also write an HTML page: the table, and each figure's runs of both
    /// sides on one axis (never overwritten).
    #[arg(long, value_name = "FILE.html")]
    pub(crate) html: Option<PathBuf>,
}
