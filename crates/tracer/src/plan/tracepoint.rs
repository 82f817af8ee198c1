//! A classic tracepoint candidate's attaches, and the helper that makes
//! the common one.

/// One eBPF program attached to one classic tracepoint, with the global
/// that receives the tracepoint's layout and the fields it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracepointAttach {
    pub program: &'static str,
    pub system: &'static str,
    pub event: &'static str,
    /// `None` for programs that read no field.
    pub layout_global: Option<&'static str>,
    pub fields: &'static [&'static str],
    /// Fields without which the hook is useless on this kernel.
    pub required: &'static [&'static str],
    /// The program copies the record's first words after the common
    /// header and userspace decodes them with the layout
    /// ([`writeback_common::dirty::record_word`]); a field outside them is
    /// unavailable on this kernel.
    pub copies_words: bool,
    /// The candidate works without this event (a filesystem's own, whose
    /// module may not be loaded): where tracefs lacks it, its program is
    /// left out and the log says so.
    pub optional: bool,
}

/// An attach with a layout global, not optional, not copying words.
pub(super) const fn tp(
    program: &'static str,
    system: &'static str,
    event: &'static str,
    layout_global: &'static str,
    fields: &'static [&'static str],
    required: &'static [&'static str],
) -> TracepointAttach {
    TracepointAttach {
        program,
        system,
        event,
        layout_global: Some(layout_global),
        fields,
        required,
        copies_words: false,
        optional: false,
    }
}

/// A program that reads no field of its event.
pub(super) const fn bare(
    program: &'static str,
    system: &'static str,
    event: &'static str,
) -> TracepointAttach {
    TracepointAttach {
        layout_global: None,
        ..tp(program, system, event, "", &[], &[])
    }
}

/// A system call's exit tracepoint (its `ret`), as `program` names it.
pub(super) const fn sys_exit(program: &'static str, global: &'static str) -> TracepointAttach {
    tp(
        program,
        "syscalls",
        program,
        global,
        &writeback_common::fields::sys_exit::NAMES,
        &writeback_common::fields::sys_exit::NAMES,
    )
}

/// An event the candidate works without (a module not loaded, or an
/// event this kernel names otherwise): where tracefs lacks it, its
/// program is left out and the log says so.
pub(super) const fn optional(a: TracepointAttach) -> TracepointAttach {
    TracepointAttach {
        optional: true,
        ..a
    }
}
