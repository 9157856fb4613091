//! Remote daemons: machines that run tasks for this server (`berth daemon`).

pub mod wire;
