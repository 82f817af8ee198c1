//! Escaping what came from outside (a recording, another host's process
//! names) before a terminal sees it: a crafted string must not retitle,
//! clear or reprogram the terminal it is printed on.
use std::borrow::Cow;

/// Characters that drive a terminal rather than show on it: C0 and C1
/// controls (ESC starts the sequences that retitle, clear or move; in
/// UTF-8, U+009B is CSI to some terminals), DEL, and the bidirectional
/// marks and overrides that reorder the text after them (Unicode UAX #9).
fn drives_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with the characters that drive a terminal written as Rust escapes
/// (`\u{1b}`, `\n`): for anything printed that a recording or another
/// process chose (a process name, a host name), so that printing it cannot
/// rewrite the terminal.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(drives_terminal) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if drives_terminal(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Every string in `value` passed through [`escape_controls`].
pub fn escape_json_strings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let Cow::Owned(escaped) = escape_controls(s) {
                *s = escaped;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(escape_json_strings),
        serde_json::Value::Object(map) => {
            map.values_mut().for_each(escape_json_strings);
            // Keys too: they are printed as well.
            if map.keys().any(|k| k.chars().any(drives_terminal)) {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, v)| (escape_controls(&k).into_owned(), v))
                    .collect();
            }
        }
        _ => {}
    }
}

/// A line of JSON with the terminal-driving characters serde_json leaves
/// raw in strings (it escapes only U+0000 to U+001F: DEL, the C1 controls
/// and the bidirectional marks stay) written as `\uXXXX` escapes. They can
/// only occur inside strings, so the line decodes to the same value.
pub fn escape_json_line(line: &str) -> Cow<'_, str> {
    if !line.chars().any(drives_terminal) {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        if drives_terminal(c) {
            // All of them are in the Basic Multilingual Plane.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_escaped() {
        assert_eq!(escape_controls("dd"), "dd");
        assert!(matches!(escape_controls("kworker/u8:2"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\u{1b}]0;owned\u{7}\u{1b}[2J\n\u{9b}31m\u{202e}é"),
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\n\\u{9b}31m\\u{202e}é"
        );
    }

    #[test]
    fn json_lines_keep_their_value_without_raw_controls() {
        let v = serde_json::json!({"comm": "a\u{1b}b\u{7f}c\u{9b}d\u{2066}e", "n": 1});
        let line = serde_json::to_string(&v).unwrap();
        assert!(
            line.contains('\u{9b}'),
            "serde_json leaves C1 raw: {line:?}"
        );
        let escaped = escape_json_line(&line);
        assert!(!escaped.chars().any(drives_terminal), "{escaped:?}");
        assert!(escaped.contains("\\u009b"), "{escaped}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&escaped).unwrap(),
            v
        );
    }

    #[test]
    fn every_string_of_a_value_is_escaped() {
        let mut v = serde_json::json!({"host\u{1b}": ["\u{1b}]0;t\u{7}", {"k": "ok"}], "n": 2});
        escape_json_strings(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"host\\u{1b}": ["\\u{1b}]0;t\\u{7}", {"k": "ok"}], "n": 2})
        );
    }
}
