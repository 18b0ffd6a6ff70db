//! Framing.
//!
//! ```text
//!  0      4        6      7       8            16           20          24
//!  | CAIR | version | kind | flags | request id | header len | data len | header | data |
//! ```
//! All integers little-endian. `kind` is 0 request, 1 response, 2 push. The header is a
//! bincode-encoded [`crate::msg::Request`], [`crate::msg::Response`] or
//! [`crate::msg::Push`]; the data segment is raw bulk bytes read straight into its own
//! buffer. A frame over the limits, with a bad magic or an unknown kind is a protocol
//! error: the receiver answers once with EPROTO/EMSGSIZE (when it can) and closes.

use crate::aligned;
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const MAGIC: [u8; 4] = *b"CAIR";
pub const PREFIX_LEN: usize = 24;
/// Largest header accepted (a directory listing or a heal state fits easily).
pub const MAX_HEADER: u32 = 4 << 20;
/// Largest bulk segment accepted: one read or write of at most 16 MiB, or the
/// compare-and-write pair.
pub const MAX_DATA: u32 = 32 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Request = 0,
    Response = 1,
    Push = 2,
}

#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: FrameKind,
    pub version: u16,
    pub id: u64,
    pub header: Bytes,
    pub data: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad magic {0:02x?}: not a Cairn peer")]
    BadMagic([u8; 4]),
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    #[error("frame too large: header {header} bytes, data {data} bytes (limits {MAX_HEADER} and {MAX_DATA})")]
    TooLarge { header: u32, data: u32, id: u64 },
}

impl Frame {
    pub fn new(kind: FrameKind, id: u64, header: Bytes, data: Bytes) -> Frame {
        Frame { kind, version: crate::PROTOCOL_VERSION, id, header, data }
    }

    pub fn encode_prefix(&self) -> [u8; PREFIX_LEN] {
        let mut p = [0u8; PREFIX_LEN];
        p[0..4].copy_from_slice(&MAGIC);
        p[4..6].copy_from_slice(&self.version.to_le_bytes());
        p[6] = self.kind as u8;
        p[7] = 0;
        p[8..16].copy_from_slice(&self.id.to_le_bytes());
        p[16..20].copy_from_slice(&(self.header.len() as u32).to_le_bytes());
        p[20..24].copy_from_slice(&(self.data.len() as u32).to_le_bytes());
        p
    }
}

/// Parse a prefix; returns (kind, version, id, header_len, data_len).
pub fn decode_prefix(p: &[u8; PREFIX_LEN]) -> Result<(FrameKind, u16, u64, u32, u32), FrameError> {
    let magic: [u8; 4] = p[0..4].try_into().unwrap();
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let version = u16::from_le_bytes([p[4], p[5]]);
    let kind = match p[6] {
        0 => FrameKind::Request,
        1 => FrameKind::Response,
        2 => FrameKind::Push,
        k => return Err(FrameError::BadKind(k)),
    };
    let id = u64::from_le_bytes(p[8..16].try_into().unwrap());
    let header = u32::from_le_bytes(p[16..20].try_into().unwrap());
    let data = u32::from_le_bytes(p[20..24].try_into().unwrap());
    if header > MAX_HEADER || data > MAX_DATA {
        return Err(FrameError::TooLarge { header, data, id });
    }
    Ok((kind, version, id, header, data))
}

/// Read one frame. Returns `FrameError::Closed` on a clean EOF between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Frame, FrameError> {
    let mut prefix = [0u8; PREFIX_LEN];
    match r.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let (kind, version, id, hlen, dlen) = decode_prefix(&prefix)?;
    // Both segments are read straight into their buffers, not zero-filled first: one pass
    // over the bytes instead of two, and memory a peer declared but has not sent stays
    // untouched (address space, not resident). A large bulk segment (WRITE payloads) goes
    // to a page-aligned buffer, which a brick can write with O_DIRECT as it is.
    let mut header = BytesMut::with_capacity(hlen as usize);
    read_segment(r, &mut header, hlen as usize, |d| d.len()).await?;
    let data = if dlen as usize >= aligned::MIN_ALIGNED {
        let mut data = aligned::AlignedBuf::with_capacity(dlen as usize);
        read_segment(r, &mut data, dlen as usize, |d| d.len()).await?;
        data.freeze()
    } else {
        let mut data = BytesMut::with_capacity(dlen as usize);
        read_segment(r, &mut data, dlen as usize, |d| d.len()).await?;
        data.freeze()
    };
    Ok(Frame { kind, version, id, header: header.freeze(), data })
}

/// Read `want` bytes from `r` into `buf` (`len` says how many it holds).
async fn read_segment<R: AsyncRead + Unpin, B: bytes::BufMut>(
    r: &mut R,
    buf: &mut B,
    want: usize,
    len: impl Fn(&B) -> usize,
) -> Result<(), FrameError> {
    while len(buf) < want {
        let left = (want - len(buf)) as u64;
        if (&mut *r).take(left).read_buf(buf).await? == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
    }
    Ok(())
}

/// Write one frame (prefix, header, data) without copying the data segment.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> std::io::Result<()> {
    w.write_all(&f.encode_prefix()).await?;
    w.write_all(&f.header).await?;
    if !f.data.is_empty() {
        w.write_all(&f.data).await?;
    }
    Ok(())
}

pub fn encode<T: serde::Serialize>(v: &T) -> Bytes {
    use bincode::Options;
    let opts = bincode::DefaultOptions::new().with_fixint_encoding().allow_trailing_bytes();
    Bytes::from(opts.serialize(v).expect("bincode serialization of a protocol type"))
}

pub fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, bincode::Error> {
    use bincode::Options;
    // Bound allocations by the frame itself so a hostile length prefix cannot make us
    // allocate more than the header we already hold.
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(b.len() as u64 * 4 + 1024)
        .deserialize(b)
}

/// Decode a field added at the end of a message: a peer built before it sends nothing
/// there (the decoder allows trailing bytes, so older peers ignore it in turn).
pub(crate) fn trailing<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    Ok(T::deserialize(d).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn roundtrip() {
        let f = Frame::new(
            FrameKind::Request,
            7,
            Bytes::from_static(b"hdr"),
            Bytes::from_static(b"data!"),
        );
        let mut buf = Vec::new();
        write_frame(&mut buf, &f).await.unwrap();
        let g = read_frame(&mut &buf[..]).await.unwrap();
        assert_eq!(g.id, 7);
        assert_eq!(&g.header[..], b"hdr");
        assert_eq!(&g.data[..], b"data!");
    }

    #[tokio::test]
    async fn rejects_bad_magic_and_oversize() {
        let mut buf = [0u8; PREFIX_LEN];
        buf[0..4].copy_from_slice(b"HTTP");
        assert!(matches!(read_frame(&mut &buf[..]).await, Err(FrameError::BadMagic(_))));
        let f = Frame::new(FrameKind::Request, 1, Bytes::new(), Bytes::new());
        let mut p = f.encode_prefix();
        p[20..24].copy_from_slice(&(MAX_DATA + 1).to_le_bytes());
        assert!(matches!(read_frame(&mut &p[..]).await, Err(FrameError::TooLarge { .. })));
    }

    #[tokio::test]
    async fn truncated_frame_is_an_error_not_a_hang() {
        let f = Frame::new(FrameKind::Request, 1, Bytes::from_static(b"0123456789"), Bytes::new());
        let mut buf = Vec::new();
        write_frame(&mut buf, &f).await.unwrap();
        buf.truncate(PREFIX_LEN + 3);
        assert!(read_frame(&mut &buf[..]).await.is_err());
    }
}
