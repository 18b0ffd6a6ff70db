//! Connections from a client to the nodes of a volume, and the pushes they carry.

use cairn_proto::msg::{PeerKind, Push};
use cairn_proto::rpc::{Connection, PushHandler};
use cairn_proto::{Errno, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// One connection per node address, re-dialled on demand after a failure. Every push
/// received on any of them is sent to one channel, tagged with the address it came from.
pub struct Pool {
    name: String,
    timeout: Duration,
    conns: Mutex<HashMap<String, Arc<Connection>>>,
    dial: tokio::sync::Mutex<()>,
    pushes: mpsc::UnboundedSender<(String, Push)>,
}

impl Pool {
    pub fn new(name: String, timeout: Duration) -> (Pool, mpsc::UnboundedReceiver<(String, Push)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Pool {
                name,
                timeout,
                conns: Mutex::default(),
                dial: tokio::sync::Mutex::new(()),
                pushes: tx,
            },
            rx,
        )
    }

    pub async fn get(&self, addr: &str) -> Result<Arc<Connection>, RemoteError> {
        if addr.is_empty() {
            return Err(RemoteError::new(Errno::EHOSTDOWN, "brick has no known address"));
        }
        if let Some(c) = self.conns.lock().get(addr).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let _g = self.dial.lock().await;
        if let Some(c) = self.conns.lock().get(addr).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let tx = self.pushes.clone();
        let a = addr.to_string();
        let handler: PushHandler = Arc::new(move |p| {
            let _ = tx.send((a.clone(), p));
        });
        let c =
            Connection::connect(addr, PeerKind::Client, &self.name, Some(handler), self.timeout)
                .await?;
        self.conns.lock().insert(addr.to_string(), c.clone());
        Ok(c)
    }

    pub fn forget(&self, addr: &str) {
        if let Some(c) = self.conns.lock().remove(addr) {
            c.close();
        }
    }

    pub fn close_all(&self) {
        for (_, c) in self.conns.lock().drain() {
            c.close();
        }
    }
}
