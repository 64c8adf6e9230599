//! What a run traces, checked against the host: running processes that exist, are not wprof
//! itself and may be traced, or a command found on $PATH with the credentials to start it.
//!
//! In: the plan's [`TargetSpec`]. Out: a [`Checked`] target, the [`Scope`] its profile
//! resolves in, and then the [`Target`] [`super::Session::trace`] follows (the processes, or
//! the command's child held at its gate until the probes are live).

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::child::{self, GatedChild};
use super::config::{usage, TargetSpec};
use crate::attach::{check_capabilities, process_alive};
use crate::error::WprofError;
use crate::privilege::command::Launch;
use crate::resolve::Scope;

/// A target the host agreed to, not started yet.
pub enum Checked {
    /// Running processes.
    Pids {
        /// The processes.
        pids: Vec<u32>,
        /// `--follow-forks`.
        follow_forks: bool,
    },
    /// A command to start.
    Command {
        /// The executable found for the command's first word.
        exe: PathBuf,
        /// The command and its arguments.
        argv: Vec<String>,
        /// The credentials the command runs with.
        launch: Launch,
    },
}

/// What [`super::Session::trace`] traces.
pub enum Target {
    /// Running processes (`attach`).
    Pids {
        /// The processes.
        pids: Vec<u32>,
        /// `--follow-forks`.
        follow_forks: bool,
    },
    /// `record`'s child, held at its gate until released.
    Child {
        /// The child.
        child: GatedChild,
        /// Its command line, for the run's provenance.
        argv: Vec<String>,
    },
}

/// Refuses wprof itself, processes that are gone, and processes the real user may not trace.
fn check_pids(pids: &[u32]) -> Result<()> {
    for &pid in pids {
        // Its own probes would fire inside its own BPF-reading loop: each hit makes work that
        // hits again (a livelock that ignores --duration and signals).
        if pid == std::process::id() || Path::new(&format!("/proc/self/task/{pid}")).exists() {
            return Err(usage(format!(
                "pid {pid} is wprof itself (or one of its threads): wprof cannot trace itself"
            )));
        }
        if !process_alive(pid) {
            let why = if Path::new(&format!("/proc/{pid}")).exists() {
                format!(
                    "process {pid} has exited (a zombie its parent has not reaped yet): there is \
                     nothing left to trace"
                )
            } else {
                format!(
                    "no process with pid {pid} (check `ps -p {pid}`; wprof attaches to running \
                     processes)"
                )
            };
            return Err(WprofError::NoProcess(why).into());
        }
    }
    crate::privilege::check_may_trace(pids)?;
    Ok(())
}

impl Checked {
    /// Checks the capabilities first (so a missing one is reported as such and not as a /proc
    /// permission error), then the target itself.
    pub fn of(spec: &TargetSpec) -> Result<Checked> {
        check_capabilities()?;
        match spec {
            TargetSpec::Pids { pids, follow_forks } => {
                check_pids(pids)?;
                Ok(Checked::Pids {
                    pids: pids.clone(),
                    follow_forks: *follow_forks,
                })
            }
            TargetSpec::Command { argv, as_root } => {
                let exe = child::find_executable(&argv[0])?;
                let launch = crate::privilege::command::launch_for(&exe, *as_root)?;
                Ok(Checked::Command {
                    exe,
                    argv: argv.clone(),
                    launch,
                })
            }
        }
    }

    /// Where the profile resolves: in the processes' mappings, or in the command's binary.
    pub fn scope(&self) -> Scope {
        match self {
            Checked::Pids { pids, .. } => Scope::Pids(pids.clone()),
            Checked::Command { exe, .. } => Scope::Binary(exe.clone()),
        }
    }

    /// The target to trace: for a command, its child forked and held at the gate.
    pub fn start(self) -> Result<Target> {
        Ok(match self {
            Checked::Pids { pids, follow_forks } => Target::Pids { pids, follow_forks },
            Checked::Command { exe, argv, launch } => Target::Child {
                child: GatedChild::spawn(&exe, &argv, &launch)?,
                argv,
            },
        })
    }
}

impl Target {
    /// The pids the probes go on.
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Target::Pids { pids, .. } => pids.clone(),
            Target::Child { child, .. } => vec![child.pid()],
        }
    }

    /// Whether the processes they fork are traced too.
    pub fn follows_forks(&self) -> bool {
        matches!(
            self,
            Target::Pids {
                follow_forks: true,
                ..
            }
        )
    }

    /// After a failed attach: a child that was never released is killed.
    pub fn abort(&mut self) {
        if let Target::Child { child, .. } = self {
            child.abort();
        }
    }
}
