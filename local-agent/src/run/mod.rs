//! The run of one task, in place, in a worktree or in scratch: [`NativeExecutor`],
//! which the server calls through its `Executor` trait (implemented outside the
//! runner, in `crate::serve`, so the runner names no server type). Its stages, in
//! order:
//!
//! 1. [`place`]: where the task runs: the bound directory validated, pinned and
//!    locked (`crate::dir`), a [`worktree`] of it, or the session's [`scratch`];
//! 2. [`prepare`]: settings and trust, the [`fence`], the brief and the sidecars
//!    (journaled, `crate::inject`), then a re-check of the directory;
//! 3. [`execute`]: the agent spawned and its turn streamed into events (`crate::agent`);
//! 4. [`finish`]: the directory restored through its descriptor, the lock released,
//!    and the task's [`outcome`].
//!
//! The future of [`NativeExecutor::run_task`] never resolves before the directory is
//! restored and the lock released.

mod execute;
mod executor;
pub(crate) mod fence;
mod finish;
mod outcome;
mod place;
mod prepare;
pub mod scratch;
mod state;
pub(crate) mod tmp;
pub mod worktree;

pub use executor::{ExecutorError, NativeExecutor};
