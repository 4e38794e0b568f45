//! Objects by reference (`Ref<T>`) in the Rust API, each beside its same-run
//! baseline: a put and get against a copy of the same array in memory, and a task
//! on an array by reference against the same task on the array by value (inline,
//! through the root: the path a call takes without refs).

use std::time::Instant;

use saker::{Ref, Task};
use serde_json::json;

/// Sums an array read in place.
pub struct SumRef;
impl Task for SumRef {
    const NAME: &'static str = "sum-ref";
    type Input = Ref<Vec<f64>>;
    type Output = f64;
    async fn run(values: Ref<Vec<f64>>) -> f64 {
        let values = values.map().await.expect("the object is on this node");
        values.iter().map(|x| x.to_native()).sum()
    }
}

/// Sums an array sent by value.
pub struct SumValue;
impl Task for SumValue {
    const NAME: &'static str = "sum-value";
    type Input = Vec<f64>;
    type Output = f64;
    async fn run(values: Vec<f64>) -> f64 {
        values.iter().sum()
    }
}

/// An array of `n` values, kept on its node by `submit_ref`.
pub struct Ramp;
impl Task for Ramp {
    const NAME: &'static str = "ramp";
    type Input = u64;
    type Output = Vec<f64>;
    async fn run(n: u64) -> Vec<f64> {
        (0..n).map(|x| x as f64).collect()
    }
}

/// Prints a row: its saker figure beside its same-run baseline.
fn row(name: String, unit: &str, saker: f64, baseline: f64, baseline_name: &str) {
    let row = json!({"row": name, "unit": unit, "saker": saker, "baseline": baseline,
                     "baseline_name": baseline_name, "target": null});
    println!("{row}");
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

pub async fn rows(pilot: saker::Pilot, quick: bool) -> Result<(), String> {
    let error = |e: &dyn std::fmt::Display| e.to_string();
    let rounds = 3;
    let big_mib: usize = if quick { 64 } else { 256 };
    let big: Vec<f64> = (0..big_mib << 17).map(|x| x as f64).collect();
    let expected: f64 = big.iter().sum();

    // Put, then get back whole, against copying the same array in memory.
    let (mut saker, mut copy) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let copied = big.clone();
        copy.push(started.elapsed().as_secs_f64());
        drop(copied);
        let started = Instant::now();
        let object = pilot.put(&big).await.map_err(|e| error(&e))?;
        let back = object.get().await.map_err(|e| error(&e))?;
        saker.push(started.elapsed().as_secs_f64());
        if back.len() != big.len() {
            return Err("the array came back short".into());
        }
    }
    let mib = big_mib as f64;
    row(
        format!("rust: put then get of a {big_mib} MiB Vec<f64>"),
        "mebibytes_per_second",
        mib / median(saker),
        mib / median(copy.clone()),
        "a clone of the same Vec in memory",
    );

    // A task on the array by reference, end to end (the put included), against the
    // same task with the largest array a call sends by value.
    let small_mib = 8usize;
    let small: Vec<f64> = (0..small_mib << 17).map(|x| x as f64).collect();
    let (mut by_ref, mut by_value) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        let object = pilot.put(&small).await.map_err(|e| error(&e))?;
        pilot
            .submit::<SumRef>(object)
            .await
            .map_err(|e| error(&e))?;
        by_ref.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        pilot
            .submit::<SumValue>(small.clone())
            .await
            .map_err(|e| error(&e))?;
        by_value.push(started.elapsed().as_secs_f64());
    }
    row(
        format!("rust: a task on an {small_mib} MiB Vec<f64> by Ref, end to end"),
        "seconds",
        median(by_ref),
        median(by_value),
        "the same task with the array by value (inline, through the root)",
    );

    // The big array by reference: past what a call may send by value at all.
    let mut trips = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let object = pilot.put(&big).await.map_err(|e| error(&e))?;
        let sum = pilot
            .submit::<SumRef>(object)
            .await
            .map_err(|e| error(&e))?;
        trips.push(started.elapsed().as_secs_f64());
        if sum != expected {
            return Err(format!("the sum {sum} is not {expected}"));
        }
    }
    let started = Instant::now();
    let floor: f64 = big.iter().sum();
    let floor_s = started.elapsed().as_secs_f64() + median(copy.clone());
    std::hint::black_box(floor);
    row(
        format!("rust: a task on a {big_mib} MiB Vec<f64> by Ref, end to end"),
        "seconds",
        median(trips),
        floor_s,
        "one copy and one sum of the array in the driver",
    );

    // An output of the big array's size kept on its node, read back by the driver.
    let mut made = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let object: Ref<Vec<f64>> = pilot
            .submit_ref::<Ramp>((big_mib as u64) << 17)
            .await
            .map_err(|e| error(&e))?;
        let back = object.map().await.map_err(|e| error(&e))?;
        made.push(started.elapsed().as_secs_f64());
        if back.len() != big.len() {
            return Err("the output came back short".into());
        }
    }
    let started = Instant::now();
    let ramp: Vec<f64> = (0..(big_mib as u64) << 17).map(|x| x as f64).collect();
    let ramp_s = started.elapsed().as_secs_f64();
    std::hint::black_box(ramp);
    row(
        format!("rust: submit_ref of a task making {big_mib} MiB, read in place"),
        "seconds",
        median(made),
        ramp_s,
        "making the same Vec in the driver",
    );
    Ok(())
}
