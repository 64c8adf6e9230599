//! Errors a caller branches on, and the exit codes they map to (docs/exit-codes in README).

use thiserror::Error;

/// Errors with a documented exit code. Everything else is a runtime error (exit 1).
#[derive(Debug, Error)]
pub enum WprofError {
    /// Bad command-line usage (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A profile that does not parse or validate (exit 2).
    #[error("{0}")]
    Profile(String),
    /// A required phase did not resolve (exit 4).
    #[error("{0}")]
    Unresolved(String),
    /// The host cannot trace (missing capability, no BPF), or wprof may not trace this process
    /// or program for its user (crate::privilege) (exit 1, with the fix in the text).
    #[error("{0}")]
    Permission(String),
    /// A traced process does not exist or went away before attach finished (exit 1).
    #[error("{0}")]
    NoProcess(String),
}

/// Exit codes, as documented in the README.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// Runtime error.
    pub const RUNTIME: i32 = 1;
    /// Usage error (arguments, malformed profile).
    pub const USAGE: i32 = 2;
    /// A check or compare threshold failed.
    pub const CHECK_FAILED: i32 = 3;
    /// A required phase could not be resolved.
    pub const UNRESOLVED: i32 = 4;
    /// `--max-overhead` detached the probes (outputs were written).
    pub const OVER_BUDGET: i32 = 5;
}

/// The exit code for an error that ended the program.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    match err.downcast_ref::<WprofError>() {
        Some(WprofError::Usage(_)) | Some(WprofError::Profile(_)) => exit::USAGE,
        Some(WprofError::Unresolved(_)) => exit::UNRESOLVED,
        _ => exit::RUNTIME,
    }
}

/// Longest line of an error message shown: a parser quoting a 300 KB line of a hostile file
/// must not flood the terminal.
const MAX_ERROR_LINE: usize = 1_000;

/// `message` with every line longer than [`MAX_ERROR_LINE`] cut, saying how much was left out.
pub fn readable(message: &str) -> String {
    message
        .lines()
        .map(|l| {
            if l.len() <= MAX_ERROR_LINE {
                return l.to_string();
            }
            let mut cut = MAX_ERROR_LINE;
            while !l.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}… ({} more bytes)", &l[..cut], l.len() - cut)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod readable_tests {
    #[test]
    fn long_lines_are_cut_and_say_so() {
        let long = "é".repeat(800); // 1,600 bytes
        let out = super::readable(&format!("short\n{long}"));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "short");
        assert!(
            lines[1].len() < 1_100 && lines[1].ends_with("(600 more bytes)"),
            "{}",
            lines[1]
        );
    }
}
