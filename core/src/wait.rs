//! Why a task waits for its directory, in the words of its `wait_reason`, and the
//! holder read back from those words.
//!
//! The directory lock writes the reason (`waiting for the directory: in use by task
//! ID`); the server reads the holder's task id back from it, to name the session a
//! waiting task waits for. Writer and reader live here side by side, so the words
//! cannot drift from what is parsed.

use crate::ids::TaskId;

/// What every reason for a directory wait starts with.
const WAITING: &str = "waiting for the directory: ";

/// What names the holding task, after [`WAITING`].
const IN_USE_BY_TASK: &str = "in use by task ";

/// Who holds a directory a task waits for. `process` is the pid of another Berth
/// process holding it (`None`: this one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<'a> {
    /// A task, by its id (or what else holds a directory in a task's place: the CLI's
    /// undo names itself `undo-` and the task's short id).
    Task {
        id: &'a str,
        process: Option<&'a str>,
    },
    /// Berth taking a directory's first snapshot, at link time.
    FirstSnapshot { process: Option<&'a str> },
    /// A process that holds the lock and has not said for what yet.
    Process { pid: &'a str },
    /// Another task of this process, not known yet.
    AnotherTask,
    /// Another Berth process, not known yet.
    AnotherProcess,
}

/// The wait reason of a task waiting for a directory `holder` holds.
pub fn directory_wait(holder: Holder<'_>) -> String {
    let who = match holder {
        Holder::Task { id, process: None } => format!("{IN_USE_BY_TASK}{id}"),
        Holder::Task {
            id,
            process: Some(pid),
        } => format!("{IN_USE_BY_TASK}{id} of Berth process {pid}"),
        Holder::FirstSnapshot { process: None } => "Berth is taking its first snapshot".into(),
        Holder::FirstSnapshot { process: Some(pid) } => {
            format!("Berth is taking its first snapshot (Berth process {pid})")
        }
        Holder::Process { pid } => format!("in use by process {pid}"),
        Holder::AnotherTask => "in use by another task".into(),
        Holder::AnotherProcess => "in use by another Berth process".into(),
    };
    format!("{WAITING}{who}")
}

/// The task a [`directory_wait`] reason names as the holder; `None` for any other
/// reason, or a holder that is not a task (or whose name is not an id).
pub fn holder_task(reason: &str) -> Option<TaskId> {
    let rest = reason.strip_prefix(WAITING)?.strip_prefix(IN_USE_BY_TASK)?;
    TaskId::parse(rest.split_whitespace().next()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0192f3a1-7c2e-7d10-9a4b-5c6d7e8f9a0b";

    #[test]
    fn each_reason_reads_back_its_holding_task_and_no_other() {
        let task = Some(TaskId::parse(ID).unwrap());
        let cases = [
            (
                Holder::Task {
                    id: ID,
                    process: None,
                },
                format!("waiting for the directory: in use by task {ID}"),
                task.clone(),
            ),
            (
                Holder::Task {
                    id: ID,
                    process: Some("4242"),
                },
                format!("waiting for the directory: in use by task {ID} of Berth process 4242"),
                task,
            ),
            (
                Holder::Task {
                    id: "undo-0192f3a1",
                    process: None,
                },
                "waiting for the directory: in use by task undo-0192f3a1".to_owned(),
                Some(TaskId::parse("undo-0192f3a1").unwrap()),
            ),
            (
                Holder::FirstSnapshot { process: None },
                "waiting for the directory: Berth is taking its first snapshot".to_owned(),
                None,
            ),
            (
                Holder::FirstSnapshot { process: Some("7") },
                "waiting for the directory: Berth is taking its first snapshot (Berth process 7)"
                    .to_owned(),
                None,
            ),
            (
                Holder::Process { pid: "7" },
                "waiting for the directory: in use by process 7".to_owned(),
                None,
            ),
            (
                Holder::AnotherTask,
                "waiting for the directory: in use by another task".to_owned(),
                None,
            ),
            (
                Holder::AnotherProcess,
                "waiting for the directory: in use by another Berth process".to_owned(),
                None,
            ),
        ];
        for (holder, words, read) in cases {
            let reason = directory_wait(holder);
            assert_eq!(reason, words, "{holder:?}");
            assert_eq!(holder_task(&reason), read, "{holder:?}");
        }
    }

    #[test]
    fn other_reasons_name_no_task() {
        for reason in [
            "",
            "waiting for machine laptop-b",
            "in use by task 0192f3a1",
            "waiting for the directory: in use by task ",
            "waiting for the directory: in use by task a/b",
        ] {
            assert_eq!(holder_task(reason), None, "{reason:?}");
        }
    }
}
