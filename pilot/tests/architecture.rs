//! docs/architecture.md's crate graph says which workspace crate depends on which: it
//! must be what the Cargo manifests declare, edge for edge, so that the picture a new
//! reader starts from cannot drift from the code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

type Graph = BTreeMap<String, BTreeSet<String>>;

const MARKER: &str = "<!-- crate graph:";

/// The edges the document's crate graph draws (`crate ─> a, b`; `(none)` for none).
fn documented(text: &str) -> Graph {
    let after = text
        .split_once(MARKER)
        .expect("docs/architecture.md marks its crate graph")
        .1;
    let block = after
        .split_once("```text\n")
        .expect("the crate graph is a text block")
        .1
        .split_once("```")
        .expect("the block ends")
        .0;
    let mut graph = Graph::new();
    for line in block.lines().filter(|line| !line.trim().is_empty()) {
        let (from, to) = line
            .split_once('─')
            .map(|(from, rest)| (from, rest.trim_start_matches(['─', '>'])))
            .unwrap_or_else(|| panic!("not an edge line: {line:?}"));
        let deps = to
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty() && *name != "(none)")
            .map(str::to_owned)
            .collect();
        let previous = graph.insert(from.trim().to_owned(), deps);
        assert!(previous.is_none(), "{} is drawn twice", from.trim());
    }
    graph
}

/// The workspace's crates and their normal dependencies among themselves.
fn declared(workspace: &Path) -> Graph {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let packages = metadata["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|package| package["name"].as_str().expect("a name").to_owned())
        .collect();
    packages
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|dep| dep["kind"].is_null())
                .filter_map(|dep| dep["name"].as_str())
                .filter(|name| names.contains(*name))
                .map(str::to_owned)
                .collect();
            (
                package["name"].as_str().unwrap_or_default().to_owned(),
                deps,
            )
        })
        .collect()
}

#[test]
fn the_documented_crate_graph_is_the_manifests() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("pilot/ is in the workspace");
    let text = std::fs::read_to_string(workspace.join("docs/architecture.md")).unwrap();
    let drawn = documented(&text);
    let real = declared(workspace);
    let missing: Vec<_> = real
        .keys()
        .filter(|name| !drawn.contains_key(*name))
        .collect();
    let unknown: Vec<_> = drawn
        .keys()
        .filter(|name| !real.contains_key(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "crates the graph leaves out: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "crates the graph names that do not exist: {unknown:?}"
    );
    for (name, deps) in &real {
        assert_eq!(
            &drawn[name], deps,
            "{name}'s edges: drawn (left) and declared in its manifest (right)"
        );
    }
}

#[test]
fn an_edge_line_reads_as_its_crates() {
    let text = format!("{MARKER} x -->\n```text\na ─> b, c\nd ─> (none)\n```\n");
    let graph = documented(&text);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert!(graph["d"].is_empty());
}

/// The workspace's top directories a document may name a path under.
const TOP: [&str; 11] = [
    "runtime/",
    "pilot/",
    "api/",
    "perf/",
    "bindings/",
    "python/",
    "scripts/",
    "sbatch-templates/",
    "examples/",
    "docs/",
    ".ci/",
];

/// Every `path` in backticks, in `text`, that starts with one of [`TOP`].
fn named_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| TOP.iter().any(|top| quoted.starts_with(top)))
        .filter(|quoted| {
            quoted
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
        })
        .map(|quoted| quoted.trim_end_matches('.').to_owned())
        .collect()
}

/// The files of the root's owners as the table in docs/architecture.md names them
/// (relative to `runtime/root/src/actor/`).
fn owner_files(text: &str) -> Vec<String> {
    let table = text
        .split_once("| owner | files |")
        .expect("docs/architecture.md has the root's table of owners")
        .1;
    let rows = table.split("\n\n").next().unwrap_or_default();
    rows.lines()
        .filter_map(|row| row.split('|').nth(2))
        .flat_map(|files| files.split('`').skip(1).step_by(2))
        .filter(|name| name.ends_with(".rs") || name.ends_with('/'))
        .map(str::to_owned)
        .collect()
}

/// The docs name files and folders as they are: a file moved or renamed takes its
/// docs along.
#[test]
fn every_path_the_docs_name_exists() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("pilot/ is in the workspace");
    let mut documents: Vec<_> = std::fs::read_dir(workspace.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    documents.push(workspace.join("README.md"));
    documents.push(workspace.join("python/README.md"));
    let mut missing = Vec::new();
    for document in &documents {
        let text = std::fs::read_to_string(document).expect("a readable document");
        for path in named_paths(&text) {
            if !workspace.join(&path).exists() {
                missing.push(format!("{}: {path}", document.display()));
            }
        }
    }
    let architecture = std::fs::read_to_string(workspace.join("docs/architecture.md")).unwrap();
    let actor = workspace.join("runtime/root/src/actor");
    let owners = owner_files(&architecture);
    assert!(owners.len() >= 8, "the owners' table is read: {owners:?}");
    for name in owners {
        if !actor.join(&name).exists() {
            missing.push(format!("docs/architecture.md (owners): {name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs name that do not exist: {missing:#?}"
    );
}

#[test]
fn a_path_is_named_only_in_backticks_under_a_top_directory() {
    let text = "see `runtime/root/src/lib.rs`, `cargo run`, `pilot/tests/`. and `runtime/*`";
    assert_eq!(
        named_paths(text),
        ["runtime/root/src/lib.rs", "pilot/tests/"]
    );
}
