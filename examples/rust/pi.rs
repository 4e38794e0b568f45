//! Monte Carlo π with a million small typed tasks.
//!
//! Each task throws `SAMPLES` darts at the unit square from its own seed and returns
//! how many fell inside the quarter circle. The driver maps the task over a million
//! seeds and adds up the hits as they come.
//!
//! ```text
//! cargo run --release -p saker --example pi            # embedded pilot on this machine
//! cargo run --release -p saker --example pi -- 10000   # fewer tasks
//! saker run --app target/release/examples/pi           # under a pilot saker starts
//! ```

use std::process::ExitCode;

use saker::{App, Task, TaskError};

/// Darts per task.
const SAMPLES: u32 = 100;

struct Darts;

impl Task for Darts {
    const NAME: &'static str = "darts";
    type Input = u64;
    type Output = u32;

    async fn run(seed: u64) -> u32 {
        let mut state = seed;
        let mut next = || {
            // SplitMix64: fast, and good enough for darts.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..SAMPLES)
            .filter(|_| {
                let (x, y) = (next(), next());
                x * x + y * y <= 1.0
            })
            .count() as u32
    }
}

fn main() -> ExitCode {
    let app = App::new().task::<Darts>();
    let tasks: u64 = app
        .args()
        .get(1)
        .and_then(|a| a.to_str()?.parse().ok())
        .unwrap_or(1_000_000);
    app.run(move |pilot| async move {
        let started = std::time::Instant::now();
        let mut outputs = pilot.map_unordered::<Darts, _>(0..tasks);
        let mut hits = 0u64;
        let mut done = 0u64;
        while let Some((_, result)) = outputs.next().await {
            hits += u64::from(result?);
            done += 1;
        }
        let darts = done * u64::from(SAMPLES);
        let pi = 4.0 * hits as f64 / darts as f64;
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "pi ~ {pi:.6} from {darts} darts in {done} tasks ({seconds:.2} s, {:.0} tasks/s)",
            done as f64 / seconds
        );
        Ok::<_, TaskError>(())
    })
}
