//! Debian's chromium, headless, as the report tests open a page: its DOM after load,
//! what its console printed, and a screenshot.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A page as chromium rendered it.
pub struct Rendered {
    /// The DOM after load (`--dump-dom`).
    pub dom: String,
    /// Console messages (chromium logs each as a `CONSOLE` line): errors in scripts,
    /// in SVG attributes, anything the page logs.
    pub console: Vec<String>,
    pub elapsed: Duration,
}

/// The browser, or `None` (with a note) when it is not installed and not required.
pub fn chromium() -> Option<PathBuf> {
    let path = PathBuf::from(
        std::env::var_os("SAKER_CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into()),
    );
    if path.exists() {
        return Some(path);
    }
    // The README's test command installs chromium and sets SAKER_REQUIRE_CHROMIUM=1.
    assert!(
        std::env::var("SAKER_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
        "SAKER_REQUIRE_CHROMIUM=1 but {} does not exist: install chromium",
        path.display()
    );
    eprintln!(
        "skipped the browser part: {} is not installed",
        path.display()
    );
    None
}

fn headless(browser: &Path, profile: &Path) -> Command {
    let mut command = Command::new(browser);
    // As root in a sandbox without network: no sandbox, no GPU, no calls home.
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .stdin(Stdio::null());
    command
}

/// Runs `command` to its end, killed after `limit`.
fn finish(mut command: Command, limit: Duration) -> std::process::Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let pid = child.id();
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if waited.recv_timeout(limit).is_err() {
            // Still running: end it so the test fails instead of hanging.
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let output = child.wait_with_output().expect("chromium output");
    let _ = done.send(());
    output
}

/// Loads `page` and returns its DOM after load and the console's messages.
pub fn render(browser: &Path, page: &Path, profile: &Path) -> Rendered {
    let mut command = headless(browser, profile);
    command
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()));
    let began = Instant::now();
    let output = finish(command, Duration::from_secs(120));
    let elapsed = began.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "chromium failed: {stderr}");
    Rendered {
        dom: String::from_utf8_lossy(&output.stdout).into_owned(),
        console: stderr
            .lines()
            .filter(|line| line.contains(":CONSOLE"))
            .map(str::to_owned)
            .collect(),
        elapsed,
    }
}

/// Saves a screenshot of `page`, `width` × `height` pixels, as `png`.
pub fn screenshot(browser: &Path, page: &Path, profile: &Path, png: &Path, size: (u32, u32)) {
    let mut command = headless(browser, profile);
    command
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()));
    let output = finish(command, Duration::from_secs(120));
    assert!(
        output.status.success() && png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
