//! Where the report's panels put things: the page's width and margins,
//! the runs laid end to end on the shared time axis ([`x_layout`]), and
//! what every panel on that axis (the findings strip, the time panels)
//! draws alike: the runs' names and seconds ([`segment_axis`]), their
//! frames, and the line under the axis with the notes below it. Both
//! panels use these, so the strip's runs stand exactly above the time
//! panels' runs.
use super::{
    data::{ReportData, Segment},
    svg::{Anchor, Canvas, FRAME, INK, MUTED, text_width, tick_label, ticks, xml},
};

/// Width of every panel, px.
pub(crate) const WIDTH: f64 = 1100.0;
/// Left margin of the time axis: room for the y ticks' labels.
pub(crate) const LEFT: f64 = 76.0;
pub(crate) const RIGHT: f64 = 16.0;
/// Top of a time-axis panel's plot: below its title, legend and the
/// runs' names.
pub(crate) const PLOT_TOP: f64 = 62.0;
pub(crate) const TICK_SIZE: f64 = 10.0;
pub(crate) const NOTE_SIZE: f64 = 11.0;
const MIN_SEGMENT_PX: f64 = 64.0;
const GAP_PX: f64 = 8.0;

/// Where each segment sits on the x axis.
#[derive(Clone, Debug)]
pub(crate) struct XLayout {
    /// `(x0, x1)` of each segment, px.
    pub(crate) spans: Vec<(f64, f64)>,
}

/// Widths proportional to the runs' lengths, none under the minimum.
pub(crate) fn x_layout(segments: &[Segment], left: f64, right: f64) -> XLayout {
    let k = segments.len().max(1);
    let avail = (right - left - GAP_PX * (k - 1) as f64).max(k as f64);
    let len: Vec<f64> = segments
        .iter()
        .map(|s| s.timeline.span_s.max(1e-3))
        .collect();
    let mut width = vec![avail / k as f64; k];
    if avail >= MIN_SEGMENT_PX * k as f64 && !segments.is_empty() {
        // Pin the short ones at the minimum, share the rest by length,
        // until no share falls under the minimum.
        let mut pinned = vec![false; k];
        loop {
            let free: f64 = avail - pinned.iter().filter(|p| **p).count() as f64 * MIN_SEGMENT_PX;
            let total: f64 = (0..k).filter(|i| !pinned[*i]).map(|i| len[i]).sum();
            let mut changed = false;
            for i in 0..k {
                width[i] = if pinned[i] {
                    MIN_SEGMENT_PX
                } else {
                    free * len[i] / total
                };
                if !pinned[i] && width[i] < MIN_SEGMENT_PX {
                    pinned[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }
    let mut x = left;
    let spans = width
        .iter()
        .map(|w| {
            let s = (x, x + w);
            x += w + GAP_PX;
            s
        })
        .collect();
    XLayout { spans }
}

/// A panel drawn, with what the tests read: its label boxes (in the
/// canvas), how many values it shows, and why it is empty when it is.
pub(crate) struct Drawn {
    pub(crate) canvas: Canvas,
    pub(crate) id: &'static str,
    pub(crate) points: usize,
    pub(crate) empty: Option<String>,
}

impl Drawn {
    /// The standalone `<svg>` of the panel, of CSS class `class`.
    pub(crate) fn finish(self, class: &str) -> String {
        let empty = self
            .empty
            .map(|e| format!(" data-empty=\"{}\"", xml(&e)))
            .unwrap_or_default();
        self.canvas.finish(&format!(
            "class=\"{class}\" data-panel=\"{}\" data-points=\"{}\"{empty}",
            self.id, self.points
        ))
    }
}

/// A run's name above its part of the axis (its number when the name
/// does not fit: `key` gets `#k = name`) and its x ticks: the seconds
/// from its start.
pub(crate) fn segment_axis(
    c: &mut Canvas,
    d: &ReportData,
    s: &Segment,
    i: usize,
    (x0, x1): (f64, f64),
    plot_b: f64,
    key: &mut Vec<String>,
) {
    if d.segments.len() > 1 || !d.recording {
        let name_y = PLOT_TOP - 6.0;
        let mid = (x0 + x1) / 2.0;
        let fits = text_width(&s.name, NOTE_SIZE) <= x1 - x0 - 4.0;
        if !(fits && c.text(&s.name, mid, name_y, NOTE_SIZE, Anchor::Middle, INK)) {
            let short = format!("#{}", i + 1);
            c.text(&short, mid, name_y, NOTE_SIZE, Anchor::Middle, INK);
            key.push(format!("{short} = {}", s.name));
        }
    }
    let span = s.timeline.span_s;
    let max_ticks = ((x1 - x0) / 44.0).floor().max(1.0) as usize;
    let t = ticks(0.0, span, max_ticks);
    let step = t.get(1).map_or(span.max(0.1), |v| v - t[0]);
    for v in t {
        let x = x0 + (x1 - x0) * (v / span.max(1e-9));
        c.line(x, plot_b, x, plot_b + 4.0, FRAME, 1.0);
        c.text(
            &tick_label(v, step),
            x,
            plot_b + 16.0,
            TICK_SIZE,
            Anchor::Middle,
            INK,
        );
    }
}

/// Every run's frame, `plot_h` high from [`PLOT_TOP`].
pub(crate) fn frames(c: &mut Canvas, layout: &XLayout, plot_h: f64) {
    for &(x0, x1) in &layout.spans {
        c.frame(x0, x1, PLOT_TOP, plot_h);
    }
}

/// Under the axis (`plot_b` its bottom): what the seconds count, then
/// `notes`; the canvas ends below the last.
pub(crate) fn notes_below<S: AsRef<str>>(
    c: &mut Canvas,
    d: &ReportData,
    plot_b: f64,
    notes: impl IntoIterator<Item = S>,
) {
    let axis = if d.recording {
        "time: seconds from the start of the recording"
    } else {
        "time: seconds from the start of each run (runs end to end, in the order they ran)"
    };
    let mut ny = plot_b + 32.0;
    c.text(axis, LEFT, ny, NOTE_SIZE, Anchor::Start, INK);
    for note in notes {
        ny += 15.0;
        c.text(note.as_ref(), LEFT, ny, NOTE_SIZE, Anchor::Start, MUTED);
    }
    c.height = ny + 10.0;
}
