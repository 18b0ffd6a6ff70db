//! The `cairn` binary against a tiny in-test server speaking the real Cairn wire protocol
//! (`cairn_proto::rpc::serve`) on 127.0.0.1. The server is a test double for the transport
//! only: it records every management request and answers from a per-test function. The
//! tests check what the CLI sends, what it prints and which exit code it returns.

use bytes::Bytes;
use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap, VolumeStatus};
use cairn_proto::mgmt::{MgmtReply, MgmtRequest, PeerInfo, VolumeCreate};
use cairn_proto::msg::{Reply, Request, Response, Welcome};
use cairn_proto::rpc::{self, Service, Session};
use cairn_proto::tls::Transport;
use cairn_proto::{Errno, RemoteError};
use std::future::Future;
use std::pin::Pin;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Answer = Box<dyn Fn(&MgmtRequest) -> Response + Send + Sync>;

struct Fake {
    seen: Mutex<Vec<MgmtRequest>>,
    answer: Answer,
    /// Never answer (to exercise the CLI's reply timeout).
    silent: bool,
}

impl Service for Fake {
    fn welcome(&self, session_id: u64) -> Welcome {
        Welcome { version: cairn_proto::PROTOCOL_VERSION, session: session_id, node: "fake".into() }
    }

    fn call(
        &self,
        _session: Arc<Session>,
        req: Request,
        _data: Bytes,
    ) -> Pin<Box<dyn Future<Output = (Response, Bytes)> + Send + 'static>> {
        let resp = match req {
            Request::Mgmt(m) => {
                let r = (self.answer)(&m);
                self.seen.lock().unwrap().push(m);
                r
            }
            other => Err(RemoteError::new(Errno::EPROTO, format!("fake: not mgmt: {other:?}"))),
        };
        let silent = self.silent;
        Box::pin(async move {
            if silent {
                std::future::pending::<()>().await;
            }
            (resp, Bytes::new())
        })
    }
}

/// A server on 127.0.0.1:<ephemeral>; stopped when dropped (its runtime shuts down).
struct Server {
    rt: Option<tokio::runtime::Runtime>,
    fake: Arc<Fake>,
    addr: String,
}

impl Server {
    fn start(answer: impl Fn(&MgmtRequest) -> Response + Send + Sync + 'static) -> Server {
        Server::start_with(Box::new(answer), false)
    }

    fn start_with(answer: Answer, silent: bool) -> Server {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let fake = Arc::new(Fake { seen: Mutex::new(vec![]), answer, silent });
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        rt.spawn(rpc::serve_with(listener, fake.clone(), Transport::Plain));
        Server { rt: Some(rt), fake, addr }
    }

    fn seen(&self) -> Vec<MgmtRequest> {
        self.fake.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Run the real binary with stdin not a terminal.
fn cairn(host: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--host")
        .arg(host)
        .args(args)
        .env_remove("CAIRN_HOST")
        // The fake server speaks plain TCP (the TLS path: tests/integration/security.sh).
        .env("CAIRN_TRANSPORT", "plain")
        .env_remove("CAIRN_CREDENTIALS")
        .stdin(Stdio::null())
        .output()
        .expect("run cairn")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn done(message: &str) -> Response {
    Ok(Reply::Mgmt(MgmtReply::Done { message: message.into() }))
}

fn volume_map() -> VolumeMap {
    let brick = |index: u32, node: &str| BrickInfo {
        index,
        node: node.into(),
        addr: format!("{node}:7420"),
        path: "/bricks/b1".into(),
        state: BrickState::Up,
    };
    VolumeMap {
        name: "vol0".into(),
        id: u128::MAX - 5,
        epoch: 3,
        layout_epoch: 1,
        rebalancing: false,
        layout: vec![],
        status: VolumeStatus::Started,
        replica: 2,
        sets: vec![ReplicaSet { id: 1, bricks: vec![brick(0, "node1"), brick(1, "node2")] }],
        options: [("network.ping-timeout".to_string(), "10".to_string())].into_iter().collect(),
    }
}

#[test]
fn sends_the_right_requests() {
    let srv = Server::start(|_| done(""));
    let cases: Vec<(&[&str], MgmtRequest)> = vec![
        (
            &["volume", "create", "vol0", "replica", "2", "n1:/b/1", "n2:/b/1/", "force"],
            MgmtRequest::VolumeCreate(VolumeCreate {
                name: "vol0".into(),
                replica: 2,
                bricks: vec!["n1:/b/1".into(), "n2:/b/1".into()],
                force: true,
            }),
        ),
        (
            &["volume", "start", "vol0"],
            MgmtRequest::VolumeStart { name: "vol0".into(), force: false },
        ),
        // stdin is not a terminal: no question, the stop is sent.
        (
            &["volume", "stop", "vol0", "force"],
            MgmtRequest::VolumeStop { name: "vol0".into(), force: true },
        ),
        (&["volume", "delete", "vol0"], MgmtRequest::VolumeDelete { name: "vol0".into() }),
        (
            &["volume", "set", "vol0", "network.ping-timeout", "5"],
            MgmtRequest::VolumeSet {
                name: "vol0".into(),
                key: "network.ping-timeout".into(),
                value: "5".into(),
            },
        ),
        (
            &["volume", "reset", "vol0", "network.ping-timeout"],
            MgmtRequest::VolumeReset { name: "vol0".into(), key: "network.ping-timeout".into() },
        ),
        (
            &["peer", "probe", "node2"],
            MgmtRequest::PeerProbe { addr: "node2:7420".into(), token: None },
        ),
        (
            &["peer", "detach", "node2", "force"],
            MgmtRequest::PeerDetach { name: "node2".into(), force: true },
        ),
        (
            &["volume", "add-brick", "vol0", "replica", "2", "n3:/b/1", "n4:/b/1/"],
            MgmtRequest::VolumeAddBrick {
                name: "vol0".into(),
                replica: Some(2),
                bricks: vec!["n3:/b/1".into(), "n4:/b/1".into()],
                force: false,
            },
        ),
    ];
    for (args, expected) in &cases {
        let out = cairn(&srv.addr, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        assert_eq!(srv.seen().last(), Some(expected), "{args:?}");
    }
    assert_eq!(srv.seen().len(), cases.len());

    let out = cairn(&srv.addr, &["volume", "start", "vol0"]);
    assert_eq!(text(&out.stdout), "volume start: vol0: success\n");
}

#[test]
fn success_message_and_json_result() {
    let srv = Server::start(|_| done("please start the volume to access data"));
    let out = cairn(&srv.addr, &["volume", "create", "vol0", "n1:/b"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "volume create: vol0: success: please start the volume to access data\n"
    );
    let out = cairn(&srv.addr, &["--json", "volume", "start", "vol0"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"], "success");
    assert_eq!(v["command"], "volume start");
    assert_eq!(v["name"], "vol0");
}

#[test]
fn server_errors_exit_1() {
    let srv = Server::start(|req| match req {
        MgmtRequest::VolumeStart { name, .. } => {
            Err(RemoteError::new(Errno::ENOENT, format!("volume {name} does not exist")))
        }
        _ => Err(RemoteError::new(Errno::EINVAL, String::new())),
    });
    let out = cairn(&srv.addr, &["volume", "start", "vol9"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "volume start: vol9: failed: volume vol9 does not exist\n");
    assert!(out.stdout.is_empty());

    // An empty message falls back to the errno.
    let out = cairn(&srv.addr, &["volume", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "volume list: failed: EINVAL (22)\n");

    // With --json a failure also yields a result document on stdout.
    let out = cairn(&srv.addr, &["--json", "volume", "start", "vol9"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"], "failed");
    assert_eq!(v["errno"], "ENOENT");
    assert_eq!(v["message"], "volume vol9 does not exist");
}

#[test]
fn wrong_reply_kind_exits_1() {
    let srv = Server::start(|_| Ok(Reply::Mgmt(MgmtReply::Names(vec!["x".into()]))));
    let out = cairn(&srv.addr, &["volume", "info", "vol0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("volume info: vol0: failed: unexpected reply"));
}

#[test]
fn read_commands_human_and_json() {
    let srv = Server::start(|req| {
        Ok(Reply::Mgmt(match req {
            MgmtRequest::VolumeInfo { .. } => MgmtReply::Volumes(vec![volume_map()]),
            MgmtRequest::VolumeList => MgmtReply::Names(vec!["vol0".into(), "vol1".into()]),
            MgmtRequest::PeerStatus => MgmtReply::Peers(vec![
                PeerInfo {
                    name: "node1".into(),
                    addr: "127.0.0.1:7420".into(),
                    uuid: "u1".into(),
                    connected: true,
                    local: true,
                },
                PeerInfo {
                    name: "node2".into(),
                    addr: "10.0.0.2:7420".into(),
                    uuid: "u2".into(),
                    connected: false,
                    local: false,
                },
            ]),
            _ => MgmtReply::Done { message: String::new() },
        }))
    });

    let out = cairn(&srv.addr, &["volume", "info", "all"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(srv.seen().last(), Some(&MgmtRequest::VolumeInfo { name: None }));
    let human = text(&out.stdout);
    assert!(human.contains("\nVolume Name: vol0\nType: Replicate\n"), "{human}");
    assert!(human.contains("Volume ID: ffffffff-ffff-ffff-ffff-fffffffffffa\n"), "{human}");
    assert!(human.contains("Number of Bricks: 1 x 2 = 2\n"), "{human}");
    assert!(human.contains("Brick2: node2:/bricks/b1\n"), "{human}");
    assert!(human.ends_with("Options Reconfigured:\nnetwork.ping-timeout: 10\n"), "{human}");

    let out = cairn(&srv.addr, &["--json", "volume", "info", "vol0"]);
    assert_eq!(srv.seen().last(), Some(&MgmtRequest::VolumeInfo { name: Some("vol0".into()) }));
    let doc: cairn_cli::json::VolumeInfoDoc = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(VolumeMap::try_from(&doc.volumes[0]).unwrap(), volume_map());

    let out = cairn(&srv.addr, &["volume", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"volumes": ["vol0", "vol1"]}));

    let out = cairn(&srv.addr, &["peer", "status"]);
    assert_eq!(
        text(&out.stdout),
        "Number of Peers: 1\n\nHostname: node2\nAddress: 10.0.0.2:7420\nUuid: u2\n\
         State: Peer in Cluster (Disconnected)\n"
    );
    let out = cairn(&srv.addr, &["--json", "pool", "list"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["peers"].as_array().unwrap().len(), 2);
    assert_eq!(v["peers"][0]["local"], true);
}

#[test]
fn usage_errors_exit_2_and_send_nothing() {
    let srv = Server::start(|_| done(""));
    let out =
        cairn(&srv.addr, &["volume", "create", "vol0", "replica", "2", "a:/b", "b:/b", "c:/b"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "volume create: vol0: failed: number of bricks (3) is not a multiple of replica count (2)\n"
    );
    let out = cairn(&srv.addr, &["volume", "create", "vol0", "replica", "2", "a:/b", "a:/c"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("same host"));
    let out = cairn(&srv.addr, &["volume", "add-brick", "vol0", "replica", "2", "a:/b"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "volume add-brick: vol0: failed: number of bricks (1) is not a multiple of replica count (2)\n"
    );
    let out = cairn(&srv.addr, &["volume", "add-brick", "vol0", "force"]);
    assert_eq!(out.status.code(), Some(2));
    let out = cairn(&srv.addr, &["volume", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let out = cairn(&srv.addr, &["volume", "start", "a.b"]);
    assert_eq!(out.status.code(), Some(2));
    let out = cairn("node1:notaport", &["volume", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(srv.seen().is_empty(), "{:?}", srv.seen());

    let out = cairn(&srv.addr, &["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("cairn "));
}

#[test]
fn nothing_listening_exits_3() {
    // Bind then drop to get a port nobody listens on.
    let addr =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let out = cairn(&addr, &["volume", "list"]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!("volume list: failed: cannot reach cairnd at {addr}")),
        "{err}"
    );
    assert!(err.contains("check that cairnd is running"), "{err}");

    // CAIRN_HOST is honoured when --host is absent.
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["volume", "info"])
        .env("CAIRN_HOST", &addr)
        .env("CAIRN_TRANSPORT", "plain")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains(&addr));
}

#[test]
fn no_reply_within_timeout_exits_1() {
    let srv = Server::start_with(Box::new(|_| done("")), true);
    let out = cairn(&srv.addr, &["--timeout", "1", "volume", "start", "vol0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no reply from cairnd"), "{}", text(&out.stderr));
    assert_eq!(srv.seen().len(), 1);
}

/// Questions are asked only on a terminal; the library entry point lets the test play one.
#[test]
fn confirmation_on_a_terminal() {
    let srv = Server::start(|_| done(""));
    let run = |args: &[&str], answer: &str| {
        let mut full = vec!["cairn", "--transport", "plain", "--host", &srv.addr];
        full.extend_from_slice(args);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut input = std::io::Cursor::new(answer.as_bytes().to_vec());
        let code = cairn_cli::run(full, &mut out, &mut err, &mut input, true);
        (code, text(&out), text(&err))
    };

    let (code, out, err) = run(&["volume", "stop", "vol0"], "n\n");
    assert_eq!(code, 1);
    assert!(out.starts_with("Stopping volume will make its data inaccessible."), "{out}");
    assert_eq!(err, "volume stop: vol0: failed: cancelled\n");
    assert!(srv.seen().is_empty());

    let (code, out, _) = run(&["volume", "stop", "vol0"], "y\n");
    assert_eq!(code, 0);
    assert!(out.ends_with("volume stop: vol0: success\n"), "{out}");
    assert_eq!(srv.seen().len(), 1);

    // --mode=script and --yes skip the question even on a terminal (no input needed).
    let (code, out, _) = run(&["--mode=script", "volume", "delete", "vol0"], "");
    assert_eq!((code, out.as_str()), (0, "volume delete: vol0: success\n"));
    let (code, _, _) = run(&["--yes", "peer", "detach", "node2"], "");
    assert_eq!(code, 0);
    // End of input counts as "no".
    let (code, _, _) = run(&["volume", "delete", "vol0"], "");
    assert_eq!(code, 1);
    assert_eq!(srv.seen().len(), 3);
}

/// A raw TCP server that answers HELLO with a proper Welcome and then, depending on
/// `drop_after_hello`, closes the connection on the first request (cairnd dying mid-call)
/// or closes right away without answering HELLO (something that is not cairnd).
fn raw_server(drop_after_hello: bool) -> (String, std::thread::JoinHandle<()>) {
    use cairn_proto::frame::{self, Frame, FrameKind};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let (mut sock, _) = listener.accept().await.unwrap();
            if !drop_after_hello {
                return;
            }
            let hello = frame::read_frame(&mut sock).await.unwrap();
            let welcome: Response = Ok(Reply::Welcome(Welcome {
                version: cairn_proto::PROTOCOL_VERSION,
                session: 1,
                node: "raw".into(),
            }));
            let f =
                Frame::new(FrameKind::Response, hello.id, frame::encode(&welcome), Bytes::new());
            frame::write_frame(&mut sock, &f).await.unwrap();
            // Read the management request, then vanish without a reply.
            let _ = frame::read_frame(&mut sock).await.unwrap();
        });
    });
    (addr, handle)
}

#[test]
fn connection_lost_mid_call_exits_3() {
    let (addr, h) = raw_server(true);
    let out = cairn(&addr, &["volume", "start", "vol0"]);
    h.join().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("cannot reach cairnd at {addr}")), "{err}");
    assert!(err.contains("lost"), "{err}");

    let (addr, h) = raw_server(false);
    let out = cairn(&addr, &["volume", "list"]);
    h.join().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
}
