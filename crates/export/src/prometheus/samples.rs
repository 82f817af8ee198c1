//! The exporter's own OpenMetrics text, read back line by line: what a
//! backfill stamps and a push sends are the registry's samples as a
//! scrape would have had them (prometheus-client encodes; nothing here
//! reads text from anywhere else).

/// OpenMetrics label value escaping: backslash, double quote, newline.
pub(crate) fn escape_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A sample line's parts: the metric name, what is inside its braces
/// (empty without), and the value with anything after it.
pub(crate) fn split_sample(line: &str) -> Option<(&str, &str, &str)> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    if line[name_end..].starts_with('{') {
        // The closing brace outside a quoted value.
        let body = &line[name_end + 1..];
        let (mut quoted, mut escaped) = (false, false);
        for (i, c) in body.char_indices() {
            match (c, quoted, escaped) {
                (_, true, true) => escaped = false,
                ('\\', true, false) => escaped = true,
                ('"', _, false) => quoted = !quoted,
                ('}', false, _) => {
                    let rest = body[i + 1..].trim_start();
                    return Some((name, &body[..i], rest));
                }
                _ => {}
            }
        }
        None
    } else {
        Some((name, "", line[name_end..].trim_start()))
    }
}

/// The label names of a braces' inside (`a="x",b="y"`).
pub(crate) fn label_names(inner: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let (mut quoted, mut escaped, mut start) = (false, false, Some(0));
    for (i, c) in inner.char_indices() {
        match (c, quoted, escaped) {
            (_, true, true) => escaped = false,
            ('\\', true, false) => escaped = true,
            ('"', _, false) => quoted = !quoted,
            ('=', false, _) => {
                if let Some(s) = start.take() {
                    names.push(inner[s..i].trim());
                }
            }
            (',', false, _) => start = Some(i + 1),
            _ => {}
        }
    }
    names
}

/// The labels of a braces' inside, names and unescaped values, in order.
pub(crate) fn labels(inner: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = inner;
    while let Some((name, after)) = rest.split_once('=') {
        let name = name.trim().trim_start_matches(',').trim();
        let Some(body) = after.strip_prefix('"') else {
            break;
        };
        let mut value = String::new();
        let mut chars = body.char_indices();
        let mut end = body.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((name.to_string(), value));
        rest = &body[end..];
    }
    out
}

/// One sample: its metric name, its labels (name, value), its value.
pub(crate) type Sample<'a> = (&'a str, Vec<(String, String)>, f64);

/// Every sample of an encoded registry: name, labels, value. Metadata,
/// `# EOF` and blank lines are skipped; a line that cannot be read is
/// an error naming it.
pub(crate) fn samples(text: &str) -> Result<Vec<Sample<'_>>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, inner, value) =
            split_sample(line).ok_or_else(|| format!("a sample line not read: {line}"))?;
        let value = value.split(' ').next().unwrap_or(value);
        let value: f64 = value
            .parse()
            .map_err(|_| format!("a sample value not read: {line}"))?;
        out.push((name, labels(inner), value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_line_splits_around_quoted_braces() {
        assert_eq!(
            split_sample(r#"a_total{x="}{\"",y="b"} 3"#),
            Some(("a_total", r#"x="}{\"",y="b""#, "3"))
        );
        assert_eq!(split_sample("b 4.5"), Some(("b", "", "4.5")));
        assert_eq!(split_sample(r#"c{x="unclosed} 1"#), None);
        assert_eq!(label_names(r#"x="a,b=c",y="d""#), vec!["x", "y"]);
    }

    #[test]
    fn labels_are_unescaped_and_values_read() {
        let text =
            "# TYPE a counter\na_total{x=\"q\\\"=,\\\\\",y=\"\\n\"} 3\nb +Inf\nc NaN\n# EOF\n";
        let s = samples(text).expect("samples");
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].0, "a_total");
        assert_eq!(
            s[0].1,
            vec![
                ("x".to_string(), "q\"=,\\".to_string()),
                ("y".to_string(), "\n".to_string())
            ]
        );
        assert_eq!(s[0].2, 3.0);
        assert!(s[1].2.is_infinite() && s[2].2.is_nan());
        assert!(samples("d{x=\"1\"} notanumber\n").is_err());
        assert_eq!(escape_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
