//! The pilot directory: where a pilot keeps its CA, certificates and endpoint files.
//!
//! A pilot directory is private to the user who created it (mode 0700) and is
//! recognised by a small marker file, [`MARKER_FILE_NAME`], holding the format
//! version and a random [`PilotId`]. Every file written through
//! [`PilotDir::write_secret_file`] is created with mode 0600 from the start and
//! moved into place atomically, so a reader sees either the old file or the
//! whole new one, and no other user ever sees a readable secret.
//!
//! # Ownership policy for an existing directory
//!
//! [`PilotDir::create`] accepts a directory that already exists (users often
//! `mkdir` it themselves, getting 0755) under two conditions:
//!
//! - it is not writable by group or others: in such a directory another user
//!   could already have planted or swapped files, so it is refused rather than
//!   repaired ([`DirError::WritableByOthers`]);
//! - its mode can be tightened to 0700. The kernel only lets the owner (or a
//!   privileged process) change a mode, so a successful `chmod` is also the
//!   ownership check; a refusal is reported as [`DirError::NotOwned`]. This
//!   avoids needing the process uid (and `libc`).
//!
//! [`PilotDir::open`] does not change anything: it requires the marker and a
//! mode with no group/other bits. Since a 0700 directory is only readable by
//! its owner, being able to read the marker of such a directory proves the
//! caller owns it.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Name of the marker file that makes a directory a Saker pilot directory.
pub const MARKER_FILE_NAME: &str = "saker-pilot.json";

/// The `format` value in the marker file.
const MARKER_FORMAT: &str = "saker-pilot";

/// Version of the pilot directory layout this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Mode of the pilot directory itself.
const DIRECTORY_MODE: u32 = 0o700;

/// Mode of every file written by [`PilotDir::write_secret_file`].
const SECRET_FILE_MODE: u32 = 0o600;

/// Random 128-bit identity of one pilot, shown as 32 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PilotId(u128);

impl PilotId {
    /// A fresh random id from the thread RNG (a CSPRNG seeded by the OS).
    pub fn random() -> PilotId {
        PilotId(rand::random())
    }

    /// The id as a number.
    pub fn as_u128(self) -> u128 {
        self.0
    }
}

impl From<u128> for PilotId {
    fn from(value: u128) -> Self {
        PilotId(value)
    }
}

impl fmt::Display for PilotId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:032x}", self.0)
    }
}

/// A string that is not 32 hex digits was given as a [`PilotId`].
#[derive(Debug, thiserror::Error)]
#[error("pilot id {text:?} is not 32 hexadecimal digits")]
pub struct ParsePilotIdError {
    /// The rejected text.
    pub text: String,
}

impl FromStr for PilotId {
    type Err = ParsePilotIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let well_formed = text.len() == 32 && text.bytes().all(|byte| byte.is_ascii_hexdigit());
        match u128::from_str_radix(text, 16) {
            Ok(value) if well_formed => Ok(PilotId(value)),
            _ => Err(ParsePilotIdError {
                text: text.to_owned(),
            }),
        }
    }
}

/// Contents of [`MARKER_FILE_NAME`].
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    format: String,
    version: u32,
    pilot_id: String,
}

/// Errors creating, opening or writing into a pilot directory.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// A parent of the pilot directory could not be created.
    #[error("cannot create parent directory {}", path.display())]
    CreateParent {
        /// The parent directory.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// The pilot directory itself could not be created.
    #[error("cannot create pilot directory {}", path.display())]
    CreateDirectory {
        /// The pilot directory.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// The path does not exist.
    #[error("pilot directory {} does not exist", path.display())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The path exists but is not a directory.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// Metadata of the directory or one of its files could not be read.
    #[error("cannot inspect {}", path.display())]
    Inspect {
        /// The path inspected.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// An existing directory is writable by group or others (see the module docs).
    #[error(
        "refusing to use {} as a pilot directory: it is writable by group or others (mode {mode:04o}); \
         another user may have placed files in it",
        path.display()
    )]
    WritableByOthers {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// An existing directory's mode could not be changed: we do not own it.
    #[error(
        "refusing to use {} as a pilot directory: it is owned by uid {owner_uid}, not by the current user",
        path.display()
    )]
    NotOwned {
        /// The directory.
        path: PathBuf,
        /// Uid of its owner.
        owner_uid: u32,
    },
    /// Changing the directory's mode to 0700 failed for another reason.
    #[error("cannot set mode 0700 on {}", path.display())]
    SetMode {
        /// The directory.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// [`PilotDir::create`] found a marker: the directory already holds a pilot.
    #[error("{} is already a saker pilot directory ({MARKER_FILE_NAME} exists); open it instead", path.display())]
    AlreadyPilotDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// [`PilotDir::open`] found no marker.
    #[error("{} is not a saker pilot directory: missing {missing}", path.display())]
    NotPilotDirectory {
        /// The directory.
        path: PathBuf,
        /// The file that was expected.
        missing: &'static str,
    },
    /// The marker file could not be read.
    #[error("cannot read {}", path.display())]
    ReadMarker {
        /// The marker file.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// The marker file is not the JSON this crate writes.
    #[error("{} is not a valid saker pilot marker", path.display())]
    CorruptMarker {
        /// The marker file.
        path: PathBuf,
        /// The parse failure.
        #[source]
        source: serde_json::Error,
    },
    /// The marker file is JSON but does not describe a Saker pilot.
    #[error("{} does not describe a saker pilot (format {format:?}, expected {MARKER_FORMAT:?})", path.display())]
    ForeignMarker {
        /// The marker file.
        path: PathBuf,
        /// The `format` found.
        format: String,
    },
    /// The marker's pilot id is malformed.
    #[error("{} holds a malformed pilot id", path.display())]
    CorruptPilotId {
        /// The marker file.
        path: PathBuf,
        /// The parse failure.
        #[source]
        source: ParsePilotIdError,
    },
    /// The directory was written by an incompatible version of Saker.
    #[error(
        "{} has pilot directory format version {found}; this build supports version {FORMAT_VERSION}",
        path.display()
    )]
    UnsupportedVersion {
        /// The marker file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
    /// [`PilotDir::open`] found group or other permission bits on the directory.
    #[error(
        "pilot directory {} is accessible by group or others (mode {mode:04o}); expected 0700",
        path.display()
    )]
    InsecurePermissions {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A file name given to [`PilotDir::write_secret_file`] is not a plain name.
    #[error("{name:?} is not a plain file name inside the pilot directory")]
    InvalidFileName {
        /// The rejected name.
        name: String,
    },
    /// Writing a secret file failed.
    #[error("cannot write {}", path.display())]
    WriteFile {
        /// The file being written (or its temporary sibling).
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
}

/// A validated pilot directory. Cheap to clone; holds no open files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PilotDir {
    path: PathBuf,
    pilot_id: PilotId,
}

impl PilotDir {
    /// Makes `path` a new pilot directory with a fresh [`PilotId`].
    ///
    /// Creates missing parents (with the default mode) and the directory itself
    /// with mode 0700. An existing directory is adopted under the policy in the
    /// module docs; one that already holds a marker is refused. Credentials are
    /// not generated here: see `Credentials::generate_into`.
    pub fn create(path: impl AsRef<Path>) -> Result<PilotDir, DirError> {
        let path = path.as_ref();
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            fs::create_dir_all(parent).map_err(|source| DirError::CreateParent {
                path: parent.to_owned(),
                source,
            })?;
        }
        match DirBuilder::new().mode(DIRECTORY_MODE).create(path) {
            // The umask may have removed owner bits; set the mode explicitly.
            // Nothing secret is in the directory yet, so chmod-after is safe here.
            Ok(()) => set_directory_mode(path)?,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => adopt_existing(path)?,
            Err(source) => {
                return Err(DirError::CreateDirectory {
                    path: path.to_owned(),
                    source,
                });
            }
        }
        let marker_path = path.join(MARKER_FILE_NAME);
        match fs::symlink_metadata(&marker_path) {
            Ok(_) => {
                return Err(DirError::AlreadyPilotDirectory {
                    path: path.to_owned(),
                });
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DirError::Inspect {
                    path: marker_path,
                    source,
                });
            }
        }
        let pilot_dir = PilotDir {
            path: path.to_owned(),
            pilot_id: PilotId::random(),
        };
        let marker = Marker {
            format: MARKER_FORMAT.to_owned(),
            version: FORMAT_VERSION,
            pilot_id: pilot_dir.pilot_id.to_string(),
        };
        // Serializing a struct of strings and integers cannot fail.
        let mut contents = serde_json::to_vec_pretty(&marker)
            .expect("invariant: the marker has only string and integer fields");
        contents.push(b'\n');
        pilot_dir.write_secret_file(MARKER_FILE_NAME, &contents)?;
        tracing::debug!(path = %path.display(), pilot_id = %pilot_dir.pilot_id, "created pilot directory");
        Ok(pilot_dir)
    }

    /// Opens an existing pilot directory, checking its marker and permissions.
    pub fn open(path: impl AsRef<Path>) -> Result<PilotDir, DirError> {
        let path = path.as_ref();
        let metadata = match fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(DirError::NotFound {
                    path: path.to_owned(),
                });
            }
            Err(source) => {
                return Err(DirError::Inspect {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        if !metadata.is_dir() {
            return Err(DirError::NotADirectory {
                path: path.to_owned(),
            });
        }
        let marker_path = path.join(MARKER_FILE_NAME);
        let contents = match fs::read(&marker_path) {
            Ok(contents) => contents,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(DirError::NotPilotDirectory {
                    path: path.to_owned(),
                    missing: MARKER_FILE_NAME,
                });
            }
            Err(source) => {
                return Err(DirError::ReadMarker {
                    path: marker_path,
                    source,
                });
            }
        };
        let marker: Marker =
            serde_json::from_slice(&contents).map_err(|source| DirError::CorruptMarker {
                path: marker_path.clone(),
                source,
            })?;
        if marker.format != MARKER_FORMAT {
            return Err(DirError::ForeignMarker {
                path: marker_path,
                format: marker.format,
            });
        }
        if marker.version != FORMAT_VERSION {
            return Err(DirError::UnsupportedVersion {
                path: marker_path,
                found: marker.version,
            });
        }
        let pilot_id = marker
            .pilot_id
            .parse()
            .map_err(|source| DirError::CorruptPilotId {
                path: marker_path,
                source,
            })?;
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(DirError::InsecurePermissions {
                path: path.to_owned(),
                mode,
            });
        }
        Ok(PilotDir {
            path: path.to_owned(),
            pilot_id,
        })
    }

    /// The directory's path, as given to `create` or `open`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pilot's identity, from the marker file.
    pub fn pilot_id(&self) -> PilotId {
        self.pilot_id
    }

    /// Path of `file_name` inside the directory (no check that it exists).
    pub fn file_path(&self, file_name: &str) -> PathBuf {
        self.path.join(file_name)
    }

    /// Writes `contents` to `file_name` in the directory with mode 0600, atomically.
    ///
    /// The data goes to a temporary sibling created with mode 0600 (never a
    /// chmod after the fact), is synced, and is renamed over `file_name`; the
    /// directory is then synced so the rename survives a crash. Returns the
    /// final path.
    pub fn write_secret_file(&self, file_name: &str, contents: &[u8]) -> Result<PathBuf, DirError> {
        let is_plain_name = !file_name.is_empty()
            && file_name != "."
            && file_name != ".."
            && !file_name.contains('/')
            && !file_name.contains('\0');
        if !is_plain_name {
            return Err(DirError::InvalidFileName {
                name: file_name.to_owned(),
            });
        }
        let final_path = self.path.join(file_name);
        let temporary_path = self
            .path
            .join(format!(".{file_name}.tmp-{:016x}", rand::random::<u64>()));
        let write_error = |path: &Path, source: io::Error| DirError::WriteFile {
            path: path.to_owned(),
            source,
        };
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(SECRET_FILE_MODE)
            .open(&temporary_path)
            .and_then(|mut file| {
                file.write_all(contents)?;
                file.sync_all()
            });
        if let Err(source) = written {
            let _ = fs::remove_file(&temporary_path);
            return Err(write_error(&temporary_path, source));
        }
        if let Err(source) = fs::rename(&temporary_path, &final_path) {
            let _ = fs::remove_file(&temporary_path);
            return Err(write_error(&final_path, source));
        }
        File::open(&self.path)
            .and_then(|directory| directory.sync_all())
            .map_err(|source| write_error(&self.path, source))?;
        Ok(final_path)
    }
}

/// Applies the policy for a directory that already exists (see the module docs).
fn adopt_existing(path: &Path) -> Result<(), DirError> {
    let metadata = fs::metadata(path).map_err(|source| DirError::Inspect {
        path: path.to_owned(),
        source,
    })?;
    if !metadata.is_dir() {
        return Err(DirError::NotADirectory {
            path: path.to_owned(),
        });
    }
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(DirError::WritableByOthers {
            path: path.to_owned(),
            mode,
        });
    }
    match fs::set_permissions(path, fs::Permissions::from_mode(DIRECTORY_MODE)) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => Err(DirError::NotOwned {
            path: path.to_owned(),
            owner_uid: metadata.uid(),
        }),
        Err(source) => Err(DirError::SetMode {
            path: path.to_owned(),
            source,
        }),
    }
}

fn set_directory_mode(path: &Path) -> Result<(), DirError> {
    fs::set_permissions(path, fs::Permissions::from_mode(DIRECTORY_MODE)).map_err(|source| {
        DirError::SetMode {
            path: path.to_owned(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pilot_id_round_trips_through_text() {
        let id = PilotId::from(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let text = id.to_string();
        assert_eq!(text, "0123456789abcdef0011223344556677");
        assert_eq!(text.parse::<PilotId>().unwrap(), id);
    }

    #[test]
    fn pilot_id_rejects_wrong_length_and_signs() {
        assert!("abc".parse::<PilotId>().is_err());
        assert!(
            "+123456789abcdef0011223344556677"
                .parse::<PilotId>()
                .is_err()
        );
        assert!(
            "0123456789abcdef00112233445566778"
                .parse::<PilotId>()
                .is_err()
        );
    }
}
