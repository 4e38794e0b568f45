//! A network partition between an agent and its parent, made by the kernel: the
//! agent runs in a network namespace of its own, its link to its parent crosses a
//! namespace that routes between the two, and that router drops packets at random
//! (heavy loss), then all of them (a partition longer than the heartbeat timeout),
//! then none. Every task still has exactly one accepted result and succeeds: a link
//! declared dead, rightly or by mistake, costs replays only.
//!
//! Needs root, `ip` (iproute2) and `nft` (nftables; scripts/test.sh installs it). The
//! loss is nftables' `numgen random`, not `tc … netem`: the kernels this runs on have
//! no `sch_netem`.
//!
//! ```text
//!  default namespace                 saker-wire-PID             saker-far-PID
//!  root (loopback) ── agent 0 ── ska ═══ skb   [drop]   skc ═══ skd ── agent 1
//!                      "near"   10.231.B.1   forward    10.231.B+1.2    "far"
//! ```
//!
//! A local pilot's root listens on loopback only, so the far agent cannot reach it:
//! it is agent 1 of fan-out 1, whose parent is agent 0, started by hand (`--bind`) on
//! the address of the host's end of the veth pair. The drops are in the router's
//! `forward` chain, so neither end sees an error from `sendmsg` (as dropping in an
//! `output` chain would give): packets just vanish, as on a broken switch.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_one_result_per_task, executions, results, saker, wait_for};

const TASKS: u32 = 400;
const HEARTBEAT: [&str; 4] = ["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"];
/// The heavy random loss, per direction, in percent.
const HEAVY_LOSS: u32 = 50;
/// How long each loss phase lasts: the total one well past the heartbeat timeout.
const HEAVY_FOR: Duration = Duration::from_secs(3);
const PARTITION_FOR: Duration = Duration::from_secs(3);

/// Runs `program args`, failing the test with its output and `hint` if it fails.
fn sh(program: &str, args: &[&str], hint: &str) -> String {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("cannot run `{program}` ({error}): {hint}"));
    assert!(
        output.status.success(),
        "`{program} {}` failed ({}): {}\n{hint}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The namespaces, veth pairs and routes of the test, removed when dropped (also when
/// the test fails). Each run has names and addresses of its own, from its pid.
struct Network {
    wire: String,
    far: String,
    host_link: String,
    /// The address of the host's end: agent 0 accepts its child there.
    near_ip: String,
    /// The far agent's address.
    far_ip: String,
}

impl Network {
    fn create() -> Network {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test makes network namespaces and firewall rules: run it as root"
        );
        sh(
            "nft",
            &["--version"],
            "nft is missing: install the nftables package (scripts/test.sh does)",
        );
        let pid = std::process::id();
        let base = (pid % 120) * 2;
        let (near_net, far_net) = (format!("10.231.{base}"), format!("10.231.{}", base + 1));
        for net in [&near_net, &far_net] {
            let routes = sh("ip", &["-4", "route", "show", &format!("{net}.0/24")], "");
            assert!(
                routes.trim().is_empty(),
                "{net}.0/24 is in use already (a lab left by a killed run?): {routes}"
            );
        }
        let network = Network {
            wire: format!("saker-wire-{pid}"),
            far: format!("saker-far-{pid}"),
            host_link: format!("ska{pid}"),
            near_ip: format!("{near_net}.1"),
            far_ip: format!("{far_net}.2"),
        };
        let (wire, far) = (&network.wire, &network.far);
        let (ska, skb, skc, skd) = (
            &network.host_link,
            format!("skb{pid}"),
            format!("skc{pid}"),
            format!("skd{pid}"),
        );
        let hint = "network namespaces and veth pairs are needed (`ip netns add`, root)";
        for command in [
            format!("netns add {wire}"),
            format!("netns add {far}"),
            format!("link add {ska} type veth peer name {skb} netns {wire}"),
            format!("-n {wire} link add {skc} type veth peer name {skd} netns {far}"),
            format!("addr add {near_net}.1/24 dev {ska}"),
            format!("-n {wire} addr add {near_net}.2/24 dev {skb}"),
            format!("-n {wire} addr add {far_net}.1/24 dev {skc}"),
            format!("-n {far} addr add {far_net}.2/24 dev {skd}"),
            format!("link set {ska} up"),
            format!("-n {wire} link set {skb} up"),
            format!("-n {wire} link set {skc} up"),
            format!("-n {far} link set {skd} up"),
            format!("-n {far} link set lo up"),
            format!("route add {far_net}.0/24 via {near_net}.2"),
            format!("-n {far} route add default via {far_net}.1"),
            format!("netns exec {wire} sysctl -qw net.ipv4.ip_forward=1"),
        ] {
            sh("ip", &command.split(' ').collect::<Vec<_>>(), hint);
        }
        // The loss lives in the router's own table: nothing of the host's changes.
        network.nft(
            "add table inet partition; add chain inet partition forward \
             { type filter hook forward priority 0; policy accept; }",
        );
        network
    }

    /// Runs nft commands (`;`-separated: one batch, all of them or none) in the
    /// router namespace.
    fn nft(&self, commands: &str) {
        sh(
            "ip",
            &["netns", "exec", &self.wire, "nft", commands],
            "nft is needed (the nftables package) with nf_tables and numgen in the kernel",
        );
    }

    /// Drops `percent` % of the packets between the far agent and the rest, each way.
    fn loss(&self, percent: u32) {
        // When, to read beside the logs (shown if the test fails).
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let (secs, millis) = (now.as_secs() % 86_400, now.subsec_millis());
        eprintln!(
            "{:02}:{:02}:{:02}.{millis:03} UTC: {percent} % loss",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        );
        let rule = match percent {
            0 => String::new(),
            100.. => "; add rule inet partition forward drop".to_owned(),
            _ => {
                format!("; add rule inet partition forward numgen random mod 100 < {percent} drop")
            }
        };
        self.nft(&format!("flush chain inet partition forward{rule}"));
    }

    /// `saker agent` run inside the far namespace. (`ip netns exec` mounts a /sys of
    /// its own, without cgroups: that agent accounts memory but cannot limit it, and
    /// says so. Nothing here needs limits.)
    fn far_command(&self) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.far])
            .arg(saker().get_program())
            .env_remove("SAKER_DIR");
        command
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Removing the router's namespace takes its ends of both pairs, and with them
        // the other ends, the host's route and the firewall table.
        for ns in [&self.far, &self.wire] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .stderr(Stdio::null())
            .status();
    }
}

/// The agents, killed when the test ends, pass or fail; on failure their logs (and
/// the root's) are shown.
struct Agents {
    children: Vec<Child>,
    logs: Vec<PathBuf>,
}

impl Drop for Agents {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for log in &self.logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                eprintln!("--- {} (last 40 lines) ---\n{tail}", log.display());
            }
        }
    }
}

#[test]
fn a_partitioned_agent_costs_replays_only() {
    // Declared first, removed last: after every process in it has gone.
    let network = Network::create();
    let dir = tempfile::tempdir().unwrap();
    let root_log = dir.path().join("root.log");
    let mut args = vec!["--agents", "0"];
    args.extend_from_slice(&HEARTBEAT);
    let service = common::Service::start_logged(dir.path(), &args, &root_log);
    let pilot = service.pilot.clone();
    let mut agents = Agents {
        children: Vec::new(),
        logs: vec![root_log],
    };
    for (node, hostname, ip) in [(0, "near", &network.near_ip), (1, "far", &network.far_ip)] {
        let log = dir.path().join(format!("agent-{node}.log"));
        let mut command = if node == 0 {
            saker()
        } else {
            network.far_command()
        };
        let child = command
            .args(["agent", "--dir"])
            .arg(&pilot)
            .args(["--node", &node.to_string(), "--fanout", "1", "--cores", "2"])
            .args(["--bind", &format!("{ip}:0"), "--hostname", hostname])
            .args(HEARTBEAT)
            .args(["--log", "info"])
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        agents.children.push(child);
        agents.logs.push(log);
    }

    // Each task takes 0.2 s until the gate opens, 0.02 s after: the work lasts through
    // the fault, whatever the machine's speed, and then ends quickly.
    let log = dir.path().join("executions.log");
    let gate = dir.path().join("gate");
    let script = format!(
        "if [ -e {gate} ]; then sleep 0.02; else sleep 0.2; fi; echo {{index}} $SAKER_NODE >> {log}",
        gate = gate.display(),
        log = log.display()
    );
    let mut submit = saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&pilot)
        .args(["--array", &format!("1-{TASKS}")])
        // Heavy loss may declare the far link dead more than once, each time costing
        // a replay of what it held: room for that, as docs/faults.md advises where
        // losses are expected. Acceptance is what is tested, not the replay budget.
        .args(["--max-replays", "10"])
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("work on both agents", Duration::from_secs(30), || {
        let done = executions(&log);
        [0, 1]
            .iter()
            .all(|n| done.iter().filter(|e| e.1 == *n).count() >= 4)
    });

    // Heavy loss: QUIC retransmits; the link may live or be declared dead.
    network.loss(HEAVY_LOSS);
    std::thread::sleep(HEAVY_FOR);
    // A partition: both ends declare the link dead after the heartbeat timeout.
    network.loss(100);
    std::thread::sleep(PARTITION_FOR);
    network.loss(0);
    let healed = executions(&log).len();
    // The far agent finds its parent again, registers anew and works.
    wait_for(
        "the far agent to work again",
        Duration::from_secs(30),
        || executions(&log)[healed..].iter().any(|e| e.1 == 1),
    );
    std::fs::write(&gate, "").unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = submit.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = submit.kill();
            let _ = submit.wait();
            panic!("the tasks did not finish within 60 s of the partition's end");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let records = results(&pilot);
    let not_succeeded: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["state"] != "succeeded")
        .collect();
    assert!(
        status.success() && not_succeeded.is_empty(),
        "every task succeeds ({status}); these did not: {not_succeeded:#?}"
    );
    assert_one_result_per_task(&records, TASKS as usize);
    let executed = executions(&log);
    let ran: BTreeSet<u32> = executed.iter().map(|e| e.0).collect();
    assert_eq!(ran, (1..=TASKS).collect(), "every index ran at least once");

    // The partition happened: the far agent's work was lost with its link and
    // replayed. Every replay is owed to a lost agent: the far one, or (on a starved
    // machine) either declared lost by mistake.
    let notes: Vec<&serde_json::Value> = records
        .iter()
        .flat_map(|r| r["history"].as_array().unwrap())
        .collect();
    for note in &notes {
        assert_eq!(note["end"], "lost", "{note}");
        let reason = note["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("agent 1 on far lost: ")
                || reason.starts_with("agent 0 on near lost: "),
            "{reason}"
        );
    }
    assert!(
        notes.iter().any(|n| n["reason"]
            .as_str()
            .unwrap()
            .starts_with("agent 1 on far lost: ")),
        "the far agent's attempts were replayed after the partition"
    );
    eprintln!(
        "{} executions of {TASKS} tasks; {} attempts replayed",
        executed.len(),
        notes.len()
    );

    // Back in the tree, the far agent stops with the pilot, as the near one does.
    drop(service);
    for (node, agent) in agents.children.iter_mut().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = agent.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "agent {node} still runs 20 s after the pilot stopped"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "agent {node} exits cleanly: {status}");
    }
}
