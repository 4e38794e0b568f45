//! The PMI-1 C API (MPICH's `pmi.h`) over [`Client`]: the crate's only `unsafe`,
//! which is reading and writing the caller's pointers and taking over `PMI_FD`.
//!
//! One client per process, behind a lock: PMI-1 callers are single-threaded in
//! practice, and a lock costs nothing beside a socket round trip.

use std::ffi::{CStr, c_char, c_int};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, MutexGuard};

use crate::client::{Client, Error};
use crate::code;

static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

fn client() -> MutexGuard<'static, Option<Client>> {
    CLIENT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `f` on the initialized client, as a PMI return code.
fn with(f: impl FnOnce(&mut Client) -> Result<(), Error>) -> c_int {
    match client().as_mut() {
        None => code::ERR_INIT,
        Some(client) => match f(client) {
            Ok(()) => code::SUCCESS,
            Err(error) => error.code(),
        },
    }
}

fn variable(name: &str) -> Option<u32> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Writes `value` to `out` unless it is null.
fn put_int(out: *mut c_int, value: i64) -> c_int {
    if out.is_null() {
        return code::ERR_INVALID_ARG;
    }
    let Ok(value) = c_int::try_from(value) else {
        return code::FAIL;
    };
    // SAFETY: the caller passes a pointer to an int (pmi.h), checked non-null.
    unsafe { out.write(value) };
    code::SUCCESS
}

/// Copies `text` and its NUL into `out`, which holds `length` bytes.
fn put_text(out: *mut c_char, length: c_int, text: &str) -> c_int {
    if out.is_null() {
        return code::ERR_INVALID_ARG;
    }
    if usize::try_from(length).map_or(true, |length| text.len() >= length) {
        return code::ERR_INVALID_LENGTH;
    }
    // SAFETY: `out` holds `length` bytes (pmi.h), more than `text` and its NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast::<u8>(), text.len());
        out.add(text.len()).write(0);
    }
    code::SUCCESS
}

/// The caller's string, if non-null and UTF-8 (PMI keys and values are ASCII).
fn text<'a>(pointer: *const c_char) -> Option<&'a str> {
    if pointer.is_null() {
        return None;
    }
    // SAFETY: pmi.h's strings are NUL-terminated and outlive the call.
    unsafe { CStr::from_ptr(pointer) }.to_str().ok()
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Init(spawned: *mut c_int) -> c_int {
    let mut held = client();
    if held.is_none() {
        let (Some(fd), Some(rank), Some(size)) = (
            variable("PMI_FD"),
            variable("PMI_RANK"),
            variable("PMI_SIZE"),
        ) else {
            return code::ERR_INIT;
        };
        let Ok(fd) = i32::try_from(fd) else {
            return code::ERR_INIT;
        };
        // SAFETY: PMI_FD names the socket the agent gave this process for PMI, to
        // be owned by its PMI client; nothing else in the process uses it.
        let stream = unsafe { UnixStream::from_raw_fd(fd) };
        match Client::init(stream, rank, size) {
            Ok(client) => *held = Some(client),
            Err(error) => {
                eprintln!("saker PMI: {error}");
                return error.code();
            }
        }
    }
    if spawned.is_null() {
        return code::SUCCESS;
    }
    put_int(spawned, variable("PMI_SPAWNED").unwrap_or(0).into())
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Initialized(initialized: *mut c_int) -> c_int {
    put_int(initialized, client().is_some().into())
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Finalize() -> c_int {
    match client().take() {
        None => code::SUCCESS,
        Some(mut client) => match client.finalize() {
            Ok(()) => code::SUCCESS,
            Err(error) => error.code(),
        },
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Abort(exit_code: c_int, message: *const c_char) -> c_int {
    let message = text(message).unwrap_or_default();
    if let Some(client) = client().as_mut() {
        client.abort(exit_code, message);
    }
    // Not served, or the agent closed the socket without ending this process.
    std::process::exit(if exit_code == 0 { 1 } else { exit_code })
}

/// What `pick` reads of the initialized client, written to `out`.
fn get_int(out: *mut c_int, pick: impl Fn(&Client) -> i64) -> c_int {
    let value = client().as_ref().map(pick);
    value.map_or(code::ERR_INIT, |value| put_int(out, value))
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Get_size(size: *mut c_int) -> c_int {
    get_int(size, |client| client.size.into())
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Get_rank(rank: *mut c_int) -> c_int {
    get_int(rank, |client| client.rank.into())
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Get_universe_size(size: *mut c_int) -> c_int {
    get_int(size, |client| client.universe.into())
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Get_appnum(appnum: *mut c_int) -> c_int {
    get_int(appnum, |client| client.appnum.into())
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Barrier() -> c_int {
    with(Client::barrier)
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_KVS_Get_my_name(kvsname: *mut c_char, length: c_int) -> c_int {
    let name = client().as_ref().map(|client| client.kvsname.clone());
    name.map_or(code::ERR_INIT, |name| put_text(kvsname, length, &name))
}

/// The server's limit, as MPICH's client reports it (Open MPI sizes its chunks of
/// encoded values by it, so one more would overrun the server's).
fn max_length(out: *mut c_int, pick: impl Fn(&crate::Maxes) -> usize) -> c_int {
    get_int(out, |client| pick(&client.maxes) as i64)
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_KVS_Get_name_length_max(length: *mut c_int) -> c_int {
    max_length(length, |maxes| maxes.kvsname)
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_KVS_Get_key_length_max(length: *mut c_int) -> c_int {
    max_length(length, |maxes| maxes.key)
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_KVS_Get_value_length_max(length: *mut c_int) -> c_int {
    max_length(length, |maxes| maxes.value)
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_KVS_Put(
    _kvsname: *const c_char,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    let (Some(key), Some(value)) = (text(key), text(value)) else {
        return code::ERR_INVALID_ARG;
    };
    with(|client| client.put(key, value))
}

/// Puts go to the agent as they are made; a commit has nothing left to send.
#[unsafe(no_mangle)]
pub extern "C" fn PMI_KVS_Commit(_kvsname: *const c_char) -> c_int {
    with(|_| Ok(()))
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_KVS_Get(
    _kvsname: *const c_char,
    key: *const c_char,
    value: *mut c_char,
    length: c_int,
) -> c_int {
    let Some(key) = text(key) else {
        return code::ERR_INVALID_ARG;
    };
    let found = match client().as_mut().map(|client| client.get(key)) {
        None => return code::ERR_INIT,
        Some(Err(error)) => return error.code(),
        Some(Ok(found)) => found,
    };
    match found {
        Some(found) => put_text(value, length, &found),
        None => code::ERR_INVALID_KEY,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Get_clique_size(size: *mut c_int) -> c_int {
    let count = match client()
        .as_mut()
        .map(|client| client.clique().map(<[u32]>::len))
    {
        None => return code::ERR_INIT,
        Some(Err(error)) => return error.code(),
        Some(Ok(count)) => count,
    };
    put_int(size, count as i64)
}

#[unsafe(no_mangle)]
pub extern "C" fn PMI_Get_clique_ranks(ranks: *mut c_int, length: c_int) -> c_int {
    let clique = match client()
        .as_mut()
        .map(|client| client.clique().map(<[u32]>::to_vec))
    {
        None => return code::ERR_INIT,
        Some(Err(error)) => return error.code(),
        Some(Ok(clique)) => clique,
    };
    if ranks.is_null() {
        return code::ERR_INVALID_ARG;
    }
    if usize::try_from(length).map_or(true, |length| length < clique.len()) {
        return code::ERR_INVALID_LENGTH;
    }
    for (at, rank) in clique.iter().enumerate() {
        // SAFETY: `ranks` holds `length` ints (pmi.h), at least `clique.len()`.
        unsafe { ranks.add(at).write(*rank as c_int) };
    }
    code::SUCCESS
}

/// PMI-1's process id: the rank, as MPICH's simple client answers.
#[unsafe(no_mangle)]
pub extern "C" fn PMI_Get_id(id: *mut c_char, length: c_int) -> c_int {
    let rank = client().as_ref().map(|client| client.rank);
    rank.map_or(code::ERR_INIT, |rank| {
        put_text(id, length, &rank.to_string())
    })
}
