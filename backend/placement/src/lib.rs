//! Placement
