//! Which programs the workspace's Rust sources spawn, read from the sources
//! themselves, and the test that `cargo xtask setup` installs each of them
//! (issue #13: btf.rs's tests ran `bpftool`, which nothing installed, and
//! the README's `cargo xtask test` failed on a fresh machine).
//!
//! The sources are tokenised (comments dropped, string literals kept as
//! values), then every `Command::new(ARG)` (and `which::which(ARG)`) is
//! resolved to the programs it can run:
//! - a string literal, or a path's file name (`"/usr/bin/prometheus"`);
//! - a `const`/`static` or `let` of the same file bound to such a literal,
//!   or to `env!("CARGO_BIN_EXE_…")` (our own binary: nothing to install);
//! - `f("x")` (a path helper such as `kmod_tool("depmod")`);
//! - `NAME[0]` where `NAME` is a `let` of arrays (`&["mkfs.ext4", "-q"]`):
//!   the first element of each;
//! - a parameter of the enclosing function: the same resolution at each
//!   call of that function in the same file (`sh("losetup", &args)`,
//!   `run(&["x", "-y"])` for `NAME[0]`), reported at the call;
//! - `sh -c SCRIPT` (a literal, a `format!` or a `let` of either): the
//!   first word of each command of the script, shell builtins and
//!   `command -v` aside.
//!
//! Anything else is "unresolved" and must be listed, with the programs it
//! may run, in [`DYNAMIC_SPAWNS`]: a new spawn can never go unnoticed.
use std::path::Path;

use crate::setup::{Scope, scope_tools};

/// Programs a base Debian machine of this kind has before `cargo xtask
/// setup` (a fresh machine here has tmux, strace, jq, e2fsprogs,
/// util-linux, xz-utils, mount, coreutils, sh, rustup/cargo/rustc, git and
/// gcc; not bpftool, xfsprogs, btrfs-progs, fio, bpftrace, prometheus,
/// qemu or busybox-static), as (program, package). Only programs the
/// sources spawn are listed (the test fails on an entry nothing spawns).
const BASE_TOOLS: &[(&str, &str)] = &[
    ("sh", "dash"),
    ("dd", "coreutils"),
    ("env", "coreutils"),
    ("sha256sum", "coreutils"),
    ("sleep", "coreutils"),
    // gzip is Essential: yes.
    ("zcat", "gzip"),
    ("sync", "coreutils"),
    ("losetup", "util-linux"),
    ("blkid", "util-linux"),
    ("mount", "mount"),
    ("umount", "mount"),
    ("mkfs.ext4", "e2fsprogs"),
    // dpkg and apt are Debian's own (Priority: required); setup needs them
    // to install anything.
    ("dpkg", "dpkg"),
    ("apt-get", "apt"),
    ("apt-cache", "apt"),
    // tar is Essential: yes.
    ("tar", "tar"),
    // libc-bin is Essential: yes.
    ("ldd", "libc-bin"),
    // gcc depends on binutils.
    ("strip", "binutils"),
    ("rustup", "rustup"),
    ("rustc", "rustup"),
    ("cargo", "rustup"),
    ("git", "git"),
];

/// Spawned only when not root (xtask's `run`, setup's apt-get): setup
/// cannot install it, since installing needs root; a user without it gets
/// sudo's "not found" from the spawn's error.
const NOT_ROOT_TOOLS: &[&str] = &["sudo"];

/// Spawns whose program the scanner cannot resolve, keyed by file and the
/// expression as the scanner prints it (tokens without spaces), with the
/// programs they may run (none: our own binary, or a script a test wrote).
/// An entry that no longer matches anything fails the test.
const DYNAMIC_SPAWNS: &[(&str, &str, &[&str])] = &[
    // The wbscope binary xtask built.
    ("xtask/src/main.rs", "binary", &[]),
    ("xtask/src/bench.rs", "binary", &[]),
    ("xtask/src/bench/recorder.rs", "binary", &[]),
    // The baseline wbscope binary of WBSCOPE_BENCH_BASELINE.
    ("xtask/src/bench.rs", "b", &[]),
    ("xtask/src/bench_writer.rs", "self.binary", &[]),
    ("xtask/src/dist.rs", "release_binary", &[]),
    // `wbscope diff` of the guests' scenario documents.
    ("xtask/src/vm/scenario.rs", "wbscope", &[]),
    // The cargo that runs xtask.
    (
        "xtask/src/main.rs",
        r#"std::env::var("CARGO").unwrap_or_else(|_|"cargo".into())"#,
        &["cargo"],
    ),
    // apt with the private configuration (the tests put a shell script
    // they wrote in its place).
    ("xtask/src/vm/apt.rs", "self.apt_get", &["apt-get"]),
    (
        "xtask/src/vm/apt.rs",
        "self.apt_cache",
        &["apt-cache", "sh"],
    ),
    // The decompressor of a module's suffix.
    ("xtask/src/vm/initramfs.rs", "tool", &["xz", "zstd"]),
    // The mkfs of the filesystem type asked for.
    (
        "scratchfs/src/lib.rs",
        "mkfs",
        &["mkfs.ext4", "mkfs.xfs", "mkfs.btrfs"],
    ),
    // The test binary itself, re-run as a child that SIGKILL then ends.
    (
        "scratchfs/tests/scratch.rs",
        "std::env::current_exe().unwrap()",
        &[],
    ),
];

/// Words of a shell command line that are the shell's own.
const SHELL_BUILTINS: &[&str] = &[
    "echo", "exec", "cd", "test", "[", "true", "false", "exit", "set", "export", "read", "printf",
    "kill", "wait", "trap", "eval", ".", ":", "!", "if", "then", "else", "elif", "fi", "do",
    "done", "while", "until", "{", "}",
];

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Char,
    Punct(char),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

/// What a spawn runs.
#[derive(Clone, Debug, PartialEq)]
enum Program {
    Named(String),
    /// A binary this workspace builds (`env!("CARGO_BIN_EXE_…")`).
    Own,
    /// The expression the scanner could not resolve.
    Unresolved(String),
}

#[derive(Clone, Debug, PartialEq)]
struct Spawn {
    line: usize,
    program: Program,
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Rust source to tokens: comments dropped, string literals (plain, raw,
/// byte) as their values, char literals and lifetimes as [`Tok::Char`] or
/// dropped, identifiers and numbers as [`Tok::Ident`].
fn tokenize(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            let (value, end, lines) = cooked_string(&c, i + 1);
            out.push(Token {
                tok: Tok::Str(value),
                line,
            });
            line += lines;
            i = end;
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                // '\n', '\'', '\u{..}': to the closing quote after the escape.
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(Token {
                    tok: Tok::Char,
                    line,
                });
            } else if at(i + 2) == '\'' {
                i += 3;
                out.push(Token {
                    tok: Tok::Char,
                    line,
                });
            } else {
                // A lifetime or label.
                i += 1;
                while i < c.len() && is_ident_char(c[i]) {
                    i += 1;
                }
            }
        } else if is_ident_char(ch) {
            if let Some((value, end, lines)) = prefixed_string(&c, i) {
                out.push(Token {
                    tok: Tok::Str(value),
                    line,
                });
                line += lines;
                i = end;
                continue;
            }
            if ch == 'b' && at(i + 1) == '\'' {
                // A byte literal: the quote starts a char literal.
                i += 1;
                continue;
            }
            let start = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(c[start..i].iter().collect()),
                line,
            });
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

/// A `"…"` body from `i` (after the quote): its value, the index after the
/// closing quote, and the newlines inside.
fn cooked_string(c: &[char], mut i: usize) -> (String, usize, usize) {
    let (mut value, mut lines) = (String::new(), 0);
    while i < c.len() {
        match c[i] {
            '"' => return (value, i + 1, lines),
            '\\' => {
                let e = c.get(i + 1).copied().unwrap_or('\\');
                i += 2;
                match e {
                    'n' => value.push('\n'),
                    't' => value.push('\t'),
                    'r' => value.push('\r'),
                    '0' => value.push('\0'),
                    '\n' => {
                        // A line continuation: the next line's leading
                        // whitespace goes too.
                        lines += 1;
                        while i < c.len() && c[i].is_whitespace() {
                            lines += usize::from(c[i] == '\n');
                            i += 1;
                        }
                    }
                    'x' => i += 2,
                    'u' => {
                        while i < c.len() && c[i] != '}' {
                            i += 1;
                        }
                        i += 1;
                    }
                    other => value.push(other),
                }
            }
            ch => {
                lines += usize::from(ch == '\n');
                value.push(ch);
                i += 1;
            }
        }
    }
    (value, i, lines)
}

/// `r"…"`, `r#"…"#`, `b"…"`, `br#"…"#`, `c"…"` starting at `i`, if one
/// does.
fn prefixed_string(c: &[char], i: usize) -> Option<(String, usize, usize)> {
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut j = i;
    if matches!(at(j), 'b' | 'c') {
        j += 1;
    }
    if at(j) == 'r' {
        j += 1;
        let mut hashes = 0;
        while at(j) == '#' {
            hashes += 1;
            j += 1;
        }
        if at(j) != '"' {
            return None;
        }
        let start = j + 1;
        let mut k = start;
        while k < c.len() {
            if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
                let value: String = c[start..k].iter().collect();
                let lines = value.matches('\n').count();
                return Some((value, k + 1 + hashes, lines));
            }
            k += 1;
        }
        return None;
    }
    (j > i && at(j) == '"').then(|| cooked_string(c, j + 1))
}

/// A file's tokens and what resolution needs of them.
struct SourceFile {
    toks: Vec<Token>,
}

/// Recursion limit for parameters passed on through helpers.
const MAX_DEPTH: usize = 4;

impl SourceFile {
    fn tok(&self, i: usize) -> Option<&Tok> {
        self.toks.get(i).map(|t| &t.tok)
    }

    fn is_ident(&self, i: usize, name: &str) -> bool {
        matches!(self.tok(i), Some(Tok::Ident(n)) if n == name)
    }

    fn is_punct(&self, i: usize, p: char) -> bool {
        self.tok(i) == Some(&Tok::Punct(p))
    }

    fn line(&self, i: usize) -> usize {
        self.toks.get(i).or(self.toks.last()).map_or(0, |t| t.line)
    }

    /// The index of the bracket closing the one at `open`.
    fn close_of(&self, open: usize) -> usize {
        let mut depth = 0i32;
        for i in open..self.toks.len() {
            match self.tok(i) {
                Some(Tok::Punct('(' | '[' | '{')) => depth += 1,
                Some(Tok::Punct(')' | ']' | '}')) => {
                    depth -= 1;
                    if depth == 0 {
                        return i;
                    }
                }
                _ => {}
            }
        }
        self.toks.len()
    }

    /// From `from`, the end of the expression: the first `stop` character
    /// at depth 0, or an unmatched closing bracket.
    fn expr_end(&self, from: usize, stop: &[char]) -> usize {
        let mut depth = 0i32;
        for i in from..self.toks.len() {
            match self.tok(i) {
                Some(Tok::Punct('(' | '[' | '{')) => depth += 1,
                Some(Tok::Punct(')' | ']' | '}')) => {
                    if depth == 0 {
                        return i;
                    }
                    depth -= 1;
                }
                Some(Tok::Punct(p)) if depth == 0 && stop.contains(p) => return i,
                _ => {}
            }
        }
        self.toks.len()
    }

    /// The top-level comma-separated parts of `(start..end)`.
    fn split_args(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        let mut parts = Vec::new();
        let mut from = start;
        while from < end {
            let to = self.expr_end(from, &[',']).min(end);
            parts.push((from, to));
            from = to + 1;
        }
        parts
    }

    fn text(&self, start: usize, end: usize) -> String {
        self.toks[start..end.min(self.toks.len())]
            .iter()
            .map(|t| match &t.tok {
                Tok::Ident(s) => s.clone(),
                Tok::Str(s) => format!("{s:?}"),
                Tok::Char => "'?'".to_string(),
                Tok::Punct(p) => p.to_string(),
            })
            .collect()
    }

    /// Every spawn in the file.
    fn spawns(&self) -> Vec<Spawn> {
        let mut out = Vec::new();
        for k in 0..self.toks.len() {
            // `Command::new(` or `which::which(`.
            let spawner = (self.is_ident(k, "Command") && self.is_ident(k + 3, "new"))
                || (self.is_ident(k, "which") && self.is_ident(k + 3, "which"));
            if !(spawner
                && self.is_punct(k + 1, ':')
                && self.is_punct(k + 2, ':')
                && self.is_punct(k + 4, '('))
            {
                continue;
            }
            let open = k + 4;
            let close = self.close_of(open);
            let found = self.resolve(open + 1, close, k, false, 0);
            for spawn in found {
                let shell = matches!(&spawn.program,
                    Program::Named(p) if ["sh", "bash", "dash"].contains(&p.as_str()));
                out.push(spawn);
                if shell {
                    out.extend(self.shell_script(close + 1, self.line(k)));
                }
            }
        }
        out
    }

    /// The programs the expression `start..end`, at token `at`, names.
    /// `first`: the expression is an array whose first element is the
    /// program (`NAME[0]` was spawned).
    fn resolve(
        &self,
        mut start: usize,
        end: usize,
        at: usize,
        first: bool,
        depth: usize,
    ) -> Vec<Spawn> {
        while start < end && (self.is_punct(start, '&') || self.is_punct(start, '*')) {
            start += 1;
        }
        let line = self.line(at);
        let unresolved = || {
            vec![Spawn {
                line,
                program: Program::Unresolved(self.text(start, end)),
            }]
        };
        let named = |s: &str| Spawn {
            line,
            program: Program::Named(base_name(s)),
        };
        if first {
            // Every array literal's first element, in the expression.
            let found: Vec<Spawn> = (start..end)
                .filter(|&i| self.is_punct(i, '['))
                .filter_map(|i| match self.tok(i + 1) {
                    Some(Tok::Str(s)) => Some(named(s)),
                    _ => None,
                })
                .collect();
            if !found.is_empty() {
                return found;
            }
        }
        let len = end.saturating_sub(start);
        match (self.tok(start), len) {
            (Some(Tok::Str(s)), 1) if !first => return vec![named(s)],
            // A path helper: `kmod_tool("depmod")`.
            (Some(Tok::Ident(_)), 4)
                if self.is_punct(start + 1, '(') && self.is_punct(start + 3, ')') && !first =>
            {
                if let Some(Tok::Str(s)) = self.tok(start + 2) {
                    return vec![named(s)];
                }
            }
            (Some(Tok::Ident(e)), 5) if e == "env" && self.is_punct(start + 1, '!') => {
                if let Some(Tok::Str(s)) = self.tok(start + 3)
                    && s.starts_with("CARGO_BIN_EXE_")
                {
                    return vec![Spawn {
                        line,
                        program: Program::Own,
                    }];
                }
            }
            _ => {}
        }
        if depth >= MAX_DEPTH {
            return unresolved();
        }
        // A path (`a::b::NAME`) or `NAME[0]`: the binding of NAME.
        let mut i = start;
        let mut name = None;
        while i < end {
            match self.tok(i) {
                Some(Tok::Ident(n)) => {
                    name = Some(n.clone());
                    i += 1;
                }
                Some(Tok::Punct(':')) if self.is_punct(i + 1, ':') => i += 2,
                _ => break,
            }
        }
        let indexed = i + 3 == end
            && self.is_punct(i, '[')
            && self.is_ident(i + 1, "0")
            && self.is_punct(i + 2, ']');
        let (Some(name), true) = (name, i == end || indexed) else {
            return unresolved();
        };
        let first = first || indexed;
        let bound = |(vs, ve): (usize, usize)| {
            let found = self.resolve(vs, ve, at, first, depth + 1);
            if found
                .iter()
                .any(|s| matches!(s.program, Program::Unresolved(_)))
            {
                unresolved()
            } else {
                found
            }
        };
        // A `let` shadows a parameter, which shadows a `const`.
        if let Some(value) = self.let_binding(&name, at) {
            return bound(value);
        }
        if let Some(calls) = self.parameter_calls(&name, at) {
            if calls.is_empty() {
                return unresolved();
            }
            return calls
                .into_iter()
                .flat_map(|(s, e, call)| self.resolve(s, e, call, first, depth + 1))
                .collect();
        }
        match self.const_binding(&name) {
            Some(value) => bound(value),
            None => unresolved(),
        }
    }

    /// The `fn` whose body `at` is in: the nearest `fn NAME` before it.
    fn enclosing_fn(&self, at: usize) -> Option<usize> {
        (0..at)
            .rev()
            .find(|&k| self.is_ident(k, "fn") && matches!(self.tok(k + 1), Some(Tok::Ident(_))))
    }

    /// The value (a token range) after the first `=` from `k` to the `;`.
    fn value_after(&self, k: usize) -> Option<(usize, usize)> {
        let eq = (k..self.toks.len()).find(|&i| {
            self.is_punct(i, '=') && !self.is_punct(i + 1, '=') && !self.is_punct(i + 1, '>')
        })?;
        Some((eq + 1, self.expr_end(eq + 1, &[';'])))
    }

    /// The value of the nearest `let NAME` before `at` in its function.
    fn let_binding(&self, name: &str, at: usize) -> Option<(usize, usize)> {
        let from = self.enclosing_fn(at).unwrap_or(0);
        (from..at).rev().find_map(|k| {
            if !self.is_ident(k, "let") {
                return None;
            }
            let n = if self.is_ident(k + 1, "mut") {
                k + 2
            } else {
                k + 1
            };
            (self.is_ident(n, name) && (self.is_punct(n + 1, '=') || self.is_punct(n + 1, ':')))
                .then(|| self.value_after(n))
                .flatten()
        })
    }

    /// The value of `const NAME` or `static NAME` in the file.
    fn const_binding(&self, name: &str) -> Option<(usize, usize)> {
        (0..self.toks.len())
            .find(|&k| {
                (self.is_ident(k, "const") || self.is_ident(k, "static"))
                    && self.is_ident(k + 1, name)
                    && self.is_punct(k + 2, ':')
            })
            .and_then(|k| self.value_after(k + 2))
    }

    /// If `name` is a parameter of the function around `at`: each call of
    /// that function in the file, as the argument's range and the call's
    /// token.
    fn parameter_calls(&self, name: &str, at: usize) -> Option<Vec<(usize, usize, usize)>> {
        let k = self.enclosing_fn(at)?;
        let Some(Tok::Ident(func)) = self.tok(k + 1) else {
            return None;
        };
        let open = (k + 2..at).find(|&i| self.is_punct(i, '('))?;
        // Method calls pass `self` before the parentheses.
        let params: Vec<(usize, usize)> = self
            .split_args(open + 1, self.close_of(open))
            .into_iter()
            .filter(|&(s, e)| !(s..e).any(|i| self.is_ident(i, "self")))
            .collect();
        let index = params.iter().position(|&(s, _)| {
            let s = if self.is_ident(s, "mut") { s + 1 } else { s };
            self.is_ident(s, name) && self.is_punct(s + 1, ':')
        })?;
        let calls = (0..self.toks.len())
            .filter(|&c| {
                self.is_ident(c, func)
                    && self.is_punct(c + 1, '(')
                    && !(c > 0 && self.is_ident(c - 1, "fn"))
                    // `std::thread::spawn(…)` is not a call of a local
                    // `fn spawn`: a module path (lower case) names another
                    // function; `Type::f(…)`, `Self::f(…)` and `f(…)` may
                    // be this one.
                    && !(c >= 3
                        && self.is_punct(c - 1, ':')
                        && self.is_punct(c - 2, ':')
                        && matches!(self.tok(c - 3), Some(Tok::Ident(m))
                            if m.starts_with(|ch: char| ch.is_ascii_lowercase())))
            })
            .filter_map(|c| {
                let args = self.split_args(c + 2, self.close_of(c + 1));
                args.get(index).map(|&(s, e)| (s, e, c))
            })
            .collect();
        Some(calls)
    }

    /// The programs of the `-c` script in the method chain from `from`.
    fn shell_script(&self, from: usize, line: usize) -> Vec<Spawn> {
        let end = self.expr_end(from, &[';']);
        let Some(c) = (from..end).find(|&i| self.tok(i) == Some(&Tok::Str("-c".into()))) else {
            return Vec::new();
        };
        let (s, e) = if self.is_punct(c + 1, ',') {
            (c + 2, self.expr_end(c + 2, &[',']))
        } else if self.is_punct(c + 1, ')')
            && self.is_punct(c + 2, '.')
            && self.is_punct(c + 4, '(')
        {
            (c + 5, self.close_of(c + 4))
        } else {
            return Vec::new();
        };
        let unresolved = |s: usize, e: usize| {
            vec![Spawn {
                line,
                program: Program::Unresolved(format!("sh -c {}", self.text(s, e))),
            }]
        };
        let script = |s: usize, e: usize| -> Option<String> {
            let s = if self.is_punct(s, '&') { s + 1 } else { s };
            match self.tok(s) {
                Some(Tok::Str(v)) if e == s + 1 => Some(v.clone()),
                Some(Tok::Ident(f)) if f == "format" && self.is_punct(s + 1, '!') => {
                    match self.tok(s + 3) {
                        Some(Tok::Str(v)) => Some(v.clone()),
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        let text = script(s, e).or_else(|| {
            let v = if self.is_punct(s, '&') { s + 1 } else { s };
            match self.tok(v) {
                Some(Tok::Ident(name)) if e == v + 1 => {
                    let (bs, be) = self.let_binding(name, s)?;
                    script(bs, be)
                }
                _ => None,
            }
        });
        let Some(text) = text else {
            let s = if self.is_punct(s, '&') { s + 1 } else { s };
            return unresolved(s, e);
        };
        shell_commands(&text)
            .into_iter()
            .map(|word| Spawn {
                line,
                program: match word {
                    Ok(p) => Program::Named(p),
                    Err(w) => Program::Unresolved(format!("sh -c …{w}…")),
                },
            })
            .collect()
    }
}

/// A program named by path: its file name.
fn base_name(s: &str) -> String {
    s.rsplit('/').next().unwrap_or(s).to_string()
}

/// The programs a shell script runs: the first word of each command, as
/// `Err` when it is not a plain name (`{}` of a format string, `$VAR`).
fn shell_commands(script: &str) -> Vec<Result<String, String>> {
    let mut s = script.replace("$(", ";");
    for sep in ["&&", "||", "|", "\n", "(", ")", "`"] {
        s = s.replace(sep, ";");
    }
    let mut out = Vec::new();
    for command in s.split(';') {
        let mut words = command
            .split_whitespace()
            .skip_while(|w| (w.contains('=') && !w.starts_with('-')) || *w == "exec");
        let Some(word) = words.next() else { continue };
        if word == "command" || SHELL_BUILTINS.contains(&word) {
            continue;
        }
        if word.contains(['{', '$']) {
            out.push(Err(word.to_string()));
        } else {
            out.push(Ok(base_name(word)));
        }
    }
    out
}

/// The spawns of one source file.
fn spawns_in(src: &str) -> Vec<Spawn> {
    SourceFile {
        toks: tokenize(src),
    }
    .spawns()
}

/// The setup scope that has to provide what `file` (relative to the
/// workspace) spawns.
fn scope_of(file: &str) -> Scope {
    if file.starts_with("xtask/src/bench") {
        Scope::Bench
    } else if file.starts_with("xtask/src/vm") {
        Scope::Vm
    } else if file.starts_with("xtask/") || file.ends_with("build.rs") {
        Scope::Build
    } else {
        Scope::Test
    }
}

/// One line per spawn of a program that neither the file's scope installs
/// nor a base machine has, or whose program the scanner cannot tell;
/// also the [`DYNAMIC_SPAWNS`] entries used and the base tools seen.
struct Check {
    problems: Vec<String>,
    dynamic_used: Vec<usize>,
    seen: Vec<String>,
    spawns: usize,
}

fn check(files: &[(String, String)]) -> Check {
    let mut c = Check {
        problems: Vec::new(),
        dynamic_used: Vec::new(),
        seen: Vec::new(),
        spawns: 0,
    };
    for (file, src) in files {
        let scope = scope_of(file);
        let installed = scope_tools(scope);
        for spawn in spawns_in(src) {
            c.spawns += 1;
            let programs: Vec<String> = match &spawn.program {
                Program::Own => Vec::new(),
                Program::Named(p) => vec![p.clone()],
                Program::Unresolved(expr) => {
                    match DYNAMIC_SPAWNS
                        .iter()
                        .position(|(f, e, _)| f == file && e == expr)
                    {
                        Some(i) => {
                            c.dynamic_used.push(i);
                            DYNAMIC_SPAWNS[i].2.iter().map(|p| p.to_string()).collect()
                        }
                        None => {
                            c.problems.push(format!(
                                "{file}:{}: spawns `{expr}`: cannot tell which program; use a \
                                 literal or a const of this file, or list it in DYNAMIC_SPAWNS \
                                 (xtask/src/spawned.rs) with the programs it may run",
                                spawn.line
                            ));
                            Vec::new()
                        }
                    }
                }
            };
            for p in programs {
                let ok = BASE_TOOLS.iter().any(|(t, _)| *t == p)
                    || NOT_ROOT_TOOLS.contains(&p.as_str())
                    || installed.iter().any(|(t, _)| *t == p);
                if !ok {
                    c.problems.push(format!(
                        "{file}:{}: spawns `{p}`, which neither setup's {scope:?} tools \
                         (xtask/src/setup.rs) install nor BASE_TOOLS (xtask/src/spawned.rs) \
                         list: add (\"{p}\", DEBIAN_PACKAGE) to that scope's list",
                        spawn.line
                    ));
                }
                c.seen.push(p);
            }
        }
    }
    c
}

/// Every `.rs` file of the workspace but `target/` and hidden directories,
/// as (path relative to `root`, text).
fn workspace_sources(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs")
                && let (Ok(rel), Ok(text)) =
                    (path.strip_prefix(root), std::fs::read_to_string(&path))
            {
                out.push((rel.to_string_lossy().to_string(), text));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(src: &str) -> Vec<(usize, String)> {
        spawns_in(src)
            .into_iter()
            .map(|s| match s.program {
                Program::Named(p) => (s.line, p),
                Program::Own => (s.line, "<own>".into()),
                Program::Unresolved(e) => (s.line, format!("?{e}")),
            })
            .collect()
    }

    /// The real workspace: every program spawned is installed by the scope
    /// of its code or on a base machine.
    #[test]
    fn every_spawned_program_is_installed_by_setup() {
        let root = crate::workspace_root();
        let files = workspace_sources(&root);
        for krate in [
            "writeback-user/src",
            "writeback-user/tests",
            "writer-core",
            "xtask/src",
        ] {
            assert!(
                files.iter().any(|(f, _)| f.starts_with(krate)),
                "no sources under {krate} in {}",
                root.display()
            );
        }
        let mut c = check(&files);
        assert!(c.spawns > 0, "no spawn found in {} files", files.len());
        for (i, (file, expr, _)) in DYNAMIC_SPAWNS.iter().enumerate() {
            if !c.dynamic_used.contains(&i) {
                c.problems.push(format!(
                    "DYNAMIC_SPAWNS: {file} `{expr}` matches no spawn any more"
                ));
            }
        }
        for (tool, _) in BASE_TOOLS {
            if !c.seen.iter().any(|p| p == tool) {
                c.problems
                    .push(format!("BASE_TOOLS: nothing spawns `{tool}` any more"));
            }
        }
        assert!(c.problems.is_empty(), "\n{}", c.problems.join("\n"));
    }

    /// A new spawn of a program nobody installs fails, naming file, line
    /// and program.
    #[test]
    fn an_unlisted_program_is_reported_with_file_and_line() {
        let src = "fn f() {\n    let _ = std::process::Command::new(\"fakeprog\")\n        .status();\n    Command::new(\"bpftool\");\n}\n";
        let c = check(&[("writeback-user/src/x.rs".into(), src.into())]);
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(
            c.problems[0].starts_with("writeback-user/src/x.rs:2: spawns `fakeprog`,"),
            "{}",
            c.problems[0]
        );
        // bpftool is a test tool: fine in test code, not in the bench's.
        let c = check(&[("xtask/src/bench.rs".into(), src.into())]);
        assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
        assert!(c.problems[1].starts_with("xtask/src/bench.rs:4: spawns `bpftool`,"));
        let c = check(&[("x/y.rs".into(), "fn f() { Command::new(pick()); }".into())]);
        assert_eq!(c.problems.len(), 1);
        assert!(c.problems[0].starts_with("x/y.rs:1: spawns `pick()`: cannot tell"));
    }

    #[test]
    fn literals_paths_and_consts() {
        let src = r#"
const FAKE: &str = "/usr/sbin/fake1";
const OWN: &str = env!("CARGO_BIN_EXE_wbscope");
fn f() {
    Command::new(FAKE);
    tokio::process::Command::new(OWN);
    let prog = "/usr/bin/fake2";
    Command::new(prog).arg("x");
    Command::new(kmod_tool("fake3"));
    Command::new(env!("CARGO_BIN_EXE_wbscope"));
    Command::new(&self.binary);
    which::which("fake4");
}
"#;
        assert_eq!(
            named(src),
            vec![
                (5, "fake1".into()),
                (6, "<own>".into()),
                (8, "fake2".into()),
                (9, "fake3".into()),
                (10, "<own>".into()),
                (11, "?self.binary".into()),
                (12, "fake4".into()),
            ]
        );
    }

    /// Spawns in comments, doc comments and strings are not spawns.
    #[test]
    fn comments_and_strings_are_not_code() {
        let src = r##"
// Command::new("no1")
/// Command::new("no2")
/* Command::new("no3") /* nested */ Command::new("no4") */
fn f() {
    let s = "Command::new(\"no5\")";
    let r = r#"Command::new("no6")"#;
    let c = '"'; let l: &'static str = "x"; let b = b'"';
    Command::new("yes");
}
"##;
        assert_eq!(named(src), vec![(9, "yes".into())]);
    }

    /// Helpers that take the program as a parameter, directly or as the
    /// first element of an argv array; arrays bound by `let`.
    #[test]
    fn helpers_and_arrays() {
        let src = r#"
fn sh(cmd: &str, args: &[&str]) -> String {
    run(Command::new(cmd).args(args))
}
fn run_argv(&self, argv: &[&str]) {
    Command::new(argv[0]).args(&argv[1..]);
}
fn g(kind: &str) {
    sh("fake1", &["-q"]);
    self.run_argv(&["fake2", "-x"]);
    let mkfs: &[&str] = match kind {
        "a" => &["mkfs.fake3", "-q"],
        _ => &["mkfs.fake4"],
    };
    Command::new(mkfs[0]).arg("dev");
    sh(other(), &[]);
}
"#;
        assert_eq!(
            named(src),
            vec![
                (9, "fake1".into()),
                (16, "?other()".into()),
                (10, "fake2".into()),
                (15, "mkfs.fake3".into()),
                (15, "mkfs.fake4".into()),
            ]
        );
    }

    /// `sh -c`: the commands of the script, builtins and `command -v`
    /// aside.
    #[test]
    fn shell_scripts() {
        let src = r#"
fn f(dir: &str) {
    Command::new("sh").args(["-c", "fake1 -a && exec fake2 | /bin/fake3; echo hi"]).status();
    let script = format!("echo $$ > {dir}/x && A=1 fake4 if=/dev/zero");
    Command::new("sh").arg("-c").arg(&script).status();
    Command::new("sh").args(["-c", &format!("command -v {}", X)]).status();
    Command::new("sh").args(["-c", &make()]).status();
    Command::new("sh").args(["-c", "{} --x"]).status();
}
"#;
        assert_eq!(
            named(src),
            vec![
                (3, "sh".into()),
                (3, "fake1".into()),
                (3, "fake2".into()),
                (3, "fake3".into()),
                (5, "sh".into()),
                (5, "fake4".into()),
                (6, "sh".into()),
                (7, "sh".into()),
                (7, "?sh -c make()".into()),
                (8, "sh".into()),
                (8, "?sh -c …{}…".into()),
            ]
        );
    }
}
