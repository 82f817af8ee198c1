//! Errors of a run. They wrap only the errors of the layers below (a
//! refused config, a failed verify); a failure that carries the partial
//! report is `RunFailure`, which lives beside the report.
use std::io;

use crate::config::ConfigError;
use crate::verify::VerifyError;

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The target refuses the run before anything is written: missing or
    /// read-only directory, not enough free space, a block device.
    #[error("{0}")]
    Refused(String),
    /// A system call failed while running (ENOSPC, EIO, ...).
    #[error("{context}: {error}")]
    Io { context: String, error: io::Error },
    /// The data read back is not what was written.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error("writer thread for job {0} panicked")]
    Panicked(u32),
}

impl WriterError {
    /// Bad input or a target that refuses the run (the CLI's exit code 2),
    /// as opposed to a failure while running (exit code 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, WriterError::Config(_) | WriterError::Refused(_))
    }

    /// The underlying OS error, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            WriterError::Io { error, .. } => Some(error),
            WriterError::Verify(VerifyError::Io { error, .. }) => Some(error),
            _ => None,
        }
    }
}
