//! The error type for command-line values that cannot be used.

/// A command-line value that cannot be used (exit code 2), found after
/// parsing (a missing path, a process that does not exist).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
