//! Command jobs from the Rust API: a program's exit and output, ranks on both
//! nodes, an MPI program started by the agents through PMI, a refusal.

use saker::{Command, Launcher, Mpi, TaskError, TaskOptions};

use crate::check;

/// `probe`: an MPI probe (`pilot/tests/mpi/probe.c`) to run through PMI, if given.
pub(crate) async fn commands(pilot: &saker::Pilot, probe: Option<&str>) -> Result<(), String> {
    // A failing program ran to its end: its exit and output, not an error.
    let failed = pilot
        .command(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]))
        .await
        .map_err(|e| e.to_string())?;
    check(!failed.success(), "exit 3 is no success")?;
    check(failed.exit_code == Some(3), format!("{failed:?}"))?;
    check(
        failed.stdout == "out\n" && failed.stderr == "err\n",
        &failed.stdout,
    )?;

    // Ranks on both nodes at once, with their variables; the options apply.
    let ranks = pilot
        .with(TaskOptions::new().retries(1))
        .command(
            Command::shell("echo $RANK/$WORLD_SIZE $GREETING")
                .env("GREETING", "hello")
                .nodes(2)
                .ranks_per_node(1)
                .mpi(Mpi::None),
        )
        .await
        .map_err(|e| e.to_string())?;
    check(ranks.success(), format!("{ranks:?}"))?;
    check(ranks.stdout == "0/2 hello\n", &ranks.stdout)?;
    let gang = ranks.record.gang.as_ref().ok_or("no gang in the record")?;
    check(gang.processes.len() == 2, "two ranks")?;

    // An MPI program whose ranks the agents start and serve PMI: no mpirun.
    if let Some(probe) = probe {
        let mpi = pilot
            .command(Command::new(probe).nodes(2).ranks_per_node(1).mpi(Mpi::Pmi))
            .await
            .map_err(|e| e.to_string())?;
        check(mpi.success(), format!("{mpi:?}"))?;
        check(
            mpi.stdout.contains(" size=2 ") && mpi.stdout.contains(" sum=3 "),
            &mpi.stdout,
        )?;
        println!("ok mpi through pmi");

        // A script run once on the first node, starting ranks twice through this
        // application's own binary (`$SAKER_MPIEXEC`): their output is the script's.
        let script = format!("$SAKER_MPIEXEC {probe} && $SAKER_MPIEXEC -n 1 {probe}");
        let runs = Command::shell(script)
            .nodes(2)
            .ranks_per_node(1)
            .mpi(Mpi::Pmi)
            .launcher(Launcher::Script);
        let runs = pilot.command(runs).await.map_err(|e| e.to_string())?;
        check(runs.success(), format!("{runs:?}"))?;
        check(
            runs.stdout.matches(" size=2 ").count() == 2
                && runs.stdout.matches(" size=1 ").count() == 1,
            &runs.stdout,
        )?;
        println!("ok mpi runs from a script");
    }

    // More nodes than the pilot has: refused, an error.
    match pilot.command(Command::new("true").nodes(5)).await {
        Err(TaskError::Failed { reason }) => check(reason.contains("node"), &reason)?,
        other => return Err(format!("expected a refusal, got {other:?}")),
    }
    println!("ok commands");
    Ok(())
}
