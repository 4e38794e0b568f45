//! Typed tasks: the trait an application implements, and how a call of one travels
//! as a function task's payload (the worker kind `rust`, see `docs/rust-api.md`).
//!
//! A payload is a small header and an rkyv archive of the inputs:
//!
//! ```text
//! b"SKR1"  u64 fingerprint  u16 name length  name  u32 inputs  archive of Vec<Input>
//! ```
//!
//! or, for a call whose output stays on its node as an object (`submit_ref`),
//! `b"SKR2"` and the same with the object's id (`u128`) after `inputs`; its answer
//! is then the output's [`crate::Ref`].
//!
//! and a worker's answer is an archive of one [`Answer`] per input. The fingerprint
//! names the task's types; a worker built from another version of the program refuses
//! a call whose fingerprint differs from its own, and every archive is validated
//! before it is read, so a mismatch is a clear error and never undefined behaviour.

use std::future::Future;

use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;

/// What a task's input or output can be: a type rkyv can archive, validate and read
/// back. Derive it with `#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]`;
/// numbers, strings, vectors, options and tuples of such are already.
pub trait Data:
    Sized
    + rkyv::Archive<
        Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
                      + rkyv::Deserialize<Self, HighDeserializer<rancor::Error>>,
    > + for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>
    + for<'a> rkyv::Serialize<HighSerializer<FileWriter, ArenaHandle<'a>, rancor::Error>>
    + Send
    + 'static
{
}

impl<T> Data for T where
    T: rkyv::Archive<
            Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
                          + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
        > + for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>
        + for<'a> rkyv::Serialize<HighSerializer<FileWriter, ArenaHandle<'a>, rancor::Error>>
        + Send
        + 'static
{
}

/// Where an object is archived straight into its file (`Pilot::put`), no buffer of
/// the whole archive in between.
pub type FileWriter = rkyv::ser::writer::IoWriter<std::io::BufWriter<std::fs::File>>;

/// A kind of task: a named function from one [`Data`] type to another, run on the
/// pilot's workers (a process of the application's own binary on some node).
///
/// `run` is async; a blocking body is fine too (each worker runs one call at a time
/// on its own thread, and the call's slot holds the task's cores meanwhile).
///
/// ```
/// struct Square;
///
/// impl saker::Task for Square {
///     const NAME: &'static str = "square";
///     type Input = u64;
///     type Output = u64;
///
///     async fn run(x: u64) -> u64 {
///         x * x
///     }
/// }
/// ```
pub trait Task: 'static {
    /// Unique among the application's tasks: how a worker finds the code to run.
    const NAME: &'static str;
    /// Raise it when the meaning of the input or output changes without their types'
    /// names or sizes changing, so that old workers refuse new calls.
    const VERSION: u32 = 0;
    type Input: Data;
    type Output: Data;

    fn run(input: Self::Input) -> impl Future<Output = Self::Output> + Send;
}

/// How one input of a call ended on the worker.
#[derive(Debug, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) enum Answer<T> {
    Returned(T),
    Panicked(String),
}

/// The identity of a task's types, compared between driver and worker: a stable
/// FNV-1a hash of the name, the version, the types' names and their archived sizes
/// and alignments. Two builds of the same source agree; a change of either type's
/// name, path or archived layout, or of `VERSION`, disagrees.
pub(crate) fn fingerprint<T: Task>() -> u64 {
    type_fingerprint(
        &[T::NAME.as_bytes(), &T::VERSION.to_le_bytes()],
        &[type_shape::<T::Input>(), type_shape::<T::Output>()],
    )
}

/// A type's name and its archived size and alignment: what a fingerprint covers.
pub(crate) type TypeShape = (&'static str, usize, usize);

pub(crate) fn type_shape<T: rkyv::Archive>() -> TypeShape {
    (
        std::any::type_name::<T>(),
        size_of::<T::Archived>(),
        align_of::<T::Archived>(),
    )
}

/// FNV-1a over `parts` (the kind's name and version), then each type's shape.
pub(crate) fn type_fingerprint(parts: &[&[u8]], types: &[TypeShape]) -> u64 {
    let mut hash = Fnv::new();
    for part in parts {
        hash.write(part);
    }
    for (name, size, align) in types {
        hash.write(name.as_bytes());
        hash.write(&(*size as u64).to_le_bytes());
        hash.write(&(*align as u64).to_le_bytes());
    }
    hash.0
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }
}

const MAGIC: &[u8; 4] = b"SKR1";
const MAGIC_STORED: &[u8; 4] = b"SKR2";

/// Why a payload or an answer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("not a Saker task call (bad header)")]
    Header,
    #[error("the data does not validate as {what}: {message}")]
    Invalid { what: &'static str, message: String },
    #[error("could not archive {what}: {message}")]
    Archive { what: &'static str, message: String },
}

/// The header of a call, read by a worker before it knows the types.
#[derive(Debug)]
pub(crate) struct CallHeader<'a> {
    pub(crate) fingerprint: u64,
    pub(crate) name: &'a str,
    pub(crate) inputs: u32,
    /// The object the output is stored as, on the worker's node.
    pub(crate) store: Option<u128>,
    pub(crate) archive: &'a [u8],
}

/// A call of `T` on `inputs`, as a function task's payload; with `store`, its
/// output is kept on the worker's node as that object.
pub(crate) fn encode_call<T: Task>(
    inputs: &Vec<T::Input>,
    store: Option<u128>,
) -> Result<Vec<u8>, CodecError> {
    let archive = archive_slice(inputs, "the task's inputs")?;
    let name = T::NAME.as_bytes();
    let mut payload = Vec::with_capacity(4 + 8 + 2 + name.len() + 4 + 16 + archive.len());
    payload.extend_from_slice(if store.is_some() { MAGIC_STORED } else { MAGIC });
    payload.extend_from_slice(&fingerprint::<T>().to_le_bytes());
    payload.extend_from_slice(&(name.len() as u16).to_le_bytes());
    payload.extend_from_slice(name);
    payload.extend_from_slice(&(inputs.len() as u32).to_le_bytes());
    if let Some(object) = store {
        payload.extend_from_slice(&object.to_le_bytes());
    }
    payload.extend_from_slice(&archive);
    Ok(payload)
}

// A `&Vec`, not a slice: rkyv archives a sized root, read back as `ArchivedVec<T>`.
#[allow(clippy::ptr_arg)]
fn archive_slice<T: Data>(items: &Vec<T>, what: &'static str) -> Result<AlignedVec, CodecError> {
    rkyv::to_bytes::<rancor::Error>(items).map_err(|error| CodecError::Archive {
        what,
        message: error.to_string(),
    })
}

pub(crate) fn read_header(payload: &[u8]) -> Result<CallHeader<'_>, CodecError> {
    let take = |at: usize, n: usize| payload.get(at..at + n).ok_or(CodecError::Header);
    let stored = match take(0, 4)? {
        magic if magic == MAGIC => false,
        magic if magic == MAGIC_STORED => true,
        _ => return Err(CodecError::Header),
    };
    let fingerprint = u64::from_le_bytes(take(4, 8)?.try_into().expect("8 bytes"));
    let name_len = u16::from_le_bytes(take(12, 2)?.try_into().expect("2 bytes")) as usize;
    let name = std::str::from_utf8(take(14, name_len)?).map_err(|_| CodecError::Header)?;
    let at = 14 + name_len;
    let inputs = u32::from_le_bytes(take(at, 4)?.try_into().expect("4 bytes"));
    let mut at = at + 4;
    let store = if stored {
        let object = u128::from_le_bytes(take(at, 16)?.try_into().expect("16 bytes"));
        at += 16;
        Some(object)
    } else {
        None
    };
    Ok(CallHeader {
        fingerprint,
        name,
        inputs,
        store,
        archive: &payload[at..],
    })
}

/// Validates and reads an archived `Vec<T>` (a call's inputs or a worker's answers).
pub(crate) fn decode_vec<T: Data>(bytes: &[u8], what: &'static str) -> Result<Vec<T>, CodecError>
where
    rkyv::vec::ArchivedVec<T::Archived>: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
{
    // rkyv reads archives in place and needs them aligned: a payload arrives at any
    // address, so it is copied once into an aligned buffer.
    let mut aligned = AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(bytes);
    let archived = rkyv::access::<rkyv::vec::ArchivedVec<T::Archived>, rancor::Error>(&aligned)
        .map_err(|error| CodecError::Invalid {
            what,
            message: error.to_string(),
        })?;
    archived
        .iter()
        .map(|item| {
            rkyv::deserialize::<T, rancor::Error>(item).map_err(|error| CodecError::Invalid {
                what,
                message: error.to_string(),
            })
        })
        .collect()
}

/// A worker's answers, one per input.
#[allow(clippy::ptr_arg)]
pub(crate) fn encode_answers<O: Data>(answers: &Vec<Answer<O>>) -> Result<AlignedVec, CodecError> {
    archive_slice(answers, "the task's outputs")
}

pub(crate) fn decode_answers<O: Data>(bytes: &[u8]) -> Result<Vec<Answer<O>>, CodecError> {
    decode_vec::<Answer<O>>(bytes, "the task's outputs")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Square;
    impl Task for Square {
        const NAME: &'static str = "square";
        type Input = u64;
        type Output = u64;
        async fn run(x: u64) -> u64 {
            x * x
        }
    }

    struct Words;
    impl Task for Words {
        const NAME: &'static str = "square";
        type Input = String;
        type Output = u64;
        async fn run(x: String) -> u64 {
            x.len() as u64
        }
    }

    #[test]
    fn a_call_round_trips_through_its_payload() {
        for store in [None, Some(u128::MAX - 7)] {
            let payload = encode_call::<Square>(&vec![3, 4, 5], store).unwrap();
            let header = read_header(&payload).unwrap();
            assert_eq!(header.name, "square");
            assert_eq!(header.inputs, 3);
            assert_eq!(header.store, store);
            assert_eq!(header.fingerprint, fingerprint::<Square>());
            let inputs: Vec<u64> = decode_vec(header.archive, "inputs").unwrap();
            assert_eq!(inputs, vec![3, 4, 5]);
        }
        // A stored call cut short of its object id is refused, not misread.
        let payload = encode_call::<Square>(&vec![3], Some(1)).unwrap();
        assert!(read_header(&payload[..14 + 6 + 4 + 8]).is_err());
    }

    #[test]
    fn types_that_differ_have_different_fingerprints() {
        assert_ne!(fingerprint::<Square>(), fingerprint::<Words>());
    }

    #[test]
    fn answers_round_trip_and_garbage_is_refused() {
        let answers = vec![Answer::Returned(9u64), Answer::Panicked("boom".into())];
        let bytes = encode_answers(&answers).unwrap();
        let back: Vec<Answer<u64>> = decode_answers(&bytes).unwrap();
        assert!(matches!(back[0], Answer::Returned(9)));
        assert!(matches!(&back[1], Answer::Panicked(m) if m == "boom"));
        let garbage = vec![0xffu8; 64];
        assert!(decode_answers::<String>(&garbage).is_err());
        assert!(read_header(b"SKR").is_err());
        assert!(read_header(b"XXXX0000000000").is_err());
    }
}
