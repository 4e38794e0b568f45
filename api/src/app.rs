//! [`App`]: the one entry point of an application's binary, which plays every role
//! the pilot needs of it:
//!
//! - **driver** (the default): runs the application's code against a pilot, either
//!   the one named by `--pilot-dir DIR` / `SAKER_PILOT_DIR` (set by `saker run --app`
//!   and `saker pilot --app`), or an embedded pilot on this machine that the driver
//!   starts and stops itself;
//! - **worker**: started by an agent with `SAKER_WORKER_KIND` set to the app's kind,
//!   it runs calls of the registered task types;
//! - **a node's roles** (agent, reaper, remote shell; crate `saker-node`), behind the
//!   hidden first argument `__saker`: the embedded pilot's agents are this same binary
//!   (`myapp __saker agent …`), so an application needs nothing installed but itself.

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use saker_root::local::{Shape, ShapeRequest};
use saker_root::{AgentCommand, Agents, PilotOptions};

use crate::actor::Actor;
use crate::error::Error;
use crate::host::{ActorTypes, Host};
use crate::link::Link;

/// How long a driver attached to a pilot that goes on waits, once done, for what it
/// queued last to be sent (a handle kept somewhere would hold it forever).
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
use crate::pilot::Pilot;
use crate::task::Task;
use crate::worker::Registry;

/// The hidden first argument under which the binary serves a node's roles
/// (`myapp __saker agent …`, `reaper`, `rsh-agent`, `mpiexec`, `cgroup-exec`).
pub const CLI_ARGUMENT: &str = saker_actors::self_exe::APP_PREFIX;
/// The worker kind of an application's tasks unless [`App::kind`] says otherwise.
pub const DEFAULT_KIND: &str = "rust";
/// Where `saker run --app` and `saker pilot --app` tell the driver its pilot is.
pub use saker_client::PILOT_DIR_VAR;

/// An application: its task types and how to run its driver.
#[derive(Debug)]
pub struct App {
    registry: Registry,
    actors: ActorTypes,
    kind: String,
    pilot_dir: Option<PathBuf>,
    agents: Option<u32>,
    slots: Option<u32>,
    args: Vec<OsString>,
}

impl Default for App {
    fn default() -> Self {
        App::new()
    }
}

impl App {
    /// An application with no task types yet. Reads `--pilot-dir DIR` (or
    /// `--pilot-dir=DIR`) from the command line, removing it from [`Self::args`], and
    /// `SAKER_PILOT_DIR`; the command line wins.
    pub fn new() -> App {
        let (args, pilot_dir) = take_pilot_dir(
            std::env::args_os().collect(),
            std::env::var_os(PILOT_DIR_VAR),
        );
        App {
            registry: Registry::default(),
            actors: ActorTypes::default(),
            kind: DEFAULT_KIND.to_owned(),
            pilot_dir,
            agents: None,
            slots: None,
            args,
        }
    }

    /// Registers task type `T`: workers can run it and the driver can submit it.
    pub fn task<T: Task>(mut self) -> App {
        self.registry.add::<T>();
        self
    }

    /// Registers actor type `A`: the application's agents can host it and anyone
    /// with the pilot can spawn it. Its [`Actor::NAME`] must be 1 to 64 ASCII
    /// letters, digits, `_` and `-` (checked as the program is built: another name
    /// fails the build here) and differ from the other actor types' (checked here,
    /// at run time: a panic).
    pub fn actor<A: Actor>(mut self) -> App {
        self.actors.add::<A>();
        self
    }

    /// The worker kind this application's tasks run on (default `rust`). A pilot
    /// started with `saker … --app` runs the app under this kind.
    pub fn kind(mut self, kind: &str) -> App {
        self.kind = kind.to_owned();
        self
    }

    /// Uses the pilot in `dir` rather than `--pilot-dir` / `SAKER_PILOT_DIR` or an
    /// embedded one.
    pub fn pilot_dir(mut self, dir: impl Into<PathBuf>) -> App {
        self.pilot_dir = Some(dir.into());
        self
    }

    /// Agent processes of the embedded pilot (default 1).
    pub fn agents(mut self, agents: u32) -> App {
        self.agents = Some(agents);
        self
    }

    /// Slots (cores) of the embedded pilot, shared among its agents (default: this
    /// machine's cores).
    pub fn slots(mut self, slots: u32) -> App {
        self.slots = Some(slots);
        self
    }

    /// This process's command line without `--pilot-dir DIR` (or `--pilot-dir=DIR`):
    /// index 0 is the program, the application's own arguments start at index 1.
    ///
    /// A method of the `App`: read it before [`App::run`], which consumes the app,
    /// and move what the driver needs into the driver's closure. Parse it there, in
    /// the driver, rather than before `run`: `main` runs in every role, and as an
    /// agent the command line is `myapp __saker agent …`, which the application's own
    /// parser would refuse.
    ///
    /// ```no_run
    /// # struct Square;
    /// # impl saker::Task for Square {
    /// #     const NAME: &'static str = "square";
    /// #     type Input = u64;
    /// #     type Output = u64;
    /// #     async fn run(x: u64) -> u64 { x * x }
    /// # }
    /// // As in docs/rust-api.md: `myapp 1000` or `myapp --pilot-dir DIR 1000`.
    /// fn main() -> std::process::ExitCode {
    ///     let app = saker::App::new().task::<Square>();
    ///     let args: Vec<String> = app.args().iter().skip(1)
    ///         .map(|arg| arg.to_string_lossy().into_owned()).collect();
    ///     app.run(move |pilot| async move {
    ///         let count: u64 = args.first().ok_or("usage: myapp COUNT")?.parse()?;
    ///         let sum: u64 = pilot.map::<Square, _>(0..count).collect().await
    ///             .into_iter().map(|(_, square)| square).sum::<Result<u64, _>>()?;
    ///         println!("{sum}");
    ///         Ok::<_, Box<dyn std::error::Error>>(())
    ///     })
    /// }
    /// ```
    pub fn args(&self) -> &[OsString] {
        &self.args
    }

    /// Plays the role this process was started for, and returns its exit code: as
    /// driver, runs `driver` with a [`Pilot`] and reports its error, if any.
    ///
    /// ```no_run
    /// struct Square;
    /// impl saker::Task for Square {
    ///     const NAME: &'static str = "square";
    ///     type Input = u64;
    ///     type Output = u64;
    ///     async fn run(x: u64) -> u64 { x * x }
    /// }
    ///
    /// fn main() -> std::process::ExitCode {
    ///     saker::App::new().task::<Square>().run(|pilot| async move {
    ///         let nine = pilot.submit::<Square>(3).await?;
    ///         println!("{nine}");
    ///         Ok::<_, saker::TaskError>(())
    ///     })
    /// }
    /// ```
    pub fn run<F, Fut, E>(self, driver: F) -> ExitCode
    where
        F: FnOnce(Pilot) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        if self.args.get(1).is_some_and(|a| a == CLI_ARGUMENT) {
            saker_actors::self_exe::set_prefix(CLI_ARGUMENT);
            // As an agent, this binary hosts the application's actors.
            saker_actors::actor_host::install(std::sync::Arc::new(Host::new(self.actors)));
            let args = self.args.get(2..).unwrap_or_default().to_vec();
            return saker_node::serve(args).unwrap_or_else(|| {
                let roles = saker_node::Role::ALL.map(saker_node::Role::argument);
                eprintln!("error: {CLI_ARGUMENT} takes a role: {}", roles.join(", "));
                ExitCode::from(2)
            });
        }
        if std::env::var_os("SAKER_WORKER_KIND").is_some_and(|kind| kind == *self.kind) {
            return match crate::worker::serve(&self.registry) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("saker worker: {error}");
                    ExitCode::from(3)
                }
            };
        }
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("error: {}", Error::Runtime(error));
                return ExitCode::from(2);
            }
        };
        runtime.block_on(async move {
            match self.drive(driver).await {
                Ok(Ok(())) => ExitCode::SUCCESS,
                Ok(Err(error)) => {
                    eprintln!("error: {error}");
                    ExitCode::FAILURE
                }
                Err(error) => {
                    eprintln!("error: {}", saker_actors::error_chain(&error));
                    ExitCode::from(2)
                }
            }
        })
    }

    async fn drive<F, Fut, E>(self, driver: F) -> Result<Result<(), E>, Error>
    where
        F: FnOnce(Pilot) -> Fut,
        Fut: Future<Output = Result<(), E>>,
    {
        if let Some(dir) = &self.pilot_dir {
            let link = Link::connect(dir).await?;
            let pilot = Pilot::start(link, self.kind.clone(), false).await?;
            let submitter = pilot.take_submitter();
            let outcome = driver(pilot).await;
            // The pilot goes on: what the driver queued last (frees of the objects
            // its refs held, as they dropped) reaches it before the process ends.
            if let Some(submitter) = submitter
                && tokio::time::timeout(FLUSH_WAIT, submitter).await.is_err()
            {
                tracing::warn!("the driver's last requests were not all sent");
            }
            return Ok(outcome);
        }
        let embedded = self.start_embedded().await?;
        // Its agents are this machine's processes, joining within moments: the
        // driver starts once they have, so that `Pilot::slots` counts them all.
        let link = Link::Embedded(embedded.pilot.root.clone());
        let pilot = Pilot::start(link, self.kind.clone(), true).await?;
        let outcome = driver(pilot).await;
        if let Err(error) = embedded.pilot.shutdown().await {
            tracing::warn!(%error, "stopping the embedded pilot");
        }
        Ok(outcome)
    }

    async fn start_embedded(&self) -> Result<Embedded, Error> {
        let temp = tempfile::Builder::new()
            .prefix("saker-app-")
            .tempdir()
            .map_err(Error::TempDir)?;
        let dir = temp.path().join("pilot");
        let program = std::env::current_exe().map_err(Error::CurrentExe)?;
        let worker = shell_words::quote(&program.to_string_lossy()).into_owned();
        let shape = Shape::new(ShapeRequest {
            agents: Some(self.agents.unwrap_or(1)),
            slots: self.slots,
            fanout: 16,
            allow_none: false,
        })
        .map_err(|error| Error::Shape(error.to_string()))?;
        let pilot = saker_root::Pilot::start(PilotOptions {
            dir: dir.clone(),
            agents: Agents::Local(shape),
            agent_command: AgentCommand {
                program,
                args: vec![CLI_ARGUMENT.into(), "agent".into()],
                env: vec![(
                    saker_actors::worker::worker_variable(&self.kind).into(),
                    worker.into(),
                )],
            },
            // A temporary pilot outlives nothing: its journal need not reach the disk.
            sync: false,
            resume: false,
            take_over: false,
            deadline_unix_us: None,
            liveness: Default::default(),
            core: Default::default(),
            // What each agent offers beyond cores, it finds on this machine.
            nodes: Default::default(),
            journal: Default::default(),
            elastic: None,
            // A temporary pilot ends with its driver: nothing for a standby to take over.
            standbys: None,
            notices: Default::default(),
        })
        .await
        .map_err(|source| Error::Start {
            dir,
            source: Box::new(source),
        })?;
        Ok(Embedded { pilot, _dir: temp })
    }
}

/// `args` without `--pilot-dir DIR` (or `--pilot-dir=DIR`), and the pilot directory:
/// the one it named, else `from_env` (`SAKER_PILOT_DIR`).
fn take_pilot_dir(
    mut args: Vec<OsString>,
    from_env: Option<OsString>,
) -> (Vec<OsString>, Option<PathBuf>) {
    let mut pilot_dir = from_env.map(PathBuf::from);
    if let Some(at) = args.iter().position(|a| a == "--pilot-dir")
        && at + 1 < args.len()
    {
        pilot_dir = Some(PathBuf::from(args.remove(at + 1)));
        args.remove(at);
    } else if let Some(at) = args
        .iter()
        .position(|a| a.to_str().is_some_and(|a| a.starts_with("--pilot-dir=")))
    {
        let given = args.remove(at);
        let given = given.to_string_lossy();
        pilot_dir = Some(PathBuf::from(&given["--pilot-dir=".len()..]));
    }
    (args, pilot_dir)
}

/// An embedded pilot and the directory it lives in (removed when dropped).
struct Embedded {
    pilot: saker_root::Pilot,
    _dir: tempfile::TempDir,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn args_lose_the_pilot_dir_in_either_form_and_the_command_line_wins() {
        for given in [
            line(&["myapp", "--pilot-dir", "/p", "1000"]),
            line(&["myapp", "--pilot-dir=/p", "1000"]),
            line(&["myapp", "1000", "--pilot-dir", "/p"]),
        ] {
            let (args, dir) = take_pilot_dir(given.clone(), Some("/env".into()));
            assert_eq!(args, line(&["myapp", "1000"]), "{given:?}");
            assert_eq!(dir, Some(PathBuf::from("/p")), "{given:?}");
        }
        let (args, dir) = take_pilot_dir(line(&["myapp", "1000"]), Some("/env".into()));
        assert_eq!(args, line(&["myapp", "1000"]));
        assert_eq!(dir, Some(PathBuf::from("/env")));
        let (args, dir) = take_pilot_dir(line(&["myapp"]), None);
        assert_eq!((args, dir), (line(&["myapp"]), None));
        // A flag with nothing after it is the application's, not a pilot directory.
        let (args, dir) = take_pilot_dir(line(&["myapp", "--pilot-dir"]), None);
        assert_eq!((args, dir), (line(&["myapp", "--pilot-dir"]), None));
    }
}
