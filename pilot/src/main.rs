//! `saker`: the command line; everything is in the library (`saker_pilot::main_with`).

fn main() -> std::process::ExitCode {
    saker_pilot::main_with(std::env::args_os().collect())
}
