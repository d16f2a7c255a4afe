//! `NotebookEdit`: replaces, inserts or deletes one cell of a Jupyter notebook (`.ipynb` JSON,
//! written back with Jupyter's one-space indent).

use muster_protocol::ToolName;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::TypedTool;
use super::context::ToolContext;
use super::output::{ToolDetails, ToolOutput};
use super::text::{read_text_file, run_blocking_on, write_text_file};
use super::workspace::PathAccess;

/// The kind of a notebook cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CellType {
    /// Code.
    Code,
    /// Markdown.
    Markdown,
}

impl CellType {
    fn name(self) -> &'static str {
        match self {
            CellType::Code => "code",
            CellType::Markdown => "markdown",
        }
    }
}

/// What `NotebookEdit` does to the cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotebookEditMode {
    /// Replace the source of the cell `cell_id` (the default).
    #[default]
    Replace,
    /// Insert a new cell after `cell_id` (at the start without `cell_id`).
    Insert,
    /// Delete the cell `cell_id`.
    Delete,
}

/// Input of `NotebookEdit`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotebookEditInput {
    /// The path of the `.ipynb` file (absolute, or relative to the workspace root).
    pub notebook_path: String,
    /// The id of the cell to change; for `insert`, the cell after which to insert (omit to
    /// insert at the start). `cell-N` addresses the N-th cell (from 0) of a notebook without
    /// ids.
    #[serde(default)]
    pub cell_id: Option<String>,
    /// The new source of the cell (ignored by `delete`).
    pub new_source: String,
    /// The cell's type; required for `insert`, changes the cell's type for `replace`.
    #[serde(default)]
    pub cell_type: Option<CellType>,
    /// `replace` (default), `insert` or `delete`.
    #[serde(default)]
    pub edit_mode: Option<NotebookEditMode>,
}

/// Edits one notebook cell.
#[derive(Debug, Clone, Copy, Default)]
pub struct NotebookEdit;

impl TypedTool for NotebookEdit {
    type Input = NotebookEditInput;
    const NAME: &'static str = ToolName::NotebookEdit.as_str();
    const DESCRIPTION: &'static str = "Edits one cell of a Jupyter notebook (.ipynb): `replace` (default) sets the source of cell \
         `cell_id`, `insert` adds a new cell of `cell_type` after `cell_id` (or at the start), \
         `delete` removes cell `cell_id`. Replacing a code cell clears its outputs.";
    const READ_ONLY: bool = ToolName::NotebookEdit.is_read_only();
    const IDEMPOTENT: bool = false;

    fn paths(input: &NotebookEditInput) -> Vec<PathAccess> {
        vec![PathAccess::write(&input.notebook_path)]
    }

    async fn run(&self, context: &ToolContext, input: NotebookEditInput) -> ToolOutput {
        if Path::new(&input.notebook_path)
            .extension()
            .is_none_or(|extension| extension != "ipynb")
        {
            return ToolOutput::error(format!(
                "invalid input for NotebookEdit: field `notebook_path` (`{}`) must name a .ipynb file; use Edit for other files",
                input.notebook_path
            ));
        }
        run_blocking_on(
            context.resolve_write(&input.notebook_path),
            move |resolved| edit_notebook(&input, resolved),
        )
        .await
    }
}

fn edit_notebook(input: &NotebookEditInput, resolved: PathBuf) -> ToolOutput {
    let requested = &input.notebook_path;
    let text = match read_text_file(requested, &resolved) {
        Ok(text) => text,
        Err(error) => return ToolOutput::error(error.to_string()),
    };
    let mut notebook: Value = match serde_json::from_str(&text) {
        Ok(notebook) => notebook,
        Err(error) => {
            return ToolOutput::error(format!("`{requested}` is not valid notebook JSON: {error}"));
        }
    };
    let uses_ids = notebook_uses_ids(&notebook);
    let Some(cells) = notebook.get_mut("cells").and_then(Value::as_array_mut) else {
        return ToolOutput::error(format!(
            "`{requested}` is not a Jupyter notebook: it has no `cells` array"
        ));
    };
    let summary = match apply(cells, input, uses_ids) {
        Ok(summary) => summary,
        Err(message) => return ToolOutput::error(format!("cannot edit `{requested}`: {message}")),
    };
    let serialized = match to_notebook_json(&notebook) {
        Ok(serialized) => serialized,
        Err(error) => return ToolOutput::error(format!("cannot serialise `{requested}`: {error}")),
    };
    match write_text_file(&resolved, &serialized) {
        Ok(()) => ToolOutput::text(format!("{summary} in `{requested}`."))
            .with_details(ToolDetails::FileWritten { path: resolved }),
        Err(error) => ToolOutput::error(format!(
            "cannot write `{requested}` (resolved to `{}`): {error}",
            resolved.display()
        )),
    }
}

/// Whether new cells get ids (nbformat 4.5 and later, or cells that already have them).
fn notebook_uses_ids(notebook: &Value) -> bool {
    let major = notebook
        .get("nbformat")
        .and_then(Value::as_u64)
        .unwrap_or(4);
    let minor = notebook
        .get("nbformat_minor")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let cells_have_ids = notebook
        .get("cells")
        .and_then(Value::as_array)
        .is_some_and(|cells| cells.iter().any(|cell| cell.get("id").is_some()));
    major > 4 || (major == 4 && minor >= 5) || cells_have_ids
}

fn apply(
    cells: &mut Vec<Value>,
    input: &NotebookEditInput,
    uses_ids: bool,
) -> Result<String, String> {
    match input.edit_mode.unwrap_or_default() {
        NotebookEditMode::Replace => {
            let id = required_cell_id(input, "replace")?;
            let index = find_cell(cells, id)?;
            let cell = cells
                .get_mut(index)
                .and_then(Value::as_object_mut)
                .ok_or_else(|| format!("cell `{id}` is not a JSON object"))?;
            replace_cell(cell, &input.new_source, input.cell_type);
            Ok(format!("Replaced the source of cell `{id}`"))
        }
        NotebookEditMode::Insert => {
            let cell_type = input.cell_type.ok_or(
                "field `cell_type` is required to insert a cell (`code` or `markdown`)".to_owned(),
            )?;
            let position = match &input.cell_id {
                Some(id) => find_cell(cells, id)? + 1,
                None => 0,
            };
            let id = uses_ids.then(|| fresh_cell_id(cells));
            cells.insert(
                position,
                new_cell(cell_type, &input.new_source, id.as_deref()),
            );
            Ok(match id {
                Some(id) => format!(
                    "Inserted {} cell `{id}` at position {position}",
                    cell_type.name()
                ),
                None => format!("Inserted {} cell at position {position}", cell_type.name()),
            })
        }
        NotebookEditMode::Delete => {
            let id = required_cell_id(input, "delete")?;
            let index = find_cell(cells, id)?;
            cells.remove(index);
            Ok(format!("Deleted cell `{id}`"))
        }
    }
}

fn required_cell_id<'a>(input: &'a NotebookEditInput, action: &str) -> Result<&'a str, String> {
    input
        .cell_id
        .as_deref()
        .ok_or_else(|| format!("field `cell_id` is required to {action} a cell"))
}

/// The index of the cell with this id, or `cell-N`/`N` as an index.
fn find_cell(cells: &[Value], id: &str) -> Result<usize, String> {
    if let Some(index) = cells
        .iter()
        .position(|cell| cell.get("id").and_then(Value::as_str) == Some(id))
    {
        return Ok(index);
    }
    let index = id.strip_prefix("cell-").unwrap_or(id).parse::<usize>().ok();
    match index {
        Some(index) if index < cells.len() => Ok(index),
        _ => {
            let known: Vec<String> = cells
                .iter()
                .enumerate()
                .take(20)
                .map(
                    |(index, cell)| match cell.get("id").and_then(Value::as_str) {
                        Some(id) => format!("`{id}`"),
                        None => format!("`cell-{index}`"),
                    },
                )
                .collect();
            Err(format!(
                "no cell `{id}` (field `cell_id`); the notebook has {} cells: {}",
                cells.len(),
                known.join(", ")
            ))
        }
    }
}

fn source_lines(source: &str) -> Value {
    Value::Array(
        source
            .split_inclusive('\n')
            .map(|line| Value::String(line.to_owned()))
            .collect(),
    )
}

fn replace_cell(cell: &mut Map<String, Value>, source: &str, cell_type: Option<CellType>) {
    cell.insert("source".to_owned(), source_lines(source));
    if let Some(cell_type) = cell_type {
        cell.insert("cell_type".to_owned(), json!(cell_type.name()));
    }
    let is_code = cell.get("cell_type").and_then(Value::as_str) == Some("code");
    if is_code {
        cell.insert("execution_count".to_owned(), Value::Null);
        cell.insert("outputs".to_owned(), json!([]));
    } else {
        cell.remove("execution_count");
        cell.remove("outputs");
    }
}

fn new_cell(cell_type: CellType, source: &str, id: Option<&str>) -> Value {
    let mut cell = Map::new();
    cell.insert("cell_type".to_owned(), json!(cell_type.name()));
    if let Some(id) = id {
        cell.insert("id".to_owned(), json!(id));
    }
    cell.insert("metadata".to_owned(), json!({}));
    cell.insert("source".to_owned(), source_lines(source));
    if cell_type == CellType::Code {
        cell.insert("execution_count".to_owned(), Value::Null);
        cell.insert("outputs".to_owned(), json!([]));
    }
    Value::Object(cell)
}

/// An id no cell has yet (`muster-1`, `muster-2`, …).
fn fresh_cell_id(cells: &[Value]) -> String {
    (1_u64..)
        .map(|n| format!("muster-{n}"))
        .find(|candidate| {
            !cells
                .iter()
                .any(|cell| cell.get("id").and_then(Value::as_str) == Some(candidate.as_str()))
        })
        .unwrap_or_else(|| "muster-cell".to_owned())
}

/// Jupyter's layout: one-space indent and a final newline.
fn to_notebook_json(notebook: &Value) -> serde_json::Result<String> {
    let mut buffer = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut buffer, formatter);
    notebook.serialize(&mut serializer)?;
    buffer.push(b'\n');
    Ok(String::from_utf8_lossy(&buffer).into_owned())
}
