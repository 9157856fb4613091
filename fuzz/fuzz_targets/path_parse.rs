//! Path parsing and the refusal table never panic, and normalizing is idempotent.
#![no_main]

use berth_core::rules::check_str;
use berth_core::{Context, LocalPath, Platform};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for platform in [Platform::Linux, Platform::Macos, Platform::Windows] {
        if let Ok(path) = LocalPath::parse(platform, text) {
            let again = LocalPath::parse(platform, path.as_str()).expect("normalized text parses");
            assert_eq!(again, path);
        }
        let home = if platform.is_windows() { "C:\\Users\\alice" } else { "/home/alice" };
        let ctx = Context::new(platform).with_home(LocalPath::parse(platform, home).unwrap());
        let _ = check_str(&ctx, text);
    }
});
