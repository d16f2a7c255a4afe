mod model;
mod shell;
mod tools;
