use super::*;

fn parse(args: &[&str]) -> Result<Parsed, FlagError> {
    parse_agent(args.iter().map(OsString::from), |_| None)
}

fn agent(args: &[&str]) -> AgentArgs {
    match parse(args).unwrap() {
        Parsed::Run(args) => *args,
        Parsed::Help => panic!("parsed help from {args:?}"),
    }
}

fn error(args: &[&str]) -> String {
    match parse(args) {
        Err(error) => error.to_string(),
        Ok(parsed) => panic!("{args:?} parsed as {parsed:?}"),
    }
}

#[test]
fn the_required_flags_alone_leave_every_default() {
    let args = agent(&["--dir", "/p", "--fanout", "16"]);
    assert_eq!(
        args,
        AgentArgs {
            dir: PathBuf::from("/p"),
            node: None,
            fanout: 16,
            subtree_base: None,
            cores: None,
            bind: None,
            advertise: None,
            hostname: None,
            offer: NodeOffer::default(),
            gpu_ids: None,
            liveness: Liveness::default(),
            reattach_for: Duration::from_secs(30),
            any_root: false,
            log: "warn".into(),
        }
    );
    assert_eq!(args.offer.pin_cpus, "auto");
}

#[test]
fn every_flag_is_read_with_its_value_apart_or_after_an_equals_sign() {
    let args = agent(&[
        "--dir=/p",
        "--node",
        "7",
        "--fanout=4",
        "--subtree-base",
        "5",
        "--cores",
        "3",
        "--bind",
        "0.0.0.0:9000",
        "--advertise",
        "10.1.2.3",
        "--hostname=n7",
        "--gpu-ids",
        "1,3",
        "--heartbeat-interval",
        "200ms",
        "--heartbeat-timeout=1s",
        "--reattach-for",
        "10m",
        "--log",
        "debug",
        "--gpus-per-node",
        "2",
        "--mem-per-node",
        "4G",
        "--node-resource",
        "licence=2",
        "--node-resource=disk=1",
        "--pin-cpus",
        "0-2",
        "--no-memory-limits",
        "--scratch",
        "/scratch",
        "--shared-scratch",
        "--object-memory",
        "1G",
        "--object-memory-dir",
        "/hugetmp",
    ]);
    assert_eq!(
        args,
        AgentArgs {
            dir: PathBuf::from("/p"),
            node: Some(7),
            fanout: 4,
            subtree_base: Some(5),
            cores: Some(3),
            bind: Some("0.0.0.0:9000".parse().unwrap()),
            advertise: Some("10.1.2.3".parse().unwrap()),
            hostname: Some("n7".into()),
            offer: NodeOffer {
                gpus_per_node: Some(2),
                mem_per_node: Some("4G".into()),
                node_resources: vec!["licence=2".into(), "disk=1".into()],
                pin_cpus: "0-2".into(),
                no_memory_limits: true,
                scratch: Some(PathBuf::from("/scratch")),
                shared_scratch: true,
                object_memory: Some("1G".into()),
                object_memory_dir: Some(PathBuf::from("/hugetmp")),
            },
            gpu_ids: Some("1,3".into()),
            liveness: Liveness::new(Duration::from_millis(200), Duration::from_secs(1)).unwrap(),
            reattach_for: Duration::from_secs(600),
            any_root: false,
            log: "debug".into(),
        }
    );
}

#[test]
fn help_is_asked_for_with_either_spelling_wherever_it_stands() {
    assert_eq!(parse(&["--help"]).unwrap(), Parsed::Help);
    assert_eq!(parse(&["--dir", "/p", "-h"]).unwrap(), Parsed::Help);
    assert!(AGENT_USAGE.starts_with("Internal: one agent process"));
    assert!(AGENT_USAGE.contains(AGENT_SYNOPSIS));
}

/// Each flag the usage lists is one the parser takes, and it lists as many as the
/// parser takes (besides `--help`), so the two cannot drift apart.
#[test]
fn every_flag_the_usage_lists_is_parsed() {
    let listed: Vec<&str> = AGENT_USAGE
        .lines()
        .filter(|line| line.starts_with("      --"))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(listed.len(), 23, "{listed:?}");
    for flag in listed {
        let parsed = parse(&[flag, "1s"]);
        assert!(
            !matches!(parsed, Err(FlagError::Unknown { .. })),
            "{flag} is listed but not parsed"
        );
    }
}

#[test]
fn an_unknown_flag_is_named() {
    assert_eq!(
        error(&["--dir", "/p", "--fanout", "2", "--frobnicate"]),
        "unknown flag '--frobnicate'"
    );
    assert_eq!(error(&["-x"]), "unknown flag '-x'");
    assert_eq!(
        error(&["--dir", "/p", "stray"]),
        "unexpected argument \"stray\""
    );
}

#[test]
fn a_flag_without_its_value_is_named() {
    assert_eq!(error(&["--fanout", "2", "--dir"]), "--dir needs a value");
    assert_eq!(
        error(&["--dir", "/p", "--fanout"]),
        "--fanout needs a value"
    );
    assert!(
        error(&["--dir", "/p", "--fanout", "2", "--no-memory-limits=yes"])
            .contains("--no-memory-limits"),
        "a switch takes no value"
    );
}

#[test]
fn required_flags_and_their_companions_are_checked() {
    assert_eq!(error(&["--fanout", "2"]), "--dir is required");
    assert_eq!(error(&["--dir", "/p"]), "--fanout is required");
    assert_eq!(
        error(&["--dir", "/p", "--fanout", "2", "--shared-scratch"]),
        "--shared-scratch requires --scratch"
    );
}

#[test]
fn a_value_that_does_not_parse_names_its_flag() {
    let base = ["--dir", "/p", "--fanout", "2"];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        error(&args)
    };
    assert_eq!(
        with(&["--node", "x"]),
        "--node \"x\": invalid digit found in string"
    );
    assert!(with(&["--cores", "-1"]).starts_with("--cores \"-1\": "));
    assert!(with(&["--bind", "nowhere"]).starts_with("--bind \"nowhere\": "));
    assert!(with(&["--advertise", "1.2.3"]).starts_with("--advertise \"1.2.3\": "));
    assert!(with(&["--reattach-for", "soon"]).starts_with("--reattach-for \"soon\": "));
    assert!(with(&["--heartbeat-timeout", "1s"]).contains("at least twice the interval"));
    assert_eq!(
        error(&["--dir", "/p", "--fanout", "many"]),
        "--fanout \"many\": invalid digit found in string"
    );
}

#[test]
fn the_log_filter_is_the_flag_else_the_variable_else_warn() {
    let base = ["--dir", "/p", "--fanout", "2"].map(OsString::from);
    let log = |extra: &[&str], variable: Option<&str>| {
        let args = base.iter().cloned().chain(extra.iter().map(OsString::from));
        let env = |name: &str| (name == LOG_VARIABLE).then(|| variable.map(str::to_owned))?;
        match parse_agent(args, env).unwrap() {
            Parsed::Run(args) => args.log,
            Parsed::Help => unreachable!(),
        }
    };
    assert_eq!(log(&["--log", "info"], Some("trace")), "info");
    assert_eq!(log(&[], Some("saker=debug")), "saker=debug");
    assert_eq!(log(&[], Some("")), "warn");
    assert_eq!(log(&[], None), "warn");
    assert_eq!(
        parse_reaper([OsString::from("--log=info")], |_| None).unwrap(),
        "info"
    );
    assert_eq!(
        parse_reaper(Vec::<OsString>::new(), |_| Some("debug".into())).unwrap(),
        "debug"
    );
    let error = parse_reaper([OsString::from("--dir")], |_| None).unwrap_err();
    assert_eq!(error.to_string(), "unknown flag '--dir'");
}

/// The command lines the root starts agents with (`saker_root::local` and `::slurm`,
/// through `agent_arguments` and `liveness_arguments`) are ones this parser takes,
/// meaning what the root meant.
#[test]
fn the_flags_the_root_writes_are_the_flags_the_agent_reads() {
    use crate::offer::{NodeOptions, agent_arguments, liveness_arguments};
    use saker_actors::resources::{Declared, PinCpus};
    let liveness = Liveness::new(Duration::from_millis(250), Duration::from_secs(2)).unwrap();
    let declared = Declared {
        gpu_ids: Some(vec!["0".into(), "2".into()]),
        gpus: None,
        memory_mib: Some(1024),
        custom: [("licence".to_owned(), 3)].into_iter().collect(),
        pin: PinCpus::List(vec![4, 5]),
    };
    let options = NodeOptions {
        declared: declared.clone(),
        no_memory_limits: true,
        scratch: Some(PathBuf::from("/local")),
        shared_scratch: true,
        object_memory_mib: Some(3 << 10),
        object_memory_dir: Some(PathBuf::from("/hugetmp")),
    };
    let mut args: Vec<String> = [
        "--dir", "/p", "--node", "3", "--fanout", "16", "--cores", "2",
    ]
    .map(str::to_owned)
    .into();
    args.extend(liveness_arguments(&liveness));
    args.extend(agent_arguments(&declared, &options));
    let args = agent(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(args.liveness, liveness);
    assert_eq!((args.node, args.fanout, args.cores), (Some(3), 16, Some(2)));
    assert_eq!(
        args.offer.declared(args.gpu_ids.as_deref()).unwrap(),
        declared
    );
    assert!(args.offer.no_memory_limits && args.offer.shared_scratch);
    assert_eq!(args.offer.scratch, Some(PathBuf::from("/local")));
    assert_eq!(args.offer.object_memory_mib().unwrap(), Some(3 << 10));
    assert_eq!(
        args.offer.object_memory_dir,
        Some(PathBuf::from("/hugetmp"))
    );
}

/// `--object-memory` takes a size as `--mem-per-node` does; 0 is none, and a size
/// that is none is refused with the flag named.
#[test]
fn object_memory_is_a_size_and_zero_is_none() {
    let base = ["--dir", "/p", "--node", "0", "--fanout", "4"];
    let with = |size: &str| {
        let mut args = base.to_vec();
        args.extend(["--object-memory", size]);
        agent(&args).offer.object_memory_mib()
    };
    assert_eq!(with("2G").unwrap(), Some(2048));
    assert_eq!(with("512").unwrap(), Some(512));
    assert_eq!(with("0").unwrap(), None);
    assert_eq!(agent(&base).offer.object_memory_mib().unwrap(), None);
    let error = with("lots").unwrap_err().to_string();
    assert!(error.contains("--object-memory"), "{error}");
}
