//! `muster-tests`: end-to-end suites that cross crates live in `tests/tests/`; this library
//! holds nothing yet.
