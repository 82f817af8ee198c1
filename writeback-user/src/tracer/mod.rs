//! Everything that touches the kernel, and the only place aya is used:
//! the probe plan ([`plan`]), loading and attaching ([`attach`]), reading
//! the programs' maps ([`maps`]) and ring buffer ([`ring`]), tracefs
//! formats, kernel BTF, privileges, the embedded object and the BPF cost
//! calibration. What it hands upwards is plain data from [`crate::model`].
pub mod attach;
pub mod btf;
pub mod cost;
pub mod object;
pub mod plan;
pub mod privileges;
pub mod ring;
pub mod tracefs;

pub use attach::{KernelStats, ProgramRunTime, Tracer, TracerOptions};

/// Forwards aya-log records from the kernel programs to the `log` crate.
pub fn spawn_ebpf_log_pump(tracer: &mut Tracer) {
    let Some(logger) = tracer.take_logger() else {
        return;
    };
    // SAFETY: the logger owns its ring-buffer fd until it is dropped, which
    // only the AsyncFd does.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE)
    };
    let Ok(mut fd) = registered else {
        log::warn!("cannot poll the eBPF log buffer");
        return;
    };
    tokio::spawn(async move {
        while let Ok(mut guard) = fd.readable_mut().await {
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    });
}
