//! Netlink framing (netlink(7)): the message header, attributes (TLVs
//! aligned to 4 bytes), the error/ACK and DONE messages, and a builder.
//! Nothing here trusts a length it reads.

/// `struct nlmsghdr`'s size.
pub const HDRLEN: usize = 16;
/// `struct nlattr`'s size.
pub const ATTR_HDRLEN: usize = 4;
/// An attribute type's flag: its payload is attributes.
pub const NLA_F_NESTED: u16 = 0x8000;

/// `NLMSG_ERROR`: an error, or an ACK when the error is 0.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a dump.
pub const NLMSG_DONE: u16 = 3;
/// Below this, types are netlink's own control messages.
pub const NLMSG_MIN_TYPE: u16 = 0x10;

/// `NLM_F_REQUEST`: a request (the kernel ignores other messages).
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_MULTI`: one of the messages of a dump.
pub const NLM_F_MULTI: u16 = 0x2;
/// `NLM_F_ACK`: the sender asks for an acknowledgement.
pub const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`): every object.
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_CAPPED`: an error message carrying only the request's header.
pub const NLM_F_CAPPED: u16 = 0x100;

/// Rounds up to netlink's 4-byte alignment.
pub const fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// `struct nlmsghdr`, in host byte order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut v = [0; 2];
    v.copy_from_slice(&b[at..at + 2]);
    u16::from_ne_bytes(v)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut v = [0; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(v)
}

impl Header {
    /// The header at the start of `b`, reading absent bytes as zero (so
    /// that an answer to a truncated request still echoes what it had).
    pub fn read_padded(b: &[u8]) -> Header {
        let mut h = [0u8; HDRLEN];
        let n = b.len().min(HDRLEN);
        h[..n].copy_from_slice(&b[..n]);
        Header {
            len: u32_at(&h, 0),
            ty: u16_at(&h, 4),
            flags: u16_at(&h, 6),
            seq: u32_at(&h, 8),
            pid: u32_at(&h, 12),
        }
    }

    pub fn bytes(&self) -> [u8; HDRLEN] {
        let mut b = [0; HDRLEN];
        b[0..4].copy_from_slice(&self.len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.ty.to_ne_bytes());
        b[6..8].copy_from_slice(&self.flags.to_ne_bytes());
        b[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        b[12..16].copy_from_slice(&self.pid.to_ne_bytes());
        b
    }
}

/// Why a datagram or a message's attributes could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("{0} bytes: shorter than a netlink header")]
    Short(usize),
    #[error("nlmsg_len {len} with {have} bytes left")]
    Length { len: u32, have: usize },
    #[error("an attribute's nla_len {len} with {have} bytes left")]
    Attr { len: u16, have: usize },
}

/// The messages of a datagram, each with its whole bytes (header
/// included); the first inconsistent header ends the walk with its error.
pub fn messages(mut b: &[u8]) -> impl Iterator<Item = Result<(Header, &[u8]), Malformed>> {
    let mut done = false;
    std::iter::from_fn(move || {
        if done || b.is_empty() {
            return None;
        }
        if b.len() < HDRLEN {
            done = true;
            return Some(Err(Malformed::Short(b.len())));
        }
        let h = Header::read_padded(b);
        let len = h.len as usize;
        if len < HDRLEN || len > b.len() {
            done = true;
            return Some(Err(Malformed::Length {
                len: h.len,
                have: b.len(),
            }));
        }
        let m = &b[..len];
        b = &b[align(len).min(b.len())..];
        Some(Ok((h, m)))
    })
}

/// The attributes of a payload as (type without the nested/byte-order
/// flags, payload). Fewer than 4 bytes left over are padding and ignored,
/// as the kernel's liberal parser ignores them; an attribute that claims
/// more than is left, or less than its own header, is malformed.
pub fn attrs(mut b: &[u8]) -> Result<Vec<(u16, &[u8])>, Malformed> {
    let mut v = Vec::new();
    while b.len() >= ATTR_HDRLEN {
        let len = u16_at(b, 0);
        let ty = u16_at(b, 2) & 0x3fff;
        let l = len as usize;
        if l < ATTR_HDRLEN || l > b.len() {
            return Err(Malformed::Attr { len, have: b.len() });
        }
        v.push((ty, &b[ATTR_HDRLEN..l]));
        b = &b[align(l).min(b.len())..];
    }
    Ok(v)
}

/// A `u32` attribute's value: exactly 4 bytes, or more (the kernel's
/// liberal parser takes the first 4).
pub fn get_u32(payload: &[u8]) -> Option<u32> {
    (payload.len() >= 4).then(|| u32_at(payload, 0))
}

/// One message under construction.
pub struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    pub fn new(ty: u16, flags: u16, seq: u32, pid: u32) -> Builder {
        let h = Header {
            len: 0,
            ty,
            flags,
            seq,
            pid,
        };
        Builder {
            buf: h.bytes().to_vec(),
        }
    }

    /// Appends raw payload bytes (padded to the alignment).
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self.buf.resize(align(self.buf.len()), 0);
        self
    }

    fn attr(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        // attribute payloads here are a few bytes: a name, a number
        let len = (ATTR_HDRLEN + payload.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.raw(payload)
    }

    pub fn u8(&mut self, ty: u16, v: u8) -> &mut Self {
        self.attr(ty, &[v])
    }

    pub fn u32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.attr(ty, &v.to_ne_bytes())
    }

    pub fn u64(&mut self, ty: u16, v: u64) -> &mut Self {
        self.attr(ty, &v.to_ne_bytes())
    }

    /// A NUL-terminated string (`nla_put_string`).
    pub fn str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut b = Vec::with_capacity(s.len() + 1);
        b.extend_from_slice(s.as_bytes());
        b.push(0);
        self.attr(ty, &b)
    }

    /// An attribute holding `payload` as is (padded to the alignment).
    pub fn bytes(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        self.attr(ty, payload)
    }

    /// A nested attribute (`nla_nest_start` / `nla_nest_end`): the
    /// attributes `inner` adds, under a header of type `ty` with
    /// `NLA_F_NESTED` set and their whole length.
    pub fn nested(&mut self, ty: u16, inner: impl FnOnce(&mut Self)) -> &mut Self {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; ATTR_HDRLEN]);
        inner(self);
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self.buf[at + 2..at + 4].copy_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        self
    }

    /// The message with its length filled in.
    pub fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// `NLMSG_ERROR` answering `req` (its whole bytes, or as many as there
/// were) with `-errno`, 0 for an ACK. As the kernel's `netlink_ack`: an
/// ACK, or an error to a socket that set `NETLINK_CAP_ACK`, carries only
/// the request's header and says so with `NLM_F_CAPPED`; other errors
/// carry the whole request.
pub fn error(req: &[u8], errno: i32, portid: u32, cap_ack: bool) -> Vec<u8> {
    let h = Header::read_padded(req);
    let capped = errno == 0 || cap_ack;
    let flags = if capped { NLM_F_CAPPED } else { 0 };
    let mut m = Builder::new(NLMSG_ERROR, flags, h.seq, portid);
    m.raw(&(-errno).to_ne_bytes());
    if capped || req.len() < HDRLEN {
        m.raw(&h.bytes());
    } else {
        m.raw(req);
    }
    m.finish()
}

/// `NLMSG_DONE` ending the dump that answered `seq`.
pub fn done(seq: u32, portid: u32) -> Vec<u8> {
    done_with(seq, portid, 0)
}

/// `NLMSG_DONE` carrying `status`: 0, or the `-errno` of a dump that
/// failed (`netlink_dump_done`).
pub fn done_with(seq: u32, portid: u32, status: i32) -> Vec<u8> {
    let mut m = Builder::new(NLMSG_DONE, NLM_F_MULTI, seq, portid);
    m.raw(&status.to_ne_bytes());
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_message_reads_back() {
        let mut b = Builder::new(0x1401, NLM_F_MULTI, 7, 42);
        b.u32(1, 3)
            .str(2, "t0")
            .u8(14, 1)
            .u64(6, 0x0053_52ff_fe00_0001);
        let m = b.finish();
        assert_eq!(m.len() % 4, 0);
        let all: Vec<_> = messages(&m).collect();
        assert_eq!(all.len(), 1);
        let (h, whole) = all[0].unwrap();
        assert_eq!(
            (h.len as usize, h.ty, h.flags, h.seq, h.pid),
            (m.len(), 0x1401, 2, 7, 42)
        );
        let a = attrs(&whole[HDRLEN..]).unwrap();
        assert_eq!(a[0], (1, &3u32.to_ne_bytes()[..]));
        assert_eq!(a[1], (2, &b"t0\0"[..]));
        assert_eq!(a[2], (14, &[1u8][..]));
        assert_eq!(a[3].1, 0x0053_52ff_fe00_0001u64.to_ne_bytes());
    }

    #[test]
    fn a_nested_attribute_holds_its_attributes() {
        let mut b = Builder::new(1, 0, 0, 0);
        b.raw(&[7, 0, 0, 10])
            .nested(3, |b| {
                b.nested(1, |b| {
                    b.u32(1, 9);
                });
            })
            .str(2, "s");
        let m = b.finish();
        let body = &m[HDRLEN + 4..];
        // the flag on the wire (`attrs` reads types without it)
        assert_eq!(u16_at(body, 2), 3 | NLA_F_NESTED);
        assert_eq!(u16_at(body, 6), 1 | NLA_F_NESTED);
        let outer = attrs(body).unwrap();
        assert_eq!(outer.len(), 2);
        assert_eq!(outer[0].0, 3);
        let mid = attrs(outer[0].1).unwrap();
        assert_eq!(mid.len(), 1);
        assert_eq!(mid[0].0, 1);
        assert_eq!(attrs(mid[0].1).unwrap(), vec![(1, &9u32.to_ne_bytes()[..])]);
        assert_eq!(outer[1], (2, &b"s\0"[..]));
    }

    #[test]
    fn inconsistent_lengths_are_malformed() {
        assert_eq!(messages(&[0; 8]).next(), Some(Err(Malformed::Short(8))));
        let mut h = Header {
            len: 40,
            ..Default::default()
        }
        .bytes()
        .to_vec();
        assert_eq!(
            messages(&h).next(),
            Some(Err(Malformed::Length { len: 40, have: 16 }))
        );
        h[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(
            messages(&h).next(),
            Some(Err(Malformed::Length { .. }))
        ));
        // an attribute longer than what is left, one shorter than its header
        assert!(attrs(&[8, 0, 1, 0, 0, 0]).is_err());
        assert!(attrs(&[2, 0, 1, 0]).is_err());
        // padding shorter than a header is ignored
        assert_eq!(attrs(&[8, 0, 1, 0, 9, 0, 0, 0, 0]).unwrap().len(), 1);
    }

    #[test]
    fn acks_are_capped_and_errors_carry_the_request_unless_asked_not_to() {
        let req = {
            let mut b = Builder::new(0x1405, NLM_F_REQUEST, 9, 0);
            b.u32(1, 0);
            b.finish()
        };
        let ack = error(&req, 0, 5, false);
        let (h, m) = messages(&ack).next().unwrap().unwrap();
        assert_eq!(
            (h.ty, h.flags, h.seq, h.pid),
            (NLMSG_ERROR, NLM_F_CAPPED, 9, 5)
        );
        assert_eq!(m.len(), HDRLEN + 4 + HDRLEN);
        let full = error(&req, libc::EINVAL, 5, false);
        let (h, m) = messages(&full).next().unwrap().unwrap();
        assert_eq!(h.flags, 0);
        assert_eq!(&m[HDRLEN..HDRLEN + 4], &(-libc::EINVAL).to_ne_bytes());
        assert_eq!(&m[HDRLEN + 4..], &req[..]);
        let capped = error(&req, libc::EINVAL, 5, true);
        assert_eq!(capped.len(), HDRLEN + 4 + HDRLEN);
        let d = done(9, 5);
        let (h, m) = messages(&d).next().unwrap().unwrap();
        assert_eq!((h.ty, h.flags, m.len()), (NLMSG_DONE, NLM_F_MULTI, 20));
    }
}
