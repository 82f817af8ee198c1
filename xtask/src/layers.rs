//! The shape of the code, checked (issue #14): in `writeback-user/src`
//! imports point one way, `commands → {capture, dashboard, export,
//! recording} → {tracer, model} → writeback-common`, with `cli` beside
//! `commands` and `error`/`escape`/`sys` at the bottom; aya is used from
//! `tracer` only; and no source file of the workspace has more than
//! [`MAX_LINES`] lines outside its test module. ARCHITECTURE.md draws the
//! same rule; a change that needs an import against it is a change of
//! design, to be made here and there together.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// Each top-level module of writeback-user/src and the top-level modules
/// it may import. `lib` and `main` wire everything and are not listed.
const LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("escape", &[]),
    ("sys", &[]),
    ("model", &["error", "escape", "sys"]),
    ("tracer", &["error", "escape", "sys", "model"]),
    ("capture", &["error", "escape", "sys", "model", "tracer"]),
    ("dashboard", &["error", "escape", "sys", "model", "tracer"]),
    ("export", &["error", "escape", "sys", "model", "tracer"]),
    ("recording", &["error", "escape", "sys", "model", "tracer"]),
    ("cli", &["error", "sys", "model"]),
    (
        "commands",
        &[
            "error",
            "escape",
            "sys",
            "model",
            "tracer",
            "capture",
            "dashboard",
            "export",
            "recording",
            "cli",
        ],
    ),
];

/// The one module allowed to use aya (the kernel surface).
const AYA_MODULE: &str = "tracer";

/// Longest source file, its test module aside.
const MAX_LINES: usize = 800;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The text before the file's inline test module (`#[cfg(test)] mod
/// tests {`); a `tests.rs` file is all test.
fn non_test_part(path: &Path, text: &str) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod tests {"))
        {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Code without `//` comments (doc comments name modules in prose).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level modules named by `crate::NAME` and `use crate::{NAME, …}`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while let Some(at) = code[i..].find("crate::") {
        let start = i + at + "crate::".len();
        i = start;
        if bytes.get(start) == Some(&b'{') {
            // The first path segment of each item of the group.
            let mut depth = 0;
            let mut word = String::new();
            let mut j = start;
            while j < bytes.len() {
                let c = bytes[j] as char;
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 1 && (c.is_alphanumeric() || c == '_') {
                    word.push(c);
                } else {
                    if depth >= 1 && !word.is_empty() && c != ':' || depth == 0 {
                        if !word.is_empty() {
                            found.insert(std::mem::take(&mut word));
                        }
                    } else if c == ':' && !word.is_empty() {
                        found.insert(std::mem::take(&mut word));
                        // Skip the rest of this path item.
                        let mut k = j;
                        let mut d = 0;
                        while k < bytes.len() {
                            match bytes[k] as char {
                                '{' => d += 1,
                                '}' if d == 0 => break,
                                '}' => d -= 1,
                                ',' if d == 0 => break,
                                _ => {}
                            }
                            k += 1;
                        }
                        j = k;
                        continue;
                    }
                    word.clear();
                }
                if depth == 0 {
                    break;
                }
                j += 1;
            }
        } else {
            let word: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() {
                found.insert(word);
            }
        }
    }
    found
}

/// Everything the sources of writeback-user break of the rule, one line
/// each.
fn violations(src: &Path) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = Vec::new();
    for path in files {
        let rel = path.strip_prefix(src).unwrap_or(&path);
        let top = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        if top == "lib" || top == "main" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            out.push(format!("{}: unreadable", rel.display()));
            continue;
        };
        let code = without_comments(&non_test_part(&path, &text));
        if code.contains("aya::") && top != AYA_MODULE {
            out.push(format!("{}: uses aya outside {AYA_MODULE}/", rel.display()));
        }
        let Some(may) = allowed.get(top.as_str()) else {
            out.push(format!(
                "{}: top-level module `{top}` has no layer in xtask/src/layers.rs",
                rel.display()
            ));
            continue;
        };
        for import in imports(&code) {
            let is_module = allowed.contains_key(import.as_str());
            if is_module && import != top && !may.contains(&import.as_str()) {
                out.push(format!(
                    "{}: `{top}` imports `{import}`, against the layers (ARCHITECTURE.md)",
                    rel.display()
                ));
            }
        }
    }
    out
}

/// True for test code as a whole: files under a `tests` directory
/// (integration tests) and modules declared `#[cfg(test)] mod NAME;` by
/// their parent (main.rs, lib.rs, mod.rs or the parent's own file).
fn is_test_file(root: &Path, path: &Path) -> bool {
    let rel = path.strip_prefix(root).unwrap_or(path);
    if rel.components().any(|c| c.as_os_str() == "tests") {
        return true;
    }
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem()) else {
        return false;
    };
    let declaration = format!("#[cfg(test)]\nmod {};", stem.to_string_lossy());
    let mut parents: Vec<PathBuf> = ["main.rs", "lib.rs", "mod.rs"]
        .iter()
        .map(|f| dir.join(f))
        .collect();
    parents.push(dir.with_extension("rs"));
    parents.iter().any(|p| {
        std::fs::read_to_string(p).is_ok_and(|text| {
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            lines.join("\n").contains(&declaration)
        })
    })
}

/// Files of the workspace longer than [`MAX_LINES`] outside their tests.
fn long_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files
        .iter()
        .filter(|path| !is_test_file(root, path))
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let n = non_test_part(path, &text).lines().count();
            (n > MAX_LINES).then(|| {
                format!(
                    "{}: {n} lines outside its tests (at most {MAX_LINES})",
                    path.strip_prefix(root).unwrap_or(path).display()
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_point_one_way_and_aya_stays_in_the_tracer() {
        let v = violations(&workspace().join("writeback-user/src"));
        assert!(v.is_empty(), "\n{}", v.join("\n"));
    }

    #[test]
    fn no_source_file_is_longer_than_the_limit() {
        let v = long_files(&workspace());
        assert!(v.is_empty(), "\n{}", v.join("\n"));
    }

    #[test]
    fn imports_are_read_from_paths_and_groups() {
        let code = "use crate::{\n    model::{CallRecord, plan::X},\n    sys,\n    tracer::Tracer,\n};\nfn f() { crate::dashboard::run(); }\n";
        let found: Vec<String> = imports(code).into_iter().collect();
        assert_eq!(found, ["dashboard", "model", "sys", "tracer"]);
    }

    /// The checker itself: a model file importing the dashboard, an export
    /// file using aya and an unknown module are each reported.
    #[test]
    fn a_wrong_import_is_reported() {
        let dir = tempfile_dir();
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("model")).unwrap();
        std::fs::create_dir_all(src.join("export")).unwrap();
        std::fs::write(
            src.join("model/a.rs"),
            "use crate::dashboard::state::Model;\n#[cfg(test)]\nmod tests {\n    use crate::commands;\n}\n",
        )
        .unwrap();
        std::fs::write(src.join("export/b.rs"), "use aya::maps::Array;\n").unwrap();
        std::fs::write(src.join("gadget.rs"), "").unwrap();
        let v = violations(&src);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(v.len(), 3, "{v:#?}");
        assert!(v.iter().any(|l| l.contains("`model` imports `dashboard`")));
        assert!(v.iter().any(|l| l.contains("uses aya outside")));
        assert!(v.iter().any(|l| l.contains("`gadget` has no layer")));
        // The test module's import of commands is not counted.
        assert!(!v.iter().any(|l| l.contains("commands")));
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wbscope-layers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
