//! The protobuf wire format: varints, tags and length-delimited fields.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub const VARINT: u8 = 0;
pub const FIXED64: u8 = 1;
pub const LEN: u8 = 2;
pub const FIXED32: u8 = 5;

/// One field as it appears on the wire.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
}

/// Reads the fields of one message in order.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    pub fn varint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err(WireError("truncated varint".into()));
            };
            self.buf = rest;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(WireError("varint longer than 10 bytes".into()))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError(format!(
                "field of {n} bytes exceeds the {} left",
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub fn fixed64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    pub fn fixed32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    /// The next field: its number and value, or `None` at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| WireError("bad field number".into()))?;
        if number == 0 {
            return Err(WireError("field number 0".into()));
        }
        let value = match (key & 7) as u8 {
            VARINT => Value::Varint(self.varint()?),
            FIXED64 => Value::Fixed64(self.fixed64()?),
            LEN => {
                let n = usize::try_from(self.varint()?)
                    .map_err(|_| WireError("length too large".into()))?;
                Value::Len(self.take(n)?)
            }
            FIXED32 => Value::Fixed32(self.fixed32()?),
            t => return Err(WireError(format!("unsupported wire type {t}"))),
        };
        Ok(Some((number, value)))
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_key(out: &mut Vec<u8>, number: u32, wire: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire));
}

pub fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_key(out, number, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes a length-delimited field whose body `f` writes, without an intermediate buffer
/// for the common case of short bodies: the length is patched in afterwards.
pub fn put_nested<E>(
    out: &mut Vec<u8>,
    number: u32,
    f: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_key(out, number, LEN);
    let len_at = out.len();
    out.push(0);
    let start = out.len();
    f(out)?;
    let len = out.len() - start;
    if len < 0x80 {
        out[len_at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(5);
        put_varint(&mut prefix, len as u64);
        out.splice(len_at..start, prefix);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_nesting() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(Reader::new(&out).varint().unwrap(), v);
        }
        let mut out = Vec::new();
        let long = vec![7u8; 300];
        put_nested::<()>(&mut out, 3, |o| {
            put_bytes(o, 1, &long);
            Ok(())
        })
        .unwrap();
        let mut r = Reader::new(&out);
        let Some((3, Value::Len(body))) = r.next_field().unwrap() else {
            panic!("expected field 3")
        };
        assert!(r.is_empty());
        let Some((1, Value::Len(inner))) = Reader::new(body).next_field().unwrap() else {
            panic!("expected field 1")
        };
        assert_eq!(inner, &long[..]);
        assert!(Reader::new(&[0x08]).next_field().is_err());
    }
}
