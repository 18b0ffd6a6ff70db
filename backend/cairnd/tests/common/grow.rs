//! The start of the add-brick and rebalance tests (`grow.rs`, `rebalance.rs`): a one-set
//! volume `v` on brick `b0`, mounted, with a directory `d`; then a second set, brick `b1`,
//! added by add-brick.

use super::Cluster;
use cairn_client::{Attr, Creds, Id, Volume};
use cairn_proto::mgmt::MgmtRequest;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A one-set volume and what the tests use of it.
pub struct OneSet {
    /// The directory of the volume's brick.
    pub b0: PathBuf,
    /// The directory of the brick a later [`Cluster::add_set`] adds (not made yet).
    pub b1: PathBuf,
    pub vol: Arc<Volume>,
    /// The directory `d` in the volume's root.
    pub d: Attr,
}

impl Cluster {
    /// Volume `v` with one set (brick `b0`), mounted, with directory `d` made as root.
    pub async fn one_set_volume(&self) -> OneSet {
        let (b0, b1) = (self.path("b0"), self.path("b1"));
        std::fs::create_dir_all(&b0).unwrap();
        self.volume("v", 1, &[&b0]).await;
        let vol = self.mount("v").await.unwrap();
        let d = vol.mkdir(&Creds::root(), Id::ROOT, b"d", 0o755).await.unwrap();
        OneSet { b0, b1, vol, d }
    }

    /// Add brick `b1` to volume `v` as a new set (add-brick), and wait until the mounted
    /// client `vol` has the map of layout epoch 2 pushed.
    pub async fn add_set(&self, b1: &Path, vol: &Volume) {
        std::fs::create_dir_all(b1).unwrap();
        self.mgmt(MgmtRequest::VolumeAddBrick {
            name: "v".into(),
            replica: None,
            bricks: vec![format!("t1:{}", b1.display())],
            force: true,
        })
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while vol.map().layout_epoch < 2 {
            assert!(Instant::now() < deadline, "the client never got layout epoch 2");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
