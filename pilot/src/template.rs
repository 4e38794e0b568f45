//! `saker template`: the batch scripts of sbatch-templates/, embedded in the binary
//! and filled in with a user's settings.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TemplateKind {
    /// Run a task file across the allocation, then exit.
    Mtc,
    /// Hold the allocation and run what clients submit, until shut down.
    Service,
    /// Run what fits, then continue in a chained allocation, until done.
    Campaign,
    /// Run a Parsl workflow script on a pilot across the allocation.
    Parsl,
    /// Run a Snakemake workflow with its jobs on a pilot across the allocation.
    Snakemake,
    /// Run a program built on the Rust API (`APP`) on a pilot across the allocation.
    App,
    /// Hold an elastic pilot's root, which asks for allocations of its own.
    Elastic,
}

impl TemplateKind {
    pub fn text(self) -> &'static str {
        match self {
            TemplateKind::Mtc => include_str!("../../sbatch-templates/mtc.sbatch"),
            TemplateKind::Service => include_str!("../../sbatch-templates/service.sbatch"),
            TemplateKind::Campaign => include_str!("../../sbatch-templates/campaign.sbatch"),
            TemplateKind::Parsl => include_str!("../../sbatch-templates/parsl.sbatch"),
            TemplateKind::Snakemake => include_str!("../../sbatch-templates/snakemake.sbatch"),
            TemplateKind::App => include_str!("../../sbatch-templates/app.sbatch"),
            TemplateKind::Elastic => include_str!("../../sbatch-templates/elastic.sbatch"),
        }
    }
}

/// Settings to fill in; `None` keeps the template's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub nodes: Option<u32>,
    pub time: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub tasks: Option<PathBuf>,
    pub dir: Option<PathBuf>,
    pub saker: Option<PathBuf>,
    pub script: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub snakemake: Option<PathBuf>,
}

/// The template with `settings` applied.
pub fn render(kind: TemplateKind, settings: &Settings) -> String {
    let mut out = String::with_capacity(kind.text().len() + 256);
    for line in kind.text().lines() {
        let rendered = render_line(line, settings).unwrap_or_else(|| line.to_string());
        out.push_str(&rendered);
        out.push('\n');
    }
    out
}

fn render_line(line: &str, settings: &Settings) -> Option<String> {
    let sbatch = |option: &str, value: &str| {
        // Keep the template's trailing comment, if any.
        let comment = line.find(" #").map(|at| &line[at..]).unwrap_or("");
        format!("#SBATCH --{option}={value}{comment}")
    };
    let default = |name: &str, value: &Path| format!("{name}=${{{name}:-{}}}", value.display());
    if line.starts_with("#SBATCH --nodes=") {
        return settings.nodes.map(|n| sbatch("nodes", &n.to_string()));
    }
    if line.starts_with("#SBATCH --time=") {
        return settings.time.as_deref().map(|t| sbatch("time", t));
    }
    if line.starts_with("##SBATCH --account=") {
        return settings.account.as_deref().map(|a| sbatch("account", a));
    }
    if line.starts_with("##SBATCH --partition=") {
        return settings
            .partition
            .as_deref()
            .map(|p| sbatch("partition", p));
    }
    if line.starts_with("TASKS=${TASKS:-") {
        return settings.tasks.as_deref().map(|t| default("TASKS", t));
    }
    if line.starts_with("PILOT=${PILOT:-") {
        return settings.dir.as_deref().map(|d| default("PILOT", d));
    }
    if line.starts_with("SAKER=${SAKER:-") {
        return settings.saker.as_deref().map(|s| default("SAKER", s));
    }
    if line.starts_with("SCRIPT=${SCRIPT:-") {
        return settings.script.as_deref().map(|s| default("SCRIPT", s));
    }
    if line.starts_with("PYTHON=${PYTHON:-") {
        return settings.python.as_deref().map(|p| default("PYTHON", p));
    }
    if line.starts_with("SNAKEMAKE=${SNAKEMAKE:-") {
        return settings
            .snakemake
            .as_deref()
            .map(|p| default("SNAKEMAKE", p));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_replace_the_template_defaults_and_nothing_else() {
        let settings = Settings {
            nodes: Some(8),
            time: Some("12:00:00".into()),
            account: Some("proj42".into()),
            partition: Some("compute".into()),
            tasks: Some("/scratch/tasks.txt".into()),
            dir: Some("/scratch/pilot".into()),
            saker: Some("/opt/saker/bin/saker".into()),
            script: Some("/home/me/flow.py".into()),
            python: Some("/opt/venv/bin/python".into()),
            snakemake: Some("/opt/venv/bin/snakemake".into()),
        };
        for kind in [
            TemplateKind::Mtc,
            TemplateKind::Service,
            TemplateKind::Campaign,
            TemplateKind::Parsl,
            TemplateKind::Snakemake,
            TemplateKind::App,
            TemplateKind::Elastic,
        ] {
            let text = render(kind, &settings);
            assert!(text.contains("#SBATCH --nodes=8 "), "{text}");
            assert!(text.contains("#SBATCH --time=12:00:00"), "{text}");
            assert!(text.contains("\n#SBATCH --account=proj42\n"), "{text}");
            assert!(text.contains("\n#SBATCH --partition=compute\n"), "{text}");
            assert!(text.contains("PILOT=${PILOT:-/scratch/pilot}"), "{text}");
            assert!(
                text.contains("SAKER=${SAKER:-/opt/saker/bin/saker}"),
                "{text}"
            );
            assert_eq!(text.lines().count(), kind.text().lines().count());
            // The result is still a valid shell script.
            let checked = std::process::Command::new("bash")
                .args(["-n", "-c", &text])
                .status()
                .unwrap();
            assert!(checked.success());
        }
        assert!(
            render(TemplateKind::Mtc, &settings).contains("TASKS=${TASKS:-/scratch/tasks.txt}")
        );
        let parsl = render(TemplateKind::Parsl, &settings);
        assert!(
            parsl.contains("SCRIPT=${SCRIPT:-/home/me/flow.py}"),
            "{parsl}"
        );
        assert!(
            parsl.contains("PYTHON=${PYTHON:-/opt/venv/bin/python}"),
            "{parsl}"
        );
        let snakemake = render(TemplateKind::Snakemake, &settings);
        for line in [
            "SNAKEMAKE=${SNAKEMAKE:-/opt/venv/bin/snakemake}",
            "PYTHON=${PYTHON:-/opt/venv/bin/python}",
        ] {
            assert!(snakemake.contains(line), "{snakemake}");
        }
    }

    #[test]
    fn without_settings_the_template_is_unchanged() {
        for kind in [
            TemplateKind::Mtc,
            TemplateKind::Service,
            TemplateKind::Campaign,
            TemplateKind::Parsl,
            TemplateKind::Snakemake,
            TemplateKind::App,
            TemplateKind::Elastic,
        ] {
            assert_eq!(render(kind, &Settings::default()), kind.text());
        }
    }
}
