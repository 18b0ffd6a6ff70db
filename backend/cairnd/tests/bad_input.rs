//! Bad input against a real `cairnd`: garbage and oversized frames, requests before HELLO,
//! a wrong protocol version, unknown volumes, names that try to escape the brick, and a
//! full brick. Every case must get the right error and leave the daemon serving others.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id};
use cairn_proto::frame::{self, Frame, FrameKind, MAX_DATA, PREFIX_LEN};
use cairn_proto::msg::{BrickRequest, Op, Reply, Request, Response};
use cairn_proto::PROTOCOL_VERSION;
use common::{connect_hello, errors_until_close, hello_frame, still_serving, Cluster};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_traffic_is_refused_and_the_daemon_keeps_serving() {
    let c = Cluster::start();

    // Not a Cairn peer at all.
    let mut s = TcpStream::connect(&c.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "garbage gets the connection closed, not an answer");
    still_serving(&c).await;

    // A request before HELLO.
    let mut s = TcpStream::connect(&c.addr).await.unwrap();
    let f = Frame::new(FrameKind::Request, 9, frame::encode(&Request::Ping), Bytes::new());
    frame::write_frame(&mut s, &f).await.unwrap();
    assert_eq!(errors_until_close(&mut s).await, vec![Errno::EPROTO]);

    // A HELLO from a future protocol.
    let mut s = TcpStream::connect(&c.addr).await.unwrap();
    frame::write_frame(&mut s, &hello_frame(PROTOCOL_VERSION + 1)).await.unwrap();
    assert_eq!(errors_until_close(&mut s).await, vec![Errno::EPROTONOSUPPORT]);

    // An oversized frame after HELLO: EMSGSIZE, then the connection closes.
    let mut s = connect_hello(&c).await;
    let mut p = Frame::new(FrameKind::Request, 2, Bytes::new(), Bytes::new()).encode_prefix();
    p[20..24].copy_from_slice(&(MAX_DATA + 1).to_le_bytes());
    s.write_all(&p).await.unwrap();
    assert_eq!(errors_until_close(&mut s).await, vec![Errno::EMSGSIZE]);

    // A well-framed but undecodable header.
    let mut s = connect_hello(&c).await;
    let f = Frame::new(FrameKind::Request, 3, Bytes::from_static(&[0xee; 40]), Bytes::new());
    frame::write_frame(&mut s, &f).await.unwrap();
    assert_eq!(errors_until_close(&mut s).await, vec![Errno::EPROTO]);

    // A frame cut short, then the peer vanishes.
    let mut s = connect_hello(&c).await;
    let f = Frame::new(
        FrameKind::Request,
        4,
        frame::encode(&Request::Ping),
        Bytes::from_static(b"0123456789"),
    );
    let mut raw = f.encode_prefix().to_vec();
    raw.extend_from_slice(&f.header[..2]);
    s.write_all(&raw[..PREFIX_LEN + 2]).await.unwrap();
    drop(s);

    // A response frame where a request belongs.
    let mut s = connect_hello(&c).await;
    let resp: Response = Ok(Reply::Pong);
    frame::write_frame(
        &mut s,
        &Frame::new(FrameKind::Response, 5, frame::encode(&resp), Bytes::new()),
    )
    .await
    .unwrap();
    assert_eq!(errors_until_close(&mut s).await, vec![Errno::EPROTO]);

    // Many of those at once do not disturb a client doing real work.
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2")]).await;
    let vol = c.mount("v").await.unwrap();
    let root = Creds::root();
    let f = vol.create(&root, Id::ROOT, b"keep", 0o644, true).await.unwrap();
    let attacks = (0..20).map(|i| {
        let addr = c.addr.clone();
        tokio::spawn(async move {
            let mut s = TcpStream::connect(&addr).await.unwrap();
            let _ = s.write_all(&vec![i as u8; 4096]).await;
        })
    });
    let writes = (0..20u64).map(|i| {
        let vol = vol.clone();
        async move {
            vol.write_through(&Creds::root(), f.id, i * 10, Bytes::from(vec![b'a' + i as u8; 10]))
                .await
                .unwrap()
        }
    });
    futures::future::join_all(attacks).await;
    futures::future::join_all(writes).await;
    let (data, _) = vol.read(&root, f.id, 0, 200).await.unwrap();
    assert_eq!(data.len(), 200);
    assert_eq!(data[195], b'a' + 19);
    still_serving(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_volumes_and_escaping_names() {
    let c = Cluster::start();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;

    // Unknown volume: a clear error naming it.
    let e = c.mount("nosuch").await.err().expect("mounting a missing volume fails");
    assert_eq!(e.errno, Errno::ENOENT);
    assert!(e.message.contains("nosuch"), "{e}");
    // A brick request for a volume this node does not serve.
    let conn = c.cli().await;
    let req = BrickRequest {
        volume: "nosuch".into(),
        brick: 0,
        epoch: 0,
        creds: Creds::root(),
        op: Op::GetAttr { id: Id::ROOT },
        req: None,
        parents: false,
        inline: 0,
    };
    let e = conn.call(Request::Brick(req), Bytes::new()).await.unwrap_err();
    assert!(e.message.contains("nosuch"), "{e}");

    let vol = c.mount("v").await.unwrap();
    let root = Creds::root();
    for bad in [&b".."[..], b".", b"a/b", b"../../etc/passwd", b"", b"x\0y"] {
        let e = vol.lookup(&root, Id::ROOT, bad).await.unwrap_err();
        assert!(matches!(e.errno, Errno::EINVAL | Errno::ENAMETOOLONG), "{bad:?}: {e}");
        assert!(vol.create(&root, Id::ROOT, bad, 0o644, true).await.is_err(), "{bad:?}");
    }
    // Raw requests bypassing the client's checks are refused by the brick too.
    for b in 0..4 {
        let req = BrickRequest {
            volume: "v".into(),
            brick: b,
            epoch: 0,
            creds: Creds::root(),
            op: Op::Lookup { dir: Id::ROOT, name: b"../../../etc".to_vec() },
            req: None,
            parents: false,
            inline: 0,
        };
        match conn.call(Request::Brick(req), Bytes::new()).await {
            Err(e) => {
                assert!(matches!(e.errno, Errno::EINVAL | Errno::ESTALEMAP), "brick {b}: {e}")
            }
            Ok(r) => panic!("brick {b} answered {r:?}"),
        }
    }
    // A symlink pointing outside the volume is stored, never followed by the bricks.
    let l = vol.symlink(&root, Id::ROOT, b"esc", b"/etc").await.unwrap();
    assert_eq!(vol.readlink(&root, l.id).await.unwrap(), b"/etc");
    assert!(vol.create(&root, l.id, b"pwned", 0o644, true).await.is_err());
    assert!(vol.lookup(&root, l.id, b"passwd").await.is_err());
    assert!(!std::path::Path::new("/etc/pwned").exists());
    // An id that does not exist.
    let e = vol.getattr(&root, Id::new_on_set(1)).await.unwrap_err();
    assert!(matches!(e.errno, Errno::ESTALE | Errno::ENOENT), "{e}");
    still_serving(&c).await;
}

/// A brick on a tiny filesystem fills up: writers get ENOSPC (now or at flush), the daemon
/// keeps serving, and space freed is usable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_brick_reports_enospc() {
    let c = Cluster::start();
    let img = c.path("small.img");
    let mnt = c.path("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let ok = |cmd: &mut std::process::Command| cmd.status().map(|s| s.success()).unwrap_or(false);
    assert!(ok(std::process::Command::new("truncate").args(["-s", "16M", img.to_str().unwrap()])));
    assert!(ok(std::process::Command::new("mkfs.ext4").args(["-q", "-F", img.to_str().unwrap()])));
    if !ok(std::process::Command::new("mount").args([
        "-o",
        "loop",
        img.to_str().unwrap(),
        mnt.to_str().unwrap(),
    ])) {
        panic!("loop mount failed: the ENOSPC test needs loop devices (root)");
    }
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _guard = Umount(mnt.clone());
    c.volume("tiny", 1, &[&mnt.join("brick")]).await;
    let vol = c.mount("tiny").await.unwrap();
    let root = Creds::root();
    let f = vol.create(&root, Id::ROOT, b"fill", 0o644, true).await.unwrap();
    let chunk = Bytes::from(vec![7u8; 1 << 20]);
    let mut err = None;
    for i in 0..64u64 {
        if let Err(e) = vol.write(&root, f.id, i << 20, chunk.clone()).await {
            err = Some(e);
            break;
        }
    }
    let err = match err {
        Some(e) => e,
        None => {
            vol.fsync(&root, f.id, false).await.expect_err("64 MiB cannot fit on a 16 MiB brick")
        }
    };
    assert_eq!(err.errno, Errno::ENOSPC, "{err}");
    assert!(
        err.message.contains("tiny") || err.message.contains("brick"),
        "error names where: {err}"
    );
    still_serving(&c).await;
    // Free the space: the volume works again.
    vol.unlink(&root, Id::ROOT, b"fill").await.unwrap();
    let g = vol.create(&root, Id::ROOT, b"after", 0o644, true).await.unwrap();
    vol.write_through(&root, g.id, 0, Bytes::from_static(b"fits")).await.unwrap();
    assert_eq!(&vol.read(&root, g.id, 0, 10).await.unwrap().0[..], b"fits");
}
