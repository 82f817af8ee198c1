//! Loops that drive a [`wbscope_tracer::Tracer`] over time and hand its
//! figures to an output: the tracing session of `trace` and `record`, and
//! the traced windows of `compare` and `scenario`.
mod interval;
pub mod meter;
pub mod session;
pub mod window;
