mod shell;
mod tools;
