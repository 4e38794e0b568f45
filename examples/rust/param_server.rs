//! A parameter server: one placed actor holds a model; a training task on every
//! node pulls the model, computes a gradient on its own data and pushes it back.
//!
//! The model is a vector fitted by least squares to targets that every worker
//! samples with its own noise; the server applies each pushed gradient as it comes
//! (asynchronous SGD), and the driver reads the model back at the end.
//!
//! ```text
//! cargo run --release -p saker --example param_server        # 3 local agents
//! APP=target/release/examples/param_server sbatch --nodes=3 sbatch-templates/app.sbatch
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;

use saker::{Actor, App, RemoteRef, Restart, Task, TaskOptions};

/// Model dimension.
const DIM: usize = 64;
/// Pull, compute, push rounds per worker.
const STEPS: u32 = 200;
const LEARNING_RATE: f64 = 0.05;

#[derive(saker::rkyv::Archive, saker::rkyv::Serialize, saker::rkyv::Deserialize)]
#[rkyv(crate = saker::rkyv)]
enum Request {
    /// Apply this gradient.
    Push(Vec<f64>),
    /// The model now.
    Pull,
}

#[derive(saker::rkyv::Archive, saker::rkyv::Serialize, saker::rkyv::Deserialize)]
#[rkyv(crate = saker::rkyv)]
struct Model {
    /// Updates applied so far.
    version: u64,
    weights: Vec<f64>,
}

struct ParamServer {
    weights: Vec<f64>,
    version: u64,
}

impl Actor for ParamServer {
    const NAME: &'static str = "param-server";
    type Args = u32;
    type Msg = Request;
    type Reply = Model;

    async fn on_start(dim: u32) -> ParamServer {
        ParamServer {
            weights: vec![0.0; dim as usize],
            version: 0,
        }
    }

    async fn handle(&mut self, request: Request) -> Model {
        if let Request::Push(gradient) = request {
            for (weight, g) in self.weights.iter_mut().zip(gradient) {
                *weight -= LEARNING_RATE * g;
            }
            self.version += 1;
        }
        Model {
            version: self.version,
            weights: self.weights.clone(),
        }
    }
}

/// One worker's training loop; answers its node and its last loss.
struct Train;

impl Task for Train {
    const NAME: &'static str = "train";
    type Input = (RemoteRef<ParamServer>, u64);
    type Output = (u32, f64);

    async fn run((server, seed): (RemoteRef<ParamServer>, u64)) -> (u32, f64) {
        let mut noise = Noise(seed);
        let mut loss = f64::MAX;
        for _ in 0..STEPS {
            let model = server
                .call(Request::Pull)
                .await
                .expect("the server answers");
            // Targets are 1.0 plus this worker's noise; the gradient of the squared
            // error is twice the residual.
            let residuals: Vec<f64> = model
                .weights
                .iter()
                .map(|w| w - (1.0 + 0.01 * noise.next()))
                .collect();
            loss = residuals.iter().map(|r| r * r).sum::<f64>() / DIM as f64;
            let gradient = residuals.iter().map(|r| 2.0 * r).collect();
            server
                .cast(Request::Push(gradient))
                .await
                .expect("the server takes the update");
        }
        (saker::node().unwrap_or(0), loss)
    }
}

/// Uniform noise in [-1, 1) (SplitMix64).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

fn main() -> ExitCode {
    let app = App::new()
        .agents(3)
        .slots(3)
        .actor::<ParamServer>()
        .task::<Train>();
    app.run(|pilot| async move {
        let nodes = pilot.nodes().await.map_err(|e| e.to_string())?.max(1);
        let server = pilot
            .spawn::<ParamServer>(DIM as u32)
            .restart(Restart::OnNodeLoss { max_restarts: 3 })
            .await
            .map_err(|e| e.to_string())?;
        let handles: Vec<_> = (0..nodes)
            .map(|node| {
                pilot
                    .with(TaskOptions::new().node(node))
                    .submit::<Train>((server, u64::from(node)))
            })
            .collect();
        let mut ran_on = BTreeSet::new();
        for handle in handles {
            let (node, loss) = handle.await.map_err(|e| e.to_string())?;
            println!("worker on node {node}: last loss {loss:.2e}");
            ran_on.insert(node);
        }
        let model = server
            .call(Request::Pull)
            .await
            .map_err(|e| e.to_string())?;
        let worst = model
            .weights
            .iter()
            .map(|w| (w - 1.0).abs())
            .fold(0.0, f64::max);
        println!(
            "param server: {} workers on nodes {ran_on:?}, {} updates, largest error {worst:.4}",
            ran_on.len(),
            model.version
        );
        if ran_on.len() as u32 != nodes || model.version != u64::from(nodes * STEPS) || worst > 0.02
        {
            return Err("the model did not converge from every worker's updates".to_owned());
        }
        println!("converged");
        Ok(())
    })
}
