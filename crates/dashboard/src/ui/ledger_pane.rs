//! Where the bytes go, since the start: each device's bytes written split
//! into data, journal, metadata and other beside its own counter, then
//! per process the flow from its write calls to the device: bytes
//! passed to write(), dirtied in the page cache, written back, and its
//! share of the journal and metadata, with the amplification over its
//! write calls (docs/ledger.md).
use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Cell, Paragraph, Row, Table, Widget},
};

use super::{empty_pane, pane_block, theme};
use wbscope_model::ledger::{DeviceLedger, LedgerLine, Stages};
use wbscope_model::units;

/// The widget of the ledger pane: it reads only the ledger slice of the
/// state.
pub(crate) struct LedgerPane<'a> {
    /// The intervals' ledgers added up; `None` before the first.
    pub(crate) ledger: Option<&'a LedgerLine>,
    pub(crate) focused: bool,
}

fn opt_bytes(b: Option<u64>) -> String {
    b.map_or_else(|| "-".to_string(), units::bytes)
}

/// One device's line: its counter, and the classes where measured.
fn device_line(d: &DeviceLedger) -> Line<'static> {
    let mut spans = vec![
        Span::styled(format!("{:<8}", d.dev.to_string()), theme::dim()),
        Span::raw(format!("{:>9} written", units::bytes(d.written))),
    ];
    match (d.data, d.journal, d.metadata, d.other) {
        (Some(data), Some(journal), Some(metadata), Some(other)) => {
            spans.push(Span::raw(" = "));
            spans.push(Span::styled(
                format!(
                    "data {} · journal {} · metadata {} · other {}",
                    units::bytes(data),
                    units::bytes(journal),
                    units::bytes(metadata),
                    units::bytes(other)
                ),
                theme::kernel(),
            ));
        }
        _ => spans.push(Span::styled(
            " (classes with --enable device_io)",
            theme::dim(),
        )),
    }
    spans.push(Span::styled(
        format!("  unattributed {}", units::bytes(d.unattributed)),
        theme::dim(),
    ));
    Line::from(spans)
}

fn times(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |x| format!("{x:.1}x"))
}

fn flow(s: &Stages) -> [String; 6] {
    [
        opt_bytes(s.write_calls),
        opt_bytes(s.dirtied),
        units::bytes(s.written_back),
        opt_bytes(s.journal),
        opt_bytes(s.metadata),
        times(
            s.amplification_of_write_calls
                .filter(|_| s.write_calls.is_some_and(|w| w > 0))
                .or(s.amplification),
        ),
    ]
}

impl Widget for LedgerPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let block = pane_block(
            " where the bytes go, since start: write() → dirtied → written + journal + meta ",
            self.focused,
        );
        let Some(ledger) = self.ledger else {
            empty_pane(
                "no ledger yet (a recording made before it has none)",
                block,
                area,
                buf,
            );
            return;
        };
        let inner = block.inner(area);
        block.render(area, buf);
        let shown = ledger.devices.len().min(3) as u16;
        let notes = u16::from(ledger.shares_unmeasured.is_some());
        let [devices, table_area, note_area] = Layout::vertical([
            Constraint::Length(shown),
            Constraint::Min(2),
            Constraint::Length(notes),
        ])
        .areas(inner);
        let mut by_size: Vec<&DeviceLedger> = ledger.devices.iter().collect();
        by_size.sort_by_key(|d| std::cmp::Reverse(d.written));
        Paragraph::new(
            by_size
                .into_iter()
                .take(usize::from(shown))
                .map(device_line)
                .collect::<Vec<_>>(),
        )
        .render(devices, buf);
        let num = Constraint::Length;
        let rows = ledger
            .processes
            .iter()
            .take(usize::from(table_area.height.saturating_sub(1)))
            .map(|p| {
                let mut cells = vec![Cell::from(p.pid.to_string()), Cell::from(p.comm.clone())];
                cells.extend(flow(&p.stages).into_iter().map(Cell::from));
                Row::new(cells)
            });
        let header = Row::new([
            "pid", "comm", "write()", "dirtied", "written", "+journal", "+meta", "amplif.",
        ])
        .style(theme::dim());
        Table::new(
            rows,
            [
                num(7),
                num(16),
                num(10),
                num(10),
                num(10),
                num(10),
                num(10),
                Constraint::Min(7),
            ],
        )
        .header(header)
        .render(table_area, buf);
        if let Some(why) = &ledger.shares_unmeasured {
            Paragraph::new(Line::from(Span::styled(
                format!("journal and metadata shares: {why}"),
                theme::dim(),
            )))
            .render(note_area, buf);
        }
    }
}
