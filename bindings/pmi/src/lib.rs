//! Saker's PMI-1 library: the PMI-1 *API* (`PMI_Init`, `PMI_KVS_Put`, `PMI_Barrier`,
//! …) over the PMI-1 *wire* that Saker's agents serve each rank on `PMI_FD`.
//!
//! MPICH carries its own client of that wire; Open MPI does not. Debian's Open MPI
//! has instead a component (`pmix/flux`) that `dlopen`s any PMI-1 library named by
//! `FLUX_PMI_LIBRARY_PATH`, as Flux's own `libpmi.so` is: the agents hand their
//! ranks this one (see `saker_actors::pmi::library`), and Open MPI wires up through
//! the same agents, fences and failures as MPICH does.
//!
//! - [`Client`]: the wire, safe; what each `PMI_*` function does.
//! - [`mapping`]: which ranks share a node (`PMI_Get_clique_ranks`), from the
//!   `PMI_process_mapping` the agents serve.
//! - `ffi`: the C functions, the crate's only `unsafe`.

mod client;
#[allow(unsafe_code)] // The C ABI; every block has a SAFETY comment.
mod ffi;
pub mod mapping;

pub use client::{Client, Error, Maxes};

/// PMI-1's return codes (MPICH's `pmi.h`).
pub mod code {
    pub const SUCCESS: i32 = 0;
    pub const FAIL: i32 = -1;
    pub const ERR_INIT: i32 = 1;
    pub const ERR_NOMEM: i32 = 2;
    pub const ERR_INVALID_ARG: i32 = 3;
    pub const ERR_INVALID_KEY: i32 = 4;
    pub const ERR_INVALID_KEY_LENGTH: i32 = 5;
    pub const ERR_INVALID_VAL: i32 = 6;
    pub const ERR_INVALID_VAL_LENGTH: i32 = 7;
    pub const ERR_INVALID_LENGTH: i32 = 8;
}
