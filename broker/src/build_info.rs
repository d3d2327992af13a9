//! What this binary was built from: the package version and the source
//! revision (set by `build.rs` from git, or from `MOLDAU_BUILD_REVISION` in
//! an image build). `moldau-broker --version` prints them and `/metrics`
//! exposes them as `moldau_build_info{version,revision} 1`, so an operator
//! (and the benchmark's results) can tell which build is running.

/// The package version, e.g. `0.1.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The source revision (a 12-digit commit) or `unknown`.
pub const REVISION: &str = env!("MOLDAU_BUILD_REVISION");

/// `--version`'s text after the program name: `0.1.0 (revision <commit>)`.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("MOLDAU_BUILD_REVISION"),
    ")"
);
