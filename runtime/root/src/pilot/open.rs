//! The first step of a pilot: its directory. A new pilot creates it (credentials,
//! lock); a resumed one opens it, takes the lock, reads the journal back and clears
//! what the previous root left; a standby waits for the lock first, fencing a root
//! that answers nothing.

use saker_actors::node::{Position, address_file};
use saker_transport::credentials::Credentials;
use saker_transport::pilot_dir::PilotDir;

use super::{JOURNAL_DIR, PilotOptions, Result};
use crate::error::PilotError;
use crate::lock::RootLock;
use crate::notice::{Notice, Notices};
use crate::records::Record;
use saker_client::ClientEndpoint;

/// The pilot directory, held, with what its journal says (nothing for a new pilot).
#[derive(Debug)]
pub(super) struct Opened {
    pub(super) dir: PilotDir,
    pub(super) lock: RootLock,
    pub(super) history: Vec<Record>,
    pub(super) positions: Vec<saker_journal::Position>,
}

/// Creates the pilot directory of `options`, or opens it to resume (or take over).
pub(super) async fn directory(options: &PilotOptions) -> Result<Opened> {
    if options.resume || options.take_over {
        resume(options).await
    } else {
        create(options)
    }
}

/// A new pilot's directory, with its certificates; refused if it holds a journal.
fn create(options: &PilotOptions) -> Result<Opened> {
    if options.dir.join(JOURNAL_DIR).exists() {
        return Err(PilotError::JournalExists {
            path: options.dir.clone(),
        });
    }
    let dir = PilotDir::create(&options.dir).map_err(|source| PilotError::CreateDir {
        path: options.dir.clone(),
        source,
    })?;
    let lock = RootLock::take(dir.path())?;
    Credentials::generate_into(&dir).map_err(PilotError::GenerateCredentials)?;
    Ok(Opened {
        dir,
        lock,
        history: Vec::new(),
        positions: Vec::new(),
    })
}

/// An existing pilot's directory and journal, its previous root's traces cleared.
async fn resume(options: &PilotOptions) -> Result<Opened> {
    let dir = PilotDir::open(&options.dir).map_err(|source| PilotError::OpenDir {
        path: options.dir.clone(),
        source,
    })?;
    let lock = if options.take_over {
        wait_as_standby(&dir, options).await?
    } else {
        let lock = RootLock::take(dir.path())?;
        crate::lock::clear_stopped(dir.path());
        lock
    };
    let journal_dir = options.dir.join(JOURNAL_DIR);
    let history = saker_journal::read_all::<Record>(&journal_dir).map_err(|source| {
        PilotError::ReadJournal {
            path: journal_dir.clone(),
            source,
        }
    })?;
    if let Some(torn) = &history.torn_tail {
        tracing::warn!(segment = %torn.segment.display(), offset = torn.offset,
            "ignoring a torn last journal record (the previous root stopped mid-write)");
    }
    // Addresses of the previous root, its agents and its client socket are stale; a
    // standby's agents are alive and keep theirs.
    if options.take_over {
        let _ = std::fs::remove_file(address_file(dir.path(), Position::Root));
    } else {
        let _ = std::fs::remove_dir_all(dir.path().join("addr"));
    }
    let _ = ClientEndpoint::remove(&dir);
    renew_credentials(&dir, &options.notices)?;
    Ok(Opened {
        dir,
        lock,
        history: history.records,
        positions: history.positions,
    })
}

/// A standby's wait for the lock of the running root of `dir`: listed for `saker
/// status` meanwhile, and fencing a root that hangs with its lock held.
async fn wait_as_standby(dir: &PilotDir, options: &PilotOptions) -> Result<RootLock> {
    tracing::info!("standby: waiting for the root to be gone");
    let listed = crate::standbys::list_self(dir.path()).map_err(PilotError::ListStandby)?;
    let path = dir.path().to_path_buf();
    let waiting = tokio::task::spawn_blocking(move || RootLock::wait(&path));
    // A root that hangs keeps its lock: fence it after three of its agents' heartbeat
    // timeouts of silence.
    let fence = crate::standbys::fence_when_silent(
        dir.path().to_path_buf(),
        options.liveness.interval,
        options.liveness.timeout * 3,
        options.notices.clone(),
    );
    let lock = tokio::select! {
        taken = waiting => taken.map_err(|_| PilotError::RootStopped)??,
        never = fence => match never {},
    };
    drop(listed);
    if crate::lock::stopped(dir.path()) {
        return Err(PilotError::Ended);
    }
    tracing::warn!("the root is gone; taking over");
    options.notices.tell(Notice::TakingOver);
    Ok(lock)
}

/// Replaces credentials an older saker wrote (no roles) or an interrupted generation
/// left, so an existing pilot directory can be resumed (see `docs/security.md`).
fn renew_credentials(dir: &PilotDir, notices: &Notices) -> Result<()> {
    use saker_transport::{Outdated, Renewal};
    let why = match Credentials::renew_if_outdated(dir).map_err(PilotError::RenewCredentials)? {
        Renewal::Current => return Ok(()),
        Renewal::Renewed(Outdated::NoRoles) => "its certificates predate certificate roles",
        Renewal::Renewed(Outdated::Incomplete) => "their generation had been interrupted",
    };
    tracing::warn!(
        why,
        "generated a new ca and new certificates for the resumed pilot"
    );
    notices.tell(Notice::RenewedCredentials {
        dir: dir.path().to_path_buf(),
        why,
    });
    Ok(())
}
