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

use std::borrow::Cow;
use std::path::Path;
use std::process::{Command, Stdio};

use super::node_file::NodeFile;

static TOPOLOGY: NodeFile = NodeFile::new("hwloc topology file");

/// The file in `dir` for this host, made first if needed (once per process).
pub fn file(dir: &Path) -> Option<&'static Path> {
    TOPOLOGY.get_or_make(dir, name, lstopo)
}

/// The file, if [`file()`] made it already; never makes it (for launches, built
/// after their part's service opened).
pub fn made() -> Option<&'static Path> {
    TOPOLOGY.made()
}

/// Named by the host: agents of one pilot on one host share it.
fn name() -> std::io::Result<String> {
    let host = nix::unistd::gethostname()?;
    Ok(format!("hwloc-topology.{}.xml", host.to_string_lossy()))
}

fn lstopo() -> std::io::Result<Cow<'static, [u8]>> {
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
    Ok(Cow::Owned(output.stdout))
}
