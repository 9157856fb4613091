//! Micro benchmarks of the pure core: the lexical check of a path (goal ≤ 2 µs) and
//! resolution (goal ≤ 1 µs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_core::binding::{BindMode, BindingState, BindingView, MachineId};
use berth_core::resolve::{Origin, ProjectDir, Request, Runtime, resolve};
use berth_core::rules::check_str;
use berth_core::{Context, LocalPath, Platform};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn lexical(c: &mut Criterion) {
    let ctx = Context::new(Platform::Linux)
        .with_home(LocalPath::parse(Platform::Linux, "/home/alice").unwrap())
        .with_berth_state(
            LocalPath::parse(Platform::Linux, "/home/alice/.local/share/berth").unwrap(),
        );
    c.bench_function("lexical check, accepted (~/code/app/./src/../)", |b| {
        b.iter(|| check_str(black_box(&ctx), black_box("/home/alice/code/app/./src/../")))
    });
    c.bench_function("lexical check, refused (/etc/nginx)", |b| {
        b.iter(|| check_str(black_box(&ctx), black_box("/etc/nginx/sites")))
    });
    let win = Context::new(Platform::Windows)
        .with_home(LocalPath::parse(Platform::Windows, "C:\\Users\\alice").unwrap());
    c.bench_function("lexical check, windows", |b| {
        b.iter(|| check_str(black_box(&win), black_box("c:/Users/alice/code/app")))
    });
}

fn resolution(c: &mut Criterion) {
    let a = MachineId::parse("laptop-0198c2").unwrap();
    let b = MachineId::parse("desktop-0198c3").unwrap();
    let view = BindingView {
        display: "~/code/app".into(),
        daemon: a.clone(),
        daemon_name: "laptop".into(),
        mode: BindMode::InPlace,
        state: BindingState::Ok,
    };
    let dirs = vec![ProjectDir {
        machine: b.clone(),
        dir: "~/p".to_owned(),
        mode: BindMode::Worktree,
    }];
    let online = vec![a.clone(), b.clone()];
    c.bench_function("resolution, bound session", |bch| {
        bch.iter(|| {
            resolve(black_box(&Request {
                origin: Origin::Desktop,
                runtime: Runtime::Local,
                binding: Some(&view),
                project_dirs: &dirs,
                claimer: Some(&a),
                online: &online,
            }))
        })
    });
    c.bench_function("resolution, project directory", |bch| {
        bch.iter(|| {
            resolve(black_box(&Request::<BindingView> {
                origin: Origin::Api,
                runtime: Runtime::Local,
                binding: None,
                project_dirs: &dirs,
                claimer: Some(&b),
                online: &online,
            }))
        })
    });
}

criterion_group!(benches, lexical, resolution);
criterion_main!(benches);
