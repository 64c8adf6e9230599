//! wprof's entry point: parse arguments, dispatch, map errors to exit codes.

use clap::Parser;
use wprof::args::{Cli, Command};
use wprof::{commands, error, session};

fn main() {
    // wprof re-executed as its own calibration target (see probe_cost::targets).
    if std::env::args().nth(1).as_deref() == Some(wprof::probe_cost::targets::CHILD_ARG) {
        std::process::exit(wprof::probe_cost::targets::child_main());
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Attach(a) => session::attach(a),
        Command::Record(r) => session::record(r),
        Command::Probes(p) => commands::probes(p),
        Command::Targets => commands::targets(),
        Command::Report(r) => commands::report(r),
        Command::Compare(c) => wprof::analyze::compare::run(c),
        Command::Check(c) => wprof::analyze::check::run(c),
        Command::Merge(m) => commands::merge(m),
        Command::Doctor(d) => wprof::doctor::run(d.json),
        Command::Export(e) => commands::export(e),
        Command::Completions { shell } => {
            wprof::cli_docs::completions(shell, &mut wprof::stdout::Stdout);
            Ok(0)
        }
        Command::Man { dir } => wprof::cli_docs::man(dir.as_deref()),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("wprof: {}", error::readable(&format!("{e:#}")));
            std::process::exit(error::exit_code(&e));
        }
    }
}
