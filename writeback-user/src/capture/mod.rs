//! Loops that drive a [`crate::tracer::Tracer`] over time and hand its
//! figures to an output: the tracing session of `trace` and `record`.
pub mod session;
