//! The PMI-1 wire protocol ("simple PMI"), which MPI ranks started by their agents
//! speak (`--mpi pmi`): what an MPICH-family rank says on the socket its agent hands
//! it (`PMI_FD`) and what it is answered. Pure: bytes in, requests out; replies to
//! lines. A part's key-value space and barriers are [`group`]'s, its sockets
//! [`server`]'s.
//!
//! One request per line: `cmd=NAME` then `key=value` attributes, separated by spaces
//! (MPICH's `src/pmi/maint/pmi-1.1.txt`; Flux RFC 13). Every request but `abort` gets
//! one reply line, `cmd=REPLY` with `rc=0` or, on an error, `rc=-1 msg=...`. A line
//! splits on spaces, but for the two attributes that come last and take the rest of
//! it: `put`'s `value` (Open MPI pads its base64 with blanks) and `abort`'s
//! `message`. `mcmd=spawn`
//! (dynamic processes) is read to its `endcmd` and refused, as Flux refuses it.

pub mod group;
pub mod hub;
pub mod node_file;
pub mod openmpi;
pub mod server;
pub mod topology;
pub mod v2;

/// Longest request line read: a key and a value within [`MAXES`], and a little.
pub const MOST_LINE: usize = 4096;

/// The limits a rank is told (`get_maxes`): Flux's, which MPICH ranks work within.
pub const MAXES: Maxes = Maxes {
    kvsname: 64,
    key: 64,
    value: 1024,
};

/// The lengths of names, keys and values a rank may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maxes {
    pub kvsname: usize,
    pub key: usize,
    pub value: usize,
}

/// What a rank asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Init {
        version: u32,
        subversion: u32,
    },
    GetMaxes,
    GetUniverseSize,
    GetAppnum,
    GetMyKvsname,
    Put {
        key: String,
        value: String,
    },
    Get {
        key: String,
    },
    BarrierIn,
    Finalize,
    /// PMI-2: the rank's number, the world's size, its application.
    FullInit,
    /// PMI-2: an attribute of the job (`PMI_process_mapping`, `universeSize`).
    GetJobAttr {
        key: String,
    },
    /// PMI-2: an attribute the ranks of one node share, seen by them at once.
    PutNodeAttr {
        key: String,
        value: String,
    },
    /// PMI-2: a node attribute; with `wait`, answered once some rank puts it.
    GetNodeAttr {
        key: String,
        wait: bool,
    },
    /// The rank gives up: the whole group ends (no reply).
    Abort {
        exitcode: i32,
        message: Option<String>,
    },
    /// A request this server does not serve (name services, spawn): answered
    /// `rc=-1` under `reply`'s name, the rank goes on.
    Unsupported {
        cmd: String,
        reply: &'static str,
    },
}

/// What a rank is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Init {
        version: u32,
        subversion: u32,
    },
    Maxes(Maxes),
    UniverseSize(u32),
    Appnum(u32),
    MyKvsname(String),
    PutResult,
    /// `None`: no such key.
    GetResult(Option<String>),
    BarrierOut,
    FinalizeAck,
    /// PMI-2 answers: `fullinit`, a job attribute, a node attribute, a node put.
    FullInit {
        rank: u32,
        size: u32,
        appnum: u32,
    },
    JobAttr(Option<String>),
    NodeAttr(Option<String>),
    NodeAttrPut,
    /// `rc=-1` under the request's reply name, with why.
    Refused {
        reply: &'static str,
        msg: String,
    },
}

/// Why a line is no request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PmiError {
    #[error("a request line longer than {MOST_LINE} bytes")]
    TooLong,
    #[error("a request line that is not text")]
    NotText,
    #[error("a request without `cmd=`: {0:?}")]
    NoCommand(String),
    #[error("an unknown request {0:?}")]
    Unknown(String),
    #[error("request {cmd} lacks {attribute}")]
    Missing {
        cmd: &'static str,
        attribute: &'static str,
    },
    #[error("request {cmd}: {attribute} is not a number")]
    NotANumber {
        cmd: &'static str,
        attribute: &'static str,
    },
    #[error("a PMI-2 frame longer than {} bytes", v2::MOST_FRAME)]
    FrameTooLong,
    #[error("a PMI-2 frame that cannot be read: {0:?}")]
    BadFrame(String),
    #[error("request {cmd}: {attribute} is longer than {most} bytes")]
    Oversized {
        cmd: &'static str,
        attribute: &'static str,
        most: usize,
    },
}

/// Splits a rank's bytes into requests, whatever the reads' boundaries.
#[derive(Debug, Default)]
pub struct Requests {
    pending: Vec<u8>,
    /// Inside an `mcmd=spawn` block, read to its `endcmd`.
    in_spawn: bool,
    /// The rank asked for PMI-2 in its `init`: frames follow.
    v2: bool,
    /// The `thrid` of each request of the last push (PMI-2 threaded clients).
    thrids: Vec<Option<String>>,
}

impl Requests {
    /// Takes `bytes` as read; returns the requests completed by them, in order. An
    /// error is the rank's fault: its server ends the group.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Request>, PmiError> {
        self.pending.extend_from_slice(bytes);
        self.thrids.clear();
        let mut requests = Vec::new();
        loop {
            if self.v2 {
                let Some(body) = v2::take_frame(&mut self.pending)? else {
                    break;
                };
                let (request, thrid) = v2::parse(&body)?;
                requests.push(request);
                self.thrids.push(thrid);
                continue;
            }
            let Some(end) = self.pending.iter().position(|&b| b == b'\n') else {
                break;
            };
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = std::str::from_utf8(&line[..end]).map_err(|_| PmiError::NotText)?;
            let line = line.trim_end_matches('\r');
            if self.in_spawn {
                if line.trim() == "endcmd" {
                    self.in_spawn = false;
                    requests.push(Request::Unsupported {
                        cmd: "spawn".into(),
                        reply: "spawn_result",
                    });
                    self.thrids.push(None);
                }
                continue;
            }
            if line.starts_with("mcmd=") {
                self.in_spawn = true;
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let request = parse(line)?;
            self.v2 = matches!(request, Request::Init { version: 2, .. });
            requests.push(request);
            self.thrids.push(None);
        }
        if !self.v2 && self.pending.len() > MOST_LINE {
            return Err(PmiError::TooLong);
        }
        Ok(requests)
    }

    /// Whether the rank speaks PMI-2 (its replies are frames).
    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// The `thrid` of each request the last [`push`](Self::push) returned, in order.
    pub fn thrids(&self) -> &[Option<String>] {
        &self.thrids
    }
}

/// One request line (without its newline).
pub fn parse(line: &str) -> Result<Request, PmiError> {
    if line.len() > MOST_LINE {
        return Err(PmiError::TooLong);
    }
    let (cmd, rest) = match line.trim_start().split_once(' ') {
        Some((first, rest)) => (first, rest),
        None => (line.trim(), ""),
    };
    let Some(cmd) = cmd.strip_prefix("cmd=") else {
        return Err(PmiError::NoCommand(line.chars().take(80).collect()));
    };
    if cmd == "abort" {
        return Ok(abort(rest));
    }
    let attributes = Attributes::of(rest);
    Ok(match cmd {
        "init" => Request::Init {
            version: attributes.number("init", "pmi_version")?,
            subversion: attributes.number("init", "pmi_subversion")?,
        },
        "get_maxes" => Request::GetMaxes,
        "get_universe_size" => Request::GetUniverseSize,
        "get_appnum" => Request::GetAppnum,
        "get_my_kvsname" => Request::GetMyKvsname,
        "put" => {
            // The value is last and runs to the line's end: Open MPI pads its
            // base64 with blanks, which split words would lose.
            let (before, value) = match rest.split_once(" value=") {
                Some((before, value)) => (before, Some(value)),
                None => (rest, attributes.get("value")),
            };
            Request::Put {
                key: Attributes::of(before).text("put", "key", MAXES.key)?,
                value: bounded("put", "value", value, MAXES.value)?,
            }
        }
        "get" => Request::Get {
            key: attributes.text("get", "key", MAXES.key)?,
        },
        "barrier_in" => Request::BarrierIn,
        "finalize" => Request::Finalize,
        "publish_name" => unsupported(cmd, "publish_result"),
        "unpublish_name" => unsupported(cmd, "unpublish_result"),
        "lookup_name" => unsupported(cmd, "lookup_result"),
        other => return Err(PmiError::Unknown(other.chars().take(64).collect())),
    })
}

fn unsupported(cmd: &str, reply: &'static str) -> Request {
    Request::Unsupported {
        cmd: cmd.to_owned(),
        reply,
    }
}

/// `abort`: `exitcode` (1 if missing or unreadable) and the rest of the line after
/// `message=`, which may hold spaces.
fn abort(rest: &str) -> Request {
    let (before, message) = match rest.split_once("message=") {
        Some((before, message)) => (before, Some(message.trim().to_owned())),
        None => (rest, None),
    };
    let exitcode = Attributes::of(before)
        .get("exitcode")
        .and_then(|code| code.parse().ok())
        .unwrap_or(1);
    Request::Abort { exitcode, message }
}

/// A request's `key=value` attributes.
struct Attributes<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Attributes<'a> {
    fn of(rest: &'a str) -> Attributes<'a> {
        Attributes(
            rest.split(' ')
                .filter(|word| !word.is_empty())
                .map(|word| word.split_once('=').unwrap_or((word, "")))
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn number(&self, cmd: &'static str, attribute: &'static str) -> Result<u32, PmiError> {
        self.get(attribute)
            .ok_or(PmiError::Missing { cmd, attribute })?
            .parse()
            .map_err(|_| PmiError::NotANumber { cmd, attribute })
    }

    fn text(
        &self,
        cmd: &'static str,
        attribute: &'static str,
        most: usize,
    ) -> Result<String, PmiError> {
        bounded(cmd, attribute, self.get(attribute), most)
    }
}

/// `attribute`'s `value` in request `cmd`: present, and within `most` bytes.
fn bounded(
    cmd: &'static str,
    attribute: &'static str,
    value: Option<&str>,
    most: usize,
) -> Result<String, PmiError> {
    let value = value.ok_or(PmiError::Missing { cmd, attribute })?;
    if value.len() > most {
        return Err(PmiError::Oversized {
            cmd,
            attribute,
            most,
        });
    }
    Ok(value.to_owned())
}

impl Reply {
    /// The reply's line, newline included.
    pub fn to_line(&self) -> String {
        match self {
            Reply::Init {
                version,
                subversion,
            } => format!(
                "cmd=response_to_init rc=0 pmi_version={version} pmi_subversion={subversion}\n"
            ),
            Reply::Maxes(maxes) => format!(
                "cmd=maxes rc=0 kvsname_max={} keylen_max={} vallen_max={}\n",
                maxes.kvsname, maxes.key, maxes.value
            ),
            Reply::UniverseSize(size) => format!("cmd=universe_size rc=0 size={size}\n"),
            Reply::Appnum(appnum) => format!("cmd=appnum rc=0 appnum={appnum}\n"),
            Reply::MyKvsname(name) => format!("cmd=my_kvsname rc=0 kvsname={name}\n"),
            Reply::PutResult => "cmd=put_result rc=0\n".to_owned(),
            Reply::GetResult(Some(value)) => format!("cmd=get_result rc=0 value={value}\n"),
            Reply::GetResult(None) => "cmd=get_result rc=-1 msg=key_not_found\n".to_owned(),
            Reply::BarrierOut => "cmd=barrier_out rc=0\n".to_owned(),
            Reply::FinalizeAck => "cmd=finalize_ack rc=0\n".to_owned(),
            // PMI-2 answers: no PMI-1 request asks for them.
            Reply::FullInit { .. }
            | Reply::JobAttr(_)
            | Reply::NodeAttr(_)
            | Reply::NodeAttrPut => "cmd=error rc=-1\n".to_owned(),
            Reply::Refused { reply, msg } => {
                // A message is one word on the wire.
                let msg: String = msg
                    .chars()
                    .map(|c| if c.is_whitespace() { '_' } else { c })
                    .collect();
                format!("cmd={reply} rc=-1 msg={msg}\n")
            }
        }
    }
}

#[cfg(test)]
mod tests;
