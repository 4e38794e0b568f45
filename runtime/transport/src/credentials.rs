//! The per-pilot certificate authority and the certificates it signs.
//!
//! At pilot creation [`Credentials::generate_into`] makes an ECDSA P-256 CA and
//! one certificate per [`Role`], all signed by that CA, and writes them as PEM
//! files (mode 0600) into the [`PilotDir`]:
//!
//! | file                        | contents                                                 |
//! |-----------------------------|----------------------------------------------------------|
//! | `ca.pem`                    | the pilot CA (trust anchor of every link)                |
//! | `root.pem` / `root.key`     | root: serves agent links and client sessions             |
//! | `agent.pem` / `agent.key`   | agents: dial their parent, serve their children          |
//! | `client.pem` / `client.key` | users' clients (CLI, Python, Parsl, Rust API): dial only |
//!
//! Each certificate carries its role as its one DNS name, `<role>.saker.pilot`
//! (see [`crate::roles`] for why a name): peers' addresses vary from allocation
//! to allocation, so identity is "signed by this pilot's CA, for this role", not
//! a host name. A certificate of one pilot is worthless to another.
//!
//! The CA's private key is never written: it signs the three certificates in
//! memory and is dropped, so nobody (not a task, not the user) can later mint a
//! certificate of any role for this pilot; whoever can read a role's key file has
//! that role and no other. Certificates use rcgen's default validity (1975 to
//! 4096): a pilot's lifetime is bounded by its CA, which dies with the directory.
//!
//! Directories written before certificates carried roles hold certificates named
//! only `saker.pilot` (and a `ca.key`). [`Credentials::load`] refuses them with
//! [`CredentialError::NoRole`]; a resumed root calls
//! [`Credentials::renew_if_outdated`], which replaces them with a new CA.

use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls::RootCertStore;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use crate::roles::Role;

use crate::crypto;
use crate::pilot_dir::{DirError, PilotDir};
use crate::roles;

/// File holding the pilot CA certificate. Written last: its presence marks a
/// complete credential set.
pub const CA_CERTIFICATE_FILE_NAME: &str = "ca.pem";

/// File holding the pilot CA private key in directories written before
/// certificate roles; no longer written, and removed when such a directory's
/// credentials are renewed.
pub const LEGACY_CA_KEY_FILE_NAME: &str = "ca.key";

/// Errors generating or loading credentials. File errors name the file.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// rcgen could not make a key or certificate.
    #[error("cannot generate the {what}")]
    Generate {
        /// What was being generated, e.g. "agent certificate".
        what: &'static str,
        /// The underlying failure.
        #[source]
        source: rcgen::Error,
    },
    /// [`Credentials::generate_into`] found existing credentials.
    #[error("{} already exists; refusing to replace the pilot's credentials", path.display())]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// Writing a credential file failed.
    #[error("cannot write pilot credentials")]
    Write(#[source] DirError),
    /// A credential file is missing.
    #[error("missing credential file {}", path.display())]
    Missing {
        /// The expected file.
        path: PathBuf,
    },
    /// A credential file could not be read.
    #[error("cannot read credential file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// A credential file is not PEM of the expected kind.
    #[error("credential file {} is not a valid {expected}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What it should hold, e.g. "PEM certificate".
        expected: &'static str,
        /// The parse failure.
        #[source]
        source: pem::Error,
    },
    /// The CA certificate is not usable as a trust anchor.
    #[error("credential file {} is not a usable ca certificate", path.display())]
    InvalidCaCertificate {
        /// The file.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: rustls::Error,
    },
    /// The private key cannot be used for signing.
    #[error("credential file {} holds an unusable private key", path.display())]
    UnusableKey {
        /// The file.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: rustls::Error,
    },
    /// The certificate carries no role: it was written by a saker older than
    /// certificate roles (or is not a saker certificate at all).
    #[error(
        "certificate {} carries no saker role: the pilot was created by an older saker; \
         resume it with this one (which renews its credentials) or start a new pilot",
        path.display()
    )]
    NoRole {
        /// The certificate file.
        path: PathBuf,
    },
    /// The certificate carries another role than the file it is in is for.
    #[error("certificate {} is a {found} certificate, not the {expected} certificate", path.display())]
    WrongRole {
        /// The certificate file.
        path: PathBuf,
        /// The role the file is for.
        expected: Role,
        /// The role the certificate carries.
        found: Role,
    },
    /// A certificate could not be parsed to read its role.
    #[error("credential file {} is not a parsable certificate", path.display())]
    Unparsable {
        /// The file.
        path: PathBuf,
        /// The parse failure.
        #[source]
        source: rustls::Error,
    },
    /// An outdated credential file could not be removed while renewing.
    #[error("cannot remove outdated credential file {}", path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// The private key does not belong to the certificate.
    #[error("private key {} does not match certificate {}", key.display(), certificate.display())]
    KeyMismatch {
        /// The certificate file.
        certificate: PathBuf,
        /// The key file.
        key: PathBuf,
        /// The underlying failure.
        #[source]
        source: rustls::Error,
    },
}

/// What [`Credentials::renew_if_outdated`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The credentials are current; nothing was changed.
    Current,
    /// They were replaced by a new CA and new certificates.
    Renewed(Outdated),
}

/// Why a pilot directory's credentials were renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outdated {
    /// Written before certificates carried roles.
    NoRoles,
    /// No `ca.pem`: an earlier generation or renewal was interrupted.
    Incomplete,
}

/// One role's identity plus the pilot's trust anchor: everything a TLS config needs.
pub struct Credentials {
    role: Role,
    certificate_chain: Vec<CertificateDer<'static>>,
    private_key: PrivateKeyDer<'static>,
    roots: Arc<RootCertStore>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Credentials")
            .field("role", &self.role)
            .field("certificates", &self.certificate_chain.len())
            .field("private_key", &"<redacted>")
            .field("roots", &self.roots.len())
            .finish()
    }
}

impl Clone for Credentials {
    fn clone(&self) -> Self {
        Credentials {
            role: self.role,
            certificate_chain: self.certificate_chain.clone(),
            private_key: self.private_key.clone_key(),
            roots: self.roots.clone(),
        }
    }
}

impl Credentials {
    /// Generates the pilot CA and every role's certificate into `pilot_dir`.
    ///
    /// Refuses if `ca.pem` already exists. `ca.pem` is written last, so an
    /// interrupted generation leaves no `ca.pem` and can simply be run again.
    pub fn generate_into(pilot_dir: &PilotDir) -> Result<(), CredentialError> {
        let ca_certificate_path = pilot_dir.file_path(CA_CERTIFICATE_FILE_NAME);
        match fs::symlink_metadata(&ca_certificate_path) {
            Ok(_) => {
                return Err(CredentialError::AlreadyExists {
                    path: ca_certificate_path,
                });
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(CredentialError::Read {
                    path: ca_certificate_path,
                    source,
                });
            }
        }
        let pilot_id = pilot_dir.pilot_id();
        let ca_key = generate_key("ca key")?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = rcgen::DistinguishedName::new();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("saker pilot {pilot_id} ca"));
        // Path length 0: the CA signs leaf certificates only, never another CA.
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_certificate =
            ca_params
                .self_signed(&ca_key)
                .map_err(|source| CredentialError::Generate {
                    what: "ca certificate",
                    source,
                })?;
        // The CA key signs below and is dropped with `issuer`: never written.
        let issuer = Issuer::new(ca_params, ca_key);

        for role in Role::ALL {
            let key = generate_key("role key")?;
            let mut params =
                CertificateParams::new(vec![role.dns_name().to_owned()]).map_err(|source| {
                    CredentialError::Generate {
                        what: "certificate parameters",
                        source,
                    }
                })?;
            params.distinguished_name = rcgen::DistinguishedName::new();
            params
                .distinguished_name
                .push(DnType::CommonName, format!("saker pilot {pilot_id} {role}"));
            params.is_ca = IsCa::ExplicitNoCa;
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = if role.can_serve() {
                vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ]
            } else {
                vec![ExtendedKeyUsagePurpose::ClientAuth]
            };
            params.use_authority_key_identifier_extension = true;
            let certificate =
                params
                    .signed_by(&key, &issuer)
                    .map_err(|source| CredentialError::Generate {
                        what: "role certificate",
                        source,
                    })?;
            write(pilot_dir, role.key_file_name(), key.serialize_pem())?;
            write(pilot_dir, role.certificate_file_name(), certificate.pem())?;
        }
        write(pilot_dir, CA_CERTIFICATE_FILE_NAME, ca_certificate.pem())?;
        tracing::debug!(pilot_id = %pilot_id, "generated pilot credentials");
        Ok(())
    }

    /// Makes the credentials of an existing pilot directory usable by this
    /// version, for a root resuming it: when they predate certificate roles, or
    /// their generation was interrupted (no `ca.pem`), they are replaced by a new
    /// CA and new certificates (and a legacy `ca.key` is removed). Anything else
    /// wrong with them is an error, not silently repaired.
    ///
    /// Renewing is safe only because a resumed root starts its own agents: no
    /// process keeps using the old certificates except clients of the old root,
    /// which is gone; they load the new ones when they connect again.
    pub fn renew_if_outdated(pilot_dir: &PilotDir) -> Result<Renewal, CredentialError> {
        let ca_path = pilot_dir.file_path(CA_CERTIFICATE_FILE_NAME);
        let mut outdated = None;
        for role in Role::ALL {
            match Credentials::load(pilot_dir, role) {
                Ok(_) => {}
                Err(CredentialError::NoRole { .. }) => outdated = Some(Outdated::NoRoles),
                Err(CredentialError::Missing { path }) if path == ca_path => {
                    outdated = Some(Outdated::Incomplete);
                    break;
                }
                Err(error) => return Err(error),
            }
        }
        let Some(outdated) = outdated else {
            return Ok(Renewal::Current);
        };
        // ca.pem first: until the new one is written last, the set reads as
        // incomplete, so an interrupted renewal is simply renewed again.
        for file_name in [CA_CERTIFICATE_FILE_NAME, LEGACY_CA_KEY_FILE_NAME] {
            let path = pilot_dir.file_path(file_name);
            match fs::remove_file(&path) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => {
                    return Err(CredentialError::Remove {
                        path,
                        source: error,
                    });
                }
                _ => {}
            }
        }
        Credentials::generate_into(pilot_dir)?;
        tracing::info!(pilot_id = %pilot_dir.pilot_id(), ?outdated, "renewed pilot credentials");
        Ok(Renewal::Renewed(outdated))
    }

    /// Loads `role`'s certificate and key and the pilot CA from `pilot_dir`.
    ///
    /// Checks that the key parses and matches the certificate and that the
    /// certificate carries `role`, so a broken or outdated file is reported here,
    /// naming it, rather than as a handshake failure later.
    pub fn load(pilot_dir: &PilotDir, role: Role) -> Result<Credentials, CredentialError> {
        let ca_path = pilot_dir.file_path(CA_CERTIFICATE_FILE_NAME);
        let ca_certificate: CertificateDer<'static> = parse_pem(&ca_path, "PEM certificate")?;
        let mut roots = RootCertStore::empty();
        roots
            .add(ca_certificate)
            .map_err(|source| CredentialError::InvalidCaCertificate {
                path: ca_path,
                source,
            })?;

        let certificate_path = pilot_dir.file_path(role.certificate_file_name());
        let certificate: CertificateDer<'static> = parse_pem(&certificate_path, "PEM certificate")?;
        match roles::role_of(&certificate) {
            Ok(Some(found)) if found == role => {}
            Ok(Some(found)) => {
                return Err(CredentialError::WrongRole {
                    path: certificate_path,
                    expected: role,
                    found,
                });
            }
            Ok(None) => {
                return Err(CredentialError::NoRole {
                    path: certificate_path,
                });
            }
            Err(source) => {
                return Err(CredentialError::Unparsable {
                    path: certificate_path,
                    source,
                });
            }
        }
        let key_path = pilot_dir.file_path(role.key_file_name());
        let private_key: PrivateKeyDer<'static> = parse_pem(&key_path, "PEM private key")?;

        let signing_key = crypto::provider()
            .key_provider
            .load_private_key(private_key.clone_key())
            .map_err(|source| CredentialError::UnusableKey {
                path: key_path.clone(),
                source,
            })?;
        CertifiedKey::new(vec![certificate.clone()], signing_key)
            .keys_match()
            .map_err(|source| CredentialError::KeyMismatch {
                certificate: certificate_path,
                key: key_path,
                source,
            })?;

        Ok(Credentials {
            role,
            certificate_chain: vec![certificate],
            private_key,
            roots: Arc::new(roots),
        })
    }

    /// The role these credentials were loaded for.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The role's certificate chain, end-entity first (the CA is not included:
    /// peers hold it as their trust anchor).
    pub fn certificate_chain(&self) -> &[CertificateDer<'static>] {
        &self.certificate_chain
    }

    /// The role's private key.
    pub fn private_key(&self) -> &PrivateKeyDer<'static> {
        &self.private_key
    }

    /// Trust anchors: exactly the pilot CA.
    pub fn roots(&self) -> &Arc<RootCertStore> {
        &self.roots
    }
}

fn generate_key(what: &'static str) -> Result<KeyPair, CredentialError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|source| CredentialError::Generate { what, source })
}

fn write(pilot_dir: &PilotDir, file_name: &str, contents: String) -> Result<(), CredentialError> {
    pilot_dir
        .write_secret_file(file_name, contents.as_bytes())
        .map(drop)
        .map_err(CredentialError::Write)
}

fn parse_pem<T: PemObject>(path: &PathBuf, expected: &'static str) -> Result<T, CredentialError> {
    let contents = match fs::read(path) {
        Ok(contents) => contents,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(CredentialError::Missing { path: path.clone() });
        }
        Err(source) => {
            return Err(CredentialError::Read {
                path: path.clone(),
                source,
            });
        }
    };
    T::from_pem_slice(&contents).map_err(|source| CredentialError::Pem {
        path: path.clone(),
        expected,
        source,
    })
}
