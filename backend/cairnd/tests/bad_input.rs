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
    let c = Cluster::start_plain();

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
    let c = Cluster::start_plain();
    c.volume("v", 2, &[&c.path("b1"), &c.path("b2"), &c.path("b3"), &c.path("b4")]).await;

    // Unknown volume: a clear error naming it.
    let e = c.mount("nosuch").await.err().expect("mounting a missing volume fails");
    assert_eq!(e.errno, Errno::ENOENT);
    assert!(e.message.contains("nosuch"), "{e}");
    // A brick request for a volume this node does not serve.
    let conn = c.cli().await;
    let req = BrickRequest::new("nosuch", 0, 0, Creds::root(), Op::GetAttr { id: Id::ROOT });
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
        let req = BrickRequest::new(
            "v",
            b,
            0,
            Creds::root(),
            Op::Lookup { dir: Id::ROOT, name: b"../../../etc".to_vec() },
        );
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
    let c = Cluster::start_plain();
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

/// A field of `/proc/PID/status`, in KiB.
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Peers that declare the largest frame and then send only a little of it (slowly, or
/// never) cost the daemon memory for what they sent, not for what they declared: 64 of
/// them declaring a 4 MiB header or a 32 MiB bulk segment must not make it hold 1.1 GiB,
/// and it keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_large_frames_hold_only_what_was_sent() {
    const PEERS: u32 = 64;
    const SENT: usize = 64 << 10;
    let c = Cluster::start_plain();
    let pid = c.daemon.as_ref().unwrap().id();
    still_serving(&c).await;
    let (rss0, size0) = (proc_status_kib(pid, "VmRSS"), proc_status_kib(pid, "VmSize"));
    let mut conns = vec![];
    let mut declared = 0u64;
    for i in 0..PEERS {
        let mut s = connect_hello(&c).await;
        // Even peers stall in the header, odd ones in the bulk segment after a whole header.
        let (hlen, dlen, header) = if i % 2 == 0 {
            (frame::MAX_HEADER, MAX_DATA, vec![])
        } else {
            let h = frame::encode(&Request::Ping).to_vec();
            (h.len() as u32, MAX_DATA, h)
        };
        let mut p = Frame::new(FrameKind::Request, 10 + u64::from(i), Bytes::new(), Bytes::new())
            .encode_prefix();
        p[16..20].copy_from_slice(&hlen.to_le_bytes());
        p[20..24].copy_from_slice(&dlen.to_le_bytes());
        s.write_all(&p).await.unwrap();
        s.write_all(&header).await.unwrap();
        s.write_all(&vec![0xa5; SENT]).await.unwrap();
        declared += u64::from(if i % 2 == 0 { hlen } else { dlen });
        conns.push(s);
    }
    // The daemon has read the prefixes once it reserved their buffers (address space);
    // a reader that grows its buffers as bytes come never does, so wait at most 5 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proc_status_kib(pid, "VmSize") < size0 + declared / 1024
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    still_serving(&c).await;
    let grown = proc_status_kib(pid, "VmRSS").saturating_sub(rss0);
    let budget = u64::from(PEERS) * (4 * SENT as u64) / 1024 + 32 * 1024;
    eprintln!(
        "{PEERS} stalled frames, {} MiB declared in all, {} KiB sent each: daemon RSS \
         +{grown} KiB (budget {budget} KiB), address space +{} KiB",
        declared >> 20,
        SENT >> 10,
        proc_status_kib(pid, "VmSize").saturating_sub(size0)
    );
    assert!(
        grown < budget,
        "RSS grew {grown} KiB for {PEERS} stalled frames (budget {budget} KiB)"
    );
    drop(conns);
    still_serving(&c).await;
}
