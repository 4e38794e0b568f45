//! Links of a given rate between the agents of a local pilot, for rows that are about
//! the network rather than this machine's cores: every UDP socket of the pilot's
//! processes sends through an HTB class of its own on the loopback device, at most
//! `rate`, so each node has an uplink of its own as on a cluster (its downlink is not
//! shaped). Other traffic on the loopback passes unshaped. Needs CAP_NET_ADMIN (root)
//! and `tc`; the shaping goes when the [`Shaped`] is dropped.

use std::collections::HashSet;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::process::{process_group_of, process_ids};

const DEVICE: &str = "lo";

/// The loopback's shaping, while it lives.
#[derive(Debug)]
pub struct Shaped {
    _private: (),
}

/// Whether this machine can shape links (`tc` runs, and may change the loopback).
pub fn available() -> bool {
    let probe = || -> Result<()> {
        tc(&["qdisc", "add", "dev", DEVICE, "root", "handle", "1:", "htb"])?;
        tc(&["qdisc", "del", "dev", DEVICE, "root"])
    };
    probe().is_ok()
}

impl Shaped {
    /// Each UDP socket of the processes of process group `group` sends at most
    /// `mbit` Mbit/s from now on.
    pub fn pilot(group: u32, mbit: u32) -> Result<Shaped> {
        let ports = udp_ports_of_group(group)?;
        if ports.is_empty() {
            bail!("the pilot's processes have no UDP socket to shape");
        }
        // Anything left by a run that was killed.
        let _ = tc(&["qdisc", "del", "dev", DEVICE, "root"]);
        // Unclassified traffic (`default 0`) goes out directly, unshaped.
        tc(&["qdisc", "add", "dev", DEVICE, "root", "handle", "1:", "htb"])?;
        let shaped = Shaped { _private: () };
        let rate = format!("{mbit}mbit");
        for (index, port) in ports.iter().enumerate() {
            let class = format!("1:{:x}", index + 16);
            tc(&[
                "class", "add", "dev", DEVICE, "parent", "1:", "classid", &class, "htb", "rate",
                &rate, "ceil", &rate, "burst", "256k", "cburst", "256k", "quantum", "65536",
            ])?;
            // A shallow queue, as a switch port has: a deep one (the loopback's 1,000
            // packets of up to 64 KiB each) delays acknowledgements by seconds.
            tc(&[
                "qdisc", "add", "dev", DEVICE, "parent", &class, "bfifo", "limit", "512k",
            ])?;
            tc(&[
                "filter",
                "add",
                "dev",
                DEVICE,
                "parent",
                "1:",
                "protocol",
                "ip",
                "prio",
                "1",
                "u32",
                "match",
                "ip",
                "sport",
                &port.to_string(),
                "0xffff",
                "flowid",
                &class,
            ])?;
        }
        Ok(shaped)
    }
}

impl Drop for Shaped {
    fn drop(&mut self) {
        if let Err(error) = tc(&["qdisc", "del", "dev", DEVICE, "root"]) {
            eprintln!("saker-perf: cannot remove the loopback's shaping: {error:#}");
        }
    }
}

fn tc(args: &[&str]) -> Result<()> {
    let output = Command::new("tc")
        .args(args)
        .output()
        .context("running tc")?;
    if !output.status.success() {
        bail!(
            "tc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The local ports of the IPv4 UDP sockets of the processes in `group`.
fn udp_ports_of_group(group: u32) -> Result<Vec<u16>> {
    let mut inodes = HashSet::new();
    for pid in process_ids() {
        if process_group_of(pid) != Some(group) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let table = std::fs::read_to_string("/proc/net/udp").context("reading /proc/net/udp")?;
    let mut ports: Vec<u16> = table
        .lines()
        .skip(1)
        .filter_map(|line| port_of(line, &inodes))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

/// The local port of a line of `/proc/net/udp` whose socket is one of `inodes`.
fn port_of(line: &str, inodes: &HashSet<String>) -> Option<u16> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
    let inode = fields.get(9)?;
    if !inodes.contains(*inode) {
        return None;
    }
    let (_, port) = fields.get(1)?.split_once(':')?;
    u16::from_str_radix(port, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_read_from_the_udp_table() {
        let line = "  812: 0100007F:B0E5 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0";
        let ours: HashSet<String> = ["4242".to_owned()].into();
        assert_eq!(port_of(line, &ours), Some(0xB0E5));
        assert_eq!(port_of(line, &HashSet::new()), None);
    }
}
