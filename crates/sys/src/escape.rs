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

/// Writes `value` as one line of JSON to `out`, with the terminal-driving
/// characters serde_json leaves raw in strings (it escapes only U+0000 to
/// U+001F: DEL, the C1 controls and the bidirectional marks stay) written
/// as `\uXXXX` escapes; the line decodes to the same value. One pass,
/// straight into `out`: no string per line, no second scan of it (a
/// writepages call's line under an fsync storm is written 10,000 times
/// a second).
pub fn write_json_line<W: std::io::Write + ?Sized, T: serde::Serialize + ?Sized>(
    out: &mut W,
    value: &T,
) -> std::io::Result<()> {
    write_json_value(&mut *out, value)?;
    out.write_all(b"\n")
}

/// `value` as [`write_json_line`] writes it, without the line's end: for
/// a line put together by hand (wbscope-export's call line), whose
/// strings and nested values must come out as serde's would.
pub fn write_json_value<W: std::io::Write + ?Sized, T: serde::Serialize + ?Sized>(
    out: &mut W,
    value: &T,
) -> std::io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(&mut *out, TerminalSafe);
    value.serialize(&mut ser).map_err(std::io::Error::other)
}

/// serde_json's compact format, with [`drives_terminal`] characters in
/// strings (keys included) escaped.
struct TerminalSafe;

impl serde_json::ser::Formatter for TerminalSafe {
    /// A run of a string that needs no JSON escape: all of it but the
    /// characters that drive a terminal, which are all above U+007E.
    fn write_string_fragment<W: std::io::Write + ?Sized>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        if fragment.bytes().all(|b| b < 0x7f) {
            return writer.write_all(fragment.as_bytes());
        }
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| drives_terminal(c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            // All of them are in the Basic Multilingual Plane.
            write!(writer, "\\u{:04x}", c as u32)?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
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
    fn plain_json_lines_are_serde_json_s_own() {
        let v = serde_json::json!({"comm": "dd é\"\n", "n": [1, 2.5, null], "k\u{9b}": true});
        let mut out = Vec::new();
        write_json_line(&mut out, &v).unwrap();
        let line = String::from_utf8(out).unwrap();
        let plain = serde_json::json!({"comm": "dd é\"\n", "n": [1, 2.5, null]});
        let mut plain_out = Vec::new();
        write_json_line(&mut plain_out, &plain).unwrap();
        assert_eq!(
            String::from_utf8(plain_out).unwrap(),
            serde_json::to_string(&plain).unwrap() + "\n"
        );
        // A key is escaped as a value is.
        assert!(line.contains("\"k\\u009b\""), "{line}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&line).unwrap(), v);
    }

    #[test]
    fn json_lines_keep_their_value_without_raw_controls() {
        let v = serde_json::json!({"comm": "a\u{1b}b\u{7f}c\u{9b}d\u{2066}e", "n": 1});
        let line = serde_json::to_string(&v).unwrap();
        assert!(
            line.contains('\u{9b}'),
            "serde_json leaves C1 raw: {line:?}"
        );
        let mut out = Vec::new();
        write_json_line(&mut out, &v).unwrap();
        let escaped = String::from_utf8(out).unwrap();
        assert!(escaped.ends_with('\n'), "{escaped:?}");
        let escaped = escaped.trim_end();
        assert!(!escaped.chars().any(drives_terminal), "{escaped:?}");
        assert!(escaped.contains("\\u009b"), "{escaped}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(escaped).unwrap(),
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
