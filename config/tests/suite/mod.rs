mod agents;
mod examples;
mod fixtures;
mod fuzz;
mod settings;
mod teams;
