//! Fuzzes Berth's ACP client with whatever an agent might write on its stdout: the
//! bytes are the agent's whole output, read by `acp::converse` as it reads a real
//! agent's (lines, JSON-RPC messages, session updates, permission and file requests).
//! No input may panic it, hang it, or make it write outside the run's directory.
//!
//! | bytes | meaning |
//! |---|---|
//! | 0 | the policy: 0 read-only, 1 edit, else full |
//! | rest | the agent's stdout |
#![no_main]

use berth_core::Permissions;
use berth_local_agent::agent::acp::{TurnCtx, converse};
use berth_local_agent::agent::adapter::Turn;
use libfuzzer_sys::fuzz_target;
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::Duration;

struct World {
    app: std::path::PathBuf,
    dir: std::os::fd::OwnedFd,
    rt: tokio::runtime::Runtime,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("bfuzz-acp-{}", std::process::id()));
        let app = root.join("app");
        std::fs::create_dir_all(&app).unwrap();
        let dir = std::fs::File::open(&app).unwrap().into();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        World { app, dir, rt }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&policy, out)) = data.split_first() else {
        return;
    };
    let w = world();
    let permissions = match policy {
        0 => Permissions::ReadOnly,
        1 => Permissions::Edit,
        _ => Permissions::Full,
    };
    let ctx = TurnCtx {
        turn: Turn {
            prompt: "p",
            brief: None,
            resume_id: (policy & 0x80 != 0).then_some("s"),
            work_dir: &w.app,
            permissions,
            fenced: policy & 0x40 != 0,
        },
        dir: w.dir.as_fd(),
    };
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let (_cancel_tx, mut cancel) = tokio::sync::watch::channel(false);
    w.rt.block_on(async {
        let reader = tokio::io::BufReader::new(out);
        let conv = converse(reader, tokio::io::sink(), &ctx, &tx, &mut cancel, Duration::from_millis(1));
        tokio::time::timeout(Duration::from_secs(5), conv)
            .await
            .expect("the client never hangs on a closed stream");
    });
});
