//! `wbscope` with no subcommand: the live dashboard.
//!
//! One task owns the [`Model`]; the ring-buffer collector feeds it through
//! a channel; frames are drawn at most 10 times a second from the model,
//! which rendering does not change.
use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use crossterm::event::{Event as TermEvent, EventStream, KeyCode, KeyEventKind, KeyModifiers};
use futures_util::StreamExt as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
};

use crate::{
    collector::{Event, RingCollector},
    loader::{KernelStats, Tracer, TracerOptions},
    model::Model,
    plan::{HookKind, ProbePlan, kernel_release},
    tui,
};

const FRAME: Duration = Duration::from_millis(100);
const INTERVAL: Duration = Duration::from_secs(1);

pub async fn run(disabled: &[HookKind]) -> anyhow::Result<ExitCode> {
    // Missing privileges or probes do not stop the dashboard: it opens and
    // says what is missing.
    let options = TracerOptions {
        disabled: disabled.to_vec(),
        ..TracerOptions::default()
    };
    let (tracer, probes, events) = match Tracer::attach(&options) {
        Ok(mut tracer) => {
            crate::spawn_ebpf_log_pump(&mut tracer);
            let probes = tracer.plan.statuses();
            let (tx, rx) = mpsc::channel(4096);
            let collector = RingCollector::new(tracer.take_events()?)?;
            tokio::spawn(pump(collector, tx));
            (Some(tracer), probes, Some(rx))
        }
        Err(e) => (
            None,
            ProbePlan::unavailable(kernel_release(), &format!("{e:#}")).statuses(),
            None,
        ),
    };
    let mut model = Model::new(probes);

    let mut terminal = ratatui::init();
    let result = event_loop(&mut terminal, &mut model, tracer.as_ref(), events).await;
    ratatui::restore();
    result.map(|()| ExitCode::SUCCESS)
}

/// Moves records from the ring buffer to the model's channel. Stops when
/// the dashboard is gone.
async fn pump(mut collector: RingCollector, tx: mpsc::Sender<Event>) {
    loop {
        let mut batch = Vec::new();
        if let Err(e) = collector.wait_and_drain(|e| batch.push(e)).await {
            log::error!("ring buffer: {e:#}");
            return;
        }
        for event in batch {
            if tx.send(event).await.is_err() {
                return;
            }
        }
    }
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    model: &mut Model,
    tracer: Option<&Tracer>,
    mut events: Option<mpsc::Receiver<Event>>,
) -> anyhow::Result<()> {
    let mut keys = EventStream::new();
    let mut frame = tokio::time::interval(FRAME);
    frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut interval = tokio::time::interval(INTERVAL);
    interval.tick().await;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut dirty = true;
    let mut last_interval = tokio::time::Instant::now();

    loop {
        tokio::select! {
            _ = frame.tick() => {
                if dirty {
                    terminal.draw(|f| tui::render(model, f)).context("drawing")?;
                    dirty = false;
                }
            }
            _ = interval.tick() => {
                let now = tokio::time::Instant::now();
                let kernel = match tracer {
                    Some(t) => t.stats().unwrap_or_default(),
                    None => KernelStats::default(),
                };
                model.end_interval(now.duration_since(last_interval).as_secs_f64(), kernel);
                last_interval = now;
                dirty = true;
            }
            Some(event) = async {
                match events.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                match event {
                    Event::Call(call) => model.on_call(&call),
                }
                dirty = true;
            }
            key = keys.next() => {
                match key {
                    Some(Ok(TermEvent::Key(k))) if k.kind == KeyEventKind::Press => {
                        let ctrl_c = k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL);
                        if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                            return Ok(());
                        }
                    }
                    Some(Ok(TermEvent::Resize(..))) => dirty = true,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e).context("reading the terminal"),
                    None => return Ok(()),
                }
            }
            _ = sigterm.recv() => return Ok(()),
        }
    }
}
