//! Fuzzes settings parsing: no input text may panic `parse` or `check_text`, for a
//! POSIX or a Windows declaring directory.
#![no_main]

use berth_core::path::LocalPath;
use berth_core::platform::Platform;
use berth_core::settings;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    for (platform, dir) in [
        (Platform::Linux, "/p/app/.berth"),
        (Platform::Windows, "C:\\p\\app\\.berth"),
    ] {
        if let Ok(dir) = LocalPath::parse(platform, dir) {
            let _ = settings::parse("settings.jsonc", &dir, text);
            let _ = settings::check_text("settings.jsonc", &dir, text);
        }
    }
});
