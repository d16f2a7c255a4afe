//! The read-only shell classifier the permission engine consults for `Bash`.
