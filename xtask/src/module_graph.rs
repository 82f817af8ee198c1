//! No import circle between the modules of one crate: at every level of a
//! crate's module tree, the sibling modules' `crate::`, `super::` and
//! `self::` paths (outside test code) must not form a cycle. Cargo holds
//! the graph between crates; within one, only this reading of the
//! sources does. A circle means a concept was cut in the wrong place:
//! move the shared item down, into the module it belongs to or one of its
//! own.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// A module's path in its crate: `["report", "data"]` for
/// `src/report/data.rs`; the crate root is empty.
type ModPath = Vec<String>;

fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("lib" | "main" | "mod")
    ) {
        parts.pop();
    }
    parts
}

/// The code before the inline test module, without line comments.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path the code names from `crate`, `super` or `self`, with
/// `use` groups expanded: `use super::{a, b::{c, d}}` gives `super::a`,
/// `super::b::c`, `super::b::d`.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| rest.starts_with(p))
            && (i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':'));
        if !starts {
            i += 1;
            continue;
        }
        let (len, found) = expand(rest);
        out.extend(found);
        i += len.max(1);
    }
    out
}

/// Expands the path at the start of `text` (with a trailing `{…}`
/// group), returning how many bytes it took and the full paths.
fn expand(text: &str) -> (usize, Vec<String>) {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let prefix = text[..end].trim_end_matches(':');
    if !text[end..].starts_with('{') {
        return (end, vec![prefix.to_string()]);
    }
    let mut depth = 0;
    let mut close = end;
    for (j, c) in text[end..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = end + j;
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &text[end + 1..close];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (j, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let mut out = Vec::new();
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let (_, sub) = expand(item);
        out.extend(sub.into_iter().map(|s| format!("{prefix}::{s}")));
    }
    (close + 1, out)
}

/// The module a path in `here` points into: the longest prefix that is a
/// module of the crate.
fn target(here: &ModPath, path: &str, modules: &BTreeSet<ModPath>) -> ModPath {
    let mut parts = path.split("::").peekable();
    let mut at: ModPath = match parts.peek() {
        Some(&"crate") => {
            parts.next();
            Vec::new()
        }
        Some(&"self") => {
            parts.next();
            here.clone()
        }
        _ => here.clone(),
    };
    while parts.peek() == Some(&"super") {
        parts.next();
        at.pop();
    }
    for part in parts {
        let mut next = at.clone();
        next.push(part.to_string());
        if !modules.contains(&next) {
            break;
        }
        at = next;
    }
    at
}

/// The strongly connected groups of more than one node (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.found.push(group);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// `PARENT: a <-> b <-> …` for each circle among sibling modules of the
/// crate whose sources are under `src`.
fn circles(src: &Path) -> Vec<String> {
    // Test modules in their own directories and files are left out.
    let descend = |dir: &Path| !dir.ends_with("tests") && !dir.ends_with("snapshots");
    let files: Vec<PathBuf> = xtask::rust_files(src, &descend)
        .into_iter()
        .filter(|f| !f.to_string_lossy().ends_with("tests.rs"))
        .collect();
    let modules: BTreeSet<ModPath> = files.iter().map(|f| module_of(src, f)).collect();
    // Edges between siblings under each parent module.
    let mut by_parent: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let here = module_of(src, file);
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for path in paths(&code(&text)) {
            let to = target(&here, &path, &modules);
            // The first component where the two differ is where they are
            // siblings.
            let common = here.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < here.len() && common < to.len() {
                by_parent
                    .entry(here[..common].to_vec())
                    .or_default()
                    .entry(here[common].clone())
                    .or_default()
                    .insert(to[common].clone());
            }
        }
    }
    let mut out = Vec::new();
    for (parent, graph) in &by_parent {
        for group in cycles(graph) {
            let parent = if parent.is_empty() {
                "<root>".to_string()
            } else {
                parent.join("::")
            };
            out.push(format!("{parent}: {}", group.join(" <-> ")));
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = xtask::workspace_root();
    let meta = xtask::workspace_metadata().expect("cargo metadata");
    let mut found = Vec::new();
    let mut dirs = BTreeSet::new();
    for package in meta["packages"].as_array().expect("packages") {
        for t in package["targets"].as_array().expect("targets") {
            let kinds = t["kind"].as_array().expect("kinds");
            if kinds.iter().any(|k| k == "lib" || k == "bin") {
                let src = PathBuf::from(t["src_path"].as_str().expect("src_path"));
                if let Some(dir) = src.parent() {
                    dirs.insert(dir.to_path_buf());
                }
            }
        }
    }
    for dir in &dirs {
        for circle in circles(dir) {
            let dir = dir.strip_prefix(&root).unwrap_or(dir).display();
            found.push(format!("{dir}: {circle}"));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn a_circle_is_found_through_use_groups_and_super() {
    let dir = std::env::temp_dir().join(format!("xtask-modgraph-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("report")).expect("mkdir");
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("write");
    write("lib.rs", "mod report;\n");
    write("report/mod.rs", "mod data;\nmod panels;\n");
    write("report/data.rs", "use super::{panels::{Panel, X}};\n");
    write(
        "report/panels.rs",
        "// crate::report::data in a comment\nfn f() { crate::report::data::g() }\n",
    );
    assert_eq!(circles(&dir), vec!["report: data <-> panels".to_string()]);
    write(
        "report/panels.rs",
        "// crate::report::data only in a comment\n",
    );
    assert!(circles(&dir).is_empty());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
