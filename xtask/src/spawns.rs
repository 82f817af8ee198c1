//! No Rust source of the workspace spawns a program by a string literal:
//! each comes from wbscope-programs' table (`dev/programs`), which `cargo
//! xtask setup` installs from, so each is one setup installs (or one the
//! base system has). This is the one check Cargo cannot make: to the
//! compiler a `Command::new` of any string is fine.
use std::path::Path;

/// Calls that spawn, or look up, a program by name.
const SPAWNERS: [&str; 2] = [concat!("Command::new", "("), concat!("which::which", "(")];

/// `FILE:LINE: CODE` of each spawn by a string literal in the `.rs` files
/// under `dir`, but those of `target/`, hidden directories and
/// `dev/programs` (where the names are written down); FILE relative to
/// `root`.
fn literal_spawns(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let descend = |path: &Path| {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        name != "target" && !name.starts_with('.') && path != root.join("dev/programs")
    };
    for path in crate::rust_files(dir, &descend) {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (at, spawner) in SPAWNERS.iter().flat_map(|s| text.match_indices(s)) {
            let arg = text[at + spawner.len()..].trim_start();
            if ["\"", "r\"", "r#"].iter().any(|q| arg.starts_with(q)) {
                let line = text[..at].matches('\n').count() + 1;
                let code = text[at..].lines().next().unwrap_or_default();
                let file = path.strip_prefix(root).unwrap_or(&path).display();
                out.push(format!("{file}:{line}: {code}"));
            }
        }
    }
}

#[test]
fn no_program_is_spawned_by_a_literal_name() {
    let root = crate::workspace_root();
    let mut found = Vec::new();
    literal_spawns(&root, &root, &mut found);
    assert!(
        found.is_empty(),
        "spawn these through wbscope_programs' constants (add the program to \
         dev/programs/src/lib.rs if it is not there):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_literal_spawn_is_reported_with_its_file_and_line() {
    let root = std::env::temp_dir().join(format!("xtask-spawns-{}", std::process::id()));
    let spawn = |program: &str| format!("    {}{program}).status();\n", SPAWNERS[0]);
    for dir in ["src", "target", "dev/programs/src"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("a.rs"), spawn("\"fio\"")).unwrap();
    }
    let good = format!(
        "fn f() {{\n{}{}",
        spawn("programs::FIO.name"),
        spawn("\n\"dd\"")
    );
    std::fs::write(root.join("src/b.rs"), good).unwrap();
    let mut found = Vec::new();
    literal_spawns(&root, &root, &mut found);
    found.sort();
    std::fs::remove_dir_all(&root).unwrap();
    let call = SPAWNERS[0];
    assert_eq!(
        found,
        [
            format!("src/a.rs:1: {call}\"fio\").status();"),
            format!("src/b.rs:3: {call}"),
        ]
    );
}
