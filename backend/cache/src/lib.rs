//! Caches
