//! The PMI-2 wire protocol, which Slurm's `libpmi2` (and through it MVAPICH, Intel
//! MPI, Open MPI's `s2`) and MPICH's own PMI-2 client speak. After a PMI-1 style
//! `cmd=init pmi_version=2` line and its answer, every message is a frame: six
//! characters of decimal length (of the body only, padded with spaces on either side:
//! Slurm pads on the right, Hydra on the left), then `cmd=NAME;key=value;...;` with
//! every pair ended by `;` and a `;` inside a value doubled. Replies are named
//! `<request>-response`, carry `rc` always, booleans as `TRUE`/`FALSE`, and echo a
//! `thrid` only when the request had one (a threaded client reads it as a pointer).
//! From MPICH's `doc/wiki/design/PMI_v2_Wire_Protocol.md`, checked against Slurm's
//! `contribs/pmi2` client.

use super::{MAXES, PmiError, Reply, Request, bounded};

/// The longest frame body read: a client never builds one longer.
pub const MOST_FRAME: usize = 64 * 1024;

/// The body of the first whole frame in `pending`, taken out of it; `None` until one
/// is whole.
pub(super) fn take_frame(pending: &mut Vec<u8>) -> Result<Option<String>, PmiError> {
    let Some(header) = pending.get(..6) else {
        return Ok(None);
    };
    let header = std::str::from_utf8(header).map_err(|_| PmiError::NotText)?;
    let len: usize = header
        .trim()
        .parse()
        .map_err(|_| PmiError::BadFrame(header.to_owned()))?;
    if len > MOST_FRAME {
        return Err(PmiError::FrameTooLong);
    }
    if pending.len() < 6 + len {
        return Ok(None);
    }
    let body: Vec<u8> = pending.drain(..6 + len).skip(6).collect();
    String::from_utf8(body)
        .map(Some)
        .map_err(|_| PmiError::NotText)
}

/// One frame's body: the request, and its `thrid` if it had one.
pub(super) fn parse(body: &str) -> Result<(Request, Option<String>), PmiError> {
    let pairs = pairs(body)?;
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let name = match pairs.first() {
        Some((key, cmd)) if key == "cmd" => cmd.as_str(),
        _ => return Err(PmiError::NoCommand(body.chars().take(80).collect())),
    };
    let Some(&(cmd, reply)) = KNOWN.iter().find(|(known, _)| *known == name) else {
        return Err(PmiError::Unknown(name.chars().take(64).collect()));
    };
    let text = |attribute, most| bounded(cmd, attribute, get(attribute), most);
    let request = match cmd {
        "fullinit" => Request::FullInit,
        "job-getid" => Request::GetMyKvsname,
        "info-getjobattr" => Request::GetJobAttr {
            key: text("key", MAXES.key)?,
        },
        "kvs-put" => Request::Put {
            key: text("key", MAXES.key)?,
            value: text("value", MAXES.value)?,
        },
        "kvs-fence" => Request::BarrierIn,
        // `jobid` and `srcid` are hints for jobs this server does not keep.
        "kvs-get" => Request::Get {
            key: text("key", MAXES.key)?,
        },
        "info-putnodeattr" => Request::PutNodeAttr {
            key: text("key", MAXES.key)?,
            value: text("value", MAXES.value)?,
        },
        "info-getnodeattr" => Request::GetNodeAttr {
            key: text("key", MAXES.key)?,
            wait: get("wait") == Some("TRUE"),
        },
        "finalize" => Request::Finalize,
        "abort" => Request::Abort {
            exitcode: 1,
            message: get("msg").map(str::to_owned),
        },
        _ => Request::Unsupported {
            cmd: cmd.to_owned(),
            reply,
        },
    };
    Ok((request, get("thrid").map(str::to_owned)))
}

/// Each request this module reads, by its name on the wire, and its reply's name
/// (static, so that requests and errors carry them without allocating).
const KNOWN: [(&str, &str); 18] = [
    ("fullinit", "fullinit-response"),
    ("job-getid", "job-getid-response"),
    ("info-getjobattr", "info-getjobattr-response"),
    ("kvs-put", "kvs-put-response"),
    ("kvs-fence", "kvs-fence-response"),
    ("kvs-get", "kvs-get-response"),
    ("info-putnodeattr", "info-putnodeattr-response"),
    ("info-getnodeattr", "info-getnodeattr-response"),
    ("finalize", "finalize-response"),
    ("abort", "abort-response"),
    ("name-publish", "name-publish-response"),
    ("name-unpublish", "name-unpublish-response"),
    ("name-lookup", "name-lookup-response"),
    ("job-connect", "job-connect-response"),
    ("job-disconnect", "job-disconnect-response"),
    ("spawn", "spawn-response"),
    ("ring", "ring-response"),
    ("job-getinfo", "job-getinfo-response"),
];

/// `key=value;` pairs, `;;` read as a `;` of the value.
fn pairs(body: &str) -> Result<Vec<(String, String)>, PmiError> {
    let mut pairs = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| PmiError::BadFrame(body.chars().take(80).collect()))?;
        let mut value = String::new();
        let mut chars = after.char_indices().peekable();
        let mut end = None;
        while let Some((at, c)) = chars.next() {
            if c != ';' {
                value.push(c);
            } else if chars.peek().is_some_and(|&(_, next)| next == ';') {
                chars.next();
                value.push(';');
            } else {
                end = Some(at);
                break;
            }
        }
        let end = end.ok_or_else(|| PmiError::BadFrame(body.chars().take(80).collect()))?;
        pairs.push((key.to_owned(), value));
        rest = &after[end + 1..];
    }
    Ok(pairs)
}

/// The frame (or, for `init`, the line) that answers a PMI-2 client with `reply`.
pub fn render(reply: &Reply, thrid: Option<&str>) -> String {
    let found = |value: &Option<String>| match value {
        Some(value) => format!("found=TRUE;value={};", escape(value)),
        None => "found=FALSE;".to_owned(),
    };
    let body = match reply {
        // Still a PMI-1 line: the client switches to frames after reading it.
        Reply::Init {
            version,
            subversion,
        } => {
            return format!(
                "cmd=response_to_init rc=0 pmi_version={version} pmi_subversion={subversion}\n"
            );
        }
        Reply::FullInit { rank, size, appnum } => format!(
            "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};\
             size={size};appnum={appnum};debugged=FALSE;pmiverbose=FALSE;"
        ),
        Reply::MyKvsname(name) => format!("cmd=job-getid-response;rc=0;jobid={};", escape(name)),
        Reply::PutResult => "cmd=kvs-put-response;rc=0;".to_owned(),
        Reply::BarrierOut => "cmd=kvs-fence-response;rc=0;".to_owned(),
        Reply::GetResult(value) => format!("cmd=kvs-get-response;rc=0;{}", found(value)),
        Reply::JobAttr(value) => format!("cmd=info-getjobattr-response;rc=0;{}", found(value)),
        Reply::NodeAttr(value) => format!("cmd=info-getnodeattr-response;rc=0;{}", found(value)),
        Reply::NodeAttrPut => "cmd=info-putnodeattr-response;rc=0;".to_owned(),
        Reply::FinalizeAck => "cmd=finalize-response;rc=0;".to_owned(),
        Reply::Refused { reply, msg } => format!("cmd={reply};rc=-1;errmsg={};", escape(msg)),
        // PMI-1 answers no PMI-2 request maps to.
        Reply::Maxes(_) | Reply::UniverseSize(_) | Reply::Appnum(_) => {
            "cmd=error-response;rc=-1;".to_owned()
        }
    };
    let thrid = thrid.map_or_else(String::new, |thrid| format!("thrid={};", escape(thrid)));
    let body = format!("{body}{thrid}");
    format!("{:<6}{body}", body.len())
}

fn escape(value: &str) -> String {
    value.replace(';', ";;")
}

#[cfg(test)]
mod tests;
