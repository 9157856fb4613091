//! The end-to-end tests, one module per former test file.

mod agent_env;
mod approvals;
mod bench_smoke;
mod boundaries;
mod changes;
mod chat;
mod daemons;
mod deployed;
mod faults;
mod fence;
mod git_traps;
mod hardening;
mod lean;
mod members;
mod metrics;
mod ops;
mod postgres;
mod real_acp;
mod real_agents;
mod real_clis;
mod settings;
mod sidecars;
mod tcp_peer;
mod tls;
mod trust;
mod walkthrough;
