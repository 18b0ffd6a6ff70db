//! SMB shares (filled in below).
