//! What Open MPI's ranks need to wire up through their agent as MPICH's do.
//!
//! - A PMI-1 library: Debian's Open MPI finds its PMI in one named by
//!   `FLUX_PMI_LIBRARY_PATH` (its `pmix/flux` component, which Flux uses the same
//!   way). Saker's (`bindings/pmi`) is carried inside this binary and written once
//!   per agent beside its spilled outputs; it speaks the wire served on `PMI_FD`.
//! - A shared-memory directory of the part's own: Open MPI names its shared-memory
//!   segments by host, job and *node-local* rank, so two agents of one job on one
//!   host (a test cluster, several agents per node) would map each other's.
//! - On a node without a high-speed fabric, the point-to-point layer Open MPI picks
//!   there anyway (`ob1`), named, so that `MPI_Init` does not first probe every
//!   fabric's library: Debian's Open MPI tries PSM and PSM2 (Omni-Path) in each
//!   rank, ~200 ms of a 3 × 2 job's 280 ms to the last `MPI_Init` on the test VM.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::node_file::NodeFile;

/// The library's bytes, built by this crate's build script.
pub static BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libsaker_pmi.so"));

static LIBRARY: NodeFile = NodeFile::new("PMI library for Open MPI");

/// The library's file in `dir`, written first if needed (once per process).
pub fn library(dir: &Path) -> Option<&'static Path> {
    LIBRARY.get_or_make(dir, library_name, || Ok(Cow::Borrowed(BYTES)))
}

/// The library's file, if [`library`] wrote it already; never writes it (for
/// launches).
pub fn library_written() -> Option<&'static Path> {
    LIBRARY.made()
}

/// Named by its content: agents of different builds may share a directory.
fn library_name() -> std::io::Result<String> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    BYTES.hash(&mut hasher);
    Ok(format!("libsaker_pmi.{:016x}.so", hasher.finish()))
}

/// Where this agent's part of `attempt` keeps its ranks' shared-memory segments
/// (`btl_vader_backing_directory`): in /dev/shm, Open MPI's own default, named by
/// the agent's process (agents of one job, or of two pilots, may share a host).
pub fn shared_memory_dir(attempt: u64) -> PathBuf {
    let root = Path::new("/dev/shm");
    let root = match root.is_dir() {
        true => root.to_path_buf(),
        false => std::env::temp_dir(),
    };
    root.join(format!("saker-mpi.{}.{attempt}", std::process::id()))
}

/// Whether this node has no device of any fabric an Open MPI `pml`/`mtl` other than
/// `ob1` drives (InfiniBand, RoCE and EFA under /sys/class/infiniband; Omni-Path's
/// `hfi1`, older PSM's `ipath`, Slingshot's `cxi`, Cray's `kgni` in /dev). Open MPI
/// 4.1 selects `ob1` on such a node whatever it probes first.
pub fn no_fabric() -> bool {
    static NONE: OnceLock<bool> = OnceLock::new();
    *NONE.get_or_init(|| no_fabric_in(Path::new("/sys/class/infiniband"), Path::new("/dev")))
}

fn no_fabric_in(rdma: &Path, dev: &Path) -> bool {
    let any = |dir: &Path, prefixes: &[&str]| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                prefixes.iter().any(|prefix| name.starts_with(prefix))
            })
        })
    };
    !any(rdma, &[""]) && !any(dev, &["hfi1", "ipath", "cxi", "kgni"])
}

#[cfg(test)]
mod tests {
    use super::no_fabric_in;

    #[test]
    fn a_fabric_is_any_rdma_device_or_a_named_device_node() {
        let dir = tempfile::tempdir().unwrap();
        let (rdma, dev) = (dir.path().join("infiniband"), dir.path().join("dev"));
        std::fs::create_dir(&dev).unwrap();
        std::fs::write(dev.join("null"), "").unwrap();
        assert!(no_fabric_in(&rdma, &dev), "no class directory, no device");
        std::fs::create_dir(&rdma).unwrap();
        assert!(no_fabric_in(&rdma, &dev), "an empty class directory");
        std::fs::write(dev.join("hfi1_0"), "").unwrap();
        assert!(!no_fabric_in(&rdma, &dev), "Omni-Path");
        std::fs::remove_file(dev.join("hfi1_0")).unwrap();
        std::fs::create_dir(rdma.join("mlx5_0")).unwrap();
        assert!(!no_fabric_in(&rdma, &dev), "an InfiniBand adapter");
    }
}
