//! The integration tests of `muster-config`, in one binary.

mod suite;
