//! A pipeline of actors across nodes: each stage transforms a line and casts it to
//! the next stage, on another node; the last stage tallies what reached it.
//!
//! Casts from one sender reach an actor in the order they were sent, so a `Flush`
//! call that follows the lines down the chain returns only after every line before
//! it has passed every stage.
//!
//! ```text
//! cargo run --release -p saker --example pipeline            # 3 local agents
//! saker run --agents 3 --app target/release/examples/pipeline
//! ```

use std::process::ExitCode;

use saker::{Actor, App, Placement, RemoteRef};

/// Lines the driver feeds in.
const LINES: u64 = 2_000;

#[derive(Clone, Copy, saker::rkyv::Archive, saker::rkyv::Serialize, saker::rkyv::Deserialize)]
#[rkyv(crate = saker::rkyv)]
enum Step {
    /// Collapses runs of spaces.
    Squeeze,
    Upper,
    /// Counts lines and words (the end of the line).
    Tally,
}

#[derive(saker::rkyv::Archive, saker::rkyv::Serialize, saker::rkyv::Deserialize)]
#[rkyv(crate = saker::rkyv)]
enum Message {
    Line(String),
    /// Answered by the last stage, once everything before it has passed.
    Flush,
}

#[derive(
    Debug, Default, saker::rkyv::Archive, saker::rkyv::Serialize, saker::rkyv::Deserialize,
)]
#[rkyv(crate = saker::rkyv)]
struct Tally {
    lines: u64,
    words: u64,
    /// Lines that reached the end not upper-cased and squeezed (should be none).
    malformed: u64,
    /// The nodes the stages ran on, first to last.
    nodes: Vec<u32>,
}

struct Stage {
    step: Step,
    next: Option<RemoteRef<Stage>>,
    tally: Tally,
}

impl Actor for Stage {
    const NAME: &'static str = "stage";
    type Args = (Step, Option<RemoteRef<Stage>>);
    type Msg = Message;
    type Reply = Tally;

    async fn on_start((step, next): (Step, Option<RemoteRef<Stage>>)) -> Stage {
        Stage {
            step,
            next,
            tally: Tally::default(),
        }
    }

    async fn handle(&mut self, message: Message) -> Tally {
        let line = match message {
            Message::Line(line) => line,
            Message::Flush => {
                let mut tally = match &self.next {
                    Some(next) => next
                        .call(Message::Flush)
                        .await
                        .expect("the next stage answers"),
                    None => std::mem::take(&mut self.tally),
                };
                tally.nodes.insert(0, saker::node().unwrap_or(0));
                return tally;
            }
        };
        let line = match self.step {
            Step::Squeeze => line.split_whitespace().collect::<Vec<_>>().join(" "),
            Step::Upper => line.to_uppercase(),
            Step::Tally => {
                self.tally.lines += 1;
                self.tally.words += line.split(' ').count() as u64;
                if line.contains("  ") || line.chars().any(char::is_lowercase) {
                    self.tally.malformed += 1;
                }
                return Tally::default();
            }
        };
        if let Some(next) = &self.next {
            next.cast(Message::Line(line))
                .await
                .expect("the next stage takes it");
        }
        Tally::default()
    }
}

fn main() -> ExitCode {
    let app = App::new().agents(3).slots(3).actor::<Stage>();
    app.run(|pilot| async move {
        let nodes = pilot.nodes().await.map_err(|e| e.to_string())?.max(1);
        // Built from the end, each stage on the next node round.
        let mut next = None;
        for (position, step) in [Step::Squeeze, Step::Upper, Step::Tally]
            .into_iter()
            .enumerate()
            .rev()
        {
            let stage = pilot
                .spawn::<Stage>((step, next))
                .on(Placement::Node(position as u32 % nodes))
                .await
                .map_err(|e| e.to_string())?;
            next = Some(stage);
        }
        let first = next.expect("three stages");
        let started = std::time::Instant::now();
        let mut words = 0;
        for n in 0..LINES {
            let line = format!("  line {n}   of the   pipeline ");
            words += line.split_whitespace().count() as u64;
            first
                .cast(Message::Line(line))
                .await
                .map_err(|e| e.to_string())?;
        }
        let tally = first
            .call(Message::Flush)
            .await
            .map_err(|e| e.to_string())?;
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "pipeline on nodes {:?}: {} lines, {} words, {} malformed ({:.0} lines/s)",
            tally.nodes,
            tally.lines,
            tally.words,
            tally.malformed,
            LINES as f64 / seconds
        );
        if tally.lines != LINES || tally.words != words || tally.malformed != 0 {
            return Err(format!("expected {LINES} lines of {words} words in all"));
        }
        println!("every line passed every stage, in order");
        Ok(())
    })
}
