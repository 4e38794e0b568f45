//! This machine's names, as the pilot directory's files record them (the root's lock,
//! the standbys' listing) and as `srun --nodelist` takes them.

/// The Slurm node this process runs on (`SLURMD_NODENAME`, set in every step and
/// batch script), else its host name: what `srun -w` takes.
pub fn this_node() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|node| !node.is_empty())
        .unwrap_or_else(this_host)
}

/// This machine's host name ("" if it has none).
pub fn this_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|host| host.into_string().ok())
        .unwrap_or_default()
}
