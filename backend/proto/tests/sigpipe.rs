//! A write to a peer that went away is an error, not SIGPIPE: libcairn runs inside Ganesha,
//! smbd and tcmu-runner, which keep SIGPIPE's default action (die). Alone in its own test
//! binary because it sets that process-wide disposition.

use cairn_proto::stream::plain;
use std::io::{ErrorKind, IoSlice};
use std::time::Duration;

#[tokio::test]
async fn a_write_to_a_closed_peer_is_an_error_not_sigpipe() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = tokio::net::TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    drop(s);
    // SAFETY: setting a signal disposition; this binary holds only this test.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let (_r, w) = plain(c);
    let buf = vec![7u8; 64 * 1024];
    let mut err = None;
    for _ in 0..200 {
        match w.try_write_vectored(&[IoSlice::new(&buf)]) {
            // the first writes may land before the peer's RST comes back
            Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let e = err.expect("writes to a closed peer kept succeeding");
    assert!(
        matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)),
        "unexpected error: {e}"
    );
}
