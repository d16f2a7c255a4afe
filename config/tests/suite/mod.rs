mod agents;
mod examples;
mod fixtures;
mod fuzz;
mod mcp;
mod settings;
mod skills;
mod teams;
