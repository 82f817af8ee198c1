//! Below the time axis: distributions over each run, one small chart per
//! run on shared log2 buckets (pages per call, kernel beside writer;
//! inode-pass budgets), and the scan cost per written page.
use wbscope_model::{Log2Histogram, interval::Bucket};

use super::{
    data::ReportData,
    layout::{Drawn, LEFT, WIDTH},
    svg::{
        Anchor, CHAR_EM, Canvas, GRID, INK, MUTED, Marker, STYLES, Style, n, text_width,
        tick_label, ticks,
    },
};

const CELL_MIN_W: f64 = 250.0;
const CELL_PLOT_H: f64 = 110.0;
const CELL_LEFT: f64 = 44.0;
const NOTE: f64 = 11.0;
const TICK: f64 = 10.0;

struct DistSeries {
    name: &'static str,
    style: Style,
    /// Fill the bars (else outline them): apart in grey too.
    filled: bool,
    dash: bool,
}

/// A histogram in pages from one in bytes: each bucket moved to the
/// bucket of its lower bound in pages (rounded up: 1 byte is 1 page).
fn bytes_to_pages(b: &[Bucket], page: u64) -> Vec<Bucket> {
    let mut h: std::collections::BTreeMap<usize, u64> = Default::default();
    for x in b {
        *h.entry(Log2Histogram::bucket_of(x.lo.div_ceil(page)))
            .or_default() += x.count;
    }
    h.into_iter()
        .map(|(k, count)| {
            let (lo, hi) = Log2Histogram::bucket_bounds(k);
            Bucket { lo, hi, count }
        })
        .collect()
}

type Cell = (Vec<Vec<Bucket>>, Option<String>);

/// Small multiples of histograms, one cell per segment.
fn histogram_panel(
    d: &ReportData,
    id: &'static str,
    title: &str,
    series: &[DistSeries],
    cells: &[Cell],
    empty: &str,
    notes: &[String],
) -> Drawn {
    let k_of = |b: &Bucket| Log2Histogram::bucket_of(b.lo);
    let all = || cells.iter().flat_map(|c| c.0.iter().flatten());
    let (kmin, kmax) = (
        all().map(k_of).min().unwrap_or(0),
        all().map(k_of).max().unwrap_or(0),
    );
    let points = all().filter(|b| b.count > 0).count();
    let cols = ((WIDTH - 16.0) / CELL_MIN_W).floor().max(1.0) as usize;
    let cols = cols.min(cells.len().max(1));
    let rows = cells.len().div_ceil(cols).max(1);
    let cell_w = (WIDTH - 16.0) / cols as f64;
    let cell_h = 20.0 + CELL_PLOT_H + 34.0;
    let top = 50.0;
    let note_lines = notes.len() + cells.iter().filter(|c| c.1.is_some()).count();
    let height = top + rows as f64 * cell_h + 8.0 + note_lines as f64 * 15.0;
    let mut c = Canvas::new(WIDTH, height);
    c.text(title, 8.0, 16.0, 13.0, Anchor::Start, INK);
    let mut lx = CELL_LEFT;
    for s in series {
        let style = Style {
            marker: Marker::None,
            ..s.style
        };
        match c.legend_item(lx, 34.0, s.name, style) {
            Some(x) => lx = x,
            None => break,
        }
    }
    let nb = kmax - kmin + 1;
    // Share of each series' calls, %.
    let share = |h: &[Bucket]| -> Vec<(usize, f64)> {
        let total: u64 = h.iter().map(|b| b.count).sum();
        h.iter()
            .filter(|b| b.count > 0)
            .map(|b| (k_of(b), 100.0 * b.count as f64 / total.max(1) as f64))
            .collect()
    };
    let top_share = cells
        .iter()
        .flat_map(|c| c.0.iter().flat_map(|h| share(h)))
        .map(|s| s.1)
        .fold(0.0f64, f64::max);
    let y_hi = if top_share > 50.0 {
        100.0
    } else {
        (top_share / 10.0).ceil().max(1.0) * 10.0
    };
    let mut notes_out: Vec<String> = notes.to_vec();
    for (i, (seg, cell)) in d.segments.iter().zip(cells).enumerate() {
        let (col, row) = (i % cols, i / cols);
        let x0 = 8.0 + col as f64 * cell_w + CELL_LEFT;
        let x1 = 8.0 + (col + 1) as f64 * cell_w - 12.0;
        let y0 = top + row as f64 * cell_h + 20.0;
        let yb = y0 + CELL_PLOT_H;
        let name = fit(&seg.name, x1 - x0, NOTE);
        c.text(&name, x0, y0 - 6.0, NOTE, Anchor::Start, INK);
        c.text("%", x0 - 6.0, y0 + 4.0, TICK, Anchor::End, INK);
        y_axis(
            &mut c,
            (x0, x1),
            (yb, CELL_PLOT_H),
            y_hi,
            &ticks(0.0, y_hi, 4),
        );
        let slot = (x1 - x0) / nb as f64;
        let bar_w = (slot * 0.8 / series.len().max(1) as f64).max(1.0);
        for (j, (h, s)) in cell.0.iter().zip(series).enumerate() {
            for (k, pct) in share(h) {
                let x = x0 + (k - kmin) as f64 * slot + slot * 0.1 + j as f64 * bar_w;
                let bh = CELL_PLOT_H * pct / y_hi;
                let dash = if s.dash {
                    " stroke-dasharray=\"3 2\""
                } else {
                    ""
                };
                let fill = if s.filled { s.style.colour } else { "white" };
                c.raw(&format!(
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" stroke=\"{}\" stroke-width=\"1.2\"{dash}/>\n",
                    n(x),
                    n(yb - bh),
                    n((bar_w - 1.0).max(1.0)),
                    n(bh.max(1.0)),
                    s.style.colour
                ));
            }
        }
        // The frame over the bars.
        c.frame(x0, x1, y0, CELL_PLOT_H);
        // Bucket labels, every m-th so that they cannot touch.
        let widest = (kmin..=kmax)
            .map(|k| text_width(&Log2Histogram::bucket_label(k), TICK))
            .fold(0.0, f64::max);
        let every = ((widest + 6.0) / slot).ceil().max(1.0) as usize;
        if points > 0 {
            for k in (kmin..=kmax).step_by(every) {
                let x = x0 + (k - kmin) as f64 * slot + slot / 2.0;
                c.text(
                    &Log2Histogram::bucket_label(k),
                    x,
                    yb + 14.0,
                    TICK,
                    Anchor::Middle,
                    INK,
                );
            }
            c.text(
                "pages (log2 buckets)",
                x0,
                yb + 28.0,
                TICK,
                Anchor::Start,
                INK,
            );
        }
        if cell.1.is_some() && points > 0 {
            c.text(
                "none",
                (x0 + x1) / 2.0,
                y0 + CELL_PLOT_H / 2.0,
                NOTE,
                Anchor::Middle,
                MUTED,
            );
        }
        if let Some(why) = &cell.1 {
            notes_out.push(format!("{}: {why}", seg.name));
        }
    }
    let empty = (points == 0).then(|| empty.to_string());
    if let Some(e) = &empty {
        let e = fit(e, WIDTH - 40.0, NOTE);
        c.text(
            &e,
            WIDTH / 2.0,
            top + 20.0 + CELL_PLOT_H / 2.0 - 16.0,
            NOTE,
            Anchor::Middle,
            MUTED,
        );
    }
    let mut ny = top + rows as f64 * cell_h + 4.0;
    for note in &notes_out {
        ny += 15.0;
        c.text(note, 8.0, ny, NOTE, Anchor::Start, MUTED);
    }
    Drawn {
        canvas: c,
        id,
        points,
        empty,
    }
}

/// The linear y axis of a plot over `x0..x1` whose bottom is `yb`, `h`
/// high, from 0 up to `top`: a grid line at each of `ticks` (a 1-2-5
/// step apart from 0; none at 0, the frame's edge) and its label left of
/// `x0`.
fn y_axis(c: &mut Canvas, (x0, x1): (f64, f64), (yb, h): (f64, f64), top: f64, ticks: &[f64]) {
    let step = ticks.get(1).copied().unwrap_or(top);
    for v in ticks {
        let y = yb - h * v / top;
        if *v > 0.0 {
            c.line(x0, y, x1, y, GRID, 1.0);
        }
        c.text(
            &tick_label(*v, step),
            x0 - 6.0,
            y + 4.0,
            TICK,
            Anchor::End,
            INK,
        );
    }
}

/// `text` cut to fit `width` px, with ".." when cut.
fn fit(text: &str, width: f64, size: f64) -> String {
    if text_width(text, size) <= width {
        return text.to_string();
    }
    let keep = ((width / (size * CHAR_EM)) as usize).saturating_sub(2);
    format!("{}..", text.chars().take(keep).collect::<String>())
}

fn chunks_panel(d: &ReportData) -> Drawn {
    let series = [
        DistSeries {
            name: "kernel: pages per writepages call",
            style: STYLES[0],
            filled: true,
            dash: false,
        },
        DistSeries {
            name: "writer: pages per write(2)",
            style: STYLES[1],
            filled: false,
            dash: false,
        },
        DistSeries {
            name: "writer: pages per ranged sync",
            style: STYLES[2],
            filled: false,
            dash: true,
        },
    ];
    let series: &[DistSeries] = if d.recording { &series[..1] } else { &series };
    let cells: Vec<Cell> = d
        .segments
        .iter()
        .map(|s| {
            let (w, sy) = s.writer_chunks.as_ref().map_or((vec![], vec![]), |c| {
                (
                    bytes_to_pages(&c.write_bytes, d.page_size),
                    bytes_to_pages(&c.sync_bytes, d.page_size),
                )
            });
            let why = (s.pages_per_call.is_empty() && w.is_empty()).then(|| {
                if s.o_direct {
                    "no writepages calls: O_DIRECT writes bypass the page cache".to_string()
                } else {
                    "no writepages calls and no writer calls".to_string()
                }
            });
            (vec![s.pages_per_call.clone(), w, sy], why)
        })
        .collect();
    let mut notes = vec!["bars: share of each kind's calls in each bucket".to_string()];
    if d.recording {
        notes.push("a recording holds no writer of wbscope's: kernel calls only".into());
    }
    histogram_panel(
        d,
        "chunks",
        "Pages per call: the kernel's writepages calls beside the writer's calls",
        series,
        &cells,
        "empty: no writepages calls and no writer in this input",
        &notes,
    )
}

fn passes_panel(d: &ReportData) -> Drawn {
    let series = [
        DistSeries {
            name: "budget (nr_to_write) per pass",
            style: STYLES[3],
            filled: true,
            dash: false,
        },
        DistSeries {
            name: "pages written per budget pass",
            style: STYLES[4],
            filled: false,
            dash: false,
        },
        DistSeries {
            name: "pages written per sync pass (no budget)",
            style: STYLES[5],
            filled: false,
            dash: true,
        },
    ];
    let cells: Vec<Cell> = d
        .segments
        .iter()
        .map(|s| {
            let get = |h: &Option<Vec<Bucket>>| h.clone().unwrap_or_default();
            let hists = vec![
                get(&s.pass_budgets),
                get(&s.pass_written),
                get(&s.pass_unbounded),
            ];
            let why = if s.pass_budgets.is_none() {
                Some("not measured: needs the tp_btf hook of writeback_single_inode".into())
            } else if hists.iter().all(Vec::is_empty) {
                Some("no inode passes on its devices".into())
            } else {
                None
            };
            (hists, why)
        })
        .collect();
    histogram_panel(
        d,
        "passes",
        "Inode passes (writeback_single_inode): the flusher's budget and what each pass wrote",
        &series,
        &cells,
        "empty: no inode passes measured in this input",
        &[
            "budget passes: the flusher's WB_SYNC_NONE chunks; sync passes: WB_SYNC_ALL (fsync, sync)".into(),
            // docs/probes.md: writepage_delalloc() raises the budget.
            "pages written = budget consumed; btrfs raises a budget mid-pass, so its budget passes may show fewer".into(),
        ],
    )
}

/// One bar per segment: pages examined per page written.
fn scan_panel(d: &ReportData) -> Drawn {
    let plot_top = 40.0;
    let plot_h = 120.0;
    let (x0, x1) = (LEFT, WIDTH - 16.0);
    let notes: Vec<String> = d
        .segments
        .iter()
        .filter(|s| s.scan_per_page.is_none())
        .map(|s| {
            format!(
                "{}: not measured (no scan hooks, or no calls with a scan)",
                s.name
            )
        })
        .collect();
    let height = plot_top + plot_h + 40.0 + notes.len() as f64 * 15.0;
    let mut c = Canvas::new(WIDTH, height);
    c.text(
        "Scan per written page: pages ext4 examined for each page it wrote",
        8.0,
        16.0,
        13.0,
        Anchor::Start,
        INK,
    );
    let values: Vec<f64> = d.segments.iter().filter_map(|s| s.scan_per_page).collect();
    let points = values.len();
    let hi = values.iter().copied().fold(0.0f64, f64::max).max(1.0) * 1.15;
    let yt = ticks(0.0, hi, 4);
    let step = yt.get(1).copied().unwrap_or(hi);
    let hi = (hi / step).ceil() * step;
    let yb = plot_top + plot_h;
    c.text("pages", x0 - 8.0, plot_top - 8.0, TICK, Anchor::End, INK);
    y_axis(&mut c, (x0, x1), (yb, plot_h), hi, &yt);
    let k = d.segments.len().max(1);
    let slot = (x1 - x0) / k as f64;
    for (i, s) in d.segments.iter().enumerate() {
        let cx = x0 + slot * (i as f64 + 0.5);
        let bw = (slot * 0.5).min(60.0);
        match s.scan_per_page {
            Some(v) => {
                let h = plot_h * v / hi;
                c.rect(
                    cx - bw / 2.0,
                    yb - h,
                    bw,
                    h,
                    STYLES[0].colour,
                    STYLES[0].colour,
                );
                c.text(
                    &format!("{v:.2}"),
                    cx,
                    yb - h - 4.0,
                    TICK,
                    Anchor::Middle,
                    INK,
                );
            }
            None => {
                c.text("none", cx, yb - plot_h / 2.0, NOTE, Anchor::Middle, MUTED);
            }
        }
        let name = fit(&s.name, slot - 6.0, TICK);
        c.text(&name, cx, yb + 14.0, TICK, Anchor::Middle, INK);
    }
    c.frame(x0, x1, plot_top, plot_h);
    let mut ny = yb + 14.0 + 15.0;
    for note in &notes {
        c.text(note, 8.0, ny, NOTE, Anchor::Start, MUTED);
        ny += 15.0;
    }
    let empty = (points == 0).then(|| "empty: scan not measured in this input".to_string());
    Drawn {
        canvas: c,
        id: "scan",
        points,
        empty,
    }
}

/// The panels below the time axis, drawn, with their label boxes.
pub(crate) fn dist_drawn(d: &ReportData) -> Vec<Drawn> {
    vec![chunks_panel(d), passes_panel(d), scan_panel(d)]
}

/// The panels below the time axis, each a standalone `<svg>`.
pub(crate) fn dist_panels(d: &ReportData) -> Vec<String> {
    dist_drawn(d)
        .into_iter()
        .map(|p| p.finish("panel dist"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_buckets_become_page_buckets() {
        let b = |lo: u64, hi: u64, count| Bucket { lo, hi, count };
        let pages = bytes_to_pages(&[b(1, 1, 2), b(8 << 20, (16 << 20) - 1, 3)], 4096);
        assert_eq!(pages, vec![b(1, 1, 2), b(2048, 4095, 3)]);
        assert_eq!(fit("srf-pipelined", 50.0, 10.0), "srf-pi..");
    }
}
