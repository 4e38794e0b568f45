//! `saker mpiexec`: the ranks of a script job, started by the agents.
//!
//! A job of launcher script runs its command once, on its leader (as a batch script
//! runs on a Slurm allocation's first node). Each `saker mpiexec [-n N] [-ppn P]
//! COMMAND…` in it asks the leader's [endpoint](super::endpoint) to start N ranks of
//! COMMAND, P on each of the job's first nodes (default: the job's own layout). The
//! leader asks each of those members, through the root, to start its ranks
//! ([`GangLaunch::ranks`]); each member's agent serves them PMI as it serves a PMI
//! job's, each launch a world of its own whose fences gather at the leader. When
//! every rank has ended, each member sends back its ranks' output (rank after rank)
//! and the first failure's code; `saker mpiexec` writes the output and exits with
//! that code. A rank that fails fails the job, as in a PMI job; launches of one job
//! run one at a time.
//!
//! [`GangLaunch::ranks`]: saker_wire::messages::GangLaunch::ranks

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use saker_wire::messages::EnvVar;

use super::endpoint::SOCKET_VAR;

/// The first field of an `saker mpiexec` request (a remote shell's is a host).
pub(super) const REQUEST_TAG: &str = "saker-mpiexec";

/// The variable naming the command line of `saker mpiexec` in a script job.
pub const COMMAND_VAR: &str = "SAKER_MPIEXEC";

/// What `saker mpiexec` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Request {
    pub ranks: u32,
    pub ranks_per_node: u32,
    pub cwd: String,
    /// A `/bin/sh -c` command line.
    pub command: String,
    pub env: Vec<EnvVar>,
}

impl Request {
    /// NUL-separated fields: the tag, ranks, ranks per node, directory, command, then
    /// one `KEY=VALUE` per variable.
    fn encode(&self) -> Vec<u8> {
        let mut fields = vec![
            REQUEST_TAG.to_owned(),
            self.ranks.to_string(),
            self.ranks_per_node.to_string(),
            self.cwd.clone(),
            self.command.clone(),
        ];
        fields.extend(
            self.env
                .iter()
                .map(|var| format!("{}={}", var.key, var.value)),
        );
        let mut bytes = Vec::new();
        for field in fields {
            bytes.extend_from_slice(field.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    /// The request in `text` (already known to start with the tag), or why not.
    pub(super) fn decode(text: &str) -> Result<Request, String> {
        let mut fields = text.strip_suffix('\0').unwrap_or(text).split('\0');
        fields.next(); // the tag
        let mut number = |what: &str| -> Result<u32, String> {
            let field = fields.next().ok_or_else(|| format!("no {what}"))?;
            field
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{what} {field:?} is not a positive number"))
        };
        let ranks = number("ranks")?;
        let ranks_per_node = number("ranks per node")?;
        let cwd = fields.next().ok_or("no directory")?.to_owned();
        let command = fields.next().ok_or("no command")?.to_owned();
        let env = fields
            .filter_map(|entry| entry.split_once('='))
            .map(|(key, value)| EnvVar {
                key: key.to_owned(),
                value: value.to_owned(),
            })
            .collect();
        Ok(Request {
            ranks,
            ranks_per_node,
            cwd,
            command,
            env,
        })
    }

    /// The members the ranks run on: the first `ranks / ranks_per_node` (rounded up).
    pub(super) fn members(&self) -> u32 {
        self.ranks.div_ceil(self.ranks_per_node)
    }
}

/// The endpoint's answer: a line `CODE STDOUT_BYTES STDERR_BYTES`, then the bytes.
pub(super) fn encode_answer(code: i32, stdout: &[u8], stderr: &[u8]) -> Vec<u8> {
    let mut answer = format!("{code} {} {}\n", stdout.len(), stderr.len()).into_bytes();
    answer.extend_from_slice(stdout);
    answer.extend_from_slice(stderr);
    answer
}

pub(super) fn decode_answer(answer: &[u8]) -> Option<(i32, &[u8], &[u8])> {
    let end = answer.iter().position(|&b| b == b'\n')?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let mut parts = head.split(' ');
    let code = parts.next()?.parse().ok()?;
    let out: usize = parts.next()?.parse().ok()?;
    let err: usize = parts.next()?.parse().ok()?;
    let body = &answer[end + 1..];
    (body.len() == out + err).then(|| (code, &body[..out], &body[out..]))
}

/// The command line that runs `saker mpiexec` with this binary, shell-quoted.
pub fn command_line() -> String {
    let program = std::env::current_exe()
        .map(|path| path.display().to_string())
        .unwrap_or_else(|_| "saker".to_owned());
    let mut words = vec![quote(&program)];
    words.extend(crate::self_exe::prefix().iter().map(|word| quote(word)));
    words.push("mpiexec".to_owned());
    words.join(" ")
}

/// `word` as one `/bin/sh` word.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

const USAGE: &str = "usage: saker mpiexec [-n RANKS] [-ppn RANKS_PER_NODE] [--] COMMAND [ARG]...";

/// What a `saker mpiexec` command line asks.
#[derive(Debug, PartialEq, Eq)]
struct Asked {
    ranks: Option<u32>,
    /// None: the job's.
    per_node: Option<u32>,
    argv: Vec<String>,
}

/// Why `saker mpiexec` started no rank.
#[derive(Debug, thiserror::Error)]
enum Problem {
    #[error("{0}\n{USAGE}")]
    Usage(String),
    #[error("{0}")]
    Refused(String),
    #[error("cannot reach the job's agent: {0}")]
    Io(#[from] io::Error),
}

fn parse(args: &[String]) -> Result<Asked, Problem> {
    let (mut ranks, mut per_node) = (None, None);
    let mut rest = args.iter();
    let number = |flag: &str, value: Option<&String>| -> Result<u32, Problem> {
        let value = value.ok_or_else(|| Problem::Usage(format!("{flag} needs a number")))?;
        value
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| Problem::Usage(format!("{flag} {value:?}: not a positive number")))
    };
    let none = || Problem::Usage("no command given".to_owned());
    let command = loop {
        let arg = rest.next().ok_or_else(none)?;
        match arg.as_str() {
            "-n" | "-np" | "--np" => ranks = Some(number(arg, rest.next())?),
            "-ppn" | "--ppn" | "--ranks-per-node" => per_node = Some(number(arg, rest.next())?),
            "--" => break rest.next().ok_or_else(none)?.clone(),
            flag if flag.starts_with('-') => {
                return Err(Problem::Usage(format!("unknown option {flag}")));
            }
            _ => break arg.clone(),
        }
    };
    let mut argv = vec![command];
    argv.extend(rest.cloned());
    Ok(Asked {
        ranks,
        per_node,
        argv,
    })
}

/// The variables the ranks must not take from `saker mpiexec`: their own PMI and
/// rank variables, and what their agent sets for their cores and devices.
fn passed_on(key: &str) -> bool {
    const OWN: &[&str] = &["SAKER_", "PMI_", "FLUX_", "MPI_LOCAL"];
    const BOUND: &[&str] = &[
        "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "OMPI_MCA_btl_vader_backing_directory",
    ];
    !OWN.iter().any(|prefix| key.starts_with(prefix)) && !BOUND.contains(&key)
}

/// `saker mpiexec`: starts ranks through the script job's leader and exits with
/// their first failure's code (0 when all exited 0; 255 when they could not start).
pub fn mpiexec_main(args: &[String]) -> i32 {
    match run(args) {
        Ok(code) => code,
        Err(problem) => {
            eprintln!("saker mpiexec: {problem}");
            255
        }
    }
}

fn run(args: &[String]) -> Result<i32, Problem> {
    let Asked {
        ranks,
        per_node,
        argv,
    } = parse(args)?;
    let socket = std::env::var_os(SOCKET_VAR).ok_or_else(|| {
        Problem::Refused(format!(
            "{SOCKET_VAR} is not set: run it in a job of launcher script \
             (saker submit --mpi pmi --launcher script …)"
        ))
    })?;
    let job_number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let job_ranks = job_number("SAKER_WORLD_SIZE").unwrap_or(1);
    let job_per_node = job_number("SAKER_RANKS_PER_NODE").unwrap_or(1);
    let nodes = std::env::var("SAKER_NODES").map_or(1, |nodes| nodes.split(',').count()) as u32;
    let ranks_per_node = per_node.unwrap_or(job_per_node);
    let ranks = ranks.unwrap_or(if per_node.is_some() {
        ranks_per_node.saturating_mul(nodes)
    } else {
        job_ranks
    });
    if ranks_per_node > job_per_node {
        return Err(Problem::Refused(format!(
            "{ranks_per_node} ranks per node asked; the job holds {job_per_node} per node"
        )));
    }
    if ranks > ranks_per_node.saturating_mul(nodes) {
        return Err(Problem::Refused(format!(
            "{ranks} ranks do not fit the job's {nodes} nodes at {ranks_per_node} per node"
        )));
    }
    let cwd = std::env::current_dir()
        .map(|dir| dir.display().to_string())
        .unwrap_or_default();
    // A variable that is not UTF-8 cannot travel (the wire's are text): left out.
    let env = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(key, _)| passed_on(key))
        .map(|(key, value)| EnvVar { key, value })
        .collect();
    let command = argv
        .iter()
        .map(|word| quote(word))
        .collect::<Vec<_>>()
        .join(" ");
    let request = Request {
        ranks,
        ranks_per_node,
        cwd,
        command,
        env,
    };
    let answer = ask(Path::new(&socket), &request)?;
    let unreadable = || Problem::Refused("an unreadable answer from the job's agent".to_owned());
    let (code, stdout, stderr) = decode_answer(&answer).ok_or_else(unreadable)?;
    let _ = io::stdout().write_all(stdout);
    let _ = io::stdout().flush();
    let _ = io::stderr().write_all(stderr);
    Ok(code)
}

pub(super) fn ask(socket: &Path, request: &Request) -> io::Result<Vec<u8>> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(&request.encode())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| (*arg).to_owned()).collect()
    }

    #[test]
    fn requests_and_answers_read_back() {
        let request = Request {
            ranks: 6,
            ranks_per_node: 2,
            cwd: "/work/x".into(),
            command: "./ring 'a b'".into(),
            env: vec![EnvVar {
                key: "A".into(),
                value: "1=2".into(),
            }],
        };
        let bytes = request.encode();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.starts_with(REQUEST_TAG));
        assert_eq!(Request::decode(text), Ok(request.clone()));
        assert_eq!(request.members(), 3);
        assert!(Request::decode("saker-mpiexec\x000\x001\x00/\x00x\x00").is_err());
        assert!(Request::decode("saker-mpiexec\x002\x00").is_err());
        let answer = encode_answer(3, b"out\n", b"err");
        assert_eq!(
            decode_answer(&answer),
            Some((3, &b"out\n"[..], &b"err"[..]))
        );
        assert_eq!(decode_answer(b"0 5 0\nabc"), None);
    }

    #[test]
    fn the_command_line_takes_mpiexec_options_then_the_program() {
        let asked = parse(&strings(&["-n", "4", "-ppn", "2", "./app", "-x"])).unwrap();
        assert_eq!(
            asked,
            Asked {
                ranks: Some(4),
                per_node: Some(2),
                argv: strings(&["./app", "-x"])
            }
        );
        let asked = parse(&strings(&["--", "-weird"])).unwrap();
        assert_eq!((asked.ranks, asked.per_node), (None, None));
        assert_eq!(asked.argv, strings(&["-weird"]));
        let usage = parse(&strings(&["--bind-to", "core", "./app"])).unwrap_err();
        assert!(
            usage
                .to_string()
                .contains("unknown option --bind-to\nusage:")
        );
        assert!(parse(&strings(&["-n", "0", "./app"])).is_err());
        assert!(parse(&strings(&["--bind-to", "core", "./app"])).is_err());
        assert!(parse(&strings(&["-n", "2"])).is_err());
    }

    #[test]
    fn words_are_quoted_for_the_shell_only_when_they_need_it() {
        assert_eq!(quote("./app"), "./app");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn ranks_keep_their_own_pmi_and_binding_variables() {
        assert!(passed_on("HOME"));
        assert!(passed_on("OMP_PLACES"));
        assert!(!passed_on("PMI_FD"));
        assert!(!passed_on("SAKER_GANG_SOCKET"));
        assert!(!passed_on("OMP_NUM_THREADS"));
    }
}
