//! What an agent may read in the strict read mode (`"fence": {"read": "directory"}`),
//! besides its directory, what it may write and the user's `fence.read` paths: the
//! system's directories ([`SYSTEM_LINUX`], [`SYSTEM_MACOS`]) and the toolchains under
//! the home ([`TOOLCHAINS`]).
//!
//! The point of the mode is that an agent working on one project cannot read another
//! (a consultant's client A repository from an agent working for client B), so no row
//! here may hold the user's own projects: not the home, `/home`, `/root`, `/tmp`,
//! `/var/tmp`, `/mnt`, `/media` or `/srv`. Every row is an ordinary place programs are
//! installed, configured or cached. The fence's hidden locations still apply beneath
//! every row (`~/.cargo/credentials.toml`, `~/.npmrc`, …).

use super::Pattern;

/// The system's directories on Linux: programs, libraries and their data (`/usr`, the
/// top-level program and library directories that merged-`/usr` systems make links
/// into it, `/opt`, `/nix`, `/snap`, Homebrew's prefix on Linux), system settings
/// (`/etc`: DNS, users, certificates, git's and the shells' system settings), the
/// kernel's views (`/proc`, `/sys`, `/dev`: `/proc/self`, CPU counts, `/dev/urandom`),
/// and the places under `/run` that `/etc/resolv.conf` points into (systemd-resolved,
/// resolvconf, NetworkManager) or that hold NixOS's programs. Not `/run` whole: it
/// holds `/run/media/<user>` (removable disks, projects on them) and the user's
/// runtime directory.
pub const SYSTEM_LINUX: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/snap",
    "/home/linuxbrew/.linuxbrew",
    "/proc",
    "/sys",
    "/dev",
    "/run/systemd/resolve",
    "/run/resolvconf",
    "/run/NetworkManager",
    "/run/current-system",
    "/run/wrappers",
];

/// The system's directories on macOS, in their resolved form (Seatbelt matches the
/// path the kernel resolves: `/etc` is `/private/etc`): the system and its frameworks,
/// programs and libraries (`/usr`, `/bin`, `/sbin`, Homebrew's `/opt/homebrew`, MacPorts'
/// `/opt/local`, `/nix`), Xcode and its command-line tools, system settings, the time
/// zones, `xcode-select`'s choice, and the devices.
pub const SYSTEM_MACOS: &[&str] = &[
    "/System",
    "/Library",
    "/usr",
    "/bin",
    "/sbin",
    "/opt",
    "/nix",
    "/Applications/Xcode.app",
    "/private/etc",
    "/private/var/db/timezone",
    "/private/var/db/xcode_select_link",
    "/private/var/select",
    "/dev",
];

/// Toolchains, their caches and the version managers that install them, under the
/// user's home: readable in the strict mode so that a build, a test run or an agent's
/// own CLI works. Each row is an ordinary install, cache or configuration location of
/// one tool; none holds projects. Credentials inside them are hidden by the fence's
/// own table (`HIDDEN`), as everywhere.
#[rustfmt::skip]
pub const TOOLCHAINS: &[Pattern] = &[
    // Rust: cargo's binaries, registry and git checkouts (its credentials are hidden).
    &[".cargo"],
    // Rust: the toolchains rustup installs.
    &[".rustup"],
    // npm's cache (the token file `~/.npmrc` is hidden).
    &[".npm"],
    // npm's global prefix as its documentation suggests setting it.
    &[".npm-global"],
    // Node Version Manager: Node versions and their global packages (Claude Code, Codex).
    &[".nvm"],
    // Volta: Node versions and tools.
    &[".volta"],
    // fnm: Node versions (macOS; on Linux under `~/.local/share/fnm`).
    &[".fnm"],
    // fnm's Node versions on Linux.
    &[".local", "share", "fnm"],
    // pnpm's store and global programs (Linux).
    &[".local", "share", "pnpm"],
    // pnpm's store and global programs (macOS).
    &["Library", "pnpm"],
    // Yarn's cache and global programs.
    &[".yarn"],
    // Bun: its runtime and global packages.
    &[".bun"],
    // Deno: its runtime and module cache.
    &[".deno"],
    // pyenv: Python versions.
    &[".pyenv"],
    // uv: the Pythons and tools it installs.
    &[".local", "share", "uv"],
    // Conda's packages and environments.
    &[".conda"],
    // Python's user site-packages (`pip install --user`).
    &[".local", "lib"],
    // Programs installed for the user: pipx, `uv tool`, Claude Code's installer links.
    &[".local", "bin"],
    // Claude Code's native installer: the versions `~/.local/bin/claude` points at.
    &[".local", "share", "claude"],
    // opencode's installer.
    &[".opencode"],
    // rbenv: Ruby versions.
    &[".rbenv"],
    // Ruby gems installed for the user.
    &[".gem"],
    // asdf: versions of any language.
    &[".asdf"],
    // mise: versions of any language.
    &[".local", "share", "mise"],
    // SDKMAN!: JDKs, Gradle, Maven, Kotlin.
    &[".sdkman"],
    // Gradle's caches and wrapper distributions.
    &[".gradle"],
    // Maven's local repository.
    &[".m2"],
    // Go: the module cache and `go install`'s programs (GOPATH).
    &["go"],
    // GHCup: Haskell's compilers and tools.
    &[".ghcup"],
    // opam: OCaml's compilers and packages.
    &[".opam"],
    // elan: Lean's toolchains.
    &[".elan"],
    // .NET: SDKs and global tools.
    &[".dotnet"],
    // XDG caches (pip, go-build, node-gyp, sccache, ms-playwright's browsers).
    &[".cache"],
    // macOS's caches (Homebrew's downloads, pip, clang's module cache).
    &["Library", "Caches"],
    // git's user settings (`~/.git-credentials` is hidden).
    &[".gitconfig"],
    // git's XDG settings: config, ignore, attributes.
    &[".config", "git"],
];
