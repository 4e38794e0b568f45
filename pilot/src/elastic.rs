//! `saker pilot --elastic`: its flags, checked into the root's elastic options.

use clap::Args;

/// `saker pilot --elastic`: the pilot asks Slurm for allocations as its queue needs
/// them and releases them when idle (docs/slurm.md, "Elastic pilots").
#[derive(Debug, Clone, Args)]
pub struct ElasticArgs {
    /// Grow and shrink through Slurm allocations of its own: the root runs here (a
    /// login node, say); agents run in the allocations it asks for.
    #[arg(long)]
    pub elastic: bool,
    /// Partition of the allocations (default: the cluster's).
    #[arg(long, requires = "elastic")]
    pub partition: Option<String>,
    /// Account charged for them.
    #[arg(long, requires = "elastic")]
    pub account: Option<String>,
    /// Nodes of each allocation.
    #[arg(long, default_value_t = 1, requires = "elastic")]
    pub nodes_per_allocation: u32,
    /// Nodes running and pending together never exceed this.
    #[arg(long, default_value_t = 4, requires = "elastic")]
    pub max_nodes: u32,
    /// Allocations pending at once never exceed this.
    #[arg(long, default_value_t = 2, requires = "elastic")]
    pub max_pending: u32,
    /// Each allocation's time limit (`90m`, `2h`, `H:MM:SS`).
    #[arg(long, default_value = "1h", requires = "elastic")]
    pub time: String,
    /// How many allocations a round that wants more asks for: one (at a time),
    /// additive (one more a round), exponential (1, 2, 4, …), all (at once).
    #[arg(long, default_value = "additive", requires = "elastic")]
    pub policy: String,
    /// Release an allocation idle this long with nothing queued.
    #[arg(long, default_value = "5m", requires = "elastic")]
    pub idle_release: String,
    /// Grow when the queued work would take longer than this on the nodes it has.
    #[arg(long, default_value = "1m", requires = "elastic")]
    pub grow_after: String,
    /// Replace an allocation this close to its end while work remains (default: 10m,
    /// or a quarter of --time if that is shorter; must be shorter than --time).
    #[arg(long, requires = "elastic")]
    pub replace_ahead: Option<String>,
    /// Cores a node is expected to have, for sizing before one has joined.
    #[arg(long, default_value_t = 1, requires = "elastic")]
    pub cores_per_node: u32,
    /// Between provisioning rounds.
    #[arg(long, default_value = "5s", requires = "elastic")]
    pub provision_interval: String,
    /// How long an allocation's agents wait for a restarted root.
    #[arg(long, default_value = "10m", requires = "elastic")]
    pub agents_reattach_for: String,
}

impl ElasticArgs {
    /// The pilot's elastic options, `None` without `--elastic`.
    pub fn options(&self, fanout: u32) -> anyhow::Result<Option<saker_root::ElasticOptions>> {
        use anyhow::Context as _;
        if !self.elastic {
            return Ok(None);
        }
        let duration = |flag: &str, text: &str| {
            saker_client::spec::parse_duration(text).with_context(|| format!("--{flag} {text:?}"))
        };
        let micros = |d: std::time::Duration| d.as_micros().min(u128::from(u64::MAX)) as u64;
        if self.nodes_per_allocation == 0 || self.max_nodes < self.nodes_per_allocation {
            anyhow::bail!(
                "--max-nodes {} leaves no room for one allocation of --nodes-per-allocation {}",
                self.max_nodes,
                self.nodes_per_allocation
            );
        }
        let time = duration("time", &self.time)?;
        // An allocation counts as ending within `replace_ahead` of its end: one as
        // long would be ending from its start, and replaced the round it runs.
        let replace_ahead = match &self.replace_ahead {
            Some(text) => {
                let ahead = duration("replace-ahead", text)?;
                if ahead >= time {
                    anyhow::bail!(
                        "--replace-ahead {text} is not shorter than --time {}: every \
                         allocation would be replaced as soon as it runs",
                        self.time
                    );
                }
                ahead
            }
            None => (time / 4).min(std::time::Duration::from_secs(600)),
        };
        Ok(Some(saker_root::ElasticOptions {
            provision: saker_core::provision::ProvisionConfig {
                policy: self.policy.parse().map_err(anyhow::Error::msg)?,
                nodes_per_allocation: self.nodes_per_allocation,
                cores_per_node: self.cores_per_node.max(1),
                max_nodes: self.max_nodes,
                max_pending: self.max_pending.max(1),
                grow_after_us: micros(duration("grow-after", &self.grow_after)?),
                idle_release_us: micros(duration("idle-release", &self.idle_release)?),
                replace_ahead_us: micros(replace_ahead),
            },
            round: duration("provision-interval", &self.provision_interval)?
                .max(std::time::Duration::from_millis(100)),
            partition: self.partition.clone(),
            account: self.account.clone(),
            time_limit_minutes: Some(time.as_secs().div_ceil(60).max(1) as u32),
            fanout: fanout.max(1),
            reattach_for: self.agents_reattach_for.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn options(flags: &[&str]) -> anyhow::Result<Option<saker_root::ElasticOptions>> {
        let mut argv = vec!["saker", "pilot", "--dir", "/tmp/p"];
        argv.extend_from_slice(flags);
        match Cli::try_parse_from(argv)?.command {
            Command::Pilot(args) => args.elastic.options(8),
            other => panic!("parsed {other:?}"),
        }
    }

    #[test]
    fn elastic_flags_become_the_provisioners_settings() {
        assert!(
            options(&[]).unwrap().is_none(),
            "not elastic without --elastic"
        );
        let elastic = options(&[
            "--elastic",
            "--policy",
            "exponential",
            "--time",
            "2:00:00",
            "--max-nodes",
            "8",
            "--nodes-per-allocation",
            "2",
            "--idle-release",
            "90s",
        ])
        .unwrap()
        .unwrap();
        let provision = elastic.provision;
        assert_eq!(provision.policy, saker_core::provision::Policy::Exponential);
        assert_eq!(
            (provision.max_nodes, provision.nodes_per_allocation),
            (8, 2)
        );
        assert_eq!(provision.idle_release_us, 90_000_000);
        assert_eq!(
            provision.replace_ahead_us, 600_000_000,
            "10m of a 2h allocation"
        );
        assert_eq!(elastic.time_limit_minutes, Some(120));
        assert_eq!(elastic.fanout, 8);
    }

    #[test]
    fn a_short_allocation_is_replaced_a_quarter_of_its_time_ahead() {
        let elastic = options(&["--elastic", "--time", "10m"]).unwrap().unwrap();
        assert_eq!(elastic.provision.replace_ahead_us, 150_000_000);
        let elastic = options(&["--elastic", "--time", "10m", "--replace-ahead", "1m"])
            .unwrap()
            .unwrap();
        assert_eq!(elastic.provision.replace_ahead_us, 60_000_000);
    }

    #[test]
    fn bad_elastic_flags_are_refused_with_the_flag_named() {
        let error = options(&["--elastic", "--policy", "greedy"]).unwrap_err();
        assert!(
            format!("{error:#}").contains("`greedy` is not a policy"),
            "{error:#}"
        );
        let error = options(&[
            "--elastic",
            "--max-nodes",
            "1",
            "--nodes-per-allocation",
            "2",
        ])
        .unwrap_err();
        assert!(format!("{error:#}").contains("--max-nodes 1"), "{error:#}");
        let error = options(&["--elastic", "--idle-release", "soon"]).unwrap_err();
        assert!(format!("{error:#}").contains("--idle-release"), "{error:#}");
        let error = options(&["--elastic", "--time", "10m", "--replace-ahead", "10m"]).unwrap_err();
        assert!(
            format!("{error:#}").contains("--replace-ahead 10m"),
            "{error:#}"
        );
        // Elastic settings without --elastic are a mistake, not ignored.
        assert!(options(&["--max-nodes", "4"]).is_err());
    }
}
