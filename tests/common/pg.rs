//! A throwaway PostgreSQL 15 cluster for the integration tests: initdb in a temp dir, a free
//! port, the unix socket in the temp dir (no TCP listener), run as user `postgres` (initdb
//! refuses root). Dropping the [`Pg`] stops the server (immediate mode) and removes the
//! directory, also when the test failed.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use super::http::free_port;

/// Debian's PostgreSQL 15 binaries.
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Whether PostgreSQL 15 and `runuser` are installed (the skip rule of `wprof::testing`).
pub fn available() -> bool {
    let ok = Path::new(PG_BIN).join("postgres").exists()
        && Path::new(PG_BIN).join("psql").exists()
        && Command::new("runuser").arg("--help").output().is_ok()
        && nix_is_root();
    wprof::testing::require(ok, "PostgreSQL 15 (apt postgresql-15), runuser and root")
}

fn nix_is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// The postgres server binary the backends run.
pub fn postgres_binary() -> PathBuf {
    Path::new(PG_BIN).join("postgres")
}

/// A running throwaway cluster.
pub struct Pg {
    dir: tempfile::TempDir,
    /// The port (names the socket file; there is no TCP listener).
    pub port: u16,
    /// Server settings beyond the defaults (`-c name=value` each), kept for restarts.
    settings: Vec<String>,
}

fn as_postgres(dir: &Path, program: &str) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"])
        .arg(Path::new(PG_BIN).join(program))
        .current_dir(dir);
    c
}

fn must(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

impl Pg {
    /// initdb + start; panics with the server log when either fails.
    pub fn start() -> Pg {
        Pg::start_with(&[])
    }

    /// Like [`Pg::start`], with server settings (`("track_wal_io_timing", "on")`) on the
    /// command line.
    pub fn start_with(settings: &[(&str, &str)]) -> Pg {
        let dir = tempfile::Builder::new()
            .prefix("wprof-pg-")
            .tempdir()
            .expect("temp dir");
        must(
            Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path()),
            "chown the cluster dir",
        );
        let pg = Pg {
            dir,
            port: free_port(),
            settings: settings
                .iter()
                .map(|(k, v)| format!(" -c {k}={v}"))
                .collect(),
        };
        std::fs::create_dir_all(pg.sock()).expect("socket dir");
        must(
            Command::new("chown")
                .arg("postgres:postgres")
                .arg(pg.sock()),
            "chown the socket dir",
        );
        must(
            as_postgres(pg.dir(), "initdb")
                .arg("-D")
                .arg(pg.data())
                .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
                .arg("--locale=C"),
            "initdb",
        );
        pg.pg_ctl_start();
        pg
    }

    fn pg_ctl_start(&self) {
        let opts = format!(
            "-p {} -c listen_addresses='' -c unix_socket_directories='{}' -c fsync=on{}",
            self.port,
            self.sock().display(),
            self.settings.concat()
        );
        let status = as_postgres(self.dir(), "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.log())
            .args(["-w", "-t", "60", "-o", &opts, "start"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run pg_ctl");
        assert!(
            status.success(),
            "pg_ctl start failed; server log:\n{}",
            self.server_log()
        );
    }

    /// The cluster's temp dir.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn data(&self) -> PathBuf {
        self.dir().join("data")
    }

    /// Directory of the server's unix socket.
    pub fn sock(&self) -> PathBuf {
        self.dir().join("sock")
    }

    fn log(&self) -> PathBuf {
        self.dir().join("server.log")
    }

    /// The server log so far (for failure messages).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    /// Copies a shared library (an extension's .so) into the cluster's directory, where the
    /// server (user `postgres`) can read it, and returns its path there: load it with
    /// `CREATE FUNCTION ... AS 'PATH', 'symbol' LANGUAGE C`, nothing is installed into /usr.
    pub fn install_library(&self, so: &Path) -> PathBuf {
        let dir = self.dir().join("lib");
        std::fs::create_dir_all(&dir).expect("library dir");
        let dest = dir.join(so.file_name().expect("a file name"));
        std::fs::copy(so, &dest)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", so.display(), dest.display()));
        dest
    }

    /// A libpq connection string for this cluster.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.sock().display(),
            self.port
        )
    }

    fn psql_command(&self) -> Command {
        let mut c = Command::new(Path::new(PG_BIN).join("psql"));
        c.args(["-X", "-q", "-A", "-t", "-h"])
            .arg(self.sock())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ]);
        c
    }

    /// Runs a PostgreSQL 15 client program (`pgbench`, ...) against this cluster as user
    /// `postgres` on database `postgres`, with `args`; returns its output (stdout then
    /// stderr), panics when it fails.
    pub fn client(&self, program: &str, args: &[&str]) -> String {
        let mut c = Command::new(Path::new(PG_BIN).join(program));
        c.arg("-h")
            .arg(self.sock())
            .args(["-p", &self.port.to_string(), "-U", "postgres"])
            .args(args)
            .arg("postgres");
        must(&mut c, &format!("{program} {args:?}"))
    }

    /// Runs SQL in a new session (`ON_ERROR_STOP`); returns its output, panics on an error.
    pub fn psql(&self, sql: &str) -> String {
        must(
            self.psql_command()
                .args(["-v", "ON_ERROR_STOP=1", "-c", sql]),
            &format!("psql -c {sql:?}"),
        )
    }

    /// The postmaster's pid (first line of postmaster.pid).
    pub fn postmaster_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .expect("read postmaster.pid");
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("postmaster.pid starts with the pid")
    }

    /// Stops the server (immediate mode, as a crash would) and starts it again on the same
    /// port: every backend ends and the postmaster gets a new pid.
    pub fn restart(&self) {
        self.stop();
        self.pg_ctl_start();
    }

    fn stop(&self) {
        let _ = as_postgres(self.dir(), "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "-t", "60", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Opens a psql session that stays connected (one backend) until dropped.
    pub fn session(&self) -> Session {
        // stdout and stderr share one pipe, so an ERROR comes in order with the results.
        let (reader, writer) = std::io::pipe().expect("pipe");
        let mut child = self
            .psql_command()
            .stdin(Stdio::piped())
            .stdout(writer.try_clone().expect("pipe"))
            .stderr(writer)
            .spawn()
            .expect("start psql");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().expect("stdin");
        let mut s = Session {
            child,
            stdin,
            lines: rx,
            backend_pid: 0,
        };
        let out = s.exec("SELECT pg_backend_pid();");
        s.backend_pid = out
            .first()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no backend pid from psql: {out:?}"));
        s
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A connected psql session (one backend process).
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The backend serving this session.
    pub backend_pid: u32,
}

impl Session {
    /// Sends SQL and returns the lines it printed (results and errors, e.g. `ERROR:  duplicate
    /// key ...`), waiting for the statement to finish.
    pub fn exec(&mut self, sql: &str) -> Vec<String> {
        let (out, ended) = self.exec_may_end(sql);
        assert!(!ended, "psql session ended; output so far: {out:?}");
        out
    }

    /// Like [`Session::exec`], for a statement that may end the session (the backend dies):
    /// the lines printed, and whether psql ended instead of finishing the statement.
    pub fn exec_may_end(&mut self, sql: &str) -> (Vec<String>, bool) {
        const MARK: &str = "__wprof_test_done__";
        writeln!(self.stdin, "{sql}\n\\echo {MARK}").expect("write to psql");
        self.stdin.flush().expect("flush psql");
        let mut out = Vec::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(120)) {
                Ok(l) if l == MARK => return (out, false),
                Ok(l) => out.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => return (out, true),
                Err(e) => panic!("psql hung ({e}); output so far: {out:?}"),
            }
        }
    }

    /// Like [`Session::exec`], and panics when the output holds an ERROR.
    pub fn ok(&mut self, sql: &str) -> Vec<String> {
        let out = self.exec(sql);
        assert!(
            !out.iter().any(|l| l.contains("ERROR")),
            "{sql:?} failed: {out:?}"
        );
        out
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "\\q");
        let _ = self.stdin.flush();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The skip rule and the lock of the tests that need both BPF and PostgreSQL: None when they
/// cannot run here (a failure instead under WPROF_REQUIRE_BPF=1, see `wprof::testing`).
pub fn pg_and_bpf() -> Option<std::sync::MutexGuard<'static, ()>> {
    (super::bpf_available() && available()).then(super::bpf_lock)
}
