//! Replication
