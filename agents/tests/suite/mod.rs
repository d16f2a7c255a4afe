mod budget;
mod compaction;
mod model;
mod permission;
mod runtime;
mod shell;
mod team;
mod tools;
