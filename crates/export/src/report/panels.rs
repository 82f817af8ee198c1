//! The time panels: one SVG each, all on the same time axis (runs laid
//! end to end by [`x_layout`], each wide enough that a run of a fraction
//! of a second among long ones still shows; ticks are seconds from the
//! start of each run), under the findings strip on that axis.
use wbscope_model::{
    interval::{Bucket, quantile_bucket},
    plan::Concept,
    timeline::TimeBin,
};

use super::{
    data::{ReportData, Segment},
    findings,
    layout::{
        Drawn, LEFT, NOTE_SIZE, PLOT_TOP, RIGHT, TICK_SIZE, WIDTH, XLayout, frames, notes_below,
        segment_axis, x_layout,
    },
    svg::{Anchor, Canvas, GRID, INK, MUTED, STYLES, Style, n, tick_label, ticks},
    writes::WriteSums,
};

const PLOT_H: f64 = 150.0;
const MIB: f64 = 1048576.0;

/// One series' points, segment by segment, bin by bin: (x, value), or
/// `None` where it has no value.
type Points = Vec<Vec<Option<(f64, f64)>>>;

/// A value of one bin of one segment, given the bin's index and its
/// length in seconds.
type Value<'a> = Box<dyn Fn(&Segment, usize, &TimeBin, f64) -> Option<f64> + 'a>;

struct Series<'a> {
    name: String,
    style: Style,
    value: Value<'a>,
}

/// One time panel to draw.
struct Spec<'a> {
    id: &'static str,
    title: &'static str,
    unit: &'static str,
    log: bool,
    series: Vec<Series<'a>>,
    /// Why the whole panel is empty, when it is.
    empty: String,
    /// Why one segment has no data in it, when it has none.
    segment_empty: Box<dyn Fn(&Segment) -> String + 'a>,
    notes: Vec<String>,
    /// The min..max band over the writer's jobs.
    job_band: bool,
    /// Each series is drawn on top of the ones before it (their values
    /// added), the band under it filled: parts of one whole.
    stacked: bool,
}

fn attached(d: &ReportData, c: Concept) -> bool {
    d.plan.as_ref().is_none_or(|p| p.attached(c))
}

fn no_hook(c: Concept) -> String {
    format!(
        "empty: no hook for {} was attached on this kernel (see the probe plan above)",
        c.name()
    )
}

/// Midpoint of a quantile's bucket.
fn quantile_mid(b: &[Bucket], q: f64) -> Option<f64> {
    quantile_bucket(b, q).map(|[lo, hi]| (lo as f64 + hi as f64) / 2.0)
}

/// Cause order on the legend: the flusher's causes, then the callers'.
const CAUSES: [&str; 6] = [
    "periodic",
    "background",
    "flusher_other",
    "sync",
    "direct",
    "unknown",
];

fn specs(d: &ReportData) -> Vec<Spec<'_>> {
    let page = d.page_size as f64;
    let no_timeline = |s: &Segment| {
        (!s.has_timeline)
            .then(|| "no timeline in this document (written by a wbscope without one)".to_string())
    };
    let mut out = Vec::new();

    // Writer throughput.
    let mut series = Vec::new();
    if !d.recording {
        series.push(Series {
            name: "written by the writer (all jobs)".into(),
            style: STYLES[0],
            value: Box::new(|s, _, b, len| {
                (!b.writer_bytes.is_empty() || s.timeline.jobs() > 0)
                    .then(|| b.writer_bytes.iter().sum::<u64>() as f64 / 1e6 / len)
            }),
        });
    }
    series.push(Series {
        name: "pages dirtied (all processes)".into(),
        style: STYLES[1],
        value: Box::new(move |_, _, b, len| Some(b.pages_dirtied as f64 * page / 1e6 / len)),
    });
    out.push(Spec {
        id: "writer",
        title: if d.recording {
            "Writers: pages dirtied (a recording has no writer of wbscope's; this is what all processes dirtied)"
        } else {
            "Writer throughput per run, and pages dirtied"
        },
        unit: "MB/s",
        log: false,
        series,
        empty: "empty: nothing was written or dirtied in this input".into(),
        segment_empty: Box::new(move |s| {
            no_timeline(s).unwrap_or_else(|| format!("{}: the writer wrote nothing", s.name))
        }),
        notes: vec![format!(
            "1 MB = 10^6 bytes; pages of {} bytes{}",
            d.page_size,
            if d.recording {
                ""
            } else {
                "; with several jobs, the grey band spans the slowest to the fastest"
            }
        )],
        job_band: !d.recording,
        stacked: false,
    });

    // Kernel writeback by cause.
    let present: Vec<&'static str> = CAUSES
        .iter()
        .copied()
        .filter(|c| {
            d.segments.iter().any(|s| {
                s.timeline
                    .bins
                    .iter()
                    .any(|b| b.pages_written_by_cause.contains_key(*c))
            })
        })
        .collect();
    let series = present
        .into_iter()
        .enumerate()
        .map(|(i, cause): (usize, &'static str)| Series {
            name: (*cause).to_string(),
            style: STYLES[i % STYLES.len()],
            value: Box::new(move |s: &Segment, _, b: &TimeBin, len| {
                (s.calls > 0 || b.calls > 0).then(|| {
                    b.pages_written_by_cause.get(cause).copied().unwrap_or(0) as f64 * page
                        / 1e6
                        / len
                })
            }) as Value<'_>,
        })
        .collect();
    out.push(Spec {
        id: "kernel",
        title: "Kernel: pages written by writepages calls, by cause",
        unit: "MB/s",
        log: false,
        series,
        empty: if attached(d, Concept::WritepagesCall) {
            "empty: no writepages calls in this input (O_DIRECT and idle filesystems make none)"
                .into()
        } else {
            no_hook(Concept::WritepagesCall)
        },
        segment_empty: Box::new(move |s| {
            no_timeline(s).unwrap_or_else(|| {
                if s.o_direct {
                    format!(
                        "{}: no writepages calls: O_DIRECT writes bypass the page cache",
                        s.name
                    )
                } else {
                    format!("{}: no writepages calls on its filesystem", s.name)
                }
            })
        }),
        notes: vec!["each call counted where it ended".into()],
        job_band: false,
        stacked: false,
    });

    // Dirty and writeback levels.
    let level = |f: fn(&TimeBin) -> Option<u64>| -> Value<'_> {
        Box::new(move |_, _, b, _| f(b).map(|p| p as f64 * page / MIB))
    };
    out.push(Spec {
        id: "levels",
        title: "Dirty and writeback pages, and the thresholds (/proc/vmstat, system-wide)",
        unit: "MiB",
        log: false,
        series: vec![
            Series {
                name: "dirty".into(),
                style: STYLES[0],
                value: level(|b| b.dirty_pages),
            },
            Series {
                name: "writeback".into(),
                style: STYLES[1],
                value: level(|b| b.writeback_pages),
            },
            Series {
                name: "background threshold".into(),
                style: STYLES[2],
                value: level(|b| b.background_threshold_pages),
            },
            Series {
                name: "dirty threshold".into(),
                style: STYLES[3],
                value: level(|b| b.dirty_threshold_pages),
            },
        ],
        empty: "empty: no /proc/vmstat samples in this input".into(),
        segment_empty: Box::new(move |s| {
            no_timeline(s).unwrap_or_else(|| format!("{}: no samples", s.name))
        }),
        notes: vec!["levels: the highest sample in each bin".into()],
        job_band: false,
        stacked: false,
    });

    // Throttling.
    let throttled = attached(d, Concept::Throttling);
    out.push(Spec {
        id: "throttle",
        title: "Throttling of dirtiers: time paused in balance_dirty_pages (system-wide)",
        unit: "ms/s",
        log: false,
        series: vec![Series {
            name: "pause time per second".into(),
            style: STYLES[0],
            value: Box::new(move |_, _, b, len| {
                throttled.then(|| b.throttle_pause_ms as f64 / len)
            }),
        }],
        empty: if throttled {
            "empty: no bins in this input".into()
        } else {
            no_hook(Concept::Throttling)
        },
        segment_empty: Box::new(move |s| {
            no_timeline(s).unwrap_or_else(|| format!("{}: no samples", s.name))
        }),
        notes: vec!["0 = no dirtier was made to pause".into()],
        job_band: false,
        stacked: false,
    });

    // fsyncs (`--enable durability`): the longest, the mean, and the
    // mean's journal part.
    let split = attached(d, Concept::Durability);
    let ms = |ns: u64| ns as f64 / 1e6;
    out.push(Spec {
        id: "fsync",
        title: "fsyncs: the longest and the mean, and the mean's wait for journal commits",
        unit: "ms",
        log: true,
        series: vec![
            Series {
                name: "longest fsync".into(),
                style: STYLES[0],
                value: Box::new(move |_, _, b, _| (b.fsync.count > 0).then(|| ms(b.fsync.max_ns))),
            },
            Series {
                name: "mean fsync".into(),
                style: STYLES[1],
                value: Box::new(move |_, _, b, _| {
                    (b.fsync.count > 0).then(|| ms(b.fsync.total_ns) / b.fsync.count as f64)
                }),
            },
            Series {
                name: "of which waiting on the journal".into(),
                style: STYLES[2],
                value: Box::new(move |_, _, b, _| {
                    (b.fsync.count > 0).then(|| ms(b.fsync.journal_ns) / b.fsync.count as f64)
                }),
            },
        ],
        empty: if split {
            "empty: no fsync in this input".into()
        } else {
            "empty: fsyncs are split only with --enable durability (doctor turns it on)".into()
        },
        segment_empty: Box::new(move |s| {
            no_timeline(s).unwrap_or_else(|| format!("{}: no fsync", s.name))
        }),
        notes: vec![
            "each fsync in the bin it was joined in, about 2 s after it returned \
             (docs/trace-json.md, sync)"
                .into(),
        ],
        job_band: false,
        stacked: false,
    });

    // Write calls (`--enable writes`): their time by part, stacked, and
    // their latency beside it (ms per second and ms do not share an
    // axis).
    if writes_shown(d) {
        out.extend(write_specs(d));
    }

    // Device latency and sizes: quantiles of the block tracepoints'
    // histograms (`--enable device_io`), or the /proc/diskstats means
    // (the default).
    let io = attached(d, Concept::DeviceIo);
    let diskstats = d.plan.as_ref().is_some_and(|p| p.devices_from_diskstats());
    let io_empty = if io {
        "empty: no block requests completed on these devices".to_string()
    } else {
        no_hook(Concept::DeviceIo)
    };
    let q = |f: fn(&TimeBin) -> &Vec<Bucket>, q: f64, scale: f64| -> Value<'_> {
        Box::new(move |_, _, b, _| quantile_mid(f(b), q).map(|v| v / scale))
    };
    let quantiles = |f: fn(&TimeBin) -> &Vec<Bucket>, scale: f64| {
        vec![
            Series {
                name: "p50".into(),
                style: STYLES[0],
                value: q(f, 0.5, scale),
            },
            Series {
                name: "p99".into(),
                style: STYLES[1],
                value: q(f, 0.99, scale),
            },
        ]
    };
    let mean_of = |pick: fn((f64, f64)) -> f64, scale: f64| -> Value<'_> {
        Box::new(move |_, _, b, _| b.disk.means().map(|m| pick(m) / scale))
    };
    let mean = |pick: fn((f64, f64)) -> f64, scale: f64| {
        vec![Series {
            name: "mean".into(),
            style: STYLES[0],
            value: mean_of(pick, scale),
        }]
    };
    let notes = |diskstats: bool| {
        vec![if diskstats {
            "log scale; means from /proc/diskstats (its latency counters count whole ms); \
             `--enable device_io` records the quantiles"
                .into()
        } else {
            "log scale; midpoints of the log2 buckets holding the quantile".into()
        }]
    };
    out.push(Spec {
        id: "latency",
        title: "Device request latency, issue to completion",
        unit: "ms",
        log: true,
        series: if diskstats {
            mean(|(ns, _)| ns, 1e6)
        } else {
            quantiles(|b| &b.request_latency_ns, 1e6)
        },
        empty: io_empty.clone(),
        segment_empty: Box::new(move |s| {
            no_timeline(s).unwrap_or_else(|| format!("{}: no requests completed", s.name))
        }),
        notes: notes(diskstats),
        job_band: false,
        stacked: false,
    });
    out.push(Spec {
        id: "sizes",
        title: "Device request sizes",
        unit: "KiB",
        log: true,
        series: if diskstats {
            mean(|(_, bytes)| bytes, 1024.0)
        } else {
            quantiles(|b| &b.request_bytes, 1024.0)
        },
        empty: io_empty,
        segment_empty: Box::new(move |s| {
            no_timeline(s).unwrap_or_else(|| format!("{}: no requests issued", s.name))
        }),
        notes: notes(diskstats),
        job_band: false,
        stacked: false,
    });
    out
}

/// Whether the write panels are drawn: the input traced write calls
/// (its plan attached them, or its lines carry some). Without them the
/// page says how to get them ([`writes_missing`]) instead of two empty
/// panels, since most recordings and every compare document have none.
fn writes_shown(d: &ReportData) -> bool {
    d.plan.as_ref().is_some_and(|p| p.attached(Concept::Writes))
        || d.segments.iter().any(|s| !s.writes.is_empty())
}

/// The sentence that stands for the write panels when they are not
/// drawn.
pub(crate) fn writes_missing(d: &ReportData) -> Option<&'static str> {
    if writes_shown(d) {
        None
    } else if d.recording {
        Some(
            "Write calls: not traced in this recording. `wbscope record --enable writes` \
             splits each buffered write call to a file by what it waited for (throttle, \
             stable, reclaim, blocked, other); `doctor` turns it on.",
        )
    } else {
        Some(
            "Write calls: compare and scenario trace none. Record the workload with \
             `wbscope record --enable writes` and report the recording to see each write \
             call split by what it waited for.",
        )
    }
}

/// The write panels: time in write calls per second by part, stacked;
/// the longest call, the slowest process's p99, and the mean.
fn write_specs(d: &ReportData) -> Vec<Spec<'_>> {
    use wbscope_model::writes::PART_NAMES;
    let empty = if d.plan.as_ref().is_none_or(|p| p.attached(Concept::Writes)) {
        "empty: no buffered write call to a file in this input".to_string()
    } else {
        no_hook(Concept::Writes)
    };
    // A segment that traced writes shows 0 in its bins without any: the
    // stacked parts stay a whole; one without a single write is "none".
    let parts = PART_NAMES
        .iter()
        .enumerate()
        .map(|(k, name)| Series {
            name: (*name).to_string(),
            style: STYLES[k],
            value: Box::new(move |s: &Segment, i: usize, _: &TimeBin, len: f64| {
                (!s.writes.is_empty()).then(|| {
                    let ns = s
                        .writes
                        .get(i)
                        .map_or(0, |w: &WriteSums| w.parts.values()[k]);
                    ns as f64 / 1e6 / len
                })
            }) as Value<'_>,
        })
        .collect();
    let of = |f: fn(&WriteSums) -> f64| -> Value<'_> {
        Box::new(move |s, i, _, _| s.writes.get(i).filter(|w| w.writes > 0).map(|w| f(w) / 1e6))
    };
    let segment_empty = || -> Box<dyn Fn(&Segment) -> String + '_> {
        Box::new(|s| format!("{}: no write calls", s.name))
    };
    vec![
        Spec {
            id: "writes",
            title: "Write calls: time in buffered write calls, by what it waited for (stacked)",
            unit: "ms/s",
            log: false,
            series: parts,
            empty: empty.clone(),
            segment_empty: segment_empty(),
            notes: vec![
                "each line tops its part: the highest is all the write time; processes add up \
                 (1000 ms/s = one writer always in a write call)"
                    .into(),
                "throttle: balance_dirty_pages pauses; stable: a page under writeback; reclaim: \
                 direct or memcg; blocked: other sleeps; other: on the CPU"
                    .into(),
            ],
            job_band: false,
            stacked: true,
        },
        Spec {
            id: "write-latency",
            title: "Write calls: the longest, the slowest process's p99, and the mean",
            unit: "ms",
            log: true,
            series: vec![
                Series {
                    name: "longest write".into(),
                    style: STYLES[0],
                    value: of(|w| w.max_ns as f64),
                },
                Series {
                    name: "p99 (of the slowest process)".into(),
                    style: STYLES[1],
                    value: of(|w| w.p99_ns as f64),
                },
                Series {
                    name: "mean write".into(),
                    style: STYLES[2],
                    value: of(|w| w.parts.total_ns as f64 / w.writes as f64),
                },
            ],
            empty,
            segment_empty: segment_empty(),
            notes: vec![
                "log scale; p99: the largest of the processes' exact p99s in the bin, at or \
                 above the p99 of all its writes"
                    .into(),
            ],
            job_band: false,
            stacked: false,
        },
    ]
}

/// The y axis: linear from 0, or log10.
struct YScale {
    lo: f64,
    hi: f64,
    log: bool,
}

impl YScale {
    fn of(values: &[f64], log: bool) -> YScale {
        let max = values.iter().copied().fold(0.0f64, f64::max);
        if log {
            let min = values
                .iter()
                .copied()
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min);
            let (lo, hi) = if min.is_finite() {
                (
                    10f64.powf(min.log10().floor()),
                    10f64.powf(max.log10().ceil()),
                )
            } else {
                (1.0, 10.0)
            };
            YScale {
                lo,
                hi: if hi <= lo { lo * 10.0 } else { hi },
                log,
            }
        } else {
            let hi = if max > 0.0 { max * 1.1 } else { 1.0 };
            let t = ticks(0.0, hi, 5);
            let step = t.get(1).copied().unwrap_or(hi);
            YScale {
                lo: 0.0,
                hi: (hi / step).ceil() * step,
                log,
            }
        }
    }

    /// Fraction of the height from the bottom.
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            let v = v.max(self.lo);
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// Tick values and labels.
    fn ticks(&self) -> Vec<(f64, String)> {
        if self.log {
            let decades = (self.hi.log10() - self.lo.log10()).round() as i32;
            let mut out = Vec::new();
            for e in 0..=decades {
                let p = self.lo * 10f64.powi(e);
                out.push((p, log_label(p)));
                if decades <= 2 && e < decades {
                    for m in [2.0, 5.0] {
                        out.push((p * m, log_label(p * m)));
                    }
                }
            }
            out
        } else {
            let t = ticks(self.lo, self.hi, 5);
            let step = t.get(1).map_or(1.0, |s| s - t[0]);
            t.iter().map(|v| (*v, tick_label(*v, step))).collect()
        }
    }
}

fn log_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{}", v.round() as u64)
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').to_string()
    }
}

/// Length of bin `i` of a segment (the last one may be partial).
fn bin_len(s: &Segment, i: usize) -> f64 {
    let start = i as f64 * s.timeline.bin_s;
    (s.timeline.span_s - start).clamp(0.0, s.timeline.bin_s)
}

/// Draws the time panels; each is a standalone `<svg>`.
pub(crate) fn time_panels(d: &ReportData) -> Vec<String> {
    time_drawn(d)
        .into_iter()
        .map(|p| p.finish("panel time"))
        .collect()
}

/// The time panels, drawn, with their label boxes.
pub(crate) fn time_drawn(d: &ReportData) -> Vec<Drawn> {
    let layout = x_layout(&d.segments, LEFT, WIDTH - RIGHT);
    let strip = findings::strip(d, &layout);
    std::iter::once(strip)
        .chain(specs(d).into_iter().map(|spec| draw(d, &layout, spec)))
        .collect()
}

fn draw(d: &ReportData, layout: &XLayout, spec: Spec<'_>) -> Drawn {
    // Values of every series in every bin of every segment: (x, value).
    let mut values: Vec<Points> = Vec::new();
    for series in &spec.series {
        let mut per_segment = Vec::new();
        for (s, &(x0, x1)) in d.segments.iter().zip(&layout.spans) {
            let span = s.timeline.span_s.max(1e-9);
            let pts = (0..s.timeline.bins.len())
                .filter_map(|i| {
                    let len = bin_len(s, i);
                    if len < 1e-3 {
                        return None;
                    }
                    let mid = i as f64 * s.timeline.bin_s + len / 2.0;
                    let x = x0 + (x1 - x0) * (mid / span).min(1.0);
                    Some((series.value)(s, i, &s.timeline.bins[i], len).map(|v| (x, v)))
                })
                .collect();
            per_segment.push(pts);
        }
        values.push(per_segment);
    }
    if spec.stacked {
        stack(&mut values);
    }
    let mut all: Vec<f64> = values
        .iter()
        .flatten()
        .flatten()
        .flatten()
        .map(|p| p.1)
        .collect();
    // The job band's top counts in the scale.
    let band: Vec<Vec<(f64, f64, f64)>> = if spec.job_band {
        d.segments
            .iter()
            .zip(&layout.spans)
            .map(|(s, &(x0, x1))| job_band(s, x0, x1))
            .collect()
    } else {
        Vec::new()
    };
    all.extend(band.iter().flatten().map(|b| b.2));
    let points = all.len();
    // Room for every possible note; cut to what was drawn at the end.
    let notes_h = (spec.notes.len() + 2 * d.segments.len() + 1) as f64 * 15.0;
    let height = PLOT_TOP + PLOT_H + 40.0 + notes_h;
    let mut c = Canvas::new(WIDTH, height);
    let (plot_l, plot_r) = (LEFT, WIDTH - RIGHT);
    let plot_b = PLOT_TOP + PLOT_H;
    c.text(spec.title, 8.0, 16.0, 13.0, Anchor::Start, INK);
    let y = YScale::of(&all, spec.log);
    let to_y = |v: f64| plot_b - PLOT_H * y.frac(v).clamp(0.0, 1.0);

    // Legend.
    let mut lx = plot_l;
    for s in &spec.series {
        match c.legend_item(lx, 34.0, &s.name, s.style) {
            Some(next) => lx = next,
            None => break,
        }
    }

    // Grid and y ticks.
    c.text(
        spec.unit,
        plot_l - 8.0,
        PLOT_TOP - 10.0,
        TICK_SIZE,
        Anchor::End,
        INK,
    );
    if points > 0 {
        for (v, label) in y.ticks() {
            let yy = to_y(v);
            c.line(plot_l, yy, plot_r, yy, GRID, 1.0);
            c.text(&label, plot_l - 6.0, yy + 4.0, TICK_SIZE, Anchor::End, INK);
        }
    }

    // Segments: frames, names, x ticks.
    let mut key = Vec::new();
    let mut empty_notes = Vec::new();
    for (i, (s, &(x0, x1))) in d.segments.iter().zip(&layout.spans).enumerate() {
        segment_axis(&mut c, d, s, i, (x0, x1), plot_b, &mut key);
        let has_data = values
            .iter()
            .any(|v| v[i].iter().flatten().next().is_some());
        if points > 0 && !has_data {
            c.text(
                "none",
                (x0 + x1) / 2.0,
                PLOT_TOP + PLOT_H / 2.0,
                NOTE_SIZE,
                Anchor::Middle,
                MUTED,
            );
            empty_notes.push((spec.segment_empty)(s));
        }
    }

    // Data.
    if spec.job_band {
        for b in &band {
            if b.is_empty() {
                continue;
            }
            let mut d_attr = String::new();
            for (k, (x, lo, _)) in b.iter().enumerate() {
                d_attr.push_str(&format!(
                    "{}{},{} ",
                    if k == 0 { "M" } else { "L" },
                    n(*x),
                    n(to_y(*lo))
                ));
            }
            for (x, _, hi) in b.iter().rev() {
                d_attr.push_str(&format!("L{},{} ", n(*x), n(to_y(*hi))));
            }
            c.raw(&format!(
                "<path d=\"{}Z\" fill=\"#d0d0d0\" stroke=\"none\"/>\n",
                d_attr
            ));
        }
    }
    if spec.stacked {
        for (k, (series, per_segment)) in spec.series.iter().zip(&values).enumerate() {
            for (seg, top) in per_segment.iter().enumerate() {
                let below = k.checked_sub(1).map(|j| &values[j][seg]);
                band_under(&mut c, top, below, &to_y, series.style);
            }
        }
    }
    for (series, per_segment) in spec.series.iter().zip(&values) {
        for pts in per_segment {
            let pts: Vec<Option<(f64, f64)>> =
                pts.iter().map(|p| p.map(|(x, v)| (x, to_y(v)))).collect();
            c.series(&pts, series.style, 1.8);
        }
    }
    // Frames last: over the data, so a series at zero does not hide them.
    frames(&mut c, layout, PLOT_H);
    let empty = (points == 0).then(|| spec.empty.clone());
    if let Some(e) = &empty {
        c.text(
            e,
            (plot_l + plot_r) / 2.0,
            PLOT_TOP + PLOT_H / 2.0,
            NOTE_SIZE,
            Anchor::Middle,
            MUTED,
        );
    }

    // Below: the x axis's unit, then notes.
    notes_below(
        &mut c,
        d,
        plot_b,
        spec.notes.iter().chain(&key).chain(&empty_notes),
    );
    Drawn {
        canvas: c,
        id: spec.id,
        points,
        empty,
    }
}

/// Each series' values on top of the ones before it, bin by bin (a bin
/// a series has no value in keeps none).
pub(super) fn stack(values: &mut [Points]) {
    for k in 1..values.len() {
        let (done, rest) = values.split_at_mut(k);
        let below = &done[k - 1];
        for (seg, pts) in rest[0].iter_mut().enumerate() {
            for (j, p) in pts.iter_mut().enumerate() {
                let under = below.get(seg).and_then(|b| b.get(j)).copied().flatten();
                if let (Some((_, v)), Some((_, u))) = (p.as_mut(), under) {
                    *v += u;
                }
            }
        }
    }
}

/// The band between a stacked series (`top`) and the one under it
/// (`below`, the axis for the first), filled light in its colour, for
/// each run of bins where both have values.
fn band_under(
    c: &mut Canvas,
    top: &[Option<(f64, f64)>],
    below: Option<&Vec<Option<(f64, f64)>>>,
    to_y: &dyn Fn(f64) -> f64,
    style: Style,
) {
    let mut run: Vec<(f64, f64, f64)> = Vec::new();
    let mut flush = |run: &mut Vec<(f64, f64, f64)>| {
        if run.len() >= 2 {
            let mut d = String::new();
            for (k, (x, hi, _)) in run.iter().enumerate() {
                d.push_str(&format!(
                    "{}{},{} ",
                    if k == 0 { "M" } else { "L" },
                    n(*x),
                    n(to_y(*hi))
                ));
            }
            for (x, _, lo) in run.iter().rev() {
                d.push_str(&format!("L{},{} ", n(*x), n(to_y(*lo))));
            }
            c.raw(&format!(
                "<path d=\"{}Z\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"none\"/>\n",
                d, style.colour
            ));
        }
        run.clear();
    };
    for (j, p) in top.iter().enumerate() {
        let lo = match below {
            None => Some(0.0),
            Some(b) => b.get(j).copied().flatten().map(|(_, v)| v),
        };
        match (p, lo) {
            (Some((x, hi)), Some(lo)) => run.push((*x, *hi, lo)),
            _ => flush(&mut run),
        }
    }
    flush(&mut run);
}

/// Per bin of a multi-job writer: (x, slowest job, fastest job), MB/s.
fn job_band(s: &Segment, x0: f64, x1: f64) -> Vec<(f64, f64, f64)> {
    if s.timeline.jobs() < 2 {
        return Vec::new();
    }
    let span = s.timeline.span_s.max(1e-9);
    s.timeline
        .bins
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let len = bin_len(s, i);
            if len < 1e-3 || b.writer_bytes.is_empty() {
                return None;
            }
            let mid = i as f64 * s.timeline.bin_s + len / 2.0;
            let rate = |v: &u64| *v as f64 / 1e6 / len;
            let lo = b
                .writer_bytes
                .iter()
                .map(rate)
                .fold(f64::INFINITY, f64::min);
            let hi = b.writer_bytes.iter().map(rate).fold(0.0, f64::max);
            Some((x0 + (x1 - x0) * (mid / span).min(1.0), lo, hi))
        })
        .collect()
}
