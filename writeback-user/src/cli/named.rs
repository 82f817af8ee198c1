//! clap value parsers for the model's enums: the model stays free of
//! clap, and each value is parsed by the name the model gives it (the
//! same name lines and recordings print).
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use wbscope_model::{
    diff::Rule,
    plan::{HookKind, OptIn},
};

/// An enum of the model that `--flag NAME` takes by its name.
pub(crate) trait Named: Copy + Send + Sync + 'static {
    /// Every value, in the order `--help` lists them.
    fn all() -> &'static [Self];
    fn name(self) -> &'static str;
    /// One line for `--help`'s list of values; none where the flag's own
    /// help says what each value means.
    fn help(self) -> Option<&'static str> {
        None
    }
}

impl Named for HookKind {
    fn all() -> &'static [Self] {
        &HookKind::ALL
    }
    fn name(self) -> &'static str {
        HookKind::name(self)
    }
}

impl Named for OptIn {
    fn all() -> &'static [Self] {
        &OptIn::ALL
    }
    fn name(self) -> &'static str {
        OptIn::name(self)
    }
}

impl Named for Rule {
    fn all() -> &'static [Self] {
        &Rule::ALL
    }
    fn name(self) -> &'static str {
        Rule::name(self)
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            Rule::Both => "Both LKP's and mmtests' (fewest false alarms)",
            Rule::Either => "Either of them",
            Rule::Lkp => "LKP's alone: the runs do not overlap and the change is at least 5%",
            Rule::Mmtests => "mmtests' alone: the means differ by more than both 95% half-widths",
        })
    }
}

/// The value parser of a [`Named`] enum: its names as clap's possible
/// values (so a bad value is answered with the good ones), mapped back to
/// the value.
pub(crate) fn parser<T: Named>() -> impl TypedValueParser<Value = T> {
    let values = T::all().iter().map(|v| {
        let value = PossibleValue::new(v.name());
        match v.help() {
            Some(help) => value.help(help),
            None => value,
        }
    });
    PossibleValuesParser::new(values).try_map(|name: String| {
        T::all()
            .iter()
            .copied()
            .find(|v| v.name() == name)
            .ok_or_else(|| format!("unknown value {name:?}"))
    })
}
