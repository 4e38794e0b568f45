//! Certificate roles: which process a certificate belongs to, and the check every
//! server end of a link makes.
//!
//! # How a certificate carries its role
//!
//! Each certificate the pilot CA signs carries exactly one DNS name in its subject
//! alternative names, `<role>.saker.pilot` ([`Role::dns_name`]): `root.saker.pilot`,
//! `agent.saker.pilot` or `client.saker.pilot`. Only the pilot CA's signature makes
//! that name mean anything, so a verifier needs nothing but the CA to read it.
//!
//! A name rather than a custom Extended Key Usage, because the name is checked by the
//! one check every TLS stack already makes: a client verifies the server against the
//! name it dials. An agent dialing the root asks for `root.saker.pilot`, one dialing
//! another agent asks for `agent.saker.pilot`, and every client (Rust, Python's `ssl`,
//! anything else) asks for `root.saker.pilot`, so the server's role is checked with
//! no code of ours. For client certificates, which TLS does not match against a name,
//! [`RoleVerifier`] reads the same name with rustls' own parser after the normal
//! chain check. Role names in SANs are also what Consul and Nomad use for their
//! server/client certificates. A custom EKU would need a private OID, a parser of our
//! own, and would be invisible to Python's `ssl`.
//!
//! # Who may open what
//!
//! | link                               | the server admits | the dialer accepts            |
//! |------------------------------------|-------------------|-------------------------------|
//! | QUIC agent link (root or agent)    | agent only        | root (dialing the root) or agent (dialing an agent) |
//! | QUIC data connection (an agent)    | agent only        | agent                         |
//! | client session (TCP+TLS at root)   | client only       | root only                     |
//!
//! A refusal happens inside the TLS handshake: the peer gets an alert and a closed
//! connection, the server side gets [`RoleRefused`] (logged here at `warn`), and no
//! byte of the link's protocol is ever read from the peer.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::client::verify_server_name;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, OtherError};

/// Which certificate a process presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The pilot's root: serves agents and clients, may also connect out.
    Root,
    /// A node agent: connects to its parent and serves its children.
    Agent,
    /// A user's client (CLI, Python, Parsl): connects only.
    Client,
}

impl Role {
    /// Every role, in the order their certificates are generated.
    pub const ALL: [Role; 3] = [Role::Root, Role::Agent, Role::Client];

    /// Lowercase name, also the stem of the role's file names.
    pub fn name(self) -> &'static str {
        match self {
            Role::Root => "root",
            Role::Agent => "agent",
            Role::Client => "client",
        }
    }

    /// File holding the role's certificate (PEM).
    pub fn certificate_file_name(self) -> &'static str {
        match self {
            Role::Root => "root.pem",
            Role::Agent => "agent.pem",
            Role::Client => "client.pem",
        }
    }

    /// File holding the role's private key (PKCS#8 PEM).
    pub fn key_file_name(self) -> &'static str {
        match self {
            Role::Root => "root.key",
            Role::Agent => "agent.key",
            Role::Client => "client.key",
        }
    }

    /// Whether the role's certificate is valid for server authentication.
    pub fn can_serve(self) -> bool {
        match self {
            Role::Root | Role::Agent => true,
            Role::Client => false,
        }
    }

    /// The DNS name that carries the role in its certificate: `<role>.saker.pilot`.
    pub fn dns_name(self) -> &'static str {
        match self {
            Role::Root => "root.saker.pilot",
            Role::Agent => "agent.saker.pilot",
            Role::Client => "client.saker.pilot",
        }
    }

    /// [`Self::dns_name`] as the name a dialer verifies the server against.
    pub fn server_name(self) -> ServerName<'static> {
        // Each role name is a constant, valid DNS name.
        ServerName::try_from(self.dns_name()).expect("invariant: role names are valid dns names")
    }
}

impl fmt::Display for Role {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// The kind of connection a server end accepts, each with the one role it admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// A QUIC link from a child agent to its parent (the root or an agent).
    Agent,
    /// A session on the root's client socket (CLI, Python, Parsl, the Rust API).
    Client,
    /// An agent's endpoint: agent links from its children, and data connections
    /// from other agents and from clients on no node of the pilot. The certificate
    /// check admits both roles; the agent refuses a client that asks for a link once
    /// the handshake shows what it asked for ([`crate::quic::peer_role`]).
    AgentEndpoint,
}

impl LinkKind {
    /// Whether a certificate of `role` may open this kind of link.
    pub fn admits(self, role: Role) -> bool {
        match self {
            LinkKind::Agent => role == Role::Agent,
            LinkKind::Client => role == Role::Client,
            LinkKind::AgentEndpoint => matches!(role, Role::Agent | Role::Client),
        }
    }

    /// Whether a process of `role` may serve this kind of link.
    pub fn may_serve(self, role: Role) -> bool {
        match self {
            LinkKind::Agent => matches!(role, Role::Root | Role::Agent),
            LinkKind::Client => role == Role::Root,
            LinkKind::AgentEndpoint => role == Role::Agent,
        }
    }
}

impl fmt::Display for LinkKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            LinkKind::Agent => "an agent link",
            LinkKind::Client => "a client session",
            LinkKind::AgentEndpoint => "a connection to an agent",
        })
    }
}

/// A peer presented a valid certificate of this pilot, but of a role the link does
/// not admit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} cannot open {link}", presented_text(*presented))]
pub struct RoleRefused {
    /// What the peer tried to open.
    pub link: LinkKind,
    /// The role its certificate carries; `None` for a certificate with no role
    /// (written by a saker older than certificate roles).
    pub presented: Option<Role>,
}

fn presented_text(presented: Option<Role>) -> &'static str {
    match presented {
        Some(Role::Root) => "a root certificate",
        Some(Role::Agent) => "an agent certificate",
        Some(Role::Client) => "a client certificate",
        None => "a certificate with no saker role",
    }
}

impl RoleRefused {
    /// The refusal inside `error`'s chain, if that is why it failed. Looks through
    /// `io::Error` wrappers (tokio-rustls) and rustls' certificate errors.
    pub fn find<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a RoleRefused> {
        let mut cause = Some(error);
        while let Some(current) = cause {
            if let Some(found) = current.downcast_ref::<RoleRefused>() {
                return Some(found);
            }
            if let Some(found) = in_rustls(current.downcast_ref::<rustls::Error>()) {
                return Some(found);
            }
            let wrapped = current
                .downcast_ref::<std::io::Error>()
                .and_then(|io_error| io_error.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>());
            if let Some(found) = in_rustls(wrapped) {
                return Some(found);
            }
            cause = current.source();
        }
        None
    }
}

fn in_rustls(error: Option<&rustls::Error>) -> Option<&RoleRefused> {
    match error? {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            inner.downcast_ref::<RoleRefused>()
        }
        _ => None,
    }
}

/// The role `certificate` carries, read from its DNS names; `None` when it carries
/// none. Does not check the signature: call it on a certificate already verified
/// against the pilot CA (or on one's own).
pub fn role_of(certificate: &CertificateDer<'_>) -> Result<Option<Role>, rustls::Error> {
    let parsed = ParsedCertificate::try_from(certificate)?;
    Ok(Role::ALL
        .into_iter()
        .find(|role| verify_server_name(&parsed, &role.server_name()).is_ok()))
}

/// A client-certificate verifier that admits only the roles of one [`LinkKind`].
///
/// Delegates every standard check (chain to the pilot CA, validity, client-auth
/// purpose, handshake signatures) to rustls' webpki verifier, then reads the role.
#[derive(Debug)]
pub(crate) struct RoleVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    link: LinkKind,
}

impl RoleVerifier {
    pub(crate) fn new(inner: Arc<dyn ClientCertVerifier>, link: LinkKind) -> RoleVerifier {
        RoleVerifier { inner, link }
    }
}

impl ClientCertVerifier for RoleVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let presented = role_of(end_entity)?;
        if presented.is_some_and(|role| self.link.admits(role)) {
            return Ok(verified);
        }
        let refused = RoleRefused {
            link: self.link,
            presented,
        };
        // The peer's address is not known here; the accepting side logs it too.
        tracing::warn!(error = &refused as &dyn Error, "refused a peer certificate");
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(refused)),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }
}
