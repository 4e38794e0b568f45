//! An application links the API crate: it must not link the `saker` command line's
//! dependencies with it. Their names in the crate's normal dependency tree (what an
//! application's binary gets) fail this test.

use std::path::Path;
use std::process::Command;

/// Crates the command line uses for its flags, `saker top`, `saker report` and
/// `--metrics`, which an application has no use for.
const COMMAND_LINE_ONLY: [&str; 6] = [
    "clap",
    "ratatui",
    "plotters",
    "hyper",
    "prometheus-client",
    "indicatif",
];

#[test]
fn an_application_links_none_of_the_command_lines_dependencies() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    // Offline: the lockfile holds the tree, and a test must not reach a registry.
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}", "-p", "saker", "--manifest-path"])
        .arg(&manifest)
        .output()
        .expect("cargo tree runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let packages: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        packages.contains(&"saker-node"),
        "the tree lists the crate's dependencies: {stdout}"
    );
    let found: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|package| COMMAND_LINE_ONLY.iter().any(|name| part_of(package, name)))
        .collect();
    assert!(
        found.is_empty(),
        "the `saker` API crate depends on {found:?}, which only the command line needs: \
         see which crate brings them in with `cargo tree -p saker -e normal -i {}`",
        found.first().copied().unwrap_or_default()
    );
}

/// Whether `package` is `name` or one of its parts (`clap_builder`, `ratatui-core`).
fn part_of(package: &str, name: &str) -> bool {
    package
        .strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '_']))
}
