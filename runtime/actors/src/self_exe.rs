//! How an agent runs its own binary again (the reaper, the remote shell of an MPI
//! launcher). For the `saker` binary the subcommand is given as is (`saker reaper`);
//! an application that embeds the command line behind a hidden first argument (the
//! API crate's `myapp __saker …`) sets that argument here once, before it starts.

use std::sync::OnceLock;

static PREFIX: OnceLock<String> = OnceLock::new();

/// The hidden first argument under which an application built on the API crate is
/// the `saker` command line (`myapp __saker agent …`).
pub const APP_PREFIX: &str = "__saker";

/// Puts `argument` before every subcommand this process runs itself with. Set at
/// most once; a second call is ignored (one binary has one way in).
pub fn set_prefix(argument: &str) {
    let _ = PREFIX.set(argument.to_owned());
}

/// The arguments before a subcommand of this binary: empty, or the prefix set.
pub fn prefix() -> &'static [String] {
    match PREFIX.get() {
        Some(prefix) => std::slice::from_ref(prefix),
        None => &[],
    }
}
