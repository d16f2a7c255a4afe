mod agents;
mod fixtures;
mod settings;
