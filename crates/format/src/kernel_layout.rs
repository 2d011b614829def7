//! How a kernel record's fields sit in its three words (`id`, `a`, `b`), as data, so that every
//! writer and reader takes the packing from one declaration (`kernel::KINDS`, made by the
//! `kernel_kinds!` macro below) instead of repeating shifts and masks: the collector packs with
//! the generated `kernel::<kind>::pack`, the eBPF program with the C functions of
//! `crates/collector/bpf/oslens_kinds.h` (written by `c_header`, a test keeps the file equal to
//! it), and Python decodes with the layout `oslens._native.KERNEL_KINDS` exports.

/// Which of a record's words holds a field.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    id,
    a,
    b,
}

impl Word {
    pub fn name(self) -> &'static str {
        match self {
            Word::id => "id",
            Word::a => "a",
            Word::b => "b",
        }
    }
}

/// One field: `bits` bits of `word` starting at bit `shift`; `signed` fields are two's
/// complement in their width (read back sign-extended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub word: Word,
    pub shift: u32,
    pub bits: u32,
    pub signed: bool,
    pub meaning: &'static str,
}

impl Field {
    pub const fn mask(&self) -> u64 {
        if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }

    /// The field's bits, not sign-extended.
    pub fn raw(&self, id: u32, a: u64, b: u64) -> u64 {
        let w = match self.word {
            Word::id => id as u64,
            Word::a => a,
            Word::b => b,
        };
        (w >> self.shift) & self.mask()
    }

    /// The field's value, sign-extended when signed.
    pub fn get(&self, r: &crate::Record) -> i64 {
        let v = self.raw(r.id, r.a, r.b);
        if self.signed && self.bits < 64 && v >> (self.bits - 1) & 1 == 1 {
            (v | !self.mask()) as i64
        } else {
            v as i64
        }
    }
}

/// A record's three words, as a kind's `pack` fills them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Words {
    pub id: u32,
    pub a: u64,
    pub b: u64,
}

impl Words {
    /// Ors `value`, cut to the field's width, into its place.
    pub fn put(&mut self, f: &Field, value: u64) {
        let v = (value & f.mask()) << f.shift;
        match f.word {
            Word::id => self.id |= v as u32,
            Word::a => self.a |= v,
            Word::b => self.b |= v,
        }
    }
}

/// A kind's declaration: its number, name (`kinds::kind_name`, `oslens._native.KINDS`), the
/// tracepoint or source it comes from and its fields.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    pub kind: u8,
    pub name: &'static str,
    pub source: &'static str,
    pub fields: &'static [Field],
}

/// Declares the kernel record kinds: for each, `pub const NAME: u8`, a module `name` with its
/// `Fields` (`name::F.field`) and `pack(field values...) -> Words`, and an entry of `KINDS`.
/// A field is `name: word[lo..hi] u|s "meaning"`. After `like:`, kinds that hold another's
/// fields (`= other_module`) take its module's items rather than repeat its fields.
#[macro_export]
macro_rules! kernel_kinds {
    ($( $(#[$doc:meta])* $konst:ident = $num:literal, $name:literal, $module:ident, $source:literal {
        $( $field:ident : $word:ident [$lo:literal .. $hi:literal] $sign:ident $meaning:literal ),* $(,)?
    } )*
    @like $( $(#[$ldoc:meta])* $lkonst:ident = $lnum:literal, $lname:literal, $lmodule:ident, $lsource:literal = $like:ident; )*
    ) => {
        $( $(#[$ldoc])* pub const $lkonst: u8 = $lnum; )*
        $(
            pub mod $lmodule {
                pub const KIND: u8 = $lnum;
                pub use super::$like::{pack, Fields, FIELDS, F};
            }
        )*
        $( $(#[$doc])* pub const $konst: u8 = $num; )*
        $(
            #[allow(non_snake_case)]
            pub mod $module {
                use $crate::kernel_layout::{Field, Words};
                pub const KIND: u8 = $num;
                #[allow(dead_code)]
                pub struct Fields { $( pub $field: Field, )* }
                pub const F: Fields = Fields { $( $field: Field {
                    name: stringify!($field), word: $crate::kernel_layout::Word::$word, shift: $lo, bits: $hi - $lo,
                    signed: $crate::kernel_signed!($sign), meaning: $meaning,
                }, )* };
                pub const FIELDS: &[Field] = &[$( F.$field ),*];
                #[allow(clippy::too_many_arguments, unused_mut)]
                pub fn pack($( $field: u64 ),*) -> Words {
                    let mut w = Words::default();
                    $( w.put(&F.$field, $field); )*
                    w
                }
            }
        )*
        pub const KINDS: &[$crate::kernel_layout::Kind] = &[$(
            $crate::kernel_layout::Kind { kind: $num, name: $name, source: $source, fields: $module::FIELDS },
        )* $(
            $crate::kernel_layout::Kind { kind: $lnum, name: $lname, source: $lsource, fields: $lmodule::FIELDS },
        )*];
    };
}

#[macro_export]
#[doc(hidden)]
macro_rules! kernel_signed {
    (u) => {
        false
    };
    (s) => {
        true
    };
}

/// The declaration of `kind`, if it is a kernel kind.
pub fn kind(kinds: &'static [Kind], kind: u8) -> Option<&'static Kind> {
    kinds.iter().find(|k| k.kind == kind)
}

/// The C header the eBPF program packs its records with: per kind its number (`OSL_K_<NAME>`)
/// and an inline `osl_pack_<name>(field values...)` returning the three words, each value cut
/// to its width and shifted into place as `pack` does.
pub fn c_header(kinds: &[Kind], extra: &[(&str, u64, &str)]) -> String {
    let mut s = String::from(
        "/* Generated from crates/format/src/kernel.rs by `cargo test -p oslens-format` with\n \
         * OSLENS_BLESS=1; do not edit (a test fails when it differs from the declaration). */\n\
         #ifndef OSLENS_KINDS_H\n#define OSLENS_KINDS_H\n\n\
         struct osl_words {\n    __u32 id;\n    __u64 a;\n    __u64 b;\n};\n",
    );
    for (name, value, why) in extra {
        s += &format!("\n/* {why} */\n#define {name} 0x{value:x}\n");
    }
    for (i, k) in kinds.iter().enumerate() {
        let upper = k.name.to_ascii_uppercase();
        s += &format!("\n/* {}: {} */\n#define OSL_K_{upper} {}\n", k.name, k.source, k.kind);
        // a kind laid out as an earlier one packs with its function
        if let Some(same) = kinds[..i].iter().find(|o| !k.fields.is_empty() && o.fields == k.fields) {
            s += &format!("#define osl_pack_{} osl_pack_{}\n", k.name, same.name);
            continue;
        }
        let args: Vec<String> = k.fields.iter().map(|f| format!("__u64 {}", f.name)).collect();
        let args = if args.is_empty() { "void".to_string() } else { args.join(", ") };
        s += &format!("static __always_inline struct osl_words osl_pack_{}({args}) {{\n", k.name);
        s += "    struct osl_words w = {0, 0, 0};\n";
        for f in k.fields {
            let cast = if f.word == Word::id { "(__u32)" } else { "" };
            s += &format!("    w.{} |= {cast}(({} & 0x{:x}ULL) << {}); /* {} */\n", f.word.name(), f.name, f.mask(), f.shift, f.meaning);
        }
        s += "    return w;\n}\n";
    }
    s + "\n#endif\n"
}
