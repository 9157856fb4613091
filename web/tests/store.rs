//! The store on a real SQLite file: round trips, restart recovery, id prefixes.

mod common;

use berth_core::api::TaskStatus;
use berth_core::resolve::Origin;
use berth_web::executor::{AgentKind, AgentSpec};
use berth_web::store::{NewSessionRow, Store, StoreError};
use common::TempDir;

fn agent() -> AgentSpec {
    AgentSpec {
        name: "echo".into(),
        kind: AgentKind::Command,
        command: vec!["cat".into()],
        permissions: None,
    }
}

fn unbound(title: &str) -> NewSessionRow {
    NewSessionRow {
        title: Some(title.into()),
        agent: None,
        origin: Origin::Desktop,
        project: None,
        binding: None,
        owner: None,
    }
}

#[tokio::test]
async fn everything_accepted_survives_a_restart_and_running_tasks_become_interrupted() {
    let home = TempDir::new();
    let (session, running, queued) = {
        let store = Store::open(home.path()).await.unwrap();
        assert_eq!(store.add_agent(agent()).await.unwrap(), agent());
        let s = store.create_session(unbound("demo")).await.unwrap();
        let (t1, seq1) = store
            .add_message(s.id.clone(), Origin::Desktop, "one".into())
            .await
            .unwrap();
        let (t2, seq2) = store
            .add_message(s.id[..12].to_owned(), Origin::Desktop, "two".into())
            .await
            .unwrap();
        assert_eq!((seq1, seq2, t1.seq, t2.seq), (1, 2, 1, 2));
        assert!(store.claim(t1.id.clone()).await.unwrap());
        store
            .set_status(t1.id.clone(), TaskStatus::Running, None)
            .await
            .unwrap();
        (s, t1, t2)
        // The store is dropped here as if the process died.
    };
    let store = Store::open(home.path()).await.unwrap();
    let rec = store.recover().await.unwrap();
    assert_eq!(rec.interrupted, vec![running.id.clone()]);
    assert_eq!(rec.pending_sessions, vec![session.id.clone()]);

    let again = store.session(&session.id).await.unwrap();
    assert_eq!(
        (
            again.id,
            again.title,
            again.agent,
            again.created_at,
            again.binding
        ),
        (
            session.id.clone(),
            session.title.clone(),
            session.agent.clone(),
            session.created_at.clone(),
            None
        )
    );
    assert_eq!(store.list_agents().await.unwrap(), vec![agent()]);
    let tasks = store
        .list_tasks(Some(session.id.clone()), None)
        .await
        .unwrap();
    let statuses: Vec<(String, TaskStatus)> =
        tasks.iter().map(|t| (t.id.clone(), t.status)).collect();
    assert_eq!(
        statuses,
        vec![
            (running.id.clone(), TaskStatus::Interrupted),
            (queued.id.clone(), TaskStatus::Queued)
        ]
    );
    // The transcript: both messages, the running status, then the interruption.
    let events = store
        .events_after(session.id.clone(), 0, 100)
        .await
        .unwrap();
    let kinds: Vec<(i64, &str)> = events.iter().map(|e| (e.seq, e.kind.as_str())).collect();
    assert_eq!(
        kinds,
        vec![(1, "message"), (2, "message"), (3, "status"), (4, "task")]
    );
    assert_eq!(events[0].payload["text"], "one");
    assert_eq!(events[3].payload["task"]["status"], "interrupted");
    // The queued task is next, the interrupted one is never returned again.
    let next = store.next_run(session.id.clone()).await.unwrap().unwrap();
    assert_eq!(
        (next.task.id, next.prompt, next.origin),
        (queued.id, "two".to_owned(), Origin::Desktop)
    );
    // A second recovery finds nothing more.
    let again = store.recover().await.unwrap();
    assert!(again.interrupted.is_empty());
}

#[tokio::test]
async fn ids_resolve_by_unique_prefix() {
    let home = TempDir::new();
    let store = Store::open(home.path()).await.unwrap();
    store.add_agent(agent()).await.unwrap();
    // Ids are random: among 17 sessions, two share at least their first character.
    let mut made = Vec::new();
    let (a, b, common) = loop {
        let next = store.create_session(unbound("s")).await.unwrap();
        let pair = made.iter().find_map(|m: &berth_web::store::SessionRow| {
            let common =
                m.id.chars()
                    .zip(next.id.chars())
                    .take_while(|(x, y)| x == y)
                    .count();
            (common >= 1).then(|| (m.clone(), next.clone(), common))
        });
        if let Some(p) = pair {
            break p;
        }
        made.push(next);
    };
    made.push(b.clone());
    let (a, b) = if a.id < b.id { (a, b) } else { (b, a) };
    let shared = &a.id[..common];
    let mut expected: Vec<String> = made
        .iter()
        .map(|m| m.id.clone())
        .filter(|id| id.starts_with(shared))
        .collect();
    expected.sort();

    assert_eq!(store.session(&a.id).await.unwrap().id, a.id);
    assert_eq!(store.session(&a.id[..common + 1]).await.unwrap().id, a.id);
    assert_eq!(
        store
            .session(&b.id.to_uppercase()[..common + 1])
            .await
            .unwrap()
            .id,
        b.id
    );
    match store.session(shared).await {
        Err(StoreError::Ambiguous {
            what,
            prefix,
            candidates,
        }) => {
            assert_eq!((what, prefix.as_str()), ("sessions", shared));
            assert_eq!(candidates, expected);
        }
        other => panic!("expected ambiguous, got {other:?}"),
    }
    for unknown in ["ffff", "zz", "", "0%"] {
        assert!(
            matches!(
                store.session(unknown).await,
                Err(StoreError::UnknownSession { .. })
            ),
            "{unknown:?}"
        );
    }
    let (t, _) = store
        .add_message(a.id.clone(), Origin::Api, "x".into())
        .await
        .unwrap();
    assert_eq!(store.task(&t.id[..t.id.len() - 2]).await.unwrap().id, t.id);
    assert!(matches!(
        store.task("ffff").await,
        Err(StoreError::UnknownTask { .. })
    ));
}

#[tokio::test]
async fn an_unknown_agent_names_the_known_ones() {
    let home = TempDir::new();
    let store = Store::open(home.path()).await.unwrap();
    store.add_agent(agent()).await.unwrap();
    let mut new = unbound("x");
    new.agent = Some("nope".into());
    match store.create_session(new).await {
        Err(StoreError::UnknownAgent { name, known }) => {
            assert_eq!((name.as_str(), known), ("nope", vec!["echo".to_owned()]));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.add_agent(agent()).await,
        Err(StoreError::AgentExists { .. })
    ));
}

/// Listing 10,000 sessions (the budget: 20 ms). Run with
/// `cargo test -p berth-web --release --test store -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_list_10000_sessions() {
    let home = TempDir::new();
    let store = Store::open_blocking(home.path()).unwrap();
    store
        .write_blocking(|tx, _| {
            tx.execute(
                "INSERT INTO agents (name, kind, command, created_at) VALUES ('a', 'command', '[\"cat\"]', 'now')",
                [],
            )?;
            let mut stmt = tx.prepare(
                "INSERT INTO sessions (id, title, agent, origin, created_at, updated_at)
                 VALUES (?1, ?2, 'a', 'desktop', ?3, ?3)",
            )?;
            for i in 0..10_000 {
                let id = uuid::Uuid::now_v7().to_string();
                stmt.execute(rusqlite::params![id, format!("session {i}"), berth_web::clock::now()])?;
            }
            Ok(())
        })
        .unwrap();
    let (mut query, mut total) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let start = std::time::Instant::now();
        let rows = store
            .read_blocking(|c| berth_web::store::list_sessions(c, None))
            .unwrap();
        query.push(start.elapsed());
        let docs: Vec<_> = rows.iter().map(|r| r.to_api()).collect();
        let json = serde_json::to_vec(&docs).unwrap();
        total.push(start.elapsed());
        assert_eq!(rows.len(), 10_000);
        assert!(json.len() > 10_000);
    }
    query.sort();
    total.sort();
    println!(
        "list 10,000 sessions: query median {:?}; query + JSON min {:?}, median {:?}, max {:?}",
        query[query.len() / 2],
        total[0],
        total[total.len() / 2],
        total[total.len() - 1]
    );
}
