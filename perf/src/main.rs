//! `saker-perf`: parses the options, finds the saker binary, runs the selected
//! benchmarks and prints the table (or JSON). The library does the work.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Parser;
use saker_perf::bench::{Setup, run_selected};
use saker_perf::options::{Benchmark, Options, Sizes};

/// Counts live heap bytes, for the rows that measure the core's memory in-process.
#[global_allocator]
static ALLOCATOR: saker_perf::heap::Counting = saker_perf::heap::Counting;

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    if arguments.first().map(String::as_str) == Some(saker_perf::relay::ROLE_ARGUMENT) {
        return match saker_perf::relay::serve(&arguments[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("saker-perf relay: error: {error:#}");
                ExitCode::from(2)
            }
        };
    }
    let options = Options::parse();
    match run(options) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("saker-perf: error: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn run(options: Options) -> Result<ExitCode> {
    let saker = match options.saker {
        Some(path) => path,
        None => default_saker()?,
    };
    if !saker.is_file() {
        bail!(
            "no saker binary at {} (build it with `cargo build --release -p saker-pilot`, \
             or pass --saker / set SAKER_BIN)",
            saker.display()
        );
    }
    let setup = Setup {
        saker,
        sizes: Sizes::new(options.quick),
        cores: std::thread::available_parallelism().map_or(1, |cores| cores.get()),
        quick: options.quick,
    };
    let report = run_selected(&setup, &Benchmark::selection(&options.only));
    if options.json {
        println!("{:#}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    Ok(if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `saker` in the directory of this binary: target/release/saker for
/// `cargo run --release -p saker-perf`.
fn default_saker() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let directory = exe
        .parent()
        .context("this executable has no parent directory")?;
    Ok(directory.join("saker"))
}
