//! The one function of crates.io's `whoami` that tokio-postgres calls: [`username`].
//!
//! Berth patches `whoami` with this crate (the workspace's `[patch.crates-io]`): whoami 2
//! links Apple's frameworks for functions nothing here uses, and the macOS cross build has
//! no Apple SDK to link them with.

use std::ffi::CStr;
use std::io;

/// The effective user's login name, from the password database (`getpwuid_r`), as
/// whoami's `username()` gives it.
///
/// # Errors
/// The lookup failed, or the user has no entry, or its name is not UTF-8.
pub fn username() -> io::Result<String> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid value of this plain C struct.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to live, writable memory of the stated size; on success
        // `found` points at `entry`, whose strings point into `buf`.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if found.is_null() || entry.pw_name.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("user id {uid} has no entry in the password database"),
            ));
        }
        // SAFETY: getpwuid_r succeeded, so pw_name is a NUL-terminated string in `buf`.
        let name = unsafe { CStr::from_ptr(entry.pw_name) };
        return name
            .to_str()
            .map(str::to_owned)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the user name is not UTF-8"));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_name_is_the_one_id_gives() {
        let out = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        assert!(out.status.success());
        let expected = String::from_utf8(out.stdout).unwrap();
        assert_eq!(super::username().unwrap(), expected.trim());
    }
}
