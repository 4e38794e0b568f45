//! Saker's transport: authenticated links between the processes of one pilot.
//!
//! # What it owns
//!
//! - the **pilot directory** ([`PilotDir`]): a 0700 directory marked by
//!   `saker-pilot.json`, where secrets are written 0600, atomically;
//! - the **per-pilot CA** and the root / agent / client certificates it signs
//!   ([`Credentials`]), generated with rcgen when the pilot is created, each
//!   carrying its [`Role`], and the check of that role on every link ([`roles`]);
//! - **QUIC links** ([`quic`]): quinn endpoints with mutual TLS against the
//!   pilot CA, keep-alives and idle timeouts ([`LinkTimeouts`]);
//! - the **TLS-over-TCP** configs for the client socket used by non-Rust
//!   clients ([`tls`]);
//! - **frame I/O** on any of those streams ([`FrameReader`], [`FrameWriter`]),
//!   including raw forwarding of a frame by an interior agent ([`Frame::raw`]);
//! - the workspace's single **crypto provider**, *ring* ([`crypto`]).
//!
//! # What it must never do
//!
//! Decode message payloads (that is saker-wire's job, and interior agents
//! must be able to forward without it), make scheduling decisions, or trust
//! anything a peer sends: every header is validated and sizes are checked
//! before allocating. It never consults system trust roots: a pilot trusts its
//! own CA and nothing else. It never picks a crypto provider implicitly.
//!
//! # Where to start reading
//!
//! [`pilot_dir`] → [`credentials`] → [`roles`] → [`quic`] (and [`tls`]) → [`stream`].
//! The tests in `tests/` show a full link: create a pilot, load two roles,
//! bind, connect, exchange frames.
//!
//! # Key decision: identity is the pilot CA, not a host name
//!
//! Agents start on whatever nodes Slurm hands out, behind addresses nobody
//! knows in advance, and a pilot lives for one allocation (or a chain of them
//! over the same directory). So instead of binding identity to host names or
//! to an external PKI, each pilot mints its own CA at creation, signs one
//! certificate per role with it, keeps those in a directory only the user can
//! read, and forgets the CA key. A peer is authentic exactly when its
//! certificate chains to this pilot's CA, and both ends of every link check
//! that (mutual TLS), which gives "only the user who started the pilot may talk
//! to it" without accounts, passwords or site infrastructure. Each certificate
//! names its role (`agent.saker.pilot`, …) and every link admits one role: a
//! client certificate cannot open an agent link, an agent certificate cannot
//! open a client session, and a second pilot of the same user cannot talk to
//! the first because its CA differs. The cost, one file-system secret per
//! pilot, is what a batch user already trusts for their SSH keys. The threat
//! model is in `docs/security.md`.

mod config;
pub mod credentials;
pub mod crypto;
pub mod pilot_dir;
pub mod quic;
pub mod roles;
pub mod stream;
#[cfg(feature = "test-support")]
pub mod test_support;
pub mod tls;

pub use config::{ALPN, ConfigError, DATA_ALPN};
pub use credentials::{CredentialError, Credentials, Outdated, Renewal, Role};
pub use crypto::install_crypto_provider;
pub use pilot_dir::{DirError, PilotDir, PilotId};
pub use quic::LinkTimeouts;
pub use roles::{LinkKind, RoleRefused};
pub use stream::{Frame, FrameReader, FrameWriter, StreamError};
