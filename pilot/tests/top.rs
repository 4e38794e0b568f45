//! `saker top` in a real terminal: driven in tmux, it shows the pilot's live counts,
//! its node, where time goes and a failure as it happens, and quits on `q` with the
//! terminal given back.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Service, run, saker, wait_for};

/// A tmux server of the test's own (its socket in the test's directory).
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(&self.socket);
        command
    }

    fn screen(&self) -> String {
        let output = run(self.command().args(["capture-pane", "-p", "-t", "top"]));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn alive(&self) -> bool {
        self.command()
            .args(["has-session", "-t", "top"])
            .output()
            .is_ok_and(|output| output.status.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|output| output.status.success())
}

#[test]
fn top_shows_live_counts_and_a_failure_and_quits_on_q() {
    if !tmux_available() {
        // The README's test command installs tmux and sets SAKER_REQUIRE_TMUX=1; a
        // bare `cargo test` may lack it.
        assert!(
            std::env::var("SAKER_REQUIRE_TMUX").as_deref() != Ok("1"),
            "SAKER_REQUIRE_TMUX=1 but tmux cannot run: install tmux"
        );
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 3);
    let pilot = service.pilot.clone();
    let submit = |args: &[&str]| {
        let output = run(saker().args(["submit", "--dir"]).arg(&pilot).args(args));
        assert!(output.status.success(), "{output:?}");
    };
    submit(&["--array", "1-2", "--", "sleep", "60"]);

    let tmux = Tmux {
        socket: dir.path().join("tmux.sock"),
    };
    let code = dir.path().join("code");
    let binary = saker().get_program().to_owned();
    let shell = format!(
        "{} top --dir {} --interval 200ms; echo $? > {}",
        shell_quote(Path::new(&binary)),
        shell_quote(&pilot),
        shell_quote(&code)
    );
    let started = run(tmux.command().args([
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "45",
        &shell,
    ]));
    assert!(started.status.success(), "{started:?}");

    let terminal = &tmux;
    let shows = |text: &'static str| move || terminal.screen().contains(text);
    wait_for(
        "the view with two running tasks",
        Duration::from_secs(20),
        || {
            let screen = tmux.screen();
            screen.contains("saker top: pilot") && screen.contains("running 2 ")
        },
    );
    let screen = tmux.screen();
    assert!(screen.contains("slots 3 (2 busy)"), "{screen}");
    assert!(screen.contains("recent failures (0 seen)"), "{screen}");
    assert!(screen.contains("data   0 items, 0 B held"), "{screen}");
    assert!(
        screen.contains("HELD") && screen.contains("FETCHED"),
        "{screen}"
    );

    // A failure while the view is up: counted and listed with its exit code.
    submit(&["--", "sh", "-c", "exit 3"]);
    // Listed from the results stream at once; counted at the next `status`.
    wait_for(
        "the failure listed",
        Duration::from_secs(20),
        shows("exit 3"),
    );
    wait_for(
        "the failure counted",
        Duration::from_secs(20),
        shows("failed 1 "),
    );
    let screen = tmux.screen();
    assert!(screen.contains("recent failures (1 seen)"), "{screen}");
    assert!(screen.contains("(job 2) failed on"), "{screen}");
    // Its stages are in the table once its result is accepted.
    assert!(
        screen
            .lines()
            .any(|line| line.contains("total") && line.contains(" 1 ")),
        "{screen}"
    );

    run(tmux.command().args(["send-keys", "-t", "top", "q"]));
    wait_for("saker top to exit", Duration::from_secs(10), || {
        code.exists() && !std::fs::read_to_string(&code).unwrap().is_empty()
    });
    assert_eq!(std::fs::read_to_string(&code).unwrap().trim(), "0");
    wait_for("the tmux session to end", Duration::from_secs(10), || {
        !tmux.alive()
    });
    drop(service);
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

#[test]
fn top_without_a_terminal_says_to_use_status() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(saker()
        .args(["top", "--dir"])
        .arg(dir.path())
        .stdin(std::process::Stdio::null()));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("saker status"), "{stderr}");
}
