//! Objects by reference (`Ref<T>`): put by the driver, read in place by tasks on
//! either node (fetched node to node), outputs kept on their node (`submit_ref`),
//! refs inside structures, freeing by hand and by drop.

use std::time::{Duration, Instant};

use saker::{Ref, Task, TaskError, TaskOptions};

use crate::check;

/// Sums an array read in place (the mapped archive, no copy); and where it ran.
pub struct Sum;
impl Task for Sum {
    const NAME: &'static str = "sum";
    type Input = Ref<Vec<f64>>;
    type Output = (f64, Option<u32>);
    async fn run(values: Ref<Vec<f64>>) -> (f64, Option<u32>) {
        let mapped = values.map().await.expect("the object is on this node");
        (mapped.iter().map(|x| x.to_native()).sum(), saker::node())
    }
}

/// `count` copies of `value`: kept on its node with `submit_ref`.
pub struct Fill;
impl Task for Fill {
    const NAME: &'static str = "fill";
    type Input = (u64, f64);
    type Output = Vec<f64>;
    async fn run((count, value): (u64, f64)) -> Vec<f64> {
        vec![value; count as usize]
    }
}

/// The sum of every array its input refers to (refs inside a vector).
pub struct Total;
impl Task for Total {
    const NAME: &'static str = "total";
    type Input = Vec<Ref<Vec<f64>>>;
    type Output = f64;
    async fn run(arrays: Vec<Ref<Vec<f64>>>) -> f64 {
        let mut total = 0.0;
        for array in arrays {
            let values = array.get().await.expect("the object is on this node");
            total += values.iter().sum::<f64>();
        }
        total
    }
}

/// Puts an object, has a task read it, and ends with the ref still held: it is dropped
/// as the driver ends, and its free must still reach the pilot.
pub async fn put_and_go(pilot: &saker::Pilot) -> Result<(), String> {
    let values: Vec<f64> = (0..1000).map(f64::from).collect();
    let kept = pilot.put(&values).await.map_err(|e| e.to_string())?;
    let (sum, _) = pilot
        .submit::<Sum>(kept.clone())
        .await
        .map_err(|e| e.to_string())?;
    check(sum == 499_500.0, "the sum")?;
    println!("ok put {}", kept.item());
    Ok(())
}

/// `map` over ten refs that only its inputs hold: each object outlives its task.
async fn futures_free_map(pilot: &saker::Pilot, small: &Vec<f64>) -> Result<usize, String> {
    let mut refs = Vec::new();
    for _ in 0..10 {
        refs.push(pilot.put(small).await.map_err(|e| e.to_string())?);
    }
    let mut sums = pilot.map::<Sum, _>(refs);
    let mut done = 0;
    while let Some((_, sum)) = sums.next().await {
        let (sum, _) = sum.map_err(|e| e.to_string())?;
        check(sum == 499_500.0, "a mapped task on a ref")?;
        done += 1;
    }
    Ok(done)
}

pub async fn objects(pilot: &saker::Pilot) -> Result<(), String> {
    let error = |e: &dyn std::fmt::Display| e.to_string();
    // 8 MiB: far past what a call sends inline, nothing of it through the root.
    let values: Vec<f64> = (0..1 << 20).map(f64::from).collect();
    let expected: f64 = values.iter().sum();
    let array = pilot.put(&values).await.map_err(|e| error(&e))?;
    check(array.size() > 8 << 20, "the object holds the array")?;
    let back = array.get().await.map_err(|e| error(&e))?;
    check(back == values, "the driver reads back what it put")?;

    // On each node: where it was put, and fetched to the other one.
    let mut nodes = Vec::new();
    for node in [0, 1] {
        let (sum, ran) = pilot
            .with(TaskOptions::new().node(node))
            .submit::<Sum>(array.clone())
            .await
            .map_err(|e| error(&e))?;
        check(sum == expected, format!("the sum on node {node}"))?;
        nodes.push(ran);
    }
    check(nodes == [Some(0), Some(1)], format!("ran on {nodes:?}"))?;

    // A ref moved into a task's input and so dropped by the driver at once: its
    // object is freed after the task's job reaches the pilot, never before.
    let small: Vec<f64> = (0..1000).map(f64::from).collect();
    for _ in 0..20 {
        let once = pilot.put(&small).await.map_err(|e| error(&e))?;
        let (sum, _) = pilot.submit::<Sum>(once).await.map_err(|e| error(&e))?;
        check(sum == 499_500.0, "a task on a ref it alone holds")?;
    }
    let onces = futures_free_map(pilot, &small).await?;
    check(onces == 10, "map on refs it alone holds")?;

    // An output kept on its node, read by the driver and by a later task.
    let filled = pilot
        .submit_ref::<Fill>((1000, 2.5))
        .await
        .map_err(|e| error(&e))?;
    check(
        filled.get().await.map_err(|e| error(&e))? == vec![2.5; 1000],
        "the stored output reads back",
    )?;
    let (sum, _) = pilot
        .submit::<Sum>(filled.clone())
        .await
        .map_err(|e| error(&e))?;
    check(sum == 2500.0, "a task reads the stored output")?;
    let total = pilot
        .submit::<Total>(vec![array.clone(), filled.clone()])
        .await
        .map_err(|e| error(&e))?;
    check(total == expected + 2500.0, "refs inside a vector")?;

    // Freed by hand: a task submitted later that reads it fails, naming it.
    pilot.free(&filled).await.map_err(|e| error(&e))?;
    let late = pilot.submit::<Sum>(filled.clone()).await;
    let item = filled.item();
    check(
        matches!(&late, Err(TaskError::Failed { reason }) if reason.contains(&item)),
        format!("a freed object is gone: {late:?}"),
    )?;

    // Freed by drop: the pilot forgets the driver's objects once their refs go.
    let before = pilot.status().await.map_err(|e| error(&e))?.items;
    drop((array, filled));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let items = pilot.status().await.map_err(|e| error(&e))?.items;
        if items < before {
            break;
        }
        check(
            Instant::now() < deadline,
            format!("the dropped array is still held ({items} items, {before} before)"),
        )?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("ok objects");
    Ok(())
}
