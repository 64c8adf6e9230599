//! Shell completions and man pages, generated from the clap definition in `args.rs` (so they
//! can never disagree with `--help`): `wprof completions SHELL` and `wprof man [--dir DIR]`.
//! Copies are kept in docs/completions and docs/man; a test fails when they are stale.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::args::Cli;

/// Writes the completion script for `shell` to `out`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "wprof", out);
}

/// The man pages: `wprof.1`, then `wprof-SUBCOMMAND.1` for each subcommand, as (file name,
/// roff text).
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    let cmd = Cli::command();
    let mut pages = Vec::new();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    pages.push(("wprof.1".to_string(), buf));
    for sub in cmd.get_subcommands() {
        let name = format!("wprof-{}", sub.get_name());
        let sub = sub.clone().name(name.clone());
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub).render(&mut buf)?;
        pages.push((format!("{name}.1"), buf));
    }
    Ok(pages)
}

/// `wprof man`: wprof.1 on stdout, or every page into `dir`.
pub fn man(dir: Option<&Path>) -> Result<i32> {
    let pages = man_pages()?;
    match dir {
        None => crate::stdout::Stdout.write_all(&pages[0].1)?,
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
            for (name, text) in &pages {
                let path = d.join(name);
                crate::output_file::write(&path, text)?;
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/completions and docs/man are what this build generates (`WPROF_BLESS=1` rewrites
    /// them after a change to the command line).
    #[test]
    fn committed_completions_and_man_pages_are_current() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        let bless = std::env::var("WPROF_BLESS").is_ok_and(|v| v == "1");
        let mut expected: Vec<(std::path::PathBuf, Vec<u8>)> = Vec::new();
        for (shell, file) in [
            (clap_complete::Shell::Bash, "wprof.bash"),
            (clap_complete::Shell::Zsh, "_wprof"),
            (clap_complete::Shell::Fish, "wprof.fish"),
        ] {
            let mut buf = Vec::new();
            completions(shell, &mut buf);
            expected.push((root.join("completions").join(file), buf));
        }
        for (name, text) in man_pages().unwrap() {
            expected.push((root.join("man").join(name), text));
        }
        for (path, want) in expected {
            if bless {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &want).unwrap();
                continue;
            }
            let have = std::fs::read(&path).unwrap_or_default();
            assert!(
                have == want,
                "{} is stale: regenerate with WPROF_BLESS=1 cargo test --lib cli_docs",
                path.display()
            );
        }
    }

    #[test]
    fn every_subcommand_has_a_page_and_completions_know_them() {
        let pages = man_pages().unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        for sub in [
            "attach", "record", "probes", "report", "compare", "check", "doctor", "export",
        ] {
            assert!(
                names.contains(&format!("wprof-{sub}.1").as_str()),
                "{names:?}"
            );
        }
        let mut bash = Vec::new();
        completions(clap_complete::Shell::Bash, &mut bash);
        let bash = String::from_utf8(bash).unwrap();
        assert!(bash.contains("--follow-forks") && bash.contains("doctor"));
    }
}
