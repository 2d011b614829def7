//! Function entry/exit hooks for -finstrument-functions (owned by auto-instrumentation).
