//! The PMI-1 wire, as a rank's side of it: one request line, one reply line.

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;

use crate::code;

/// The lengths the server allows (`get_maxes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maxes {
    pub kvsname: usize,
    pub key: usize,
    pub value: usize,
}

/// Why a call failed. No `thiserror`: the crate is compiled by bare `rustc`.
#[derive(Debug)]
pub enum Error {
    /// The socket failed or closed.
    Io(std::io::Error),
    /// The server answered something else than the call's reply.
    Unexpected { asked: String, reply: String },
    /// The server refused (`rc` other than 0).
    Refused { asked: String, reply: String },
    /// A key or value the wire cannot carry: too long, empty, or with blanks.
    Invalid { what: &'static str, code: i32 },
}

impl Error {
    /// The PMI-1 return code for this error.
    pub fn code(&self) -> i32 {
        match self {
            Error::Invalid { code, .. } => *code,
            _ => code::FAIL,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(error) => write!(f, "PMI socket: {error}"),
            Error::Unexpected { asked, reply } => {
                write!(f, "PMI server answered {reply:?} to {asked:?}")
            }
            Error::Refused { asked, reply } => write!(f, "PMI server refused {asked:?}: {reply:?}"),
            Error::Invalid { what, .. } => write!(f, "PMI: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(error: std::io::Error) -> Error {
        Error::Io(error)
    }
}

/// One reply line's `key=value` words; `value=` runs to the end of the line.
#[derive(Debug)]
struct Reply {
    line: String,
}

impl Reply {
    fn get(&self, key: &str) -> Option<&str> {
        if key == "value" {
            return self.line.split_once(" value=").map(|(_, value)| value);
        }
        self.line
            .split(' ')
            .filter_map(|word| word.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> Option<T> {
        self.get(key)?.parse().ok()
    }

    fn succeeded(&self) -> bool {
        self.get("rc").is_none_or(|rc| rc == "0")
    }
}

/// A rank's connection to its agent, initialized.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    pub rank: u32,
    pub size: u32,
    pub kvsname: String,
    pub maxes: Maxes,
    pub universe: u32,
    pub appnum: i32,
    clique: Option<Vec<u32>>,
}

impl Client {
    /// Says `init` on `stream` and asks what every rank asks once: the limits, the
    /// key space's name, the universe and the application number.
    pub fn init(stream: UnixStream, rank: u32, size: u32) -> Result<Client, Error> {
        let writer = stream.try_clone()?;
        let mut client = Client {
            reader: BufReader::new(stream),
            writer,
            rank,
            size,
            kvsname: String::new(),
            maxes: Maxes {
                kvsname: 0,
                key: 0,
                value: 0,
            },
            universe: size,
            appnum: 0,
            clique: None,
        };
        client.ask(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        )?;
        let maxes = client.ask("cmd=get_maxes", "maxes")?;
        let read = |key| {
            maxes.number(key).ok_or_else(|| Error::Unexpected {
                asked: "get_maxes".into(),
                reply: maxes.line.clone(),
            })
        };
        client.maxes = Maxes {
            kvsname: read("kvsname_max")?,
            key: read("keylen_max")?,
            value: read("vallen_max")?,
        };
        let name = client.ask("cmd=get_my_kvsname", "my_kvsname")?;
        client.kvsname = name.get("kvsname").unwrap_or_default().to_owned();
        let universe = client.ask("cmd=get_universe_size", "universe_size")?;
        client.universe = universe.number("size").unwrap_or(size);
        let appnum = client.ask("cmd=get_appnum", "appnum")?;
        client.appnum = appnum.number("appnum").unwrap_or(0);
        Ok(client)
    }

    /// Publishes `key` for every rank, visible after the next barrier.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.check_key(key)?;
        if value.len() > self.maxes.value {
            return Err(Error::Invalid {
                what: "value longer than vallen_max",
                code: code::ERR_INVALID_VAL_LENGTH,
            });
        }
        // Blanks are fine: a value runs to the end of its line (Open MPI pads
        // its base64 with them).
        if value.contains('\n') {
            return Err(Error::Invalid {
                what: "a value with a newline",
                code: code::ERR_INVALID_VAL,
            });
        }
        self.ask(
            &format!("cmd=put kvsname={} key={key} value={value}", self.kvsname),
            "put_result",
        )?;
        Ok(())
    }

    /// `key`'s value, if any rank put it before a barrier (or the server knows it,
    /// as `PMI_process_mapping`).
    pub fn get(&mut self, key: &str) -> Result<Option<String>, Error> {
        self.check_key(key)?;
        let line = format!("cmd=get kvsname={} key={key}", self.kvsname);
        let reply = self.exchange(&line, "get_result")?;
        Ok(match reply.succeeded() {
            true => Some(reply.get("value").unwrap_or_default().to_owned()),
            false => None,
        })
    }

    /// Waits for every rank; afterwards each sees every key put before it.
    pub fn barrier(&mut self) -> Result<(), Error> {
        self.ask("cmd=barrier_in", "barrier_out").map(drop)
    }

    /// The ranks on this rank's node, from the server's process mapping.
    pub fn clique(&mut self) -> Result<&[u32], Error> {
        if self.clique.is_none() {
            let mapping = self.get("PMI_process_mapping")?.unwrap_or_default();
            self.clique = Some(crate::mapping::clique(&mapping, self.rank, self.size));
        }
        Ok(self.clique.as_deref().unwrap_or_default())
    }

    /// Says goodbye; the server closes the rank's PMI after its answer.
    pub fn finalize(&mut self) -> Result<(), Error> {
        self.ask("cmd=finalize", "finalize_ack").map(drop)
    }

    /// Asks the server to end the whole job with `exitcode`, then waits, as MPICH's
    /// client does, until the agent ends this process with its group (or closes the
    /// socket, after which the caller exits).
    pub fn abort(&mut self, exitcode: i32, message: &str) {
        let message: String = message.chars().filter(|c| *c != '\n').collect();
        let line = format!("cmd=abort exitcode={exitcode} message={message}\n");
        if self.writer.write_all(line.as_bytes()).is_ok() {
            let mut rest = Vec::new();
            let _ = self.reader.read_to_end(&mut rest);
        }
    }

    fn check_key(&self, key: &str) -> Result<(), Error> {
        if key.is_empty() || key.contains(['\n', ' ', '=']) {
            return Err(Error::Invalid {
                what: "an empty key or one with a blank, newline or '='",
                code: code::ERR_INVALID_KEY,
            });
        }
        if key.len() > self.maxes.key {
            return Err(Error::Invalid {
                what: "key longer than keylen_max",
                code: code::ERR_INVALID_KEY_LENGTH,
            });
        }
        Ok(())
    }

    /// Sends `line`, reads the reply named `expect`, and fails on a refusal.
    fn ask(&mut self, line: &str, expect: &str) -> Result<Reply, Error> {
        let reply = self.exchange(line, expect)?;
        if !reply.succeeded() {
            return Err(Error::Refused {
                asked: line.to_owned(),
                reply: reply.line,
            });
        }
        Ok(reply)
    }

    /// Sends `line`, reads the reply named `expect`, refused or not.
    fn exchange(&mut self, line: &str, expect: &str) -> Result<Reply, Error> {
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply)? == 0 {
            return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        let reply = Reply {
            line: reply.trim_end_matches('\n').to_owned(),
        };
        let cmd = reply.line.split(' ').next().unwrap_or_default();
        if cmd.strip_prefix("cmd=") != Some(expect) {
            return Err(Error::Unexpected {
                asked: line.to_owned(),
                reply: reply.line,
            });
        }
        Ok(reply)
    }
}

#[cfg(test)]
mod tests;
