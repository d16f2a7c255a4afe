mod model;
mod permission;
mod shell;
mod tools;
