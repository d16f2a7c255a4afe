//! Where a setting's value came from: its layer and the file, variable or flag that set it.

use std::fmt;
use std::ops::Deref;

use serde::Serialize;

use crate::diagnostic::Position;

/// The settings layers, lowest precedence first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Compiled into muster.
    Default,
    /// `~/.muster/settings.toml`.
    User,
    /// `.muster/settings.toml`.
    Project,
    /// `.muster/settings.local.toml`.
    ProjectLocal,
    /// A `MUSTER_*` environment variable.
    Env,
    /// A command-line flag.
    Cli,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Default => "default",
            Layer::User => "user",
            Layer::Project => "project",
            Layer::ProjectLocal => "project_local",
            Layer::Env => "env",
            Layer::Cli => "cli",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The layer and exact source of a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    pub layer: Layer,
    /// A file path, `MUSTER_…` variable name, `--flag`, or `built-in`.
    pub source: String,
    /// Where in the file, for file layers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

impl Origin {
    pub fn built_in() -> Origin {
        Origin {
            layer: Layer::Default,
            source: "built-in".to_string(),
            position: None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}", self.layer, self.source)?;
        if let Some(position) = self.position {
            write!(f, ":{}:{}", position.line, position.column)?;
        }
        write!(f, ")")
    }
}

/// A value and the origin it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub origin: Origin,
}

impl<T> Sourced<T> {
    pub fn new(value: T, origin: Origin) -> Sourced<T> {
        Sourced { value, origin }
    }
}

impl<T> Deref for Sourced<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}
