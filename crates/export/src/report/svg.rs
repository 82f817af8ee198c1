//! The drawing primitives of the report: an SVG canvas that keeps the box
//! of every label it draws (so a label that would overlap one already
//! drawn is not drawn, and the tests can check that none overlap), nice
//! tick steps, and the series styles.
//!
//! Text is monospace (DejaVu Sans Mono, else any monospace face): every
//! glyph advances 0.602 em in DejaVu and 0.600 em in Liberation Mono, so
//! a label's width is known without the font ([`CHAR_EM`] rounds up).
use std::fmt::Write as _;

/// Advance of one monospace glyph, in em (DejaVu Sans Mono: 1233/2048).
pub(crate) const CHAR_EM: f64 = 0.62;
pub(crate) const FONT: &str = "DejaVu Sans Mono, Liberation Mono, monospace";
/// Axis frame colour: a neutral grey the browser test looks for.
pub(crate) const FRAME: &str = "#808080";
pub(crate) const GRID: &str = "#e4e4e4";
pub(crate) const INK: &str = "#222222";
pub(crate) const MUTED: &str = "#555555";

/// One series' look: a colour, a dash pattern and a marker, so that the
/// series stay apart printed in grey.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Style {
    pub(crate) colour: &'static str,
    /// `stroke-dasharray`, empty for a solid line.
    pub(crate) dash: &'static str,
    pub(crate) marker: Marker,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    Circle,
    Square,
    Triangle,
    Cross,
    Diamond,
    None,
}

/// Dark, saturated colours (readable on white; distinct in hue for
/// colour, in dash and marker for grey).
pub(crate) const STYLES: [Style; 6] = [
    Style {
        colour: "#1f4e9c",
        dash: "",
        marker: Marker::Circle,
    },
    Style {
        colour: "#b2182b",
        dash: "6 3",
        marker: Marker::Square,
    },
    Style {
        colour: "#1b7837",
        dash: "2 2",
        marker: Marker::Triangle,
    },
    Style {
        colour: "#762a83",
        dash: "8 3 2 3",
        marker: Marker::Cross,
    },
    Style {
        colour: "#c05a00",
        dash: "12 4",
        marker: Marker::Diamond,
    },
    Style {
        colour: "#01665e",
        dash: "1 3",
        marker: Marker::None,
    },
];

/// Least room between two labels on a line, px: "0.4" and "0.0" of two
/// runs side by side must not read as "0.40.0".
pub(crate) const LABEL_GAP: f64 = 5.0;

/// A text label's box, in the canvas's pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TextBox {
    pub(crate) x0: f64,
    pub(crate) y0: f64,
    pub(crate) x1: f64,
    pub(crate) y1: f64,
}

impl TextBox {
    pub(crate) fn overlaps(&self, o: &TextBox) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

/// Width of `text` at `size` px.
pub(crate) fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * CHAR_EM
}

/// `<`, `>`, `&`, quotes escaped; control characters dropped.
pub(crate) fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// A number for an SVG attribute: two decimals at most, no "-0".
pub(crate) fn n(v: f64) -> String {
    let r = (v * 100.0).round() / 100.0;
    if r == 0.0 {
        "0".into()
    } else if r == r.trunc() {
        format!("{}", r as i64)
    } else {
        let s = format!("{r:.2}");
        s.trim_end_matches('0').to_string()
    }
}

/// An SVG document being drawn.
pub(crate) struct Canvas {
    pub(crate) width: f64,
    pub(crate) height: f64,
    body: String,
    /// Every label drawn.
    pub(crate) boxes: Vec<TextBox>,
}

impl Canvas {
    pub(crate) fn new(width: f64, height: f64) -> Canvas {
        Canvas {
            width,
            height,
            body: String::new(),
            boxes: Vec::new(),
        }
    }

    /// The box `text` would take with its baseline at `y`.
    pub(crate) fn box_of(text: &str, x: f64, y: f64, size: f64, anchor: Anchor) -> TextBox {
        let w = text_width(text, size);
        let x0 = match anchor {
            Anchor::Start => x,
            Anchor::Middle => x - w / 2.0,
            Anchor::End => x - w,
        };
        // Ascent ~0.8 em above the baseline, descent ~0.25 em below.
        TextBox {
            x0,
            y0: y - size * 0.8,
            x1: x0 + w,
            y1: y + size * 0.25,
        }
    }

    /// Whether `b` is free (no label within [`LABEL_GAP`] of it) and
    /// inside the canvas.
    pub(crate) fn fits(&self, b: &TextBox) -> bool {
        let padded = TextBox {
            x0: b.x0 - LABEL_GAP,
            x1: b.x1 + LABEL_GAP,
            ..*b
        };
        b.x0 >= 0.0
            && b.y0 >= 0.0
            && b.x1 <= self.width
            && b.y1 <= self.height
            && !self.boxes.iter().any(|o| o.overlaps(&padded))
    }

    /// Draws `text` unless it would overlap a label already drawn or
    /// leave the canvas; whether it was drawn.
    pub(crate) fn text(
        &mut self,
        text: &str,
        x: f64,
        y: f64,
        size: f64,
        anchor: Anchor,
        fill: &str,
    ) -> bool {
        let b = Canvas::box_of(text, x, y, size, anchor);
        if !self.fits(&b) {
            return false;
        }
        self.boxes.push(b);
        let anchor = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let _ = writeln!(
            self.body,
            r#"<text x="{}" y="{}" font-size="{}" text-anchor="{anchor}" fill="{fill}">{}</text>"#,
            n(x),
            n(y),
            n(size),
            xml(text)
        );
        true
    }

    /// Markup drawn as is (built by the caller from numbers only).
    pub(crate) fn raw(&mut self, markup: &str) {
        self.body.push_str(markup);
    }

    pub(crate) fn line(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, stroke: &str, width: f64) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{stroke}" stroke-width="{}"/>"#,
            n(x0),
            n(y0),
            n(x1),
            n(y1),
            n(width)
        );
    }

    /// A rectangle; `fill` "none" for an outline. Crisp edges: a 1 px
    /// frame at x.5 is one pixel of exactly its colour.
    pub(crate) fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, stroke: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}" stroke="{stroke}" shape-rendering="crispEdges"/>"#,
            n(x),
            n(y),
            n(w.max(0.0)),
            n(h.max(0.0))
        );
    }

    /// The frame of a plot over `x0..x1`, `h` high from `y`: its left
    /// edge on the pixel `x0` rounds to, its right edge one pixel inside
    /// `x1`, so that frames side by side never share a pixel.
    pub(crate) fn frame(&mut self, x0: f64, x1: f64, y: f64, h: f64) {
        self.rect(
            x0.round() + 0.5,
            y + 0.5,
            (x1 - x0).round() - 1.0,
            h,
            "none",
            FRAME,
        );
    }

    /// A polyline in `style`; each run of points is one path (a `None`
    /// breaks the line: no data there).
    pub(crate) fn series(&mut self, points: &[Option<(f64, f64)>], style: Style, width: f64) {
        let mut d = String::new();
        let mut pen_up = true;
        for p in points {
            match p {
                Some((x, y)) => {
                    let _ = write!(d, "{}{},{} ", if pen_up { "M" } else { "L" }, n(*x), n(*y));
                    pen_up = false;
                }
                None => pen_up = true,
            }
        }
        if d.is_empty() {
            return;
        }
        let dash = if style.dash.is_empty() {
            String::new()
        } else {
            format!(r#" stroke-dasharray="{}""#, style.dash)
        };
        let _ = writeln!(
            self.body,
            r#"<path d="{}" fill="none" stroke="{}" stroke-width="{}"{dash} stroke-linejoin="round"/>"#,
            d.trim_end(),
            style.colour,
            n(width)
        );
        // Markers on at most ~40 points, so a dense line stays readable.
        let drawn: Vec<(f64, f64)> = points.iter().flatten().copied().collect();
        let every = drawn.len().div_ceil(40).max(1);
        for (x, y) in drawn.iter().step_by(every) {
            self.marker(*x, *y, style);
        }
    }

    pub(crate) fn marker(&mut self, x: f64, y: f64, style: Style) {
        let c = style.colour;
        let r = 3.0;
        let _ = match style.marker {
            Marker::Circle => writeln!(
                self.body,
                r#"<circle cx="{}" cy="{}" r="{}" fill="{c}"/>"#,
                n(x),
                n(y),
                n(r)
            ),
            Marker::Square => writeln!(
                self.body,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="white" stroke="{c}" stroke-width="1.5"/>"#,
                n(x - r),
                n(y - r),
                n(2.0 * r),
                n(2.0 * r)
            ),
            Marker::Triangle => writeln!(
                self.body,
                r#"<path d="M{},{} L{},{} L{},{} Z" fill="{c}"/>"#,
                n(x),
                n(y - r - 1.0),
                n(x - r),
                n(y + r),
                n(x + r),
                n(y + r)
            ),
            Marker::Cross => writeln!(
                self.body,
                r#"<path d="M{},{} L{},{} M{},{} L{},{}" stroke="{c}" stroke-width="1.5"/>"#,
                n(x - r),
                n(y - r),
                n(x + r),
                n(y + r),
                n(x - r),
                n(y + r),
                n(x + r),
                n(y - r)
            ),
            Marker::Diamond => writeln!(
                self.body,
                r#"<path d="M{},{} L{},{} L{},{} L{},{} Z" fill="white" stroke="{c}" stroke-width="1.5"/>"#,
                n(x),
                n(y - r - 1.0),
                n(x + r + 1.0),
                n(y),
                n(x),
                n(y + r + 1.0),
                n(x - r - 1.0),
                n(y)
            ),
            Marker::None => Ok(()),
        };
    }

    /// A legend entry: a line sample with its marker, then the name;
    /// returns the x after it (or `None` when it did not fit).
    pub(crate) fn legend_item(&mut self, x: f64, y: f64, name: &str, style: Style) -> Option<f64> {
        let size = 11.0;
        let text_x = x + 30.0;
        let b = Canvas::box_of(name, text_x, y + 4.0, size, Anchor::Start);
        if !self.fits(&b) {
            return None;
        }
        self.series(&[Some((x, y)), Some((x + 24.0, y))], style, 2.0);
        self.text(name, text_x, y + 4.0, size, Anchor::Start, INK);
        Some(b.x1 + 14.0)
    }

    /// The SVG element; `class` and `data-*` attributes for the page and
    /// the tests.
    pub(crate) fn finish(self, attrs: &str) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"{FONT}\" {attrs}>\n{}</svg>\n",
            self.body,
            w = n(self.width),
            h = n(self.height),
        )
    }
}

/// Tick values for `[lo, hi]`: multiples of a 1-2-5 step giving at most
/// `max` ticks.
pub(crate) fn ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) || max == 0 {
        return vec![lo];
    }
    let raw = (hi - lo) / max as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| (hi - lo) / s <= max as f64)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A tick label: no more decimals than the step needs.
pub(crate) fn tick_label(v: f64, step: f64) -> String {
    let s = format!("{step:.3}");
    let decimals = s
        .trim_end_matches('0')
        .split('.')
        .nth(1)
        .map_or(0, str::len);
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_bounded() {
        let t = ticks(0.0, 1.0, 5);
        let labels: Vec<String> = t.iter().map(|v| tick_label(*v, 0.2)).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let t = ticks(0.0, 937.0, 5);
        assert!(t.len() <= 6 && t[1] == 200.0, "{t:?}");
        assert_eq!(ticks(3.0, 3.0, 5), vec![3.0]);
        assert_eq!(tick_label(0.25, 0.25), "0.25");
        assert_eq!(tick_label(0.4, 0.2), "0.4");
        assert_eq!(tick_label(400.0, 200.0), "400");
    }

    #[test]
    fn a_label_that_would_overlap_is_not_drawn() {
        let mut c = Canvas::new(200.0, 50.0);
        assert!(c.text("128-255", 10.0, 20.0, 11.0, Anchor::Start, INK));
        assert!(!c.text("512-1023", 40.0, 20.0, 11.0, Anchor::Start, INK));
        assert!(c.text("512-1023", 80.0, 20.0, 11.0, Anchor::Start, INK));
        // Off the canvas: refused too.
        assert!(!c.text("wide label", 190.0, 20.0, 11.0, Anchor::Start, INK));
        assert_eq!(c.boxes.len(), 2);
        assert_eq!(xml("a<b&\"c\u{1b}"), "a&lt;b&amp;&quot;c");
        assert_eq!(n(-0.001), "0");
        assert_eq!(n(2.50), "2.5");
    }
}
