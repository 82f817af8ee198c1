//! Output formats of the tracer.
pub mod json_lines;
pub mod prometheus;
pub mod text;
