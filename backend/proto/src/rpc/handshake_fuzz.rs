//! Hostile bytes where the TLS handshake (or a plaintext HELLO) is expected: random
//! bytes, TLS-record-shaped ones, a plaintext frame prefix, and mutations of a real
//! ClientHello. The server must close each connection (no hang, no panic) and still
//! serve a good client afterwards.

use super::*;
use crate::msg::{PeerKind, Reply, Request, Response, Welcome};
use crate::principal::Principal;
use crate::principal::Role;
use crate::tls::test_ca;
use crate::tls::Transport;
use crate::PROTOCOL_VERSION;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

struct Nop;

impl Service for Nop {
    fn welcome(&self, session: u64) -> Welcome {
        Welcome { version: PROTOCOL_VERSION, session, node: "n".into() }
    }
    fn call(&self, _: Arc<Session>, _: Request, _: Bytes) -> BoxFuture<'static, (Response, Bytes)> {
        Box::pin(async { (Ok(Reply::Pong), Bytes::new()) })
    }
}

fn client_hello() -> Vec<u8> {
    let Transport::Tls(t) = test_ca::transport(&Principal::new("c", Role::Client)) else {
        unreachable!()
    };
    let name = rustls::pki_types::ServerName::try_from("cairn").unwrap();
    let mut c = rustls::ClientConnection::new(t.client.clone(), name).unwrap();
    let mut out = vec![];
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    out
}

fn cases(n: usize) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let hello = client_hello();
    (0..n)
        .map(|i| {
            let len = (rnd() % 600) as usize;
            let mut v: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            match i % 4 {
                0 => {}
                1 => {
                    let head = [0x16, 0x03, 0x01, (rnd() % 256) as u8, (rnd() % 256) as u8];
                    v.splice(0..0, head);
                }
                2 => {
                    v.splice(0..0, *b"CAIR");
                }
                _ => {
                    v.clone_from(&hello);
                    for _ in 0..1 + rnd() % 8 {
                        let at = (rnd() as usize) % v.len();
                        match rnd() % 3 {
                            0 => v[at] ^= 1 << (rnd() % 8),
                            1 => v.truncate(at.max(1)),
                            _ => v.insert(at, rnd() as u8),
                        }
                    }
                }
            };
            v
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_handshakes_are_closed_and_the_server_still_serves() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let t = test_ca::transport(&Principal::new("n1", Role::Node));
    tokio::spawn(serve_with(l, Arc::new(Nop), t));
    let all = cases(256);
    for batch in all.chunks(32) {
        let runs = batch.iter().cloned().map(|bytes| {
            let addr = addr.clone();
            async move {
                let mut s = TcpStream::connect(&addr).await.unwrap();
                let _ = s.write_all(&bytes).await;
                let _ = s.shutdown().await;
                let mut sink = vec![0u8; 4096];
                let end = tokio::time::timeout(HANDSHAKE_TIMEOUT + Duration::from_secs(5), async {
                    while let Ok(1..) = s.read(&mut sink).await {}
                });
                assert!(end.await.is_ok(), "server kept a hostile handshake open: {bytes:02x?}");
            }
        });
        futures::future::join_all(runs).await;
    }
    let good = test_ca::transport(&Principal::new("admin", Role::Admin));
    let c = Connection::connect_with(
        &addr,
        None,
        &good,
        PeerKind::Cli,
        "t",
        None,
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(matches!(c.call(Request::Ping, Bytes::new()).await.unwrap().0, Reply::Pong));
}
