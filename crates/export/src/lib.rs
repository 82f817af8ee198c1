//! Every output of wbscope, from the model's plain data: JSON lines
//! ([`json_lines`]), the tables of `trace`, `compare` and `scenario`
//! ([`text`], [`table`]), the doctor's findings ([`findings`]), `wbscope
//! diff`'s table and page ([`diff`]), the self-contained HTML report with
//! its hand-drawn SVG ([`report`], [`plot`]) and the Prometheus exporter
//! ([`prometheus`]).
pub mod diff;
pub mod findings;
pub mod json_lines;
pub mod plot;
pub mod prometheus;
pub mod report;
pub mod table;
pub mod text;
