//! The HTTP side of `--serve`: one listener thread (tiny_http) answering `GET /metrics`.
//!
//! A scrape asks the collect loop for fresh figures ([`Server::wanted`]) and waits until it
//! publishes them ([`Server::publish`], within a poll of the loop, 20 ms) or [`FRESH_WAIT`]
//! passes, then answers with the last ones published: protobuf when the scraper accepts it
//! (Prometheus with native histograms on), text otherwise. Nothing is computed when nobody
//! scrapes. Dropping the server stops the thread.

use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::proto::CONTENT_TYPE;

/// How long a scrape waits for the collect loop's fresh figures before it takes the last
/// ones (the loop may be busy detaching, or moving probes).
const FRESH_WAIT: Duration = Duration::from_secs(2);

/// The text format's content type.
const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the loop published last.
#[derive(Default)]
struct Published {
    protobuf: Vec<u8>,
    text: String,
    generation: u64,
    /// A scrape waits for the next generation.
    wanted: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<Published>,
    fresh: Condvar,
}

/// A listening `--serve` endpoint.
pub struct Server {
    addr: SocketAddr,
    http: Arc<tiny_http::Server>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Listens on `addr` (a port in use or an address not of this host is an error that says
    /// so) and starts answering.
    pub fn bind(addr: SocketAddr) -> Result<Server> {
        let http = tiny_http::Server::http(addr).map_err(|e| {
            anyhow!(
                "--serve {addr}: cannot listen there: {e} (is another wprof or exporter using the \
                 port? pick another one, e.g. 127.0.0.1:9465)"
            )
        })?;
        let addr = http
            .server_addr()
            .to_ip()
            .ok_or_else(|| anyhow!("--serve {addr}: not an IP listener"))?;
        let http = Arc::new(http);
        let shared = Arc::new(Shared::default());
        let thread = {
            let (http, shared) = (http.clone(), shared.clone());
            std::thread::Builder::new()
                .name("wprof-serve".into())
                .spawn(move || answer(&http, &shared))?
        };
        Ok(Server {
            addr,
            http,
            shared,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port chosen when asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether a scrape waits for fresh figures.
    pub fn wanted(&self) -> bool {
        self.lock().wanted
    }

    /// Publishes an exposition in both formats and wakes the waiting scrapes.
    pub fn publish(&self, protobuf: Vec<u8>, text: String) {
        let mut p = self.lock();
        p.protobuf = protobuf;
        p.text = text;
        p.generation += 1;
        p.wanted = false;
        self.shared.fresh.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Published> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.http.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The listener thread: answers requests until the server is unblocked.
fn answer(http: &tiny_http::Server, shared: &Shared) {
    for request in http.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("").to_string();
        let response = if path != "/metrics" {
            let body = "wprof: Prometheus metrics are at /metrics\n";
            let status = if path == "/" { 200 } else { 404 };
            tiny_http::Response::from_string(body).with_status_code(status)
        } else {
            let protobuf = request.headers().iter().any(|h| {
                h.field.equiv("Accept")
                    && h.value.as_str().contains("application/vnd.google.protobuf")
            });
            let (body, kind) = fresh(shared, protobuf);
            let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], kind.as_bytes())
                .unwrap_or_else(|_| unreachable!("a constant, valid header"));
            tiny_http::Response::from_data(body).with_header(header)
        };
        // A scraper that hung up is not wprof's problem.
        let _ = request.respond(response);
    }
}

/// Waits for the next publication (up to [`FRESH_WAIT`]) and returns it in the format asked.
fn fresh(shared: &Shared, protobuf: bool) -> (Vec<u8>, &'static str) {
    let mut p = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let seen = p.generation;
    p.wanted = true;
    let deadline = Instant::now() + FRESH_WAIT;
    while p.generation == seen {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        p = shared
            .fresh
            .wait_timeout(p, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    if protobuf {
        (p.protobuf.clone(), CONTENT_TYPE)
    } else {
        (p.text.clone().into_bytes(), TEXT_TYPE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str, accept: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_scrape_gets_what_the_loop_publishes_in_the_format_it_accepts() {
        let server = Server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.addr();
        let publisher = std::thread::spawn(move || {
            // The loop: publishes whenever a scrape waits.
            let mut n = 0;
            while n < 2 {
                if server.wanted() {
                    n += 1;
                    server.publish(b"PB".to_vec(), format!("text {n}\n"));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            server
        });
        let text = get(addr, "/metrics", "text/plain");
        assert!(
            text.contains("text 1") && text.contains("version=0.0.4"),
            "{text}"
        );
        let pb = get(addr, "/metrics", CONTENT_TYPE);
        assert!(
            pb.ends_with("PB") && pb.contains("encoding=delimited"),
            "{pb}"
        );
        assert!(get(addr, "/nope", "*/*").starts_with("HTTP/1.1 404"));
        drop(publisher.join().unwrap());
    }

    #[test]
    fn a_port_in_use_is_a_clear_error() {
        let first = Server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let e = Server::bind(first.addr()).err().expect("port in use");
        let msg = format!("{e:#}");
        assert!(msg.contains("cannot listen there"), "{msg}");
    }
}
