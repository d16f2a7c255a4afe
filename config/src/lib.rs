//! `muster-config`: settings files and their layering, agent and team definitions, policy
//! files, the list of known tool names, and validation with precise errors.

pub mod project;
