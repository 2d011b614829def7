//! Every kind's name, application kinds (`kinds.rs`) and kernel kinds (`kernel.rs`) alike: above
//! both, so that the kind numbering (`kinds.rs`) never depends on the kernel's records.

use crate::{kernel, kinds};

/// The kind's name in dumps, errors and `oslens._native.KINDS`; "unknown" for an unassigned value.
pub fn kind_name(kind: u8) -> &'static str {
    match kinds::app_kind_name(kind) {
        "unknown" => kernel::kind_name(kind),
        name => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_kinds_keep_their_kernel_names() {
        for k in kernel::SWITCH..=kernel::BLOCK_ISSUE_OTHER {
            assert_eq!(kind_name(k), kernel::kind_name(k));
        }
        assert_eq!(kind_name(kinds::EVENT), kinds::app_kind_name(kinds::EVENT));
        assert_eq!(kind_name(255), "unknown");
    }
}
