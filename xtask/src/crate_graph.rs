//! The layers, as Cargo holds them. Cargo refuses a cycle between crates
//! and an import of a crate not depended on, but it takes any dependency
//! a Cargo.toml declares, sideways or up. So the one rule left to check
//! is the table below: each crate of the workspace and the crates of the
//! workspace it may depend on (ARCHITECTURE.md draws the same graph), and
//! which crates may have aya, clap or tokio among their dependencies.
//! Read from `cargo metadata`, not from the sources.
use std::collections::{BTreeMap, BTreeSet};

/// Each workspace crate and the workspace crates it may depend on (normal
/// and build dependencies; dev-dependencies may reach further down, never
/// up: see [`dev_dependencies_point_down`]).
const LAYERS: &[(&str, &[&str])] = &[
    ("writeback-common", &[]),
    ("writeback-ebpf", &["writeback-common"]),
    ("wbscope-programs", &[]),
    ("scratchfs", &["wbscope-programs"]),
    ("writer-core", &[]),
    ("wbscope-model", &["writeback-common", "writer-core"]),
    ("wbscope-sys", &["scratchfs"]),
    (
        "wbscope-tracer",
        &[
            "writeback-common",
            "wbscope-model",
            "wbscope-sys",
            // Its build script's rustup and git.
            "wbscope-programs",
        ],
    ),
    (
        "wbscope-recording",
        &["writeback-common", "wbscope-model", "wbscope-sys"],
    ),
    (
        "wbscope-export",
        &[
            "writeback-common",
            "writer-core",
            "wbscope-model",
            "wbscope-sys",
        ],
    ),
    (
        "wbscope-capture",
        &[
            "writeback-common",
            "writer-core",
            "wbscope-model",
            "wbscope-sys",
            "wbscope-tracer",
        ],
    ),
    (
        "wbscope-dashboard",
        &[
            "writeback-common",
            "writer-core",
            "wbscope-model",
            "wbscope-sys",
            "wbscope-tracer",
        ],
    ),
    (
        "writeback-user",
        &[
            "writeback-common",
            "writer-core",
            "scratchfs",
            "wbscope-model",
            "wbscope-sys",
            "wbscope-tracer",
            "wbscope-recording",
            "wbscope-export",
            "wbscope-capture",
            "wbscope-dashboard",
        ],
    ),
    ("xtask", &["wbscope-programs"]),
    // wbscope-sys: the one single-process lock (its target/vm).
    ("wbscope-vm", &["xtask", "wbscope-programs", "wbscope-sys"]),
    (
        "wbscope-bench",
        &[
            "xtask",
            "wbscope-programs",
            "scratchfs",
            "writeback-common",
            "writer-core",
        ],
    ),
];

/// The one crate that loads BPF programs (writeback-common has aya too,
/// optionally, for the `Pod` impls of the records, as aya-template's
/// common crate does).
const AYA_CRATES: &[&str] = &["wbscope-tracer", "writeback-common"];

/// Crates that must stay plain data and arithmetic: no kernel surface, no
/// command line, no runtime.
const PLAIN: &[&str] = &["wbscope-model"];

/// A workspace crate's dependencies by kind: (name, kind) where kind is
/// `normal`, `dev` or `build`.
type Deps = BTreeMap<String, Vec<(String, String)>>;

fn workspace_deps() -> Deps {
    let meta = xtask::workspace_metadata().expect("cargo metadata");
    let mut deps = Deps::new();
    for package in meta["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("name").to_string();
        let list = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .map(|d| {
                (
                    d["name"].as_str().expect("dependency name").to_string(),
                    d["kind"].as_str().unwrap_or("normal").to_string(),
                )
            })
            .collect();
        deps.insert(name, list);
    }
    deps
}

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    LAYERS
        .iter()
        .map(|(name, deps)| (*name, deps.iter().copied().collect()))
        .collect()
}

#[test]
fn every_workspace_crate_is_in_the_table() {
    let deps = workspace_deps();
    let table = allowed();
    for name in deps.keys() {
        assert!(
            table.contains_key(name.as_str()),
            "{name} is not in LAYERS (xtask/src/crate_graph.rs): say what it may depend on"
        );
    }
    for name in table.keys() {
        assert!(
            deps.contains_key(*name),
            "LAYERS names {name}, which is gone"
        );
    }
}

#[test]
fn dependencies_point_down() {
    let deps = workspace_deps();
    let table = allowed();
    let mut wrong = Vec::new();
    for (name, list) in &deps {
        let Some(may) = table.get(name.as_str()) else {
            continue;
        };
        for (dep, kind) in list {
            let in_workspace = deps.contains_key(dep);
            if in_workspace && kind != "dev" && !may.contains(dep.as_str()) {
                wrong.push(format!("{name} -> {dep} ({kind})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against the layers (a change of design: move the type \
         down or the glue up, and redraw ARCHITECTURE.md):\n{}",
        wrong.join("\n")
    );
}

/// A dev-dependency may reach below or beside (writer-core's tests make
/// loop filesystems with scratchfs), never above: no test of a lower
/// layer builds a higher one. And no crate at all depends on the binary's
/// crate.
#[test]
fn dev_dependencies_point_down() {
    let deps = workspace_deps();
    let table = allowed();
    // Everything below a crate: its allowed dependencies, transitively.
    let below = |name: &str| {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&str> = table.get(name).into_iter().flatten().copied().collect();
        while let Some(next) = todo.pop() {
            if seen.insert(next) {
                todo.extend(table.get(next).into_iter().flatten().copied());
            }
        }
        seen
    };
    let mut wrong = Vec::new();
    for (name, list) in &deps {
        for (dep, kind) in list {
            if dep == "writeback-user" {
                wrong.push(format!(
                    "{name} -> writeback-user ({kind}): nothing depends on the binary"
                ));
            } else if kind == "dev"
                && deps.contains_key(dep)
                && dep != name
                && below(dep).contains(name.as_str())
            {
                wrong.push(format!("{name} -> {dep} (dev)"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn aya_only_in_the_tracer_and_the_model_plain() {
    let deps = workspace_deps();
    for (name, list) in &deps {
        let has = |what: &str| list.iter().any(|(d, k)| d == what && k != "dev");
        if has("aya") || has("aya-log") || has("aya-obj") {
            assert!(
                AYA_CRATES.contains(&name.as_str()),
                "{name} depends on aya: only the tracer loads BPF programs"
            );
        }
        if PLAIN.contains(&name.as_str()) {
            for what in ["aya", "clap", "tokio", "ratatui", "hyper"] {
                assert!(
                    !has(what),
                    "{name} depends on {what}: the model is plain data"
                );
            }
        }
    }
    assert!(
        deps["wbscope-tracer"].iter().any(|(d, _)| d == "aya"),
        "the tracer is where aya is"
    );
}
