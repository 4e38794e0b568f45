//! What a node offers beyond its cores, and the heartbeats of its links, as flags give
//! them: an agent's (`--gpus-per-node`, `--pin-cpus`, `--heartbeat-timeout`, …), and the
//! same settings of `saker run` and `saker pilot`, which pass them on to their agents.
//! Checked here once for both, and written here for the root that starts the agents
//! ([`agent_arguments`], [`liveness_arguments`]): the writer beside its reader, so
//! that one test reads back what the root writes (`flags/tests.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use saker_actors::liveness::Liveness;
use saker_actors::resources::{Declared, PinCpus};
use saker_client::spec::{parse_duration, parse_memory_mib, valid_resource_name};

use crate::error::FlagError;

/// What the user said of the nodes, for every agent of a pilot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeOptions {
    pub declared: Declared,
    /// Account memory but never limit it (no cgroups).
    pub no_memory_limits: bool,
    /// Where each node keeps its data items (node-local; default: `$TMPDIR`).
    pub scratch: Option<PathBuf>,
    /// `scratch` is on a filesystem every node sees.
    pub shared_scratch: bool,
    /// MiB of objects each node keeps in shared memory (`--object-memory`).
    pub object_memory_mib: Option<u64>,
    /// Where (`--object-memory-dir`; default /dev/shm).
    pub object_memory_dir: Option<PathBuf>,
}

/// The `saker agent` flags that pass `declared` (an agent's share, or what every node
/// was declared to offer) and the rest of `options` on.
pub fn agent_arguments(declared: &Declared, options: &NodeOptions) -> Vec<String> {
    let mut args = Vec::new();
    let list = |items: &mut dyn Iterator<Item = String>| items.collect::<Vec<_>>().join(",");
    match &declared.pin {
        PinCpus::Auto => {}
        PinCpus::Off => args.extend(["--pin-cpus".into(), "off".into()]),
        PinCpus::List(cpus) => {
            args.push("--pin-cpus".into());
            args.push(list(&mut cpus.iter().map(u32::to_string)));
        }
    }
    if let Some(ids) = &declared.gpu_ids {
        // An empty list (this agent gets none) is `none`: clap takes no empty value.
        args.push("--gpu-ids".into());
        args.push(if ids.is_empty() {
            "none".into()
        } else {
            list(&mut ids.iter().cloned())
        });
    } else if let Some(count) = declared.gpus {
        args.extend(["--gpus-per-node".into(), count.to_string()]);
    }
    if let Some(mib) = declared.memory_mib {
        args.extend(["--mem-per-node".into(), format!("{mib}M")]);
    }
    for (name, amount) in &declared.custom {
        args.extend(["--node-resource".into(), format!("{name}={amount}")]);
    }
    if options.no_memory_limits {
        args.push("--no-memory-limits".into());
    }
    if let Some(scratch) = &options.scratch {
        args.push("--scratch".into());
        args.push(scratch.display().to_string());
    }
    if options.shared_scratch {
        args.push("--shared-scratch".into());
    }
    if let Some(mib) = options.object_memory_mib {
        args.extend(["--object-memory".into(), format!("{mib}M")]);
    }
    if let Some(dir) = &options.object_memory_dir {
        args.push("--object-memory-dir".into());
        args.push(dir.display().to_string());
    }
    args
}

/// The `saker agent` flags that give an agent the pilot's heartbeat settings.
pub fn liveness_arguments(liveness: &Liveness) -> [String; 4] {
    [
        "--heartbeat-interval".to_string(),
        format!("{}ms", liveness.interval.as_millis()),
        "--heartbeat-timeout".to_string(),
        format!("{}ms", liveness.timeout.as_millis()),
    ]
}

/// What each node offers beyond its cores. Whatever is not given is found on each
/// node (docs/resources.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOffer {
    /// `--gpus-per-node N`.
    pub gpus_per_node: Option<u32>,
    /// `--mem-per-node SIZE` (`64G`, `512M`; a bare number is MiB).
    pub mem_per_node: Option<String>,
    /// `--node-resource NAME=N`, repeatable.
    pub node_resources: Vec<String>,
    /// `--pin-cpus auto|off|CPUS`.
    pub pin_cpus: String,
    /// `--no-memory-limits`: account each task's memory but never limit it.
    pub no_memory_limits: bool,
    /// `--scratch DIR`: where each node keeps its data items.
    pub scratch: Option<PathBuf>,
    /// `--shared-scratch`: `--scratch` is on a filesystem every node sees.
    pub shared_scratch: bool,
    /// `--object-memory SIZE`: objects each node keeps in shared memory.
    pub object_memory: Option<String>,
    /// `--object-memory-dir DIR`: the shared-memory filesystem they are kept in.
    pub object_memory_dir: Option<PathBuf>,
}

impl Default for NodeOffer {
    fn default() -> Self {
        NodeOffer {
            gpus_per_node: None,
            mem_per_node: None,
            node_resources: Vec::new(),
            pin_cpus: "auto".to_owned(),
            no_memory_limits: false,
            scratch: None,
            shared_scratch: false,
            object_memory: None,
            object_memory_dir: None,
        }
    }
}

impl NodeOffer {
    /// What these flags declare, for a pilot to pass on to its agents.
    pub fn options(&self) -> Result<NodeOptions, FlagError> {
        Ok(NodeOptions {
            declared: self.declared(None)?,
            no_memory_limits: self.no_memory_limits,
            scratch: self.scratch.clone(),
            shared_scratch: self.shared_scratch,
            object_memory_mib: self.object_memory_mib()?,
            object_memory_dir: self.object_memory_dir.clone(),
        })
    }

    /// `--object-memory` in MiB (`4G`, `512M`; a bare number is MiB); `0` is none.
    pub fn object_memory_mib(&self) -> Result<Option<u64>, FlagError> {
        let Some(text) = &self.object_memory else {
            return Ok(None);
        };
        let mib = parse_memory_mib(text).map_err(|error| FlagError::Invalid {
            flag: "--object-memory",
            value: text.clone(),
            reason: error.to_string(),
        })?;
        Ok((mib > 0).then_some(u64::from(mib)))
    }

    /// What these flags declare, with an agent's exact GPU ids (`--gpu-ids`).
    pub fn declared(&self, gpu_ids: Option<&str>) -> Result<Declared, FlagError> {
        let memory_mib = match &self.mem_per_node {
            Some(text) => Some(parse_memory_mib(text).map_err(|error| FlagError::Invalid {
                flag: "--mem-per-node",
                value: text.clone(),
                reason: error.to_string(),
            })?),
            None => None,
        };
        let custom = named_amounts(&self.node_resources, "--node-resource")?
            .into_iter()
            .collect();
        let gpu_ids = gpu_ids.map(|list| match list.trim() {
            "none" | "" => Vec::new(),
            list => list.split(',').map(|id| id.trim().to_owned()).collect(),
        });
        Ok(Declared {
            gpu_ids,
            gpus: self.gpus_per_node,
            memory_mib,
            custom,
            pin: pin_cpus(&self.pin_cpus)?,
        })
    }
}

/// `--pin-cpus`: `auto`, `off`, or a CPU list such as `0-3,8,10-11`.
fn pin_cpus(text: &str) -> Result<PinCpus, FlagError> {
    match text.trim() {
        "auto" => Ok(PinCpus::Auto),
        "off" | "none" => Ok(PinCpus::Off),
        list => cpu_list(list)
            .map(PinCpus::List)
            .map_err(|why| FlagError::Invalid {
                flag: "--pin-cpus",
                value: text.to_owned(),
                reason: format!(
                    "expected auto, off or CPUs like 0-3,8 ({})",
                    saker_actors::error_chain(&why)
                ),
            }),
    }
}

/// A list of CPUs that is not one.
#[derive(Debug, thiserror::Error)]
enum BadCpus {
    #[error("{text:?}")]
    NotACpu {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("{part:?} is no range of CPUs")]
    NotARange { part: String },
}

fn cpu_list(list: &str) -> Result<Vec<u32>, BadCpus> {
    let cpu = |text: &str| {
        text.trim()
            .parse::<u32>()
            .map_err(|source| BadCpus::NotACpu {
                text: text.to_owned(),
                source,
            })
    };
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let part = part.trim();
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (cpu(first)?, cpu(last)?);
                if last < first || last - first > 65_535 {
                    return Err(BadCpus::NotARange {
                        part: part.to_owned(),
                    });
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(cpu(part)?),
        }
    }
    Ok(cpus)
}

/// `NAME=N` flags (`flag`, as the user wrote it) as a map, each name once.
pub fn named_amounts(
    flags: &[String],
    flag: &'static str,
) -> Result<BTreeMap<String, u32>, FlagError> {
    let invalid = |given: &String, reason: &str| FlagError::Invalid {
        flag,
        value: given.clone(),
        reason: reason.to_owned(),
    };
    let mut amounts = BTreeMap::new();
    for given in flags {
        let Some((name, amount)) = given.split_once('=') else {
            return Err(invalid(given, "expected NAME=N"));
        };
        if !valid_resource_name(name) {
            return Err(invalid(
                given,
                "a name is letters, digits, '_', '-' and '.' (at most 64)",
            ));
        }
        let amount: u32 = amount
            .trim()
            .parse()
            .map_err(|_| invalid(given, "N is a whole number"))?;
        if amounts.insert(name.to_owned(), amount).is_some() {
            return Err(FlagError::Twice {
                flag,
                name: name.to_owned(),
            });
        }
    }
    Ok(amounts)
}

/// `--heartbeat-interval` and `--heartbeat-timeout` (`1s`, `500ms`, …) as heartbeats.
pub fn liveness(interval: &str, timeout: &str) -> Result<Liveness, FlagError> {
    Ok(Liveness::new(
        duration("--heartbeat-interval", interval)?,
        duration("--heartbeat-timeout", timeout)?,
    )?)
}

/// A duration flag's value (`90s`, `5m`, `1h30m`, `H:MM:SS`).
pub fn duration(flag: &'static str, text: &str) -> Result<std::time::Duration, FlagError> {
    parse_duration(text).map_err(|error| FlagError::Invalid {
        flag,
        value: text.to_owned(),
        reason: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_flags_become_what_agents_are_told() {
        let offer = NodeOffer {
            gpus_per_node: Some(4),
            mem_per_node: Some("2G".into()),
            node_resources: vec!["licence=4".into(), "disk=1".into()],
            pin_cpus: "0-2,7".into(),
            ..NodeOffer::default()
        };
        let declared = offer.declared(Some("1,3")).unwrap();
        assert_eq!(declared.gpus, Some(4));
        assert_eq!(declared.gpu_ids, Some(vec!["1".into(), "3".into()]));
        assert_eq!(declared.memory_mib, Some(2048));
        assert_eq!(
            declared.custom,
            [("disk".to_string(), 1), ("licence".to_string(), 4)]
        );
        assert_eq!(declared.pin, PinCpus::List(vec![0, 1, 2, 7]));
        assert_eq!(
            offer.declared(Some("none")).unwrap().gpu_ids,
            Some(Vec::new())
        );
        assert_eq!(
            NodeOffer::default().declared(None).unwrap().pin,
            PinCpus::Auto
        );
        for bad in ["3-1", "x", "1,,2"] {
            let error = pin_cpus(bad).unwrap_err().to_string();
            assert!(error.starts_with("--pin-cpus"), "{error}");
        }
        let error = NodeOffer {
            mem_per_node: Some("lots".into()),
            ..NodeOffer::default()
        }
        .options()
        .unwrap_err();
        assert!(
            error.to_string().starts_with("--mem-per-node \"lots\""),
            "{error}"
        );
        let twice = named_amounts(&["a=1".into(), "a=2".into()], "--resource").unwrap_err();
        assert_eq!(twice.to_string(), "--resource: \"a\" is given twice");
        let no_equals = named_amounts(&["a".into()], "--resource").unwrap_err();
        assert_eq!(no_equals.to_string(), "--resource \"a\": expected NAME=N");
        assert!(named_amounts(&["a b=1".into()], "--resource").is_err());
        assert!(named_amounts(&["a=-1".into()], "--resource").is_err());
    }

    #[test]
    fn heartbeats_are_checked_against_each_other() {
        let liveness = liveness("200ms", "1s").unwrap();
        assert_eq!(
            liveness,
            Liveness::new(
                std::time::Duration::from_millis(200),
                std::time::Duration::from_secs(1)
            )
            .unwrap()
        );
        let error = super::liveness("1s", "1s").unwrap_err();
        assert!(matches!(error, FlagError::Liveness(_)), "{error}");
        let error = super::liveness("soon", "1s").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("--heartbeat-interval \"soon\""),
            "{error}"
        );
    }
}
