//! The Thrift compact protocol, as Parquet's page headers and footer use it.

use super::{T_BINARY, T_I32, T_I64, T_LIST, T_STRUCT};

/// Thrift compact protocol, written into a byte vector.
#[derive(Default)]
pub struct Thrift {
    pub buf: Vec<u8>,
    stack: Vec<i16>,
    last: i16,
}

impl Thrift {
    pub(crate) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    pub(crate) fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    pub(crate) fn field(&mut self, id: i16, ty: u8) {
        let delta = id - self.last;
        if delta > 0 && delta <= 15 {
            self.buf.push(((delta as u8) << 4) | ty);
        } else {
            self.buf.push(ty);
            self.zigzag(id as i64);
        }
        self.last = id;
    }

    pub fn i32(&mut self, id: i16, v: i32) {
        self.field(id, T_I32);
        self.zigzag(v as i64);
    }

    pub fn i64(&mut self, id: i16, v: i64) {
        self.field(id, T_I64);
        self.zigzag(v);
    }

    pub fn binary(&mut self, id: i16, v: &[u8]) {
        self.field(id, T_BINARY);
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    /// Opens a struct field (or, with id None, a struct element of a list).
    pub fn begin(&mut self, id: Option<i16>) {
        if let Some(id) = id {
            self.field(id, T_STRUCT);
        }
        self.stack.push(self.last);
        self.last = 0;
    }

    pub fn end(&mut self) {
        self.buf.push(0);
        self.last = self.stack.pop().unwrap_or(0);
    }

    pub fn list(&mut self, id: i16, elem: u8, n: usize) {
        self.field(id, T_LIST);
        if n < 15 {
            self.buf.push(((n as u8) << 4) | elem);
        } else {
            self.buf.push(0xF0 | elem);
            self.varint(n as u64);
        }
    }

    /// A list element of type i32 (enum values).
    pub fn elem_i32(&mut self, v: i32) {
        self.zigzag(v as i64);
    }

    pub fn elem_binary(&mut self, v: &[u8]) {
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
    }
}
