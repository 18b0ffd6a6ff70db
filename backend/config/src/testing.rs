//! A throwaway single-node etcd for tests (this crate's and `cairnd`'s).
//!
//! `Etcd::start()` runs `/usr/bin/etcd` (or `$CAIRN_ETCD`) on a free 127.0.0.1 port pair
//! with a temporary data dir, waits until `/health` answers, and kills it (SIGKILL) and
//! removes the data dir when dropped. The calls block (at most ~20 s): call them from a
//! test thread, not from inside a single-threaded runtime task that must keep running.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a test etcd did not come up (the log is etcd's own, read back from its data dir).
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("open {}: {source}", path.display())]
    Log { path: PathBuf, source: std::io::Error },
    #[error("spawn {bin}: {source}")]
    Spawn { bin: String, source: std::io::Error },
    #[error("etcd exited with {status}: {log}")]
    Exited { status: std::process::ExitStatus, log: String },
    #[error("etcd not healthy after {START_TIMEOUT:?}: {log}")]
    Unhealthy { log: String },
}

pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}

fn temp_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && std::fs::metadata(shm).map(|m| !m.permissions().readonly()).unwrap_or(false)
    {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn healthy(port: u16) -> bool {
    let Ok(mut s) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.contains("\"health\":\"true\"")
}

impl Etcd {
    /// Starts a fresh etcd; panics (with etcd's log) if it does not come up.
    pub fn start() -> Etcd {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = temp_base().join(format!(
            "cairn-etcd-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir).expect("create etcd test dir");
        let mut last_err = None;
        // A port picked as free may be taken before etcd binds it: retry with new ports.
        for _ in 0..3 {
            let (client_port, peer_port) = free_ports();
            let mut e = Etcd { child: None, dir: dir.clone(), client_port, peer_port };
            match e.spawn() {
                Ok(()) => return e,
                Err(err) => {
                    last_err = Some(err);
                    e.kill();
                    e.dir = PathBuf::new(); // keep the dir for the next attempt
                    let _ = std::fs::remove_dir_all(dir.join("data"));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        match last_err {
            Some(e) => panic!("etcd did not start: {e}"),
            None => panic!("etcd did not start"),
        }
    }

    fn spawn(&mut self) -> Result<(), StartError> {
        let bin = std::env::var("CAIRN_ETCD").unwrap_or_else(|_| "/usr/bin/etcd".into());
        let curl = format!("http://127.0.0.1:{}", self.client_port);
        let purl = format!("http://127.0.0.1:{}", self.peer_port);
        let log_path = self.dir.join("etcd.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| StartError::Log { path: log_path.clone(), source })?;
        let child = Command::new(&bin)
            .arg("--name=t")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={curl}"))
            .arg(format!("--advertise-client-urls={curl}"))
            .arg(format!("--listen-peer-urls={purl}"))
            .arg(format!("--initial-advertise-peer-urls={purl}"))
            .arg(format!("--initial-cluster=t={purl}"))
            .args(["--heartbeat-interval=20", "--election-timeout=200"])
            .args(["--logger=zap", "--log-level=warn"])
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(|source| StartError::Log { path: log_path.clone(), source })?,
            )
            .stderr(log)
            .spawn()
            .map_err(|source| StartError::Spawn { bin: bin.clone(), source })?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if healthy(self.client_port) {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(StartError::Exited { status, log });
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(StartError::Unhealthy { log });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL (like a crash) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills etcd if running and starts it again on the same data dir and ports.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn() {
            panic!("etcd did not restart: {e}");
        }
    }

    /// SIGSTOP: etcd stops answering without closing connections (a hung server).
    pub fn pause(&self) {
        self.signal(rustix::process::Signal::STOP);
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        self.signal(rustix::process::Signal::CONT);
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = self.pid().expect("etcd is not running");
        let pid = rustix::process::Pid::from_raw(pid as i32).expect("nonzero pid");
        rustix::process::kill_process(pid, sig).expect("signal etcd");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // SIGKILL also ends a paused etcd.
        self.kill();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A TCP proxy in front of a server (e.g. `Etcd`) that delivers every byte `delay` after it
/// was received, in both directions: a slow link, like a connection recovering from a
/// network partition. Listens on 127.0.0.1; stops when dropped.
pub struct DelayProxy {
    port: u16,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    /// Starts forwarding to `target` (`host:port`) with no delay. Needs a tokio runtime.
    pub async fn start(target: String) -> DelayProxy {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy port");
        let port = l.local_addr().expect("proxy address").port();
        let delay_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let d = delay_ms.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = l.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else { continue };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(Self::pipe(cr, sw, d.clone()));
                tokio::spawn(Self::pipe(sr, cw, d.clone()));
            }
        });
        DelayProxy { port, delay_ms, task }
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Bytes received from now on are delivered `delay` later.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    async fn pipe(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (tx, mut rx) =
            tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
        let writer = tokio::spawn(async move {
            while let Some((due, buf)) = rx.recv().await {
                tokio::time::sleep_until(due).await;
                if to.write_all(&buf).await.is_err() {
                    return;
                }
            }
            let _ = to.shutdown().await;
        });
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = tokio::time::Instant::now()
                        + Duration::from_millis(delay_ms.load(Ordering::Relaxed));
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        drop(tx);
        let _ = writer.await;
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
