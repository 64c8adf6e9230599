//! A running `wprof attach` as the PostgreSQL tests drive it: started, waited for until its
//! probes are live, stopped with SIGINT, its stderr kept throughout.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wprof;

/// A running `wprof attach` whose stderr is kept.
pub struct Attach {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Attach {
    /// Starts `wprof attach ARGS --json JSON` and returns once its probes are live.
    pub fn start(args: &[&str], json: &Path) -> Attach {
        let mut child = wprof()
            .arg("attach")
            .args(args)
            .arg("--json")
            .arg(json)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wprof");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = BufReader::new(child.stderr.take().expect("stderr"));
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if line.contains("wprof: attached") {
                    let _ = tx.send(());
                }
                keep.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        if rx.recv_timeout(Duration::from_secs(90)).is_err() {
            let _ = child.kill();
            panic!("wprof did not attach:\n{}", stderr.lock().unwrap().as_str());
        }
        Attach { child, stderr }
    }

    /// Stops it with SIGINT (unless it already ended) and returns (stdout, stderr); wprof
    /// must exit 0.
    pub fn stop(self) -> (String, String) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.wait()
    }

    /// Waits for it to end by itself (within 60 s) and returns (stdout, stderr).
    pub fn wait(mut self) -> (String, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("wprof did not end:\n{}", self.stderr.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = self.child.wait_with_output().expect("wprof output");
        // Let the reader thread catch the last lines.
        std::thread::sleep(Duration::from_millis(100));
        let err = self.stderr.lock().unwrap().clone();
        assert!(
            out.status.success(),
            "wprof exited {:?}:\n{err}",
            out.status
        );
        (String::from_utf8_lossy(&out.stdout).into_owned(), err)
    }
}
