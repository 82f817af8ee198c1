//! The live dashboard: its state, the `App` that changes it (messages in,
//! effects out), the sources that feed it and the panes that draw it.
pub mod app;
pub mod fsync;
pub mod jump;
pub mod run;
pub mod state;
pub mod ui;
pub mod who;
pub(crate) mod writes;
