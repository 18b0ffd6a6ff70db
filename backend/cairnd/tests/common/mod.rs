//! A real single-node cluster for integration tests: etcd, one `cairnd`, a volume.

#![allow(dead_code)]

use bytes::Bytes;
use cairn_client::{MountOptions, Volume};
use cairn_config::testing::Etcd;
use cairn_proto::frame::{self, Frame, FrameKind};
use cairn_proto::map::BrickState;
use cairn_proto::mgmt::{MgmtReply, MgmtRequest, VolumeCreate};
use cairn_proto::msg::{Hello, PeerKind, Reply, Request, Response};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::rpc::Connection;
use cairn_proto::tls::Transport;
use cairn_proto::RemoteError;
use cairn_proto::{Errno, PROTOCOL_VERSION};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub mod grow;

pub struct Cluster {
    pub etcd: Etcd,
    pub dir: tempfile::TempDir,
    pub addr: String,
    pub daemon: Option<Child>,
    /// `--transport plain` (tests that write raw frames to the socket).
    pub plain: bool,
}

/// The test CA's credentials for `p` (the daemon's node certificate is issued by the same
/// CA, from the CA dir [`Cluster::start`] writes).
pub fn transport(p: &Principal) -> Transport {
    cairn_proto::tls::test_ca::transport(p)
}

pub fn admin() -> Principal {
    Principal::new("admin", Role::Admin)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Cluster {
    /// Wait (up to 30 s) until the mounted client `vol`'s map shows every brick up: a
    /// replica takes forwards, and each set's head is the one its chain order names.
    pub async fn wait_all_up(&self, vol: &Volume) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !vol.map().sets.iter().all(|s| s.bricks.iter().all(|b| b.state == BrickState::Up)) {
            assert!(Instant::now() < deadline, "bricks did not come up: {}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A cluster with TLS on, whose CA is the test CA; this process's connections use an
    /// admin certificate of it by default.
    pub fn start() -> Cluster {
        Self::start_with(false)
    }

    /// A cluster with `--transport plain`; this process's connections are plain too.
    pub fn start_plain() -> Cluster {
        Self::start_with(true)
    }

    fn start_with(plain: bool) -> Cluster {
        let etcd = Etcd::start();
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        if plain {
            cairn_proto::tls::set_default(Transport::Plain);
        } else {
            let ca = cairn_proto::tls::test_ca::ca();
            let ca_dir = dir.path().join("ca");
            std::fs::create_dir_all(&ca_dir).unwrap();
            std::fs::write(ca_dir.join("ca.pem"), ca.cert_pem()).unwrap();
            cairn_proto::tls::write_private(&ca_dir.join("ca.key"), ca.key_pem().as_bytes())
                .unwrap();
            cairn_proto::tls::set_default(transport(&admin()));
        }
        let mut c = Cluster { etcd, dir, addr, daemon: None, plain };
        c.start_daemon();
        c
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn start_daemon(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("cairnd.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cairnd"))
            .args(["--name", "t1", "--listen", &self.addr, "--etcd", &self.etcd.endpoint()])
            .args(["--state-dir", self.path("state").to_str().unwrap(), "--log-level", "warn"])
            .args(match self.plain {
                true => vec!["--transport".to_string(), "plain".into()],
                false => vec!["--ca-dir".to_string(), self.path("ca").display().to_string()],
            })
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn cairnd");
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&self.addr).is_err() {
            assert!(Instant::now() < deadline, "cairnd did not listen: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill_daemon(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("cairnd.log")).unwrap_or_default()
    }

    pub async fn cli(&self) -> Arc<Connection> {
        Connection::connect(&self.addr, PeerKind::Cli, "test", None, Duration::from_secs(5))
            .await
            .unwrap()
    }

    /// A connection as another node of the cluster would make (from 127.0.0.1, the
    /// node's own address: a member).
    pub async fn as_node(&self) -> Arc<Connection> {
        let t = match self.plain {
            true => Transport::Plain,
            false => transport(&Principal::new("t2", Role::Node)),
        };
        self.connect_as(&t, PeerKind::Daemon).await.unwrap()
    }

    /// A connection over `t` (TLS with some certificate, or plain).
    pub async fn connect_as(
        &self,
        t: &Transport,
        kind: PeerKind,
    ) -> Result<Arc<Connection>, RemoteError> {
        Connection::connect_with(&self.addr, None, t, kind, "test", None, Duration::from_secs(5))
            .await
    }

    pub async fn mgmt(&self, req: MgmtRequest) -> Result<MgmtReply, RemoteError> {
        match self.cli().await.call(Request::Mgmt(req), Bytes::new()).await? {
            (Reply::Mgmt(m), _) => Ok(m),
            (other, _) => panic!("unexpected {other:?}"),
        }
    }

    /// Create and start a volume of `replica` x (`bricks`/`replica`) under the temp dir (or
    /// on the given brick paths).
    pub async fn volume(&self, name: &str, replica: u32, bricks: &[&Path]) {
        let specs = bricks.iter().map(|b| format!("t1:{}", b.display())).collect();
        self.mgmt(MgmtRequest::VolumeCreate(VolumeCreate {
            name: name.into(),
            replica,
            bricks: specs,
            force: true,
        }))
        .await
        .unwrap();
        self.mgmt(MgmtRequest::VolumeStart { name: name.into(), force: false }).await.unwrap();
    }

    /// Volume "v", replica 2 on bricks b1 and b2, mounted once both bricks are up (a
    /// replica takes forwards): the setup of the tests of one replicated write.
    pub async fn replica2_up(&self) -> Arc<Volume> {
        self.volume("v", 2, &[&self.path("b1"), &self.path("b2")]).await;
        let vol = self.mount("v").await.unwrap();
        self.wait_all_up(&vol).await;
        vol
    }

    pub async fn mount(&self, name: &str) -> Result<Arc<Volume>, RemoteError> {
        Volume::mount(MountOptions {
            servers: vec![self.addr.clone()],
            volume: name.into(),
            client_name: "test".into(),
            ..MountOptions::default()
        })
        .await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_daemon();
    }
}

/// A new CLI connection gets PONG: the daemon still serves.
pub async fn still_serving(c: &Cluster) {
    let conn = c.cli().await;
    let (r, _) = conn.call(Request::Ping, Bytes::new()).await.expect("daemon still answers");
    assert_eq!(r, Reply::Pong);
}

/// Read frames until the server closes; return the errors it sent.
pub async fn errors_until_close(s: &mut TcpStream) -> Vec<Errno> {
    let mut out = vec![];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), frame::read_frame(s)).await {
            Ok(Ok(f)) => {
                if let Ok(Err(e)) = frame::decode::<Response>(&f.header) {
                    out.push(e.errno);
                }
            }
            Ok(Err(_)) => return out,
            Err(_) => panic!("server neither answered nor closed the connection"),
        }
    }
}

pub fn hello_frame(version: u16) -> Frame {
    let h =
        Request::Hello(Hello { version, kind: PeerKind::Client, name: "bad".into(), auth: vec![] });
    Frame::new(FrameKind::Request, 1, frame::encode(&h), Bytes::new())
}

pub async fn connect_hello(c: &Cluster) -> TcpStream {
    let mut s = TcpStream::connect(&c.addr).await.unwrap();
    frame::write_frame(&mut s, &hello_frame(PROTOCOL_VERSION)).await.unwrap();
    let f = frame::read_frame(&mut s).await.unwrap();
    assert!(matches!(frame::decode::<Response>(&f.header).unwrap(), Ok(Reply::Welcome(_))));
    s
}
