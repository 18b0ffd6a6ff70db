//! libcairn
