//! This node's hardware topology as hwloc XML, made once per agent and handed to the
//! ranks it serves PMI (`HWLOC_XMLFILE`), as Flux's shell does: every MPICH rank
//! otherwise probes `/sys` through hwloc in its `MPI_Init` before it says a word to
//! PMI, which on a 2-core VM is 12 of a singleton's 19 ms and, with six ranks
//! starting at once, most of the time to the last rank's `init` (78 ms, 18 ms with
//! the file; docs/performance.md).
//!
//! The file is made by hwloc's own `lstopo-no-graphics` (installed with every MPI
//! that uses hwloc) when the agent opens its first PMI part, before that part's ranks
//! start (10-20 ms, once), or taken as it is when an agent of the same pilot on the
//! same host made it already. Without hwloc, ranks simply probe for themselves.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The file once made (`None` inside: it could not be).
static MADE: OnceLock<Option<PathBuf>> = OnceLock::new();

/// The file in `dir` for this host, made first if needed (once per process).
pub fn file(dir: &Path) -> Option<&'static Path> {
    MADE.get_or_init(|| {
        make(dir)
            .inspect_err(|error| tracing::info!(%error, "no hwloc topology file for ranks"))
            .ok()
    })
    .as_deref()
}

/// The file, if [`file()`] made it already; never makes it (for launches, built
/// after their part's service opened).
pub fn made() -> Option<&'static Path> {
    MADE.get().and_then(|made| made.as_deref())
}

fn make(dir: &Path) -> std::io::Result<PathBuf> {
    let host = nix::unistd::gethostname()?;
    let host = host.to_string_lossy();
    // Absolute: a rank's working directory is its job's.
    let dir = std::path::absolute(dir)?;
    let file = dir.join(format!("hwloc-topology.{host}.xml"));
    if file.is_file() {
        return Ok(file);
    }
    let output = Command::new("lstopo-no-graphics")
        .args(["--of", "xml", "-"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    if !output.status.success() || output.stdout.is_empty() {
        return Err(std::io::Error::other(format!(
            "lstopo-no-graphics ended with {}",
            output.status
        )));
    }
    std::fs::create_dir_all(&dir)?;
    // Written whole, then renamed: agents of one machine may share the directory.
    let partial = dir.join(format!(
        "hwloc-topology.{host}.{}.partial",
        std::process::id()
    ));
    std::fs::write(&partial, &output.stdout)?;
    std::fs::rename(&partial, &file)?;
    Ok(file)
}
