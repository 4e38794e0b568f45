//! Unit-level tests of the core through its public API, driven by [`harness::Harness`]
//! exactly as the root actor drives it: input, then drain events and dispatches. The
//! harness checks the core's internal consistency after every input.

mod harness;

mod adopt;
mod cancel;
mod deadline;
mod dependencies;
mod dispatch;
mod failures;
mod gang_load;
mod gangs;
mod hold;
mod locality;
mod memory;
mod nodes;
mod pinned;
mod resources;
mod restore;
mod speculation;
mod spread;
mod updates;
