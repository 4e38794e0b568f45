//! An object read in place: its file mapped and its archive validated once, then
//! read as `T::Archived` with no copy. The crate's only `unsafe`: mapping a file,
//! and reading an archive already validated.

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::path::Path;

use rkyv::rancor;
use saker_core::ObjectId;

use super::{HEADER, MAGIC, ObjectError};
use crate::task::Data;

/// An object mapped from its node's store. Derefs to the archived value; see
/// [`Mapped::deserialize`] for an owned one.
pub struct Mapped<T: Data> {
    map: memmap2::Mmap,
    _value: PhantomData<fn() -> T>,
}

impl<T: Data> std::fmt::Debug for Mapped<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapped")
            .field("bytes", &self.map.len())
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

impl<T: Data> Mapped<T> {
    /// Maps `path` and validates it as an object of `T` (`fingerprint`).
    pub(crate) fn open(
        path: &Path,
        id: ObjectId,
        fingerprint: u64,
    ) -> Result<Mapped<T>, ObjectError> {
        let io = |source| ObjectError::Io {
            what: "read",
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: an object's file is written whole under another name and renamed
        // into place; nothing writes or truncates it after (a node moving it copies
        // it, then unlinks it, which leaves this mapping whole). The mapping is
        // private and read-only.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let invalid = |message: String| ObjectError::Invalid {
            id,
            path: path.to_owned(),
            message,
        };
        if map.len() < HEADER || &map[..4] != MAGIC {
            return Err(invalid("not a Rust object (bad header)".to_owned()));
        }
        if map[8..HEADER] != fingerprint.to_le_bytes() {
            return Err(ObjectError::TypeMismatch {
                id,
                expected: std::any::type_name::<T>(),
            });
        }
        rkyv::access::<T::Archived, rancor::Error>(&map[HEADER..])
            .map_err(|error| invalid(error.to_string()))?;
        Ok(Mapped {
            map,
            _value: PhantomData,
        })
    }

    /// The object as an owned value.
    pub fn deserialize(&self) -> Result<T, ObjectError> {
        rkyv::deserialize::<T, rancor::Error>(&**self).map_err(|error| ObjectError::Archive {
            message: error.to_string(),
        })
    }
}

impl<T: Data> std::ops::Deref for Mapped<T> {
    type Target = T::Archived;

    fn deref(&self) -> &T::Archived {
        // SAFETY: `open` validated these bytes as a `T::Archived` (rkyv's `access`),
        // and the mapping does not change while `self` lives.
        unsafe { rkyv::access_unchecked::<T::Archived>(&self.map[HEADER..]) }
    }
}
