//! Tests for this suite are being written.
