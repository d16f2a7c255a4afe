//! The tool set: file, shell and coordination tools with Claude Code's names and inputs.
