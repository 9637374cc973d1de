//! What the store benches share: a TCP proxy that counts a client's request flights
//! ([`Counter`]), and percentiles.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

/// A TCP proxy that counts the client's request flights.
pub struct Counter {
    /// The proxy's port on 127.0.0.1.
    pub port: u16,
    /// The client flights counted so far, over every connection: a flight is a run of
    /// client bytes after the server spoke.
    pub flights: Arc<AtomicU64>,
}

impl Counter {
    /// Starts the proxy in front of 127.0.0.1:`target`.
    pub fn start(target: u16) -> Counter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let flights = Arc::new(AtomicU64::new(0));
        let f = flights.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                // Who spoke last on this connection: 0 nobody, 1 client, 2 server.
                let last = Arc::new(AtomicU8::new(0));
                for (from, to, me) in [
                    (
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        1u8,
                    ),
                    (
                        server.try_clone().unwrap(),
                        client.try_clone().unwrap(),
                        2u8,
                    ),
                ] {
                    let (f, last) = (f.clone(), last.clone());
                    std::thread::spawn(move || pump(from, to, me, &last, &f));
                }
            }
        });
        Counter { port, flights }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, me: u8, last: &AtomicU8, flights: &AtomicU64) {
    let mut buf = [0u8; 65536];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if last.swap(me, Ordering::SeqCst) != me && me == 1 {
                    flights.fetch_add(1, Ordering::SeqCst);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

/// The `p` quantile (0 to 1) of `sorted`, by nearest rank; zero for none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
