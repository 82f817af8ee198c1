//! Pages per writepages call (last interval, since start) and the
//! writer's chunk sizes in pages, on the same log2 rows so they read
//! across: a 1 MiB chunk is 256 pages, in the `256-511` row next to the
//! kernel calls of that size.
use ratatui::{
    buffer::Buffer,
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Paragraph, Widget},
};

use super::{pane_block, theme};
use crate::state::Model;
use wbscope_model::Log2Histogram;

/// Bucket rows to show: the union of the three histograms' spans, cut
/// to `rows` around the part holding the most pages when it does not fit.
fn rows(hists: [&Log2Histogram; 3], rows: usize) -> Vec<usize> {
    let spans: Vec<(usize, usize)> = hists.iter().filter_map(|h| h.span()).collect();
    let (Some(first), Some(last)) = (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.1).max(),
    ) else {
        return Vec::new();
    };
    let all: Vec<usize> = (first..=last).collect();
    if rows == 0 {
        return Vec::new();
    }
    if all.len() <= rows {
        return all;
    }
    // The window of `rows` buckets holding the most pages: a writeback
    // histogram is read for where the volume goes, and the few large calls
    // that write most of it must not fall off the edge behind many tiny
    // ones (bucket k holds values of at least 2^(k-1)).
    let weight = |k: usize| -> u64 {
        let low = if k == 0 { 0 } else { 1u64 << (k - 1).min(62) };
        hists
            .iter()
            .map(|h| h.buckets()[k].saturating_mul(low.max(1)))
            .fold(0u64, u64::saturating_add)
    };
    let best = (0..=all.len() - rows)
        .max_by_key(|&i| all[i..i + rows].iter().map(|&k| weight(k)).sum::<u64>())
        .unwrap_or(0);
    all[best..best + rows].to_vec()
}

/// A bar of `count / max` of `width` cells, then the count.
fn bar(count: u64, max: u64, width: usize, style: Style, label: String) -> Vec<Span<'static>> {
    let fill = if max == 0 {
        0
    } else {
        ((count as f64 / max as f64) * width as f64).ceil() as usize
    }
    .min(width);
    vec![
        Span::styled("#".repeat(fill), style),
        Span::raw(" ".repeat(width - fill)),
        Span::styled(format!("{label:>6}"), theme::value()),
        Span::raw(" "),
    ]
}

/// The widget of the three chunk histograms side by side: it reads only its own slice of the
/// dashboard state.
pub(crate) struct Histograms<'a> {
    pub(crate) model: &'a Model,
    pub(crate) focused: bool,
}

impl Widget for Histograms<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let m = self.model;
        let block = pane_block(
            " pages per call (kernel) and per chunk (writer) ",
            self.focused,
        );
        let inner = block.inner(area);
        Widget::render(block, area, buf);
        if inner.height == 0 || inner.width < 20 {
            return;
        }
        let hists = [&m.hist_last, &m.hist_total, &m.writer.chunk_pages];
        let shown = rows(hists, usize::from(inner.height.saturating_sub(1)));
        if shown.is_empty() {
            Widget::render(
                Paragraph::new(Line::from(Span::styled(
                    "no writepages calls or writer chunks yet",
                    theme::dim(),
                ))),
                inner,
                buf,
            );
            return;
        }
        // Label, then three columns of bar + 6-cell figure + a space.
        const LABEL: usize = 9;
        let col = (usize::from(inner.width).saturating_sub(LABEL + 1) / 3).max(8);
        let bar_w = col.saturating_sub(7).max(1);
        let head = |t: &str| format!("{:<col$}", t.chars().take(col).collect::<String>());
        let mut lines = vec![Line::from(vec![
            Span::styled(format!("{:>LABEL$} ", "pages"), theme::dim()),
            Span::styled(head("kernel, last 1 s"), theme::kernel()),
            Span::styled(head("kernel, since start"), theme::kernel()),
            Span::styled(head("writer chunks"), theme::writer()),
        ])];
        let max_of = |h: &Log2Histogram| shown.iter().map(|&k| h.buckets()[k]).max().unwrap_or(0);
        let (max_last, max_total, max_w) = (
            max_of(&m.hist_last),
            max_of(&m.hist_total),
            max_of(&m.writer.chunk_pages),
        );
        let total = m.hist_total.count().max(1);
        let writer_total = m.writer.chunk_pages.count().max(1);
        for &k in &shown {
            let last = m.hist_last.buckets()[k];
            let tot = m.hist_total.buckets()[k];
            let wr = m.writer.chunk_pages.buckets()[k];
            let pct = |n: u64, of: u64| {
                if n == 0 {
                    String::new()
                } else {
                    format!("{:.0}%", n as f64 * 100.0 / of as f64)
                }
            };
            let mut spans = vec![Span::raw(format!(
                "{:>LABEL$} ",
                Log2Histogram::bucket_label(k)
            ))];
            spans.extend(bar(
                last,
                max_last,
                bar_w,
                theme::kernel(),
                if last == 0 {
                    String::new()
                } else {
                    last.to_string()
                },
            ));
            spans.extend(bar(tot, max_total, bar_w, theme::kernel(), pct(tot, total)));
            spans.extend(bar(
                wr,
                max_w,
                bar_w,
                theme::writer(),
                pct(wr, writer_total),
            ));
            lines.push(Line::from(spans));
        }
        Widget::render(Paragraph::new(lines), inner, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cover_all_three_and_fit() {
        let mut a = Log2Histogram::default();
        let mut b = Log2Histogram::default();
        let c = Log2Histogram::default();
        a.record(1);
        b.record(256);
        for _ in 0..10 {
            b.record(16384);
        }
        assert_eq!(rows([&a, &b, &c], 20), (1..=15).collect::<Vec<_>>());
        // Cut to 3 rows: the window with the 16K calls.
        assert_eq!(rows([&a, &b, &c], 3), vec![13, 14, 15]);
        assert!(rows([&c, &c, &c], 5).is_empty());
    }
}
