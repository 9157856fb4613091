//! Ctrl-C during `berth send`: the message's task is cancelled, not left running.
//!
//! Without this, SIGINT killed the client and left the agent running (or the queued
//! task to run later) with nothing on screen to say so. Here SIGINT is blocked in the
//! client and taken by a thread of its own (`sigwait`), so the blocking event stream
//! goes on reading: the first Ctrl-C asks the server to cancel the task (on a second
//! connection) and says so; the stream then shows the task end `cancelled` as usual.
//! A second Ctrl-C stops waiting at once (exit 130); the cancel was already sent.

use super::error::CliError;
use super::render;
use std::sync::{Arc, Mutex, PoisonError};

/// What asks the server to cancel a task (given its id).
pub type Cancel = Box<dyn Fn(&str) -> Result<(), CliError> + Send + Sync>;

/// The Ctrl-C watcher of one `berth send`.
pub struct Interrupt {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupt")
    }
}

struct Shared {
    cancel: Cancel,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The task to cancel, once the server accepted the message.
    task: Option<String>,
    /// How many times Ctrl-C was pressed.
    pressed: u32,
    /// Whether the cancel was sent.
    sent: bool,
}

impl Interrupt {
    /// Blocks SIGINT in the calling thread (and every thread it starts later) and waits
    /// for it on a thread of its own, which cancels the task with `cancel`. `None`
    /// where that fails: then Ctrl-C ends the client as before.
    pub fn install(cancel: Cancel) -> Option<Interrupt> {
        let set = sigint_set()?;
        #[allow(unsafe_code)]
        // SAFETY: `set` is an initialized signal set; only this thread's mask changes.
        let blocked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if blocked != 0 {
            return None;
        }
        let shared = Arc::new(Shared {
            cancel,
            state: Mutex::new(State::default()),
        });
        let watcher = shared.clone();
        let started = std::thread::Builder::new()
            .name("ctrl-c".into())
            .spawn(move || watch(&watcher, set));
        if started.is_err() {
            #[allow(unsafe_code)]
            // SAFETY: as above; SIGINT is delivered normally again.
            unsafe {
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
            return None;
        }
        Some(Interrupt { shared })
    }

    /// The task the message became: cancelled at once if Ctrl-C came before it did.
    pub fn task(&self, id: &str) {
        let mut st = self.shared.lock();
        st.task = Some(id.to_owned());
        if st.pressed > 0 && !st.sent {
            st.sent = true;
            drop(st);
            self.shared.cancel(id);
        }
    }

    /// Whether Ctrl-C was pressed.
    pub fn pressed(&self) -> bool {
        self.shared.lock().pressed > 0
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks the server to cancel `task`, saying so (or why it could not).
    fn cancel(&self, task: &str) {
        let short = render::short(&serde_json::Value::from(task));
        match (self.cancel)(task) {
            Ok(()) => eprintln!(
                "berth: cancelling task {short} (Ctrl-C again to stop waiting; the cancel \
                 stands)"
            ),
            Err(e) => report(&e, &short),
        }
    }
}

fn report(e: &CliError, short: &str) {
    eprintln!(
        "berth: could not cancel task {short}: {}\nhint: berth task cancel {short}",
        e.message
    );
}

/// A signal set holding SIGINT alone.
fn sigint_set() -> Option<libc::sigset_t> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    #[allow(unsafe_code)]
    // SAFETY: `sigemptyset` initializes the set it is given; `sigaddset` adds a valid
    // signal number to an initialized set.
    unsafe {
        if libc::sigemptyset(set.as_mut_ptr()) != 0
            || libc::sigaddset(set.as_mut_ptr(), libc::SIGINT) != 0
        {
            return None;
        }
        Some(set.assume_init())
    }
}

/// The watcher thread: each SIGINT in turn.
fn watch(shared: &Shared, set: libc::sigset_t) {
    loop {
        let mut sig: libc::c_int = 0;
        #[allow(unsafe_code)]
        // SAFETY: `set` is initialized and SIGINT is blocked in every thread of the
        // client, so `sigwait` takes it here.
        let waited = unsafe { libc::sigwait(&set, &mut sig) };
        if waited != 0 {
            return;
        }
        let mut st = shared.lock();
        st.pressed += 1;
        if st.pressed > 1 {
            let what = st
                .task
                .as_deref()
                .map(|t| format!("task {}", render::short(&serde_json::Value::from(t))))
                .unwrap_or_else(|| String::from("the message"));
            eprintln!("berth: stopped waiting for {what}");
            std::process::exit(130);
        }
        match st.task.clone() {
            Some(task) if !st.sent => {
                st.sent = true;
                drop(st);
                shared.cancel(&task);
            }
            Some(_) => {}
            None => eprintln!("berth: the message's task is cancelled as soon as it is accepted"),
        }
    }
}
