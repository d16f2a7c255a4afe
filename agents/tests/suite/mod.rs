mod budget;
mod model;
mod permission;
mod runtime;
mod shell;
mod tools;
